"""generate against a running `compactrl serve` (COMPACTRL_SERVE_URL; the Go
test TestServeLlamaServerEndToEnd starts one over llama-server, whose host
and port stand in for slime's SGLang router). Samples are
slime's and miles' own Sample, rebuilt from their definitions
(tests/trainer_types.py)."""

import asyncio
import json
import os
import tempfile
import types
import unittest
import urllib.request

import torch

from compactrl_slime import advantages, convert, generate
from tests.trainer_types import load

Sample = load("slime")

URL = os.environ.get("COMPACTRL_SERVE_URL")
# The episode the tests play: the nano model's "tiny" task by default; the Go test of the real model
# (SmolLM2-135M-Instruct on the vault suite) sets its own task, agent budget and action length.
TASK = os.environ.get("COMPACTRL_TEST_TASK", "tiny")
AGENT = json.loads(os.environ.get("COMPACTRL_TEST_AGENT",
                                  '{"context": 256, "reserve": 96, "keep_last": 2, "max_turns": 6, "max_compactions": 100}'))
MAX_NEW_TOKENS = int(os.environ.get("COMPACTRL_TEST_MAX_NEW_TOKENS", "12"))


def slime_args(**kw):
    a = types.SimpleNamespace(
        sglang_router_ip=os.environ.get("COMPACTRL_TEST_ROUTER_IP"),
        sglang_router_port=os.environ.get("COMPACTRL_TEST_ROUTER_PORT"),
        compactrl_serve_url=URL, compactrl_engine_kind="llamacpp",
        compactrl_agent=dict(AGENT),
        gamma=1.0, lambd=1.0, kl_coef=0.0)
    for k, v in kw.items():
        setattr(a, k, v)
    return a


# slime's sampling_params (sglang_rollout.py:95-105, 322).
PARAMS = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": MAX_NEW_TOKENS, "stop": None,
          "stop_token_ids": None, "skip_special_tokens": False, "no_stop_trim": True, "sampling_seed": 11}


def metric(name):
    req = urllib.request.Request(URL + "/metrics")
    if os.environ.get("COMPACTRL_SERVE_API_KEY"):
        req.add_header("Authorization", "Bearer " + os.environ["COMPACTRL_SERVE_API_KEY"])
    with urllib.request.urlopen(req) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return line.split(" ", 1)[1]
    return None


@unittest.skipUnless(URL, "COMPACTRL_SERVE_URL is not set")
class GenerateAgainstService(unittest.TestCase):
    def test_segments_share_integer_rollout_id(self):
        args = slime_args()
        sample = Sample(index=1234, group_index=7, prompt=TASK, metadata={"task_id": TASK}, session_id="s")
        out = asyncio.run(generate.generate(args, sample, dict(PARAMS)))
        self.assertIsInstance(out, list)
        self.assertGreaterEqual(len(out), 2, "the episode must compact")
        for k, s in enumerate(out):
            self.assertIsInstance(s, Sample)
            self.assertEqual(s.rollout_id, 1234)
            self.assertIsInstance(s.rollout_id, int)
            self.assertEqual((s.index, s.group_index, s.session_id), (1234, 7, "s"))
            self.assertEqual(len(s.loss_mask), s.response_length)
            self.assertEqual(len(s.rollout_log_probs), s.response_length)
            self.assertLess(s.response_length, len(s.tokens))
            self.assertIn(s.status, (Sample.Status.COMPLETED, Sample.Status.TRUNCATED))
            self.assertEqual(s.metadata[convert.META_KEY]["segment_index"], k)
            self.assertIsNotNone(s.reward)
        self.assertEqual(sample.rollout_id, None, "the input sample is not modified")
        # the masked overlong rollout trains nothing; unmasked, it does
        out2 = asyncio.run(generate.generate(slime_args(compactrl_mask_overlong=False), sample, dict(PARAMS)))
        self.assertGreater(sum(sum(s.loss_mask) for s in out2), 0)
        data = convert.convert_samples_to_train_data(args, out2)
        rd = {k: data[k] for k in ("rewards", "loss_masks", "rollout_mask_sums", convert.CARRY_KEY)}
        rd["values"] = [torch.zeros(n) for n in data["response_lengths"]]
        advantages.cross_gae(args, rd)
        self.assertEqual([len(a) for a in rd["advantages"]], data["response_lengths"])

    def test_rejected_request_stops(self):
        # a 400 is a configuration mistake: raised with the service's message
        sample = Sample(index=5, metadata={"task_id": "no-such-task"})
        with self.assertRaisesRegex(generate.RequestRejected, "no-such-task"):
            asyncio.run(generate.generate(slime_args(), sample, dict(PARAMS)))
        with self.assertRaisesRegex(generate.RequestRejected, "kontext"):
            asyncio.run(generate.generate(slime_args(compactrl_agent={"kontext": 5}), Sample(index=6, metadata={"task_id": TASK}), dict(PARAMS)))

    @unittest.skipUnless(os.environ.get("COMPACTRL_SERVE_API_KEY"), "the service runs without an API key")
    def test_api_key(self):
        # the key comes from $COMPACTRL_SERVE_API_KEY or compactrl_api_key_file; a wrong one is a 401
        sample = Sample(index=7, metadata={"task_id": TASK})
        key = os.environ.pop("COMPACTRL_SERVE_API_KEY")
        try:
            with tempfile.NamedTemporaryFile("w", suffix=".key") as f:
                f.write("wrong-key-of-enough-length\n")
                f.flush()
                with self.assertRaisesRegex(generate.RequestRejected, "401.*API key"):
                    asyncio.run(generate.generate(slime_args(compactrl_api_key_file=f.name), sample, dict(PARAMS)))
            with tempfile.NamedTemporaryFile("w", suffix=".key") as f:
                f.write(key + "\n")
                f.flush()
                # With the right key the request gets past authentication: an unknown task is then a 400
                # naming it (no episode needs to be played to show it).
                with self.assertRaisesRegex(generate.RequestRejected, "400.*no-such-task"):
                    asyncio.run(generate.generate(slime_args(compactrl_api_key_file=f.name),
                                                  Sample(index=8, metadata={"task_id": "no-such-task"}), dict(PARAMS)))
        finally:
            os.environ["COMPACTRL_SERVE_API_KEY"] = key

    def test_eval_returns_one_sample_per_episode(self):
        sample = Sample(index=8, metadata={"task_id": TASK})
        out = asyncio.run(generate.generate(slime_args(), sample, dict(PARAMS), evaluation=True))
        self.assertEqual(len(out), 1)

    def test_cancel_disconnects(self):
        before = metric('compactrl_episodes_finished_total{status="cancelled"}')
        args = slime_args(compactrl_agent=dict(AGENT, max_turns=100000, max_compactions=100000, max_format_errors=100000))

        async def main():
            task = asyncio.ensure_future(generate.generate(args, Sample(index=77, metadata={"task_id": TASK}), dict(PARAMS)))
            await asyncio.sleep(1.5)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
        asyncio.run(main())
        for _ in range(200):
            if metric('compactrl_episodes_finished_total{status="cancelled"}') != before and metric("compactrl_sandboxes_alive") == "0":
                break
            asyncio.run(asyncio.sleep(0.05))
        self.assertNotEqual(metric('compactrl_episodes_finished_total{status="cancelled"}'), before)
        self.assertEqual(metric("compactrl_sandboxes_alive"), "0")


if __name__ == "__main__":
    unittest.main()
