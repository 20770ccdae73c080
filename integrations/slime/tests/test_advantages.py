"""cross_gae equals `compactrl advantages --estimator cross-gae` (docs/design.md §1.7)
on random multi-segment episodes, to 1e-6, whole and with each rollout's
samples split across simulated data-parallel ranks.

The chain tested is the one slime runs: service answer →
generate.samples_from_response → convert.convert_samples_to_train_data →
(slime's split by partition, rollout.py:783-807) → advantages.cross_gae.
The samples are slime's own Sample, rebuilt from its definition (tests/trainer_types.py).
"""

import json
import os
import random
import subprocess
import types
import unittest

import torch

from compactrl_slime import advantages, convert, generate
from tests.trainer_types import load

Sample = load("slime")

BIN = os.environ.get("COMPACTRL_BIN")

# The masking rule as Go defines it (serve's "scored", rl.Masked), per status: serve/masking_test.go writes it.
with open(os.path.join(os.path.dirname(__file__), "masking.json"), encoding="utf-8") as _f:
    MASKING = json.load(_f)


def random_episode(rng, n):
    status = rng.choice(["ok", "ok", "ok", "overlong", "format_error", "infra_error", "verifier_error"])
    segs = []
    for s in range(rng.randint(1, 4)):
        p, r = rng.randint(1, 6), rng.randint(1, 30)
        mask = [rng.choice([0, 1, 1]) for _ in range(r)]
        segs.append({
            "kind": "summary" if s < 3 else "exec",
            "trainable": rng.random() > 0.15,
            "prompt_ids": [rng.randrange(100) for _ in range(p)],
            "response_ids": [rng.randrange(100) for _ in range(r)],
            "loss_mask": mask,
            "logprobs": [-rng.random() if m else 0.0 for m in mask],
            "values": [rng.uniform(-1, 1) for _ in range(r)],
        })
    reward = rng.choice([0.0, 1.0, rng.random()]) if status in ("ok", "format_error", "verifier_error") else 0.0
    return {"id": f"e{n}", "task": "t", "group": "g", "reward": reward, "status": status, "segments": segs}


def service_answer(ep, rid):
    """What `compactrl serve` answers for the episode (serve.NewResponse)."""
    return {"rollout_id": rid, "task_id": ep["task"], "status": ep["status"], "scored": MASKING[ep["status"]]["scored"],
            "reward": ep["reward"], "metrics": {},
            "segments": [{"index": i, "kind": s["kind"], "trainable": s["trainable"],
                          "tokens": s["prompt_ids"] + s["response_ids"], "response_length": len(s["response_ids"]),
                          "loss_mask": s["loss_mask"], "rollout_log_probs": s["logprobs"]}
                         for i, s in enumerate(ep["segments"])]}


def reference(eps, extra):
    out = subprocess.run([BIN, "advantages", "--estimator", "cross-gae"] + extra,
                         input="".join(json.dumps(e) + "\n" for e in eps), capture_output=True, text=True,
                         env=dict(os.environ, COMPACTRL_TEST_AS_CLI="1"), check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


@unittest.skipUnless(BIN, "COMPACTRL_BIN (the compactrl binary) is not set")
class CrossGAEMatchesCompactrl(unittest.TestCase):
    def run_case(self, seed, n_ranks, args_extra, cli_extra):
        rng = random.Random(seed)
        eps = [random_episode(rng, n) for n in range(40)]
        ref = reference(eps, cli_extra)
        args = types.SimpleNamespace(gamma=1.0, lambd=1.0, kl_coef=0.0, compactrl_max_infra_fraction=1.0, **args_extra)
        samples, values = [], []
        for rid, ep in enumerate(eps):
            proto = Sample(index=rid, group_index=rid, metadata={"task_id": "t"})
            for s in generate.samples_from_response(args, proto, service_answer(ep, rid)):
                samples.append(s)
                seg = ep["segments"][s.metadata[convert.META_KEY]["segment_index"]]
                values.append(seg["values"])
        data = convert.convert_samples_to_train_data(args, samples)
        # slime's DP split: a random partition of sample positions per rank.
        order = list(range(len(samples)))
        rng.shuffle(order)
        parts = [sorted(order[r::n_ranks]) for r in range(n_ranks)]
        got = {}
        for part in parts:
            rd = {k: [data[k][j] for j in part] for k in
                  ("tokens", "response_lengths", "rewards", "loss_masks", "rollout_ids", "rollout_mask_sums", convert.CARRY_KEY)}
            rd["loss_masks"] = [torch.tensor(m, dtype=torch.int) for m in rd["loss_masks"]]
            rd["rollout_mask_sums"] = torch.tensor(rd["rollout_mask_sums"], dtype=torch.float32)
            rd["values"] = [torch.tensor(values[j], dtype=torch.float64) for j in part]
            advantages.cross_gae(args, rd)
            self.assertNotIn(convert.CARRY_KEY, rd)
            for k, j in enumerate(part):
                got[j] = (rd["advantages"][k].tolist(), rd["returns"][k].tolist())
        pos = 0
        for ep_ref in ref:
            for seg in ep_ref["segments"]:
                adv, ret = got[pos]
                want_a = seg.get("advantages") or [0.0] * len(seg["response_ids"])
                want_r = seg.get("returns") or [0.0] * len(seg["response_ids"])
                for t in range(len(adv)):
                    self.assertAlmostEqual(adv[t], want_a[t], delta=1e-6, msg=f"{ep_ref['id']} token {t}")
                    self.assertAlmostEqual(ret[t], want_r[t], delta=1e-6, msg=f"{ep_ref['id']} token {t}")
                pos += 1
        self.assertEqual(pos, len(samples))
        nonzero = sum(1 for a, _ in got.values() for x in a if x != 0)
        self.assertGreater(nonzero, 100, "the episodes must exercise non-trivial advantages")

    def test_whole(self):
        self.run_case(1, 1, {}, [])

    def test_split_across_ranks(self):
        for seed, ranks in ((2, 2), (3, 3), (4, 5)):
            self.run_case(seed, ranks, {}, [])

    def test_fixed_lambda_gamma_scaled_returns(self):
        args = {"compactrl_gae_alpha": 0, "compactrl_scaled_returns": True}
        rng_args = {"gamma": 0.99, "lambd": 0.95}
        # gamma and lambd are slime's own args (arguments.py:1002-1003).
        for seed in (5, 6):
            rng = random.Random(seed)
            eps = [random_episode(rng, n) for n in range(20)]
            ref = reference(eps, ["--alpha", "0", "--lambda", "0.95", "--gamma", "0.99", "--scaled-returns"])
            a = types.SimpleNamespace(kl_coef=0.0, compactrl_max_infra_fraction=1.0, **rng_args, **args)
            samples, values = [], []
            for rid, ep in enumerate(eps):
                for s in generate.samples_from_response(a, Sample(index=rid, metadata={"task_id": "t"}), service_answer(ep, rid)):
                    samples.append(s)
                    values.append(ep["segments"][s.metadata[convert.META_KEY]["segment_index"]]["values"])
            data = convert.convert_samples_to_train_data(a, samples)
            rd = {k: data[k] for k in ("rewards", "loss_masks", "rollout_mask_sums", convert.CARRY_KEY)}
            rd["values"] = [torch.tensor(v, dtype=torch.float64) for v in values]
            advantages.cross_gae(a, rd)
            flat = [s for e in ref for s in e["segments"]]
            for k, seg in enumerate(flat):
                want = seg.get("advantages") or [0.0] * len(seg["response_ids"])
                for t, v in enumerate(rd["advantages"][k].tolist()):
                    self.assertAlmostEqual(v, want[t], delta=1e-6)


class Guards(unittest.TestCase):
    def test_needs_convert_hook_and_no_kl(self):
        rd = {"values": [torch.zeros(2)], "rewards": [1.0], "loss_masks": [[1, 1]], "rollout_mask_sums": [2]}
        with self.assertRaisesRegex(ValueError, "convert"):
            advantages.cross_gae(types.SimpleNamespace(gamma=1.0, lambd=1.0, kl_coef=0.0), dict(rd))
        with self.assertRaisesRegex(NotImplementedError, "kl"):
            advantages.cross_gae(types.SimpleNamespace(gamma=1.0, lambd=1.0, kl_coef=0.1), dict(rd))

    def test_lambda_rule(self):
        """compactrl's rl rule: α > 0 is the adaptive λ, and a fixed λ beside it is refused, not ignored."""
        self.assertIsNone(advantages.check_lambda(1.5, 1.0, "a", "l"))
        self.assertIsNone(advantages.check_lambda(0.0, 0.95, "a", "l"))
        self.assertRegex(advantages.check_lambda(1.5, 0.95, "a", "l"), "^l: 0.95 is used only with a 0")
        self.assertRegex(advantages.check_lambda(-1.0, 1.0, "a", "l"), "^a: -1.0: want a finite value")
        self.assertRegex(advantages.check_lambda(0.0, 1.5, "a", "l"), r"^l: 1.5: want a value in \[0, 1\]")
        rd = {"values": [torch.zeros(2)], "rewards": [1.0], "loss_masks": [[1, 1]], "rollout_mask_sums": [2],
              advantages.CARRY_KEY: [0]}
        with self.assertRaisesRegex(ValueError, "--lambd: 0.95 is used only with compactrl_gae_alpha 0"):
            advantages.cross_gae(types.SimpleNamespace(gamma=1.0, lambd=0.95, kl_coef=0.0), dict(rd))


if __name__ == "__main__":
    unittest.main()
