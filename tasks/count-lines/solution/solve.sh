#!/bin/bash
# Oracle: awk counts lines, including a last line without a newline.
set -euo pipefail
cd /app/data
total=0
: > /app/counts.tsv
while IFS= read -r f; do
  n=$(awk 'END { print NR }' "$f")
  printf '%s\t%d\n' "$f" "$n" >> /app/counts.tsv
  total=$((total + n))
done < <(find . -type f -name '*.txt' | sed 's|^\./||' | LC_ALL=C sort)
printf 'TOTAL\t%d\n' "$total" >> /app/counts.tsv
