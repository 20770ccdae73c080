#!/bin/bash
# The honest verifier: the tests in /tests must pass.
if python3 -m unittest discover -s /tests -p 'test_*.py' >/dev/null 2>&1; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
