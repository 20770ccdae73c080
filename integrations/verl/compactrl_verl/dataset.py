"""verl's train/validation parquet files from the tasks a ``compactrl serve`` plays.

    python -m compactrl_verl.dataset --serve-url http://10.0.0.7:8090 --out /data/tb --val 32
    python -m compactrl_verl.dataset --serve-url http://127.0.0.1:8090 --out /data/vault \\
        --split train --count 4096 --val-split test --val 256

The task ids come from the service itself (GET /v1/tasks), so every row names a task the service
accepts: every loaded task (Harbor dirs, a SWE-bench JSONL), or for a generated suite (vault) the first
``--count`` seeds of ``--split``. Rows are what verl's RLHFDataset reads and the ``compactrl`` agent
loop needs: ``prompt`` (a chat message list; verl requires it and tokenizes it for its length filter;
the agent loop ignores it, as the service renders the task itself), ``data_source``, ``ability``,
``reward_model`` (the verifier scores: no ground truth here), ``agent_name`` and
``extra_info.task_id`` (what the agent loop sends as task_id; ``compactrl.task_key`` renames it).

A fixed task set is split at random (``--seed``) into ``--val`` validation tasks and the rest for
training; a generated suite takes its validation seeds from ``--val-split``. Writes OUT/train.parquet
and OUT/val.parquet and prints the counts.
"""

import argparse
import json
import os
import random
import sys
import urllib.error
import urllib.parse
import urllib.request

AGENT_NAME = "compactrl"


def fetch_task_ids(serve_url, api_key=None, split=None, count=None, timeout=60.0):
    """GET /v1/tasks of the service (with split and count for a generated suite)."""
    q = {}
    if split:
        q["split"] = split
    if count:
        q["count"] = str(int(count))
    url = serve_url.rstrip("/") + "/v1/tasks" + ("?" + urllib.parse.urlencode(q) if q else "")
    req = urllib.request.Request(url)
    if api_key:
        req.add_header("Authorization", "Bearer " + api_key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:
        try:
            msg = json.loads(e.read()).get("error", "")
        except ValueError:
            msg = ""
        raise SystemExit(f"compactrl_verl.dataset: {url}: {e.code} {msg}") from e
    ids = body.get("task_ids")
    if not isinstance(ids, list) or not ids:
        raise SystemExit(f"compactrl_verl.dataset: {url} listed no tasks")
    return [str(i) for i in ids]


def rows(task_ids, split, task_key="task_id"):
    """One verl row per task id."""
    return [{
        "data_source": "compactrl",
        "prompt": [{"role": "user", "content": f"compactrl task {tid}"}],
        "ability": "agent",
        "reward_model": {"style": "compactrl-verifier", "ground_truth": ""},
        "agent_name": AGENT_NAME,
        "extra_info": {task_key: tid, "index": i, "split": split},
    } for i, tid in enumerate(task_ids)]


def write_parquet(path, data):
    import pandas as pd
    pd.DataFrame(data).to_parquet(path, index=False)


def _api_key(path):
    if path:
        with open(path, encoding="utf-8") as f:
            return f.read().rstrip("\r\n")
    return os.environ.get("COMPACTRL_SERVE_API_KEY") or None


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m compactrl_verl.dataset", description=__doc__.split("\n\n")[0])
    p.add_argument("--serve-url", required=True, help="a compactrl serve URL (the one the trainer calls)")
    p.add_argument("--api-key-file", help="the service's API key (default: $COMPACTRL_SERVE_API_KEY)")
    p.add_argument("--out", required=True, help="directory for train.parquet and val.parquet")
    p.add_argument("--val", type=int, default=0, help="validation tasks (0: no val.parquet)")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/validation split of a fixed task set")
    p.add_argument("--split", help="generated suite: the seed range of the training rows (e.g. train)")
    p.add_argument("--count", type=int, help="generated suite: training rows (the first seeds of --split)")
    p.add_argument("--val-split", help="generated suite: the seed range of the validation rows (e.g. test)")
    p.add_argument("--task-key", default="task_id", help="extra_info key naming the task (compactrl.task_key)")
    a = p.parse_args(argv)
    if a.val < 0:
        p.error("--val must be ≥ 0")
    key = _api_key(a.api_key_file)
    if a.split or a.count:
        if not (a.split and a.count):
            p.error("a generated suite needs --split and --count")
        train = fetch_task_ids(a.serve_url, key, a.split, a.count)
        val = []
        if a.val:
            if not a.val_split:
                p.error("--val with a generated suite needs --val-split (a seed range apart from --split)")
            if a.val_split == a.split:
                p.error("--val-split must differ from --split: validation tasks would be training tasks")
            val = fetch_task_ids(a.serve_url, key, a.val_split, a.val)
    else:
        if a.val_split:
            p.error("--val-split is for a generated suite (with --split and --count)")
        ids = fetch_task_ids(a.serve_url, key)
        if a.val >= len(ids):
            p.error(f"--val {a.val}: the service has {len(ids)} tasks, none would be left for training")
        shuffled = ids[:]
        random.Random(a.seed).shuffle(shuffled)
        val, train = sorted(shuffled[:a.val]), sorted(shuffled[a.val:])
    os.makedirs(a.out, exist_ok=True)
    write_parquet(os.path.join(a.out, "train.parquet"), rows(train, "train", a.task_key))
    if val:
        write_parquet(os.path.join(a.out, "val.parquet"), rows(val, "val", a.task_key))
    print(f"{os.path.join(a.out, 'train.parquet')}: {len(train)} tasks"
          + (f"; {os.path.join(a.out, 'val.parquet')}: {len(val)} tasks" if val else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
