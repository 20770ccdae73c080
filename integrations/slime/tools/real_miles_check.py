"""Run the generate and convert hooks through miles' real code (not in CI: CI cannot fetch miles).

    MILES_SRC=/path/to/miles-checkout python tools/real_miles_check.py

from integrations/slime, with a Python that has torch, numpy and ray (the
verl venv of .ci/run has them). What is real miles: Sample and its
``validate`` (miles/utils/types.py), ``load_generate_function`` and
``LegacyGenerateFnAdapter`` (rollout/inference_rollout/compatibility.py:
how miles calls --custom-generate-function-path), GenerateFnInput /
GenerateFnOutput, the conversion dispatch (ray/rollout/train_data_conversion
.convert_samples_to_train_data with our convert hook) and miles'
rollout-side DP split (split_train_data_by_dp_scheduled_raw → build_dp_schedule)
at DP 1, 2 and 3, and its train-side split (--delay-split-train-data-by-dp:
split_train_data_by_dp_raw, process_rollout_data_shard, get_data_iterator)
at DP 1–4. What is stubbed: sglang and sglang_router (GPU-only,
imported at module level, never called here; tools/gpu_stubs.py). What stands in: compactrl serve is a local HTTP server
answering /v1/rollouts with random multi-segment episodes in the service's
layout (the Go test TestServeLlamaServerEndToEnd runs the real service with
the same hook), and GenerateState is a namespace holding args. It prints one
line per check and exits 1 on the first failure.
"""

import asyncio
import http.server
import json
import os
import random
import sys
import threading
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.append(os.environ["MILES_SRC"])  # after ours: miles has a tests package too

import gpu_stubs  # noqa: E402

gpu_stubs.install(("sglang", "sglang_router"))  # miles/utils/chat_template_utils imports sglang

from miles.ray.rollout import train_data_conversion as tdc  # noqa: E402
from miles.rollout.base_types import GenerateFnInput, GenerateFnOutput  # noqa: E402
from miles.rollout.inference_rollout.compatibility import LegacyGenerateFnAdapter, load_generate_function  # noqa: E402
from miles.utils.types import Sample  # noqa: E402

from compactrl_slime import convert  # noqa: E402
from tests.test_advantages import random_episode, service_answer  # noqa: E402


class _Service(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append(body)
        rid = body["rollout_id"]
        ep = random_episode(random.Random(rid), rid)
        ep["status"] = "ok"
        data = json.dumps(service_answer(ep, rid)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def check(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'} {name} {detail}")
    if not ok:
        sys.exit(1)


def main():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    srv.seen = []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    args = types.SimpleNamespace(
        compactrl_serve_url=f"http://127.0.0.1:{srv.server_address[1]}", sglang_router_ip="127.0.0.1",
        sglang_router_port=30000, sglang_router_policy="consistent_hashing", compactrl_max_infra_fraction=1.0,
        rollout_batch_size=4, n_samples_per_prompt=2, global_batch_size=4, micro_batch_size=1,
        use_dynamic_batch_size=False, max_tokens_per_gpu=None, world_size=1, tensor_model_parallel_size=1,
        pipeline_model_parallel_size=1, context_parallel_size=1, balance_data=False, gamma=1.0, lambd=1.0,
        kl_coef=0.0)
    fn = load_generate_function("compactrl_slime.generate.generate")
    check("miles loads the hook as a legacy generate function", isinstance(fn, LegacyGenerateFnAdapter))
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 16, "stop": None,
              "stop_token_ids": None, "skip_special_tokens": False, "no_stop_trim": True}

    async def play():
        outs = []
        for i in range(8):
            s = Sample(index=i, group_index=i // 2, prompt="t", metadata={"task_id": "t"}, routing_key=f"rk{i}")
            out = await fn(GenerateFnInput(state=types.SimpleNamespace(args=args), sample=s, sampling_params=params,
                                           evaluation=False))
            outs.append(out)
        return outs

    outs = asyncio.run(play())
    check("each call returns GenerateFnOutput", all(isinstance(o, GenerateFnOutput) for o in outs))
    samples = [s for o in outs for s in o.samples]
    check("segments are miles Samples", all(type(s) is Sample for s in samples), f"({len(samples)} samples)")
    for s in samples:
        s.validate()
    check("Sample.validate passes on every segment", True)
    check("routing key sent", [b["routing_key"] for b in srv.seen] == [f"rk{i}" for i in range(8)])
    check("segments share the integer rollout_id", all(s.rollout_id == s.index for s in samples))
    data = tdc.convert_samples_to_train_data(args, samples, {}, convert.convert_samples_to_train_data, None)
    check("miles' conversion dispatch runs the convert hook", convert.CARRY_KEY in data and "rollout_ids" in data)
    for dp in (1, 2, 3):
        args.world_size = dp
        d = convert.convert_samples_to_train_data(args, samples)
        cfg = {"dp_size": dp, "cp_size": 1, "vpp_size": 1, "microbatch_group_size_per_vp_stage": 1}
        try:
            shards = tdc.split_train_data_by_dp_scheduled_raw(args, dict(d), train_parallel_config=cfg)
        except TypeError as e:
            check(f"DP {dp}: miles' rollout-side schedule", False, repr(e))
        tokens = sum(sum(m) for sh in shards for m in sh["loss_masks"])
        check(f"DP {dp}: miles' rollout-side schedule accepts the padded step", len(shards) == dp,
              f"({len(d['tokens'])} samples, {tokens} optimised tokens)")
    train_side_split(args, samples)
    srv.shutdown()
    print("miles commit checked: see `git -C $MILES_SRC rev-parse HEAD`")


def train_side_split(args, samples):
    """--delay-split-train-data-by-dp: miles' own split_train_data_by_dp_raw
    deals the padded step to the ranks (round robin and --balance-data),
    process_rollout_data_shard completes it, and get_data_iterator (static
    batching; its dynamic path needs CUDA for an all-reduce) cuts each
    rank's steps. Every rank must get the same step count, every sample a
    micro-batch, and the optimised tokens must be those before padding."""
    from miles.backends.training_utils import data as train_data

    before = convert.convert_samples_to_train_data(types.SimpleNamespace(**{**vars(args), "global_batch_size": None}),
                                                   samples)
    want_tokens = sum(sum(m) for m in before["loss_masks"])
    for dp, mbs, balance in ((1, 1, False), (2, 1, False), (2, 2, True), (3, 1, False), (3, 1, True), (4, 2, False)):
        a = types.SimpleNamespace(**vars(args))
        a.delay_split_train_data_by_dp = True
        a.world_size, a.micro_batch_size, a.global_batch_size, a.balance_data = dp, mbs, 2 * dp * mbs, balance
        a.use_dynamic_global_batch_size = False
        a.use_dynamic_batch_size = False
        a.qkv_format = "thd"
        d = convert.convert_samples_to_train_data(a, samples)
        shards = tdc.split_train_data_by_dp_raw(a, dict(d), dp_size=dp)
        state = types.SimpleNamespace(effective_dp=types.SimpleNamespace(size=dp, group=None), vpp_size=1,
                                      microbatch_group_size_per_vp_stage=1, cp=types.SimpleNamespace(size=1))
        train_data.get_parallel_state = lambda: state
        steps, covered, tokens = set(), 0, 0
        for sh in shards:
            rd = tdc.process_rollout_data_shard(a, sh)
            _, num_mbs = train_data.get_data_iterator(a, None, rd)
            steps.add(len(num_mbs))
            covered += sum(num_mbs) * mbs
            tokens += sum(sum(m) for m in rd["loss_masks"])
        name = f"DP {dp}, micro-batch {mbs}{', balance-data' if balance else ''}: miles' train-side split"
        check(name + " gives every rank the same step count", len(steps) == 1, f"(steps {sorted(steps)})")
        check(name + " drops no sample", covered == len(d["tokens"]), f"({covered} of {len(d['tokens'])} samples)")
        check(name + " optimises the tokens before padding", tokens == want_tokens, f"({tokens} tokens)")


if __name__ == "__main__":
    main()
