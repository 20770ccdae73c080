#!/bin/bash
# Verifier: build a copy of the agent's program and compare its output on
# hidden inputs (cases/N.in with flag -n $(cat N.n)) with cases/N.want.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
work=$(mktemp -d)
cp -r /app/. "$work/"
cd "$work" || exit 0
if ! go build -o "$work/wordfreq.bin" . 2>&1; then
  echo "build failed"
  exit 0
fi
for in in /tests/cases/*.in; do
  c=${in%.in}
  got=$("$work/wordfreq.bin" -n "$(cat "$c.n")" < "$in")
  if [ "$got" != "$(cat "$c.want")" ]; then
    echo "case $(basename "$c"): got:"; echo "$got"; echo "want:"; cat "$c.want"
    exit 0
  fi
done
echo "all cases pass"
echo 1 > /logs/verifier/reward.txt
