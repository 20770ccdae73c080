#!/usr/bin/env python
"""A tiny stand-in for Django's tests/runtests.py: the same arguments,
unittest's verbosity-2 output, labels are modules relative to tests/."""
import argparse
import os
import sys
import unittest

parser = argparse.ArgumentParser()
parser.add_argument("labels", nargs="*")
parser.add_argument("--verbosity", type=int, default=1)
parser.add_argument("--settings")
parser.add_argument("--parallel")
args = parser.parse_args()
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.dirname(here)]
print("Testing against Django installed in '%s' with up to 1 processes" % here)
suite = unittest.defaultTestLoader.loadTestsFromNames(args.labels or ["calc_tests.tests"])
result = unittest.TextTestRunner(verbosity=args.verbosity, stream=sys.stdout).run(suite)
sys.exit(not result.wasSuccessful())
