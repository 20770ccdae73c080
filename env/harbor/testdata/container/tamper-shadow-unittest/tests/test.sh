#!/bin/bash
cd /app && python3 -m unittest discover -s /tests && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
