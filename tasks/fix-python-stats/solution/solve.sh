#!/bin/bash
# Oracle: fix the two bugs (even-length median index, sample variance divisor).
set -euo pipefail
cd /app
sed -i 's/return (s\[mid\] + s\[mid + 1\]) \/ 2/return (s[mid - 1] + s[mid]) \/ 2/' stats.py
sed -i 's|for x in xs) / len(xs)|for x in xs) / (len(xs) - 1)|' stats.py
