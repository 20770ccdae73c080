import hashlib
import json
import os
import sys

want = json.load(open("/tests/manifest.json"))
got = {}
for root, dirs, files in os.walk("/app/sorted"):
    for f in files:
        p = os.path.join(root, f)
        with open(p, "rb") as fh:
            got[os.path.relpath(p, "/app")] = hashlib.sha256(fh.read()).hexdigest()
missing = sorted(set(want) - set(got))
extra = sorted(set(got) - set(want))
changed = sorted(k for k in set(want) & set(got) if want[k] != got[k])
left = []
if os.path.isdir("/app/inbox"):
    for root, dirs, files in os.walk("/app/inbox"):
        left += [os.path.join(root, f) for f in files]
for what, items in (("missing", missing), ("unexpected", extra), ("changed", changed), ("left in inbox", left)):
    if items:
        sys.exit(f"{what}: {items}")
print("all files sorted")
