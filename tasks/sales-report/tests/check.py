import json
import math
import sys

EXPECTED = {
    "north": {"units": 12, "revenue": 49.15},
    "south": {"units": 8, "revenue": 48.5},
    "east": {"units": 12, "revenue": 39.5},
    "west": {"units": 0, "revenue": 0.0},
}

try:
    with open("/app/report.json") as f:
        got = json.load(f)
except (OSError, ValueError) as e:
    sys.exit(f"cannot read /app/report.json: {e}")
if not isinstance(got, dict):
    sys.exit("report.json is not an object")
if set(got) != set(EXPECTED) | {"top_region"}:
    sys.exit(f"keys {sorted(got)}, want {sorted(set(EXPECTED) | {'top_region'})}")
for region, want in EXPECTED.items():
    r = got[region]
    if not isinstance(r, dict) or set(r) != {"units", "revenue"}:
        sys.exit(f"{region}: {r!r} is not {{units, revenue}}")
    if r["units"] != want["units"] or not math.isclose(r["revenue"], want["revenue"], abs_tol=0.005):
        sys.exit(f"{region}: got {r}, want {want}")
if got["top_region"] != "north":
    sys.exit(f"top_region {got['top_region']!r}, want 'north'")
print("report.json is correct")
