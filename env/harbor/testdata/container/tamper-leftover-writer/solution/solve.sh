#!/bin/bash
# Attack: a wrong program, and a daemon left behind that keeps writing a
# passing reward (read-only, too) into the verifier's directory.
echo 'print(41)' > /app/prog.py
cat > /tmp/writer.py <<'PY'
import os, time
while True:
    try:
        with open("/logs/verifier/reward.txt", "w") as f:
            f.write("1")
        os.chmod("/logs/verifier/reward.txt", 0o444)
    except OSError:
        pass
    time.sleep(0.005)
PY
setsid python3 /tmp/writer.py </dev/null >/dev/null 2>&1 &
sleep 0.2
