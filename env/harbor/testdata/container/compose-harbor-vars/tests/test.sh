#!/bin/bash
# The db service is still up beside the main one when the tests run.
want=$(python3 -c 'import urllib.request; print(urllib.request.urlopen("http://db:8080/secret", timeout=5).read().decode().strip())')
if [ -n "$want" ] && [ "$(cat /app/answer 2>/dev/null)" = "$want" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
