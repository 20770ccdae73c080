#!/bin/bash
# The honest verifier: /app/prog.py must print 42.
out=$(python3 /app/prog.py 2>/dev/null)
if [ "$out" = "42" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
