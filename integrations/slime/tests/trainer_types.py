"""slime's and miles' Sample, rebuilt from their own definitions.

tests/trainer_samples/{slime,miles}.json are written by
tools/gen_trainer_types.py from each trainer's slime|miles/utils/types.py
(repository and commit inside). ``load(name)`` returns a dataclass with that
Sample's fields in order, with their defaults, and its Status enum, so the
hooks are tested on the trainer's real field names. Defaults are rebuilt
from their source text: literals, ``Status.X``, and
``field(default_factory=F)`` (F = list, dict, set; the trainer's own
nested info classes become a SimpleNamespace factory: the hooks never read
them). Anything else fails loudly, so a new kind of default needs a look.
"""

import ast
import dataclasses
import enum
import json
import os
import types

HERE = os.path.dirname(os.path.abspath(__file__))
TRAINERS = ("slime", "miles")


def spec(name):
    with open(os.path.join(HERE, "trainer_samples", f"{name}.json"), encoding="utf-8") as f:
        return json.load(f)


def _default(text, status, nested):
    if text is None:
        return dataclasses.MISSING, dataclasses.MISSING
    node = ast.parse(text, mode="eval").body
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "field":
        kw = {k.arg: k.value for k in node.keywords}
        if set(kw) != {"default_factory"} or not isinstance(kw["default_factory"], ast.Name):
            raise ValueError(f"unsupported field(...) default {text!r}")
        fac = kw["default_factory"].id
        if fac in ("list", "dict", "set"):
            return dataclasses.MISSING, {"list": list, "dict": dict, "set": set}[fac]
        if fac in nested:
            return dataclasses.MISSING, types.SimpleNamespace
        raise ValueError(f"unsupported default factory {fac!r}")
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Status":
        return status[node.attr], dataclasses.MISSING
    return ast.literal_eval(node), dataclasses.MISSING


def load(name):
    """The trainer's Sample as a dataclass (see the module doc)."""
    s = spec(name)
    status = enum.Enum("Status", s["status"])
    nested = {"SpecInfo", "PrefixCacheInfo"}
    fields = []
    for f in s["fields"]:
        default, factory = _default(f["default"], status, nested)
        kw = {}
        if default is not dataclasses.MISSING:
            kw["default"] = default
        if factory is not dataclasses.MISSING:
            kw["default_factory"] = factory
        fields.append((f["name"], object, dataclasses.field(**kw)))
    cls = dataclasses.make_dataclass("Sample", fields, namespace={"Status": status})
    cls.__module__ = f"{name}.utils.types"
    cls.__qualname__ = "Sample"
    cls.trainer = f"{s['repo']}@{s['commit'][:10]}"
    return cls


# The fields compactrl_slime reads or writes on a Sample (generate.py,
# convert.py). Each trainer's Sample must have all of them but the routing
# key, which is the trainer's own (routing_key in miles, session_id in slime).
HOOK_FIELDS = ("index", "group_index", "rollout_id", "prompt", "tokens", "response", "response_length", "reward",
               "loss_mask", "rollout_log_probs", "remove_sample", "status", "metadata")
ROUTING_FIELD = {"slime": "session_id", "miles": "routing_key"}
