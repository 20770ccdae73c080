#!/bin/bash
# Two keys and none named "reward": Harbor records both; which one is the
# episode's reward is the user's choice (--reward-key, --reward-agg).
if [ -f /app/done ]; then
  echo '{"tests_passed": 3, "style": 1}' > /logs/verifier/reward.json
else
  echo '{"tests_passed": 0, "style": 1}' > /logs/verifier/reward.json
fi
