"""Harbor's own answers for the parity corpus (env/harbor TestHarborParity).

Usage: python parity.py CORPUS_DIR > answers.json, under a venv with
harbor==0.26.0 (setup.sh). For every tasks/*.toml: whether Harbor's
TaskConfig accepts it and, if so, its fields normalized as compactrl keeps
them (None scalars as "" or 0). For every rewards/*/ directory: the rewards
Harbor's Verifier parsing gives (reward.json first, else reward.txt) and
jobs' _primary_reward.
"""

import json
import math
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

warnings.simplefilter("ignore")

from harbor.cli.jobs import _primary_reward  # noqa: E402
from harbor.models.task.config import TaskConfig  # noqa: E402
from harbor.models.verifier.result import VerifierResult  # noqa: E402
from harbor.verifier.verifier import Verifier  # noqa: E402


def num(v):
    if v is None:
        return 0
    v = float(v)
    if not math.isfinite(v):
        return str(v)
    return v


def s(v):
    return "" if v is None else str(v)


def strs(v):
    return None if v is None else list(v)


def net(v):
    return "" if v is None else v.value


def env_cfg(e):
    if e is None:
        return None
    return {
        "build_timeout_sec": num(e.build_timeout_sec),
        "docker_image": s(e.docker_image),
        "os": e.os.value,
        "cpus": num(e.cpus),
        "memory_mb": num(e.memory_mb),
        "storage_mb": num(e.storage_mb),
        "gpus": num(e.gpus),
        "gpu_types": strs(e.gpu_types),
        "tpu": None if e.tpu is None else {"type": e.tpu.type, "topology": e.tpu.topology},
        "mcp_servers": [
            {"name": m.name, "transport": m.transport, "url": s(m.url), "command": s(m.command),
             "args": list(m.args), "headers": dict(m.headers)}
            for m in e.mcp_servers
        ],
        "env": dict(e.env),
        "skills_dir": s(e.skills_dir),
        "healthcheck": health(e.healthcheck),
        "workdir": s(e.workdir),
        "network_mode": net(e.network_mode),
        "allowed_hosts": strs(e.allowed_hosts),
    }


def health(h):
    if h is None:
        return None
    return {"command": h.command, "interval_sec": num(h.interval_sec), "timeout_sec": num(h.timeout_sec),
            "start_period_sec": num(h.start_period_sec), "start_interval_sec": num(h.start_interval_sec),
            "retries": num(h.retries)}


def agent(a):
    return {"timeout_sec": num(a.timeout_sec), "user": s(a.user), "network_mode": net(a.network_mode),
            "allowed_hosts": strs(a.allowed_hosts)}


def verifier(v):
    return {
        "timeout_sec": num(v.timeout_sec), "env": dict(v.env), "user": s(v.user),
        "network_mode": net(v.network_mode), "allowed_hosts": strs(v.allowed_hosts),
        "environment_mode": net(v.environment_mode), "environment": env_cfg(v.environment),
        "collect": [{"command": c.command, "service": c.service, "timeout_sec": num(c.timeout_sec), "user": s(c.user)}
                    for c in v.collect],
    }


def artifacts(entries):
    out = []
    for a in entries:
        if isinstance(a, str):
            out.append({"source": a, "destination": "", "exclude": [], "service": ""})
        else:
            out.append({"source": a.source, "destination": s(a.destination), "exclude": list(a.exclude),
                        "service": s(a.service)})
    return out


def config(c):
    mr = None
    return {
        "schema_version": c.schema_version,
        "task": None if c.task is None else {
            "name": c.task.name, "version": s(c.task.version), "description": c.task.description,
            "authors": [{"name": a.name, "email": s(a.email)} for a in c.task.authors],
            "keywords": list(c.task.keywords)},
        "metadata": c.metadata,
        "verifier": verifier(c.verifier),
        "agent": agent(c.agent),
        "environment": env_cfg(c.environment),
        "solution": {"env": dict(c.solution.env)},
        "source": s(c.source),
        "multi_step_reward_strategy": net(c.multi_step_reward_strategy),
        "steps": None if c.steps is None else [
            {"name": st.name, "agent": agent(st.agent), "verifier": verifier(st.verifier),
             "min_reward": (None if st.min_reward is None else
                            {k: num(v) for k, v in st.min_reward.items()} if isinstance(st.min_reward, dict)
                            else num(st.min_reward)),
             "healthcheck": health(st.healthcheck), "artifacts": artifacts(st.artifacts)}
            for st in c.steps],
        "artifacts": artifacts(c.artifacts),
    }


def task_case(path):
    try:
        c = TaskConfig.model_validate_toml(path.read_text())
    except Exception as e:  # Harbor's Task() fails on any exception here
        return {"accepted": False, "error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
    return {"accepted": True, "config": config(c)}


def reward_case(d):
    paths = SimpleNamespace(reward_text_path=d / "reward.txt", reward_json_path=d / "reward.json")
    fake = SimpleNamespace(trial_paths=paths)
    try:
        if paths.reward_json_path.exists():
            rewards = Verifier._parse_reward_json(fake)
        elif paths.reward_text_path.exists():
            rewards = Verifier._parse_reward_text(fake)
        else:
            raise FileNotFoundError("no reward file")
        result = VerifierResult(rewards=rewards)
    except Exception as e:
        return {"accepted": False, "error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
    out = {"accepted": True, "rewards": {k: float(v) for k, v in (result.rewards or {}).items()}}
    try:
        p = _primary_reward(SimpleNamespace(reward_valid=True, verifier_result=result))
        out["primary"] = p
    except Exception as e:
        out["primary_error"] = f"{type(e).__name__}: {e}"
    return out


def main():
    corpus = Path(sys.argv[1])
    out = {"harbor": "0.26.0", "tasks": {}, "rewards": {}}
    for p in sorted((corpus / "tasks").glob("*.toml")):
        out["tasks"][p.name] = task_case(p)
    for d in sorted((corpus / "rewards").iterdir()):
        if d.is_dir():
            out["rewards"][d.name] = reward_case(d)
    json.dump(out, sys.stdout, indent=1, sort_keys=True, allow_nan=False)
    print()


if __name__ == "__main__":
    main()
