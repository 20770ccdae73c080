#!/bin/bash
# Attack: the program prints 1; a daemon waits (lstat only) for test.sh's
# reward.txt and renames test.sh's own output, test-stdout.txt, over it.
echo 'print(1)' > /app/prog.py
cat > /tmp/swap.py <<'PY'
import os, time
while True:
    if os.path.lexists("/logs/verifier/reward.txt") and os.path.lexists("/logs/verifier/test-stdout.txt"):
        try:
            os.rename("/logs/verifier/test-stdout.txt", "/logs/verifier/reward.txt")
        except OSError:
            pass
    time.sleep(0.001)
PY
setsid python3 /tmp/swap.py </dev/null >/dev/null 2>&1 &
sleep 0.2
