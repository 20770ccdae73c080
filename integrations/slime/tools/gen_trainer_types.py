"""Write the shape of a trainer's Sample, read from the trainer's own source.

    python tools/gen_trainer_types.py SRC_CHECKOUT NAME > tests/trainer_samples/NAME.json

SRC_CHECKOUT is a git checkout of slime (THUDM/slime) or miles
(radixark/miles); NAME is slime or miles. The script parses
NAME/utils/types.py with ast (nothing of the trainer is imported, so it runs
without torch or numpy) and writes, for the dataclass Sample: every field's
name, annotation and default as source text, in declaration order, and the
members of its Status enum; plus the repository, commit and path it read.

tests/trainer_types.py turns that file back into a dataclass, so the hooks'
tests run on a Sample with the trainer's real field names, defaults and
Status values; a field the trainer renames or drops fails them.
"""

import ast
import json
import os
import subprocess
import sys

REPOS = {"slime": "THUDM/slime", "miles": "radixark/miles"}


def sample_shape(source):
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Sample":
            return _class_shape(node, source)
    raise SystemExit("no class Sample in types.py")


def _class_shape(cls, source):
    fields, status = [], {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            fields.append({
                "name": node.target.id,
                "annotation": ast.get_source_segment(source, node.annotation),
                "default": None if node.value is None else ast.get_source_segment(source, node.value),
            })
        elif isinstance(node, ast.ClassDef) and node.name == "Status":
            for item in node.body:
                if isinstance(item, ast.Assign) and isinstance(item.value, ast.Constant):
                    status[item.targets[0].id] = item.value.value
    if not status:
        raise SystemExit("Sample has no Status enum")
    return {"fields": fields, "status": status}


def main(argv):
    if len(argv) != 3 or argv[2] not in REPOS:
        raise SystemExit(__doc__)
    src, name = argv[1], argv[2]
    path = f"{name}/utils/types.py"
    with open(os.path.join(src, path), encoding="utf-8") as f:
        shape = sample_shape(f.read())
    commit = subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], check=True, capture_output=True,
                            text=True).stdout.strip()
    out = {"repo": REPOS[name], "commit": commit, "path": path, **shape}
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv)
