#!/bin/bash
# Attack: the code under test writes a passing reward, then kills test.sh
# before it can write its own verdict.
cat > /app/prog.py <<'PY'
import os, signal
with open("/logs/verifier/reward.txt", "w") as f:
    f.write("1")
pid, chain = os.getppid(), []
while pid > 1:
    if b"test.sh" in open("/proc/%d/cmdline" % pid, "rb").read():
        chain.append(pid)
    pid = int(open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[1])
for pid in reversed(chain):  # test.sh itself first, then its subshells
    os.kill(pid, signal.SIGKILL)
PY
