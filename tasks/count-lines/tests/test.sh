#!/bin/bash
# Verifier: /app/counts.tsv must equal the expected table exactly.
mkdir -p /logs/verifier
if [ -f /app/counts.tsv ] && cmp -s /app/counts.tsv /tests/expected.tsv; then
  echo "counts.tsv matches"
  echo 1 > /logs/verifier/reward.txt
else
  echo "counts.tsv missing or wrong; diff:"
  diff /tests/expected.tsv /app/counts.tsv 2>&1 | head -20
  echo 0 > /logs/verifier/reward.txt
fi
