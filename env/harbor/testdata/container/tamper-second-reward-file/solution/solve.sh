#!/bin/bash
# Attack: the code under test plants reward.json, which Harbor reads before
# the reward.txt that test.sh writes.
cat > /app/prog.py <<'PY'
with open("/logs/verifier/reward.json", "w") as f:
    f.write('{"reward": 1}')
print(41)
PY
