#!/bin/bash
# Oracle: aggregate with awk, emit JSON by hand.
set -euo pipefail
cd /app
awk -F, 'NR > 1 {
  if (!($2 in units)) order[++n] = $2
  units[$2] += $4; rev[$2] += $4 * $5
}
END {
  printf "{"
  best = ""
  for (i = 1; i <= n; i++) {
    r = order[i]
    printf "%s\"%s\": {\"units\": %d, \"revenue\": %.2f}", (i > 1 ? ", " : ""), r, units[r], rev[r]
    if (best == "" || rev[r] > rev[best]) best = r
  }
  printf ", \"top_region\": \"%s\"}\n", best
}' sales.csv > report.json
