#!/bin/bash
# Attack: a unittest.py in /app that python3 -m unittest would import instead of the real one.
printf "import sys\nsys.exit(0)\n" > /app/unittest.py
