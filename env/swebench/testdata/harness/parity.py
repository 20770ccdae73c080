"""The official SWE-bench harness's answers on cases.json, as JSON on
stdout, for env/swebench's parity tests: per case, the eval script the
harness builds, its log parser's statuses on the log, get_logs_eval's
statuses and found flag, get_eval_tests_report's FAIL_TO_PASS/PASS_TO_PASS
report and get_resolution_status. Run in a venv holding the pinned
`swebench` (requirements.txt):

    python parity.py cases.json > golden.json
"""
import json
import os
import sys
import tempfile
from types import SimpleNamespace

import swebench
from swebench.harness.constants import (
    FAIL_TO_PASS,
    KEY_INSTANCE_ID,
    MAP_REPO_VERSION_TO_SPECS,
    PASS_TO_PASS,
)
from swebench.harness.grading import (
    get_eval_tests_report,
    get_logs_eval,
    get_resolution_status,
)
from swebench.harness.log_parsers import MAP_REPO_TO_PARSER
from swebench.harness.test_spec.create_scripts import make_eval_script_list


def answer(case):
    inst = case["instance"]
    repo, version = inst["repo"], inst["version"]
    specs = MAP_REPO_VERSION_TO_SPECS[repo][version]
    # TestSpec.eval_script, without make_test_spec (which fetches the
    # environment's requirements from GitHub).
    lines = make_eval_script_list(
        inst, specs, "testbed", "/testbed", inst["base_commit"], inst["test_patch"]
    )
    script = "\n".join(["#!/bin/bash", "set -uxo pipefail"] + lines) + "\n"
    spec = SimpleNamespace(repo=repo, version=version, instance_id=inst["instance_id"])
    parsed = MAP_REPO_TO_PARSER[repo](case["log"], spec)
    # get_logs_eval reads the log from a file, as the harness writes it.
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(case["log"])
    try:
        status, found = get_logs_eval(spec, f.name)
    finally:
        os.unlink(f.name)
    ref = {
        KEY_INSTANCE_ID: inst["instance_id"],
        FAIL_TO_PASS: json.loads(inst["FAIL_TO_PASS"]),
        PASS_TO_PASS: json.loads(inst["PASS_TO_PASS"]),
    }
    report = get_eval_tests_report(status, ref)
    return {
        "eval_script": script,
        "parsed": parsed,
        "status": status,
        "found": found,
        "report": {k: report[k] for k in (FAIL_TO_PASS, PASS_TO_PASS)},
        "resolution": get_resolution_status(report) if found else "RESOLVED_NO",
    }


def main():
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    out = {"swebench_version": swebench.__version__, "cases": {}}
    for case in cases:
        out["cases"][case["name"]] = answer(case)
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
