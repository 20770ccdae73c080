#!/bin/bash
# Same container as the agent: its server is still up, its files are still there.
mv /tests/expected.txt /tmp/expected.txt
ok=1
python3 - <<'PY' || ok=0
import os, urllib.request
body = urllib.request.urlopen("http://127.0.0.1:%s/data.txt" % os.environ["EXPECT_PORT"], timeout=5).read().decode()
assert body.strip() == "forty-two", body
PY
[ "$(cat /home/agent/out.txt 2>/dev/null)" = "$(cat /tmp/expected.txt)" ] || ok=0
echo "checks: $ok"
echo "$ok" > /logs/verifier/reward.txt
