"""The hooks without a running service: padding for slime's batch schedule
(and that it changes neither the loss nor the advantages), sampling
refusals, 400 vs infrastructure errors, the failure-share stop, episode-level
eval and pass rate, the routing key, no unretrieved-future noise, and the
miles plug-in. Samples are slime's own Sample (tests/trainer_types.py, generated from slime's types.py); the
schedule rule checked is slime's (dp_schedule.py:167-185: static steps need
a sample count that is a multiple of dp × micro_batch_size; dynamic steps
need at least as many samples as dp-aligned micro-batches)."""

import asyncio
import gc
import hashlib
import http.server
import json
import math
import random
import sys
import threading
import time
import types
import unittest

import torch

from compactrl_slime import advantages, convert, generate, miles
from tests import trainer_types
from tests.trainer_types import load

Sample = load("slime")
from tests.test_advantages import MASKING, random_episode, service_answer


def slime_args(**kw):
    a = types.SimpleNamespace(gamma=1.0, lambd=1.0, kl_coef=0.0, rollout_batch_size=12, n_samples_per_prompt=2,
                              global_batch_size=6, world_size=1, tensor_model_parallel_size=1,
                              pipeline_model_parallel_size=1, context_parallel_size=1, micro_batch_size=1,
                              use_dynamic_batch_size=False, max_tokens_per_gpu=None, sglang_router_ip="127.0.0.1",
                              sglang_router_port=1, compactrl_max_infra_fraction=1.0)
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def episodes_to_samples(args, eps):
    samples = []
    for rid, ep in enumerate(eps):
        proto = Sample(index=rid, group_index=rid // 2, metadata={"task_id": "t"})
        samples.extend(generate.samples_from_response(args, proto, service_answer(ep, rid)))
    return samples


def _h(tokens, salt):
    d = hashlib.blake2b(repr((salt, tuple(tokens))).encode(), digest_size=8).digest()
    return int.from_bytes(d, "little") / 2 ** 64


def model(tokens, response_length):
    """A stand-in causal model: log-prob and value of each response token
    depend only on the tokens up to it (what a real causal LM guarantees)."""
    p = len(tokens) - response_length
    logp = [-0.05 - 2 * _h(tokens[:p + t + 1], "logp") for t in range(response_length)]
    value = [2 * _h(tokens[:p + t + 1], "value") - 1 for t in range(response_length)]
    return logp, value


def steps_of(data, gbs):
    return convert._steps(data["rollout_ids"], gbs)


def run_trainer(args, data, n_ranks, rng):
    """What slime does with the train data, reduced to what can change the
    update: a random DP split (any split: the hooks must not depend on it),
    the critic's values, cross_gae per rank, then per token the clipped PPO
    loss and value loss; returns per-token results keyed by (rollout_id,
    segment-relative position, token prefix) and the per-token-loss
    numerator and denominator (loss.py:1317: Σ_i max(1, Σ mask_i))."""
    n = len(data["tokens"])
    order = list(range(n))
    rng.shuffle(order)
    per_token = {}
    num_pg = num_v = 0.0
    denom = 0
    for r in range(n_ranks):
        part = sorted(order[r::n_ranks])
        if not part:
            continue
        rd = {k: [data[k][j] for j in part] for k in ("rewards", "loss_masks", convert.CARRY_KEY)}
        rd["loss_masks"] = [torch.tensor(m, dtype=torch.int) for m in rd["loss_masks"]]
        rd["rollout_mask_sums"] = torch.tensor([data["rollout_mask_sums"][j] for j in part], dtype=torch.float32)
        vals, logps = [], []
        for j in part:
            lp, v = model(data["tokens"][j], data["response_lengths"][j])
            vals.append(torch.tensor(v, dtype=torch.float64))
            logps.append(lp)
        rd["values"] = vals
        advantages.cross_gae(args, rd)
        for k, j in enumerate(part):
            mask = data["loss_masks"][j]
            denom += max(1, sum(mask))
            toks = data["tokens"][j]
            p = len(toks) - data["response_lengths"][j]
            for t, m in enumerate(mask):
                if not m:
                    continue
                a = float(rd["advantages"][k][t])
                ret = float(rd["returns"][k][t])
                ratio = math.exp(logps[k][t] - data["rollout_log_probs"][j][t])
                pg = max(-a * ratio, -a * min(max(ratio, 0.8), 1.28))
                vl = (vals[k][t].item() - ret) ** 2
                num_pg += pg
                num_v += vl
                key = (data["rollout_ids"][j], tuple(toks[:p + t + 1]))
                assert key not in per_token, "a token optimised twice"
                per_token[key] = (a, ret, pg, vl)
    return per_token, num_pg, num_v, denom


class Padding(unittest.TestCase):
    def case(self, seed, dp, mbs, dynamic, max_tokens=None):
        rng = random.Random(seed)
        eps = [random_episode(rng, n) for n in range(24)]
        base = slime_args(world_size=dp, micro_batch_size=mbs, use_dynamic_batch_size=dynamic, max_tokens_per_gpu=max_tokens)
        unpadded = convert.convert_samples_to_train_data(slime_args(global_batch_size=None), episodes_to_samples(base, eps))
        padded = convert.convert_samples_to_train_data(base, episodes_to_samples(base, eps))
        for step in steps_of(padded, base.global_batch_size):
            if dynamic:
                self.assertGreaterEqual(len(step), dp)
            else:
                self.assertEqual(len(step) % (dp * mbs), 0, f"step of {len(step)} samples, dp {dp}, mbs {mbs}")
        a = run_trainer(base, unpadded, 1, random.Random(seed))
        b = run_trainer(base, padded, dp, random.Random(seed + 1))
        self.assertEqual(a[3], b[3], "per-token-loss denominator")
        self.assertAlmostEqual(a[1], b[1], delta=1e-9)
        self.assertAlmostEqual(a[2], b[2], delta=1e-9)
        self.assertEqual(set(a[0]), set(b[0]), "the optimised tokens")
        for k, v in a[0].items():
            for x, y in zip(v, b[0][k]):
                self.assertAlmostEqual(x, y, delta=1e-9)
        # the carried raw_reward tail is one reward per rollout
        self.assertEqual(len(padded["raw_reward"]), len(padded["tokens"]) + 24)
        return len(padded["tokens"]) - len(unpadded["tokens"])

    def test_static_dp_1_2_3(self):
        pads = 0
        for seed in range(6):
            for dp in (1, 2, 3):
                for mbs in (1, 2):
                    pads += self.case(seed, dp, mbs, False)
        self.assertGreater(pads, 20, "the cases must need padding")

    def test_dynamic_dp_1_2_3(self):
        for seed in range(4):
            for dp in (1, 2, 3):
                self.case(seed, dp, 1, True, max_tokens=60)

    def test_train_side_split(self):
        """miles' --delay-split-train-data-by-dp: the rollout step is dealt to
        the ranks sample by sample and each rank cuts steps of gbs/dp samples,
        dropping the rest; the padded step must lose nothing and change no
        per-token term."""
        pads = 0
        for seed in range(4):
            for dp, mbs in ((1, 1), (2, 1), (2, 2), (3, 1), (4, 2)):
                gbs = 2 * dp * mbs
                rng = random.Random(seed)
                eps = [random_episode(rng, n) for n in range(24)]
                args = slime_args(world_size=dp, micro_batch_size=mbs, global_batch_size=gbs,
                                  delay_split_train_data_by_dp=True)
                unpadded = convert.convert_samples_to_train_data(slime_args(global_batch_size=None),
                                                                 episodes_to_samples(args, eps))
                padded = convert.convert_samples_to_train_data(args, episodes_to_samples(args, eps))
                n = len(padded["tokens"])
                self.assertEqual(n % gbs, 0, f"{n} samples, global batch {gbs}")
                pads += n - len(unpadded["tokens"])
                local = [list(range(r, n, dp)) for r in range(dp)]
                self.assertEqual({len(p) for p in local}, {n // dp}, "every rank the same share")
                self.assertEqual((n // dp) % (gbs // dp), 0, "no sample dropped at a rank's end")
                a = run_trainer(args, unpadded, 1, random.Random(seed))
                b = run_trainer(args, padded, dp, random.Random(seed + 1))
                self.assertEqual(a[3], b[3], "per-token-loss denominator")
                self.assertAlmostEqual(a[1], b[1], delta=1e-9)
                self.assertEqual(set(a[0]), set(b[0]), "the optimised tokens")
                for k, v in a[0].items():
                    for x, y in zip(v, b[0][k]):
                        self.assertAlmostEqual(x, y, delta=1e-9)
        self.assertGreater(pads, 10, "the cases must need padding")
        with self.assertRaisesRegex(ValueError, "not a multiple of the 3 data-parallel"):
            convert.train_side_multiple(slime_args(world_size=3, global_batch_size=4, delay_split_train_data_by_dp=True))
        with self.assertRaisesRegex(ValueError, "micro-batch-size 2"):
            convert.train_side_multiple(slime_args(world_size=2, global_batch_size=6, micro_batch_size=2,
                                                   delay_split_train_data_by_dp=True))

    def test_zero_mask_fallback_is_counted(self):
        # rollouts whose samples all have < 2 optimised tokens: zero-mask pads
        samples = []
        for rid in range(6):
            s = Sample(index=rid, rollout_id=rid, tokens=[1, 2, 3], response_length=1, loss_mask=[1],
                       rollout_log_probs=[-0.1], reward=1.0, status=Sample.Status.COMPLETED,
                       metadata={convert.META_KEY: {"segment_index": 0, "episode_status": "ok"}})
            samples.append(s)
        args = slime_args(world_size=4, rollout_batch_size=3, global_batch_size=6)
        with self.assertLogs("compactrl_slime.convert", "WARNING") as logs:
            data = convert.convert_samples_to_train_data(args, samples)
        self.assertEqual(len(data["tokens"]), 8)
        self.assertEqual(sum(max(1, sum(m)) for m in data["loss_masks"]), 8)
        self.assertIn("denominator", "".join(logs.output))

    def test_multiple_from_args(self):
        self.assertEqual(convert.schedule_multiple(slime_args(world_size=16, tensor_model_parallel_size=2,
                                                              pipeline_model_parallel_size=2, micro_batch_size=2)), (8, False))
        self.assertEqual(convert.schedule_multiple(slime_args(world_size=8, pipeline_model_parallel_size=2,
                                                              virtual_pipeline_model_parallel_size=2)), (8, False))
        self.assertEqual(convert.schedule_multiple(slime_args(world_size=6, use_dynamic_batch_size=True, micro_batch_size=4)), (6, True))
        self.assertEqual(convert.schedule_multiple(slime_args(compactrl_pad_multiple=5)), (5, False))


class PassRateAndFailures(unittest.TestCase):
    def test_raw_reward_tail_is_per_rollout(self):
        rng = random.Random(3)
        eps = [random_episode(rng, n) for n in range(24)]
        args = slime_args(world_size=2)
        data = convert.convert_samples_to_train_data(args, episodes_to_samples(args, eps))
        rd = {k: list(data[k]) for k in ("rewards", "loss_masks", "rollout_mask_sums", convert.CARRY_KEY, "raw_reward")}
        rd["values"] = [torch.zeros(n) for n in data["response_lengths"]]
        advantages.cross_gae(args, rd)
        self.assertEqual(len(rd["raw_reward"]), args.rollout_batch_size * args.n_samples_per_prompt)
        want = [0.0 if MASKING[e["status"]]["masked_mask_overlong"] else e["reward"] for e in eps]
        self.assertEqual(rd["raw_reward"], want)

    def test_infra_share_stops_the_run(self):
        def ep(status):
            return {"rollout_id": 0, "task_id": "t", "status": status, "scored": MASKING[status]["scored"],
                    "reward": 1.0 if status == "ok" else 0.0,
                    "segments": [{"index": 0, "kind": "exec", "tokens": [1, 2, 3], "response_length": 2,
                                  "loss_mask": [1, 1], "rollout_log_probs": [-0.1, -0.2]}]}
        args = slime_args(global_batch_size=None, compactrl_max_infra_fraction=0.25)
        def run(n_bad):
            samples = []
            for rid in range(8):
                a = dict(ep("infra_error" if rid < n_bad else "ok"), rollout_id=rid)
                samples += generate.samples_from_response(args, Sample(index=rid, metadata={"task_id": "t"}), a)
            return convert.convert_samples_to_train_data(args, samples)
        run(2)
        with self.assertRaisesRegex(convert.FailureShareExceeded, "3 of 8 rollouts"):
            run(3)

    def test_eval_is_one_sample_per_episode(self):
        rng = random.Random(5)
        ep = random_episode(rng, 0)
        ep["segments"] = ep["segments"] * 2
        ep["status"], ep["reward"] = "ok", 1.0
        out = generate.samples_from_response(slime_args(), Sample(index=3, metadata={"task_id": "t"}),
                                             service_answer(ep, 3), evaluation=True)
        self.assertEqual(len(out), 1)
        self.assertEqual(out[0].reward, 1.0)


class Sampling(unittest.TestCase):
    SLIME = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 12, "stop": None,
             "stop_token_ids": None, "skip_special_tokens": False, "no_stop_trim": True,
             "spaces_between_special_tokens": False, "sampling_seed": 3}

    def test_defaults_pass_and_are_sent(self):
        body = generate.build_request(slime_args(), Sample(index=1, metadata={"task_id": "t"}), dict(self.SLIME))
        self.assertEqual(body["sampling"], {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 12, "seed": 3})
        self.assertNotIn("routing_key", body)

    def test_refused(self):
        for k, v, why in (("top_p", 0.9, "rollout_top_p_token_ids"), ("top_k", 20, "top_k"), ("stop", ["</s>"], "stop"),
                          ("stop_token_ids", [2], "stop"), ("custom_params", {"return_top_p_token_ids": True}, "custom_params"),
                          ("repetition_penalty", 1.1, "repetition_penalty"), ("min_new_tokens", 4, "min_new_tokens"),
                          ("logit_bias", {"1": 2}, "not supported")):
            p = dict(self.SLIME, **{k: v})
            with self.assertRaisesRegex(generate.ConfigError, why, msg=k):
                generate.build_request(slime_args(), Sample(index=1, metadata={"task_id": "t"}), p)

    def test_routing_key_under_consistent_hashing(self):
        s = Sample(index=1, metadata={"task_id": "t"}, session_id="sess")
        self.assertNotIn("routing_key", generate.build_request(slime_args(), s, dict(self.SLIME)))
        body = generate.build_request(slime_args(router_policy="consistent_hashing"), s, dict(self.SLIME))
        self.assertEqual(body["routing_key"], "sess")

    def test_miles_routing_key(self):
        # miles' Sample has routing_key and no session_id; miles sends it whenever set
        # and requires it under consistent_hashing / manual (generate_endpoint_utils.py:37-49).
        M = load("miles")
        self.assertFalse(hasattr(M(), "session_id"))
        body = generate.build_request(slime_args(), M(index=1, metadata={"task_id": "t"}, routing_key="rk"), dict(self.SLIME))
        self.assertEqual(body["routing_key"], "rk")
        self.assertNotIn("routing_key", generate.build_request(slime_args(), M(index=1, metadata={"task_id": "t"}), dict(self.SLIME)))
        with self.assertRaisesRegex(generate.ConfigError, "routing_key"):
            generate.build_request(slime_args(sglang_router_policy="manual"), M(index=1, metadata={"task_id": "t"}), dict(self.SLIME))

    def test_foreign_sample_refused(self):
        class Other:
            def __init__(self):
                self.index, self.metadata, self.prompt = 1, {"task_id": "t"}, ""
        with self.assertRaisesRegex(generate.ConfigError, "neither routing_key"):
            generate.build_request(slime_args(), Other(), dict(self.SLIME))


class TrainerSamples(unittest.TestCase):
    """The hooks' fields exist, under these names, in each trainer's real Sample."""

    def test_hook_fields(self):
        for name in trainer_types.TRAINERS:
            names = [f["name"] for f in trainer_types.spec(name)["fields"]]
            for f in trainer_types.HOOK_FIELDS + (trainer_types.ROUTING_FIELD[name],):
                self.assertIn(f, names, f"{name}'s Sample has no {f}")
            self.assertEqual(trainer_types.spec(name)["status"]["FAILED"], "failed")

    def test_samples_from_response_on_each_trainer(self):
        ep = random_episode(random.Random(5), 3)
        for name in trainer_types.TRAINERS:
            S = load(name)
            out = generate.samples_from_response(slime_args(), S(index=4, metadata={"task_id": "t"}), service_answer(ep, 4))
            self.assertEqual(len(out), len(ep["segments"]))
            self.assertTrue(all(type(s) is S and s.rollout_id == 4 for s in out), name)
            data = convert.convert_samples_to_train_data(slime_args(rollout_batch_size=1, n_samples_per_prompt=1,
                                                                    global_batch_size=1), out)
            self.assertEqual(data["rollout_ids"], [4] * len(out))


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        task = body["task_id"]
        if task == "slow":
            time.sleep(3)
        code, out = {"bad": (400, {"error": "agent.kontext: unknown field", "field": "agent"}),
                     "boom": (500, {"error": "engine exploded"})}.get(task, (200, None))
        self.server.seen.append(body)
        data = json.dumps(out).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass


class Errors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        cls.srv.seen = []
        threading.Thread(target=cls.srv.serve_forever, daemon=True).start()
        cls.url = f"http://127.0.0.1:{cls.srv.server_address[1]}"

    @classmethod
    def tearDownClass(cls):
        cls.srv.shutdown()

    def gen(self, task, **kw):
        args = slime_args(compactrl_serve_url=self.url, compactrl_retries=2, **kw)
        return asyncio.run(generate.generate(args, Sample(index=9, metadata={"task_id": task}), dict(Sampling.SLIME)))

    def test_400_stops_with_the_service_message(self):
        with self.assertRaisesRegex(generate.RequestRejected, "agent.kontext: unknown field"):
            self.gen("bad")

    def test_500_is_masked_and_marked(self):
        out = self.gen("boom")
        self.assertEqual(len(out), 1)
        self.assertTrue(out[0].remove_sample)
        self.assertEqual(out[0].metadata[convert.META_KEY]["episode_status"], "infra_error")
        self.assertIn("engine exploded", out[0].metadata[convert.META_KEY]["error"])

    def test_cancel_leaves_no_unretrieved_future(self):
        errors = []

        async def main():
            asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: errors.append(ctx.get("message")))
            args = slime_args(compactrl_serve_url=self.url)
            task = asyncio.ensure_future(generate.generate(args, Sample(index=1, metadata={"task_id": "slow"}), dict(Sampling.SLIME)))
            await asyncio.sleep(0.3)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.3)
            gc.collect()
            await asyncio.sleep(0.1)
        asyncio.run(main())
        gc.collect()
        self.assertEqual(errors, [])


class Miles(unittest.TestCase):
    def test_install_rebinds_the_actor_function(self):
        names = ["miles", "miles.backends", "miles.backends.megatron_utils", miles.ACTOR_MODULE]
        saved = {n: sys.modules.get(n) for n in names}
        try:
            for n in names:
                sys.modules[n] = types.ModuleType(n)
            actor = sys.modules[miles.ACTOR_MODULE]
            actor.compute_advantages_and_returns = lambda args, rd: None
            args = slime_args(advantage_estimator="ppo", train_backend="megatron", normalize_advantages=False,
                              compactrl_gae_alpha=0)
            miles.install(args)
            self.assertIs(actor.compute_advantages_and_returns, miles.compute_advantages_and_returns)
            rd = {"values": [torch.zeros(2)], "rewards": [1.0], "loss_masks": [torch.tensor([1, 1])],
                  "rollout_mask_sums": torch.tensor([2.0]), convert.CARRY_KEY: [0]}
            actor.compute_advantages_and_returns(args, rd)
            self.assertEqual(rd["advantages"][0].tolist(), [1.0, 1.0])
            rd2 = {"values": None}
            actor.compute_advantages_and_returns(args, rd2)  # not the last stage: nothing
            self.assertNotIn("advantages", rd2)
            with self.assertRaisesRegex(NotImplementedError, "fsdp|megatron"):
                miles.install(slime_args(train_backend="fsdp"))
            for flag in ("indep_dp", "use_dynamic_global_batch_size"):
                with self.assertRaisesRegex(NotImplementedError, flag.replace("_", "-")):
                    miles.install(slime_args(advantage_estimator="ppo", train_backend="megatron", **{flag: True}))
                with self.assertRaisesRegex(NotImplementedError, flag.replace("_", "-")):
                    convert.convert_samples_to_train_data(slime_args(**{flag: True}), episodes_to_samples(
                        slime_args(), [random_episode(random.Random(1), 0)]))
            # the train-side split alone is supported (Padding.test_train_side_split)
            miles.install(slime_args(advantage_estimator="ppo", train_backend="megatron",
                                     delay_split_train_data_by_dp=True))
        finally:
            for n, m in saved.items():
                if m is None:
                    sys.modules.pop(n, None)
                else:
                    sys.modules[n] = m


if __name__ == "__main__":
    unittest.main()
