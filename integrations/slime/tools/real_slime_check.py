"""Run the hooks through slime's real code (not part of CI: CI cannot fetch slime).

    SLIME_SRC=/path/to/slime-checkout python tools/real_slime_check.py

from integrations/slime, with a Python that has torch, numpy, httpx, tqdm and
ray installed. What is real slime: Sample (slime/utils/types.py), the
rollout-id check and flattening (RolloutManager._get_rollout_data), the
convert dispatch (RolloutManager._convert_samples_to_train_data), the DP
split (RolloutManager._split_train_data_by_dp → build_dp_schedule,
tensorize_rollout_data_for_training), process_rollout_data, DataIterator,
compute_advantages_and_returns (which loads cross_gae through slime's
load_function), loss_function (its per-token normaliser and
get_sum_of_sample_mean), log_passrate, and the metric logger the convert hook calls (with wandb
and tensorboard off). What is stubbed: Megatron's
mpu (one process: every rank is the last pipeline stage, CP 1, TP 1),
megatron.core.packed_seq_params, sglang and sglang_router (imported by
slime/ray/rollout.py, never called here), and Ray's object store (ray.put /
ray.get as a pickle round trip; RolloutManager methods are called on a
plain object). The critic and the policy are a stand-in causal model: each
response token's value and log-prob are a hash of the tokens up to it.

For DP = 1, 2, 3, static batching (micro_batch_size 1, slime's default) and
dynamic batching, it checks, per training step, that the padded data
trains exactly what the unpadded data would: the same optimised tokens with
the same advantages and returns, the same Σ per-token loss and slime's same
per-token denominator; that the advantages equal a whole-episode cross-GAE
(compactrl's own estimator run without any split); and that
slime's own log_passrate (what --log-passrate runs, n_samples_per_prompt 2)
logs pass@1 equal to the episodes' pass rate.
"""

import copy
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import math
import os
import pickle
import random
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
SLIME = os.environ["SLIME_SRC"]
sys.path.insert(0, SLIME)

import gpu_stubs  # noqa: E402
import torch  # noqa: E402
import torch.distributed.distributed_c10d as _c10d  # noqa: E402

# slime/utils/distributed_utils.py imports the private _world of torch ≥ 2; a
# torch 1.13 here lacks it. It is only used to build process groups (never here).
if not hasattr(_c10d, "_world"):
    _c10d._world = None
# torch.compile (torch ≥ 2) decorates slime/utils/ppo_utils.py helpers; here
# it is the identity (compilation changes speed, not values).
if not hasattr(torch, "compile"):
    torch.compile = lambda fn=None, **kw: fn if fn is not None else (lambda f: f)


def _stub(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


class _MPU:
    """Megatron's parallel state for one process that is every DP rank in turn."""
    rank = 0
    world = 1

    def is_pipeline_last_stage(self, *a, **k):
        return True

    def get_context_parallel_world_size(self, *a, **k):
        return 1

    def get_context_parallel_rank(self, *a, **k):
        return 0

    def get_tensor_model_parallel_world_size(self, *a, **k):
        return 1

    def get_tensor_model_parallel_rank(self, *a, **k):
        return 0

    def get_data_parallel_world_size(self, *a, **k):
        return self.world

    def get_data_parallel_rank(self, *a, **k):
        return self.rank

    def get_virtual_pipeline_model_parallel_world_size(self, *a, **k):
        return None


MPU = _MPU()
_stub("megatron")
_stub("megatron.core", mpu=MPU)
_stub("megatron.core.packed_seq_params", PackedSeqParams=object)


gpu_stubs.install(("sglang", "sglang_router"))  # slime/ray/rollout.py imports them

import ray  # noqa: E402

ray.put = lambda x, **kw: pickle.loads(pickle.dumps(x))
ray.get = lambda x, **kw: pickle.loads(pickle.dumps(x))

from slime.ray.rollout import RolloutManager as _RemoteRolloutManager  # noqa: E402

# the class under @ray.remote (its methods, called on a plain object)
RolloutManager = _RemoteRolloutManager.__ray_metadata__.modified_class.__bases__[0]
from slime.utils.types import Sample  # noqa: E402
from slime.utils.data import process_rollout_data  # noqa: E402
from slime.backends.megatron_utils.data import DataIterator  # noqa: E402
from slime.backends.megatron_utils import loss as slime_loss  # noqa: E402
from slime.observability import train_metric_utils  # noqa: E402
from slime.rollout.sample_hooks import set_current_rollout_id  # noqa: E402

from compactrl_slime import advantages, convert, generate  # noqa: E402
from tests.test_advantages import MASKING, random_episode, service_answer  # noqa: E402


def _h(tokens, salt):
    d = hashlib.blake2b(repr((salt, tuple(tokens))).encode(), digest_size=8).digest()
    return int.from_bytes(d, "little") / 2 ** 64


def model(tokens, response_length):
    tokens = [int(t) for t in tokens]
    p = len(tokens) - response_length
    logp = [-0.05 - 2 * _h(tokens[:p + t + 1], "logp") for t in range(response_length)]
    value = [2 * _h(tokens[:p + t + 1], "value") - 1 for t in range(response_length)]
    return logp, value


LOSSES = []  # per micro-batch: (step, per-token records)


def test_loss(args, batch, logits, sum_of_sample_mean):
    """slime custom loss (loss_type custom_loss): clipped PPO on the stand-in
    model's log-probs plus the value loss, reduced by slime's reducer."""
    pieces = []
    for toks, rl, adv, ret, old, mask in zip(batch["tokens"], batch["response_lengths"], batch["advantages"],
                                             batch["returns"], batch["rollout_log_probs"], batch["loss_masks"]):
        logp, value = model(toks.tolist(), rl)
        ratio = torch.exp(torch.tensor(logp, dtype=torch.float64) - old.double())
        a = adv.double()
        pg = torch.maximum(-a * ratio, -a * ratio.clamp(0.8, 1.28))
        vl = (torch.tensor(value, dtype=torch.float64) - ret.double()) ** 2
        pieces.append(pg + vl)
        recs = {}
        p = len(toks) - rl
        for t in range(rl):
            if int(mask[t]):
                recs[tuple(toks[:p + t + 1].tolist())] = (float(adv[t]), float(ret[t]))
        LOSSES[-1][1].update(recs)
    x = torch.cat(pieces)
    return sum_of_sample_mean(x), {"x": x.sum().detach()}


def make_args(dp, dynamic, padded, cap=90):
    a = types.SimpleNamespace(
        gamma=1.0, lambd=1.0, kl_coef=0.0, rollout_batch_size=8, n_samples_per_prompt=2, global_batch_size=4,
        world_size=dp, tensor_model_parallel_size=1, pipeline_model_parallel_size=1, context_parallel_size=1,
        micro_batch_size=1, use_dynamic_batch_size=dynamic, max_tokens_per_gpu=cap if dynamic else None,
        balance_by_flops=False, balance_data=False, use_rollout_logprobs=False, advantage_estimator="ppo",
        custom_advantage_function_path="compactrl_slime.advantages.cross_gae", normalize_advantages=False,
        use_opd=False, calculate_per_token_loss=True, loss_type="custom_loss",
        custom_loss_function_path="__main__.test_loss", recompute_loss_function=False, allgather_cp=False,
        load_debug_rollout_data=None, rollout_data_transport="object-store", compactrl_max_infra_fraction=1.0,
        reward_key=None, rollout_top_p=1.0, use_wandb=False, use_tensorboard=False,
        wandb_always_use_train_step=False)
    if not padded:
        a.compactrl_pad_multiple = 1
    return a


def play(args, seed):
    """slime's rollout output: rollout_batch_size groups of n rollouts, each
    a list[Sample] (real Sample) from generate.samples_from_response."""
    rng = random.Random(seed)
    groups, eps = [], []
    for g in range(args.rollout_batch_size):
        group = []
        for j in range(args.n_samples_per_prompt):
            idx = g * args.n_samples_per_prompt + j
            ep = random_episode(rng, idx)
            eps.append(ep)
            proto = Sample(index=idx, group_index=g, prompt="t", metadata={"task_id": "t"})
            group.append(generate.samples_from_response(args, proto, service_answer(ep, idx)))
        groups.append(group)
    return groups, eps


def train_step_view(args, groups, dp):
    """Everything slime does from the rollout output to the loss; returns
    per step: (Σ loss, Σ num_tokens, per-token records), and raw_reward as
    the pass-rate logger sees it."""
    mgr = types.SimpleNamespace(args=args, generate_rollout=lambda *a, **k: copy.deepcopy(groups),
                                data_source=None, custom_convert_samples_to_train_data_func=convert.convert_samples_to_train_data,
                                train_parallel_config={"dp_size": dp, "cp_size": 1, "vpp_size": 1,
                                                       "microbatch_group_size_per_vp_stage": 1})
    set_current_rollout_id(0)  # as RolloutManager.generate does (rollout.py:494)
    samples, _ = RolloutManager._get_rollout_data(mgr, 0)
    data = RolloutManager._convert_samples_to_train_data(mgr, samples)
    refs = RolloutManager._split_train_data_by_dp(mgr, data)
    steps = {}
    raw = None
    MPU.world = dp
    for r in range(dp):
        MPU.rank = r
        rd = process_rollout_data(args, refs, r, dp)
        rd["values"] = [torch.tensor(model(t.tolist(), rl)[1], dtype=torch.float32)
                        for t, rl in zip(rd["tokens"], rd["response_lengths"])]
        slime_loss.compute_advantages_and_returns(args, rd)
        if r == 0:
            raw = list(rd["raw_reward"])
            logged = {}
            train_metric_utils.gather_log_data = lambda name, a, rid, d: logged.update({name: d})
            train_metric_utils.log_passrate(0, args, rd)  # what --log-passrate runs after the hooks
            raw = (raw, logged.get("passrate"))
        it = DataIterator(rd, rd["micro_batch_indices"])
        mb = 0
        for step, n_mb in enumerate(rd["num_microbatches"]):
            for _ in range(n_mb):
                LOSSES.append((step, {}))
                batch = it.get_next(["tokens", "response_lengths", "total_lengths", "loss_masks", "rollout_mask_sums",
                                     "advantages", "returns", "rollout_log_probs"])
                loss, num_tokens, _ = slime_loss.loss_function(args, batch, n_mb, args.global_batch_size, torch.zeros(1))
                s = steps.setdefault(step, [0.0, 0, {}, 0])
                s[0] += float(loss)
                s[1] += int(num_tokens)
                s[3] += sum(1 for m in batch["loss_masks"] if int(m.sum()) == 0)
                for k, v in LOSSES[-1][1].items():
                    assert k not in s[2], "token optimised twice"
                    s[2][k] = v
                mb += 1
    return steps, raw, data


def check(dp, dynamic, seed, cap=90):
    args_p, args_u = make_args(dp, dynamic, True, cap), make_args(dp, dynamic, False, cap)
    groups, eps = play(args_p, seed)
    pad_steps, raw, data = train_step_view(args_p, groups, dp)
    try:
        ref_steps, _, ref_data = train_step_view(args_u, groups, 1)
    except AssertionError as e:  # slime's own schedule refuses the unpadded data at DP > 1; DP 1 always works
        raise SystemExit(f"unpadded at DP 1 failed: {e}")
    worst = 0.0
    zero_pads = 0
    for step, (lp, nt, recs, zp) in pad_steps.items():
        lu, ntu, recu, zu = ref_steps[step]
        # a step with no sample of 2 optimised tokens is padded with zero-mask
        # samples, each adding 1 to slime's denominator (convert's module doc)
        zero_pads += zp - zu
        assert nt - zp == ntu - zu, f"step {step}: per-token denominator {nt} padded vs {ntu} unpadded, " \
                                    f"{zp - zu} zero-mask pads"
        assert set(recs) == set(recu), f"step {step}: optimised tokens differ"
        worst = max(worst, abs(lp - lu) / max(1.0, abs(lu)))
        for k, (a, r) in recs.items():
            worst = max(worst, abs(a - recu[k][0]), abs(r - recu[k][1]))
    # the advantages equal cross-GAE on whole episodes (no DP split, no padding)
    whole = {}
    for ep_i, ep in enumerate(eps):
        for seg in ep["segments"]:
            toks = seg["prompt_ids"] + seg["response_ids"]
            _, v = model(toks, len(seg["response_ids"]))
            whole[(ep_i, tuple(toks))] = v
    n_rollouts = args_p.rollout_batch_size * args_p.n_samples_per_prompt
    raw, passrate = raw
    assert len(raw) == n_rollouts, f"raw_reward has {len(raw)} entries for {n_rollouts} rollouts"
    rule = "masked_mask_overlong" if getattr(args_p, "compactrl_mask_overlong", True) else "masked_keep_overlong"
    want = [0.0 if MASKING[ep["status"]][rule] or ep["reward"] != 1 else 1.0 for ep in eps]
    passed = [1.0 if x == 1 else 0.0 for x in raw]
    assert passed == want, f"per-rollout rewards {raw} for episodes {[(e['status'], e['reward']) for e in eps]}"
    group = args_p.n_samples_per_prompt
    pass1 = sum(want) / len(want)
    assert passrate and abs(passrate["pass@1"] - pass1) < 1e-12, f"slime's log_passrate gave {passrate}, pass@1 {pass1}"
    assert "pass@%d" % group in passrate, passrate
    n_samples = len(data["tokens"])
    n_unpadded = len(ref_data["tokens"])
    return worst, n_samples - n_unpadded, len(pad_steps), zero_pads


def whole_episode_check(seed):
    """Advantages after slime's pipeline at DP 2 equal cross-GAE computed on
    each whole episode directly (segment_advantages, N_{>s} from the episode)."""
    args = make_args(2, False, True)
    groups, eps = play(args, seed)
    steps, _, _ = train_step_view(args, groups, 2)
    got = {}
    for _, _, recs, _ in steps.values():
        got.update(recs)
    worst = 0.0
    for ep_i, ep in enumerate(eps):
        masked = MASKING[ep["status"]]["masked_mask_overlong"]  # the one masking rule (rl.Masked)
        segs = ep["segments"]
        masks = [[0] * len(s["loss_mask"]) if (masked or not s["trainable"]) else s["loss_mask"] for s in segs]
        l = sum(sum(m) for m in masks)
        lam = advantages.lambda_for(l, 1.5, 1.0)
        reward = 0.0 if masked else ep["reward"]
        for i, s in enumerate(segs):
            later = sum(sum(m) for m in masks[i + 1:])
            toks = s["prompt_ids"] + s["response_ids"]
            _, v = model(toks, len(s["response_ids"]))
            a, r = advantages.segment_advantages(v, masks[i], reward, later, 1.0, lam)
            p = len(s["prompt_ids"])
            for t, m in enumerate(masks[i]):
                if m:
                    ga, gr = got[tuple(toks[:p + t + 1])]
                    worst = max(worst, abs(ga - a[t]), abs(gr - r[t]))
    return worst


def main():
    commit = os.environ.get("SLIME_COMMIT", "?")
    print(f"slime at {commit} from {SLIME}")
    modes = (("static (micro_batch_size 1)", False, None),
             ("dynamic (max_tokens_per_gpu 90)", True, 90),
             ("dynamic (max_tokens_per_gpu 20: one sample per micro-batch)", True, 20))
    for name, dynamic, cap in modes:
        for dp in (1, 2, 3):
            total_pads = zero = 0
            worst = 0.0
            steps = 0
            for seed in range(5):
                w, pads, n, z = check(dp, dynamic, seed, cap or 90)
                worst, total_pads, steps, zero = max(worst, w), total_pads + pads, steps + n, zero + z
            print(f"{name} DP={dp}: {steps} steps, {total_pads} pads ({zero} zero-mask), "
                  f"max |padded − unpadded| (loss rel., advantages, returns) = {worst:.2e}; "
                  "per-token denominators equal but for the zero-mask pads; slime's log_passrate equal")
    w = max(whole_episode_check(s) for s in range(3))
    print(f"advantages vs whole-episode cross-GAE at DP 2: max |Δ| = {w:.2e}")
    # the unpadded data: what slime does without the padding
    for name, dynamic, cap in modes[::2]:
        try:
            args = make_args(3, dynamic, False, cap or 90)
            groups, _ = play(args, 0)
            train_step_view(args, groups, 3)
            print(f"unpadded DP 3 {name}: slime accepted it (this seed)")
        except AssertionError as e:
            print(f"unpadded DP 3 {name}: slime refuses: {str(e)[:100]}")


if __name__ == "__main__":
    main()
