#!/bin/bash
# Oracle: one mv per file, extension from the name without its leading dot.
set -euo pipefail
cd /app/inbox
shopt -s dotglob nullglob
for f in *; do
  [ -f "$f" ] || continue
  base=${f#.}
  if [[ $base == *.* ]]; then ext=${base##*.}; ext=${ext,,}; else ext=other; fi
  mkdir -p "/app/sorted/$ext"
  mv -- "$f" "/app/sorted/$ext/"
done
