"""Dump the SWE-bench harness's per-repository data that compactrl's
env/swebench needs, from the pinned `swebench` package (requirements.txt),
as JSON on stdout: for every Python repository, its log parser's name and,
per version, test_cmd, eval_commands and install (the pieces of
swebench.harness.test_spec.python.make_eval_script_list_py).

    python dump_specs.py > ../../harness_specs.json
"""
import json
import sys

import swebench
from swebench.harness.constants.python import MAP_REPO_VERSION_TO_SPECS_PY
from swebench.harness.log_parsers.python import MAP_REPO_TO_PARSER_PY


def main():
    repos = {}
    for repo in sorted(MAP_REPO_VERSION_TO_SPECS_PY):
        parser = MAP_REPO_TO_PARSER_PY.get(repo)
        if parser is None:
            continue
        versions = {}
        for version, specs in sorted(MAP_REPO_VERSION_TO_SPECS_PY[repo].items()):
            test_cmd = specs["test_cmd"]
            if not isinstance(test_cmd, str):
                sys.exit(f"{repo} {version}: test_cmd is not a string")
            v = {"test_cmd": test_cmd}
            if "eval_commands" in specs:
                v["eval_commands"] = list(specs["eval_commands"])
            if "install" in specs:
                v["install"] = specs["install"]
            versions[version] = v
        repos[repo] = {"parser": parser.__name__, "versions": versions}
    json.dump({"swebench_version": swebench.__version__, "repos": repos}, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
