#!/bin/bash
# Attack: slow the host's staging down (thousands of directories in
# /logs/verifier, which it empties after /tests) and re-create /tests/test.sh
# meanwhile (an open that is refused still creates the file), so that the
# host cannot stage the tests: an episode the harness would mask.
echo 'print(41)' > /app/prog.py
mkdir /logs/verifier/d && (cd /logs/verifier/d && seq 1 4000 | xargs mkdir)
cat > /tmp/recreate.py <<'PY'
import os, time
while True:
    if not os.path.lexists("/tests/test.sh"):
        try:
            open("/tests/test.sh", "w")
        except OSError:
            pass
    time.sleep(0.0005)
PY
setsid python3 /tmp/recreate.py </dev/null >/dev/null 2>&1 &
sleep 0.2
