#!/bin/bash
# Verifier: the unit tests run against the agent's /app/stats.py (copied away
# so that stray files in /app cannot shadow the tests).
mkdir -p /logs/verifier
work=$(mktemp -d)
cp /app/stats.py "$work/" 2>/dev/null
cp /tests/test_stats.py "$work/"
cd "$work"
if python3 -m unittest -v test_stats 2>&1; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
