"""One masking rule: for every episode status, the plug-ins mask exactly what Go's rl.Masked masks (the trainer,
`compactrl advantages`), reading the service's ``scored`` (masking.json is what serve/masking_test.go computes)."""

import json
import os
import subprocess
import unittest

from compactrl_slime import generate
from tests.test_advantages import BIN, MASKING, Sample, service_answer
from tests.test_hooks import slime_args


def episode(status):
    return {"id": "e", "task": "t", "group": "g", "reward": 0.5, "status": status,
            "segments": [{"kind": "summary", "trainable": True, "prompt_ids": [1, 2], "response_ids": [3, 4, 5],
                          "loss_mask": [1, 1, 1], "logprobs": [-0.1, -0.2, -0.3], "values": [0.1, 0.2, 0.3]},
                         {"kind": "exec", "trainable": True, "prompt_ids": [1], "response_ids": [6, 7],
                          "loss_mask": [1, 1], "logprobs": [-0.1, -0.2], "values": [0.4, 0.5]}]}


class MaskingRule(unittest.TestCase):
    def test_statuses(self):
        self.assertEqual(sorted(MASKING), ["format_error", "infra_error", "ok", "overlong", "verifier_error"])

    def test_slime_samples(self):
        for status, want in MASKING.items():
            for mask_overlong, key in ((True, "masked_mask_overlong"), (False, "masked_keep_overlong")):
                resp = service_answer(episode(status), 7)
                self.assertEqual(generate.is_masked(resp, mask_overlong), want[key], (status, mask_overlong))
                out = generate.samples_from_response(slime_args(compactrl_mask_overlong=mask_overlong),
                                                     Sample(index=7, metadata={"task_id": "t"}), resp)
                masked = all(s.remove_sample and not any(s.loss_mask) for s in out)
                self.assertEqual(masked, want[key], (status, mask_overlong))

    def test_answer_without_scored_is_refused(self):
        resp = service_answer(episode("ok"), 7)
        del resp["scored"]
        with self.assertRaisesRegex(generate.ServiceError, "scored"):
            generate.is_masked(resp, True)

    @unittest.skipUnless(BIN, "COMPACTRL_BIN (the compactrl binary) is not set")
    def test_cli_agrees(self):
        """`compactrl advantages` gives a masked episode zero advantages everywhere, an unmasked one not."""
        for status, want in MASKING.items():
            for extra, key in (([], "masked_mask_overlong"), (["--no-mask-overlong"], "masked_keep_overlong")):
                out = subprocess.run([BIN, "advantages", "--estimator", "cross-gae"] + extra,
                                     input=json.dumps(episode(status)) + "\n", capture_output=True, text=True,
                                     env=dict(os.environ, COMPACTRL_TEST_AS_CLI="1"), check=True)
                adv = [a for s in json.loads(out.stdout)["segments"] for a in s["advantages"]]
                self.assertEqual(all(a == 0 for a in adv), want[key], (status, extra, adv))
