#!/bin/bash
if [ -f /app/done ]; then
  echo '{"reward": 1.0, "tests_passed": 3}' > /logs/verifier/reward.json
else
  echo '{"reward": 0, "tests_passed": 0}' > /logs/verifier/reward.json
fi
