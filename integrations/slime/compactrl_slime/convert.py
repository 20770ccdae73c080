"""slime's samples → train data, carrying N_{>s} for cross-trajectory GAE.

slime replaces its own conversion with this function when
--custom-convert-samples-to-train-data-path names it
(slime/ray/rollout.py:639-640); it receives every sample of the rollout
step, flattened (rollout.py:602-604), so each rollout's segments are all
visible here even when the DP schedule later splits them across
micro-batches and ranks (slime/utils/dp_schedule.py:187-207).

It writes the keys slime's own conversion writes for a text-only PPO run
(rollout.py:657-716): tokens, response_lengths, rewards, raw_reward,
truncated, sample_indices, rollout_ids, loss_masks, rollout_mask_sums,
rollout_log_probs; and one more, CARRY_KEY, holding N_{>s} per sample:

    N_{>s} = Σ_{j>s, same rollout_id} Σ_t loss_mask_j[t]

Only keys on slime's forwarding list reach the trainer
(rollout.py:786-804); ``prompt`` is on it and slime's own conversion never
fills it, so it carries N_{>s}; advantages.cross_gae pops it before slime
logs the rollout data (slime/backends/megatron_utils/actor.py:503, 508).

The carried value is N_{>s} (an int), or [N_{>s}, chain_mask] for a
sample whose loss mask is not its GAE chain (the padding below).

Padding (slime's static batching, micro_batch_size 1 by default, asserts
that each step's sample count is a multiple of dp_size × micro_batch_size ×
mb_group: slime/utils/dp_schedule.py:167-185; the dynamic path needs at
least as many samples as its aligned micro-batch count, 170-176). With
compaction the count varies, so each step is padded here, without changing
the loss: a pad is a copy of a trainable sample X, cut after X's last
optimised token, that takes over one optimised token t of X (X's loss mask
loses t, the pad's has only t). Both keep X's GAE chain (X's original
mask), so t gets the same advantage, return, log-probs (same prefix, causal
model) and value: every per-token loss term is the same, and slime's
per-token denominator Σ_i max(1, Σ mask_i) (loss.py:1317) is unchanged
because X keeps ≥ 1 optimised token and the pad has exactly 1. The
per-rollout mean (without --calculate-per-token-loss) divides by
rollout_mask_sums, also unchanged. Only sequence-level losses (GSPO, OPSM)
would see two sequences; they are not CompactionRL's. A step with no
sample of ≥ 2 optimised tokens is padded with all-zero-mask samples
instead, which add 1 each to that step's denominator (logged). The
multiple is computed from slime's args (world_size / (TP·PP·CP) data
ranks, micro_batch_size, VPP's microbatch group) or set with
compactrl_pad_multiple. Under miles' train-side split
(--delay-split-train-data-by-dp) steps are cut by sample count on each
rank, not by rollout, so the whole rollout step is padded to a multiple of
--global-batch-size samples instead (train_side_multiple); a pad and its
source may then fall in different steps, which moves one optimised token
between two steps' token means and leaves every per-token term unchanged.

Infrastructure failures: the share of the rollout step's rollouts (all the
samples this hook receives) masked as infra_error (engine or service
failure) is logged as rollout metrics (rollout/compactrl/infra_masked,
rollout/compactrl/infra_masked_fraction, with rollout/compactrl/pads, through
slime's own metric logger at slime's current rollout id:
slime/observability/logging_utils.py:45-51, metric_utils.py:120-123,
slime/rollout/sample_hooks.py:9-14), and past compactrl_max_infra_fraction
the run stops (FailureShareExceeded).

Pass rate: slime's --log-passrate reshapes ``raw_reward`` into
rollout_batch_size × n_samples_per_prompt (train_metric_utils.py:340-355),
one reward per rollout, while slime also indexes it per sample
(slime/utils/data.py:320-327). raw_reward is therefore the per-sample
rewards followed by one reward per rollout; advantages.cross_gae (which runs
before slime's logging, actor.py:503-508) keeps only the per-rollout tail.

Rewards are the raw rewards: slime normalises rewards only for its
group estimators (rollout.py:613-631), and CompactionRL's estimator is PPO
with a critic. Segments are ordered by their metadata segment_index
(generate.py writes it); a sample with remove_sample set trains nothing
(loss mask zeroed, as rollout.py:680-681 does).
"""

import logging
import math

CARRY_KEY = "prompt"
META_KEY = "compactrl"

logger = logging.getLogger(__name__)

DEFAULTS = {
    "compactrl_pad_multiple": None,  # samples per step must be a multiple of this; None: from slime's args
    "compactrl_max_infra_fraction": 0.1,
}


class FailureShareExceeded(RuntimeError):
    """Too many rollouts of a step failed on the engine or the infrastructure."""


def _arg(args, name):
    v = getattr(args, name, None)
    return DEFAULTS[name] if v is None else v


def _reward(args, sample):
    key = getattr(args, "reward_key", None)
    r = sample.reward
    if key and isinstance(r, dict):
        r = r[key]
    return float(r if r is not None else 0.0)


def later_tokens(rollout_ids, segment_indices, mask_sums):
    """N_{>s} per sample: the mask sums of the later segments of its rollout."""
    by_rollout = {}
    for pos, rid in enumerate(rollout_ids):
        by_rollout.setdefault(rid, []).append(pos)
    out = [0] * len(rollout_ids)
    for positions in by_rollout.values():
        positions.sort(key=lambda p: segment_indices[p])
        acc = 0
        for p in reversed(positions):
            out[p] = acc
            acc += mask_sums[p]
    return out


def _int(args, name, default):
    v = getattr(args, name, None)
    return default if v is None else int(v)


def _dp_size(args):
    """Data-parallel ranks: world_size / (TP·PP·CP), world_size from the actor's
    nodes × GPUs where args lacks it."""
    tp = _int(args, "tensor_model_parallel_size", 1)
    pp = _int(args, "pipeline_model_parallel_size", 1)
    cp = _int(args, "context_parallel_size", 1)
    world = getattr(args, "world_size", None)
    if world is None:
        world = _int(args, "actor_num_nodes", 1) * _int(args, "actor_num_gpus_per_node", 1)
    return max(1, int(world) // (tp * pp * cp))


def schedule_multiple(args):
    """(m, dynamic): each step's sample count must be a multiple of m (static
    batching) or reach m's multiple above its micro-batch count (dynamic),
    as slime's build_dp_schedule requires (dp_schedule.py:125, 167-185)."""
    dynamic = bool(getattr(args, "use_dynamic_batch_size", False))
    fixed = getattr(args, "compactrl_pad_multiple", None)
    if fixed is not None:
        return int(fixed), dynamic
    pp = _int(args, "pipeline_model_parallel_size", 1)
    vpp = _int(args, "virtual_pipeline_model_parallel_size", 1)
    group = 1
    if vpp > 1:
        group = _int(args, "microbatch_group_size_per_vp_stage", pp)
    m = _dp_size(args) * group
    if not dynamic:
        m *= _int(args, "micro_batch_size", 1)
    return m, dynamic


def train_side_multiple(args):
    """Samples per optimiser step under miles' train-side split
    (--delay-split-train-data-by-dp): the rollout step is dealt to the DP
    ranks sample by sample (round robin, or --balance-data's equal-size
    partitions: miles/ray/rollout/train_data_conversion.py:330-346) and each
    rank cuts its share into steps of global_batch_size / dp samples,
    dropping the rest (miles/backends/training_utils/data.py:462-485). So
    the whole rollout step must hold a multiple of global_batch_size samples
    (then every rank has the same whole number of steps and nothing is
    dropped), and, with static batching, global_batch_size / dp must be a
    multiple of micro_batch_size."""
    gbs = getattr(args, "global_batch_size", None)
    if not gbs:
        raise ValueError("compactrl convert: miles' --delay-split-train-data-by-dp needs --global-batch-size")
    gbs, dp = int(gbs), _dp_size(args)
    if gbs % dp:
        raise ValueError(f"compactrl convert: --global-batch-size {gbs} is not a multiple of the {dp} data-parallel "
                         "ranks; miles' train-side split would give the ranks different step counts")
    mbs = _int(args, "micro_batch_size", 1)
    if not getattr(args, "use_dynamic_batch_size", False) and (gbs // dp) % mbs:
        raise ValueError(f"compactrl convert: --global-batch-size {gbs} / {dp} data-parallel ranks is not a multiple "
                         f"of --micro-batch-size {mbs}")
    return gbs


def _steps(rollout_ids, global_batch_size):
    """slime's steps (dp_schedule.py:127-148): rollouts in first-occurrence
    order, global_batch_size per step, trailing rollouts dropped; returns
    lists of sample positions."""
    by_rollout = {}
    for pos, rid in enumerate(rollout_ids):
        by_rollout.setdefault(rid, []).append(pos)
    rids = list(by_rollout)
    n = len(rids) // global_batch_size if global_batch_size else 0
    return [[p for rid in rids[i * global_batch_size:(i + 1) * global_batch_size] for p in by_rollout[rid]]
            for i in range(n)]


def _pads_needed(args, step_lengths, m, dynamic):
    n = len(step_lengths)
    if not dynamic:
        return (-n) % m
    # dynamic: slime packs first-fit into K micro-batches and splits bins up
    # to the next multiple of m, which needs that many samples.
    k = n
    try:
        from slime.utils.seqlen_balancing import first_fit_pack
        cap = getattr(args, "max_tokens_per_gpu", None)
        if cap is not None:
            k = len(first_fit_pack(list(step_lengths), int(cap) * _int(args, "context_parallel_size", 1)))
    except ImportError:
        pass  # without slime: pad to a multiple, always enough
    target = max(m, math.ceil(k / m) * m)
    return max(0, target - n)


def pad_steps(args, rows):
    """Pad each step (see the module doc). rows: per-sample dicts with keys
    rid, tokens, response_length, mask, chain, later, logp, reward, truncated,
    index; returns the new row list and the number of pads (and of zero-mask
    pads). Under miles' train-side split the whole rollout step is padded to
    a multiple of train_side_multiple instead."""
    if getattr(args, "delay_split_train_data_by_dp", False):
        m = train_side_multiple(args)
        plan = [(list(range(len(rows))), (-len(rows)) % m)]
    else:
        gbs = getattr(args, "global_batch_size", None)
        m, dynamic = schedule_multiple(args)
        if not gbs or m <= 1:
            return rows, 0, 0
        plan = [(step, _pads_needed(args, [len(rows[p]["tokens"]) for p in step], m, dynamic))
                for step in _steps([r["rid"] for r in rows], int(gbs))]
    insert_after = {}  # position -> rows to insert after it
    pads = zero = 0
    for step, need in plan:
        for _ in range(need):
            cands = [p for p in step if sum(rows[p]["mask"]) >= 2]
            if cands:
                p = min(cands, key=lambda q: len(rows[q]["tokens"]) - rows[q]["response_length"] + _last(rows[q]["chain"]) + 1)
                insert_after.setdefault(p, []).append(_split(rows[p]))
            else:
                p = step[-1]
                insert_after.setdefault(p, []).append(_zero_pad(rows[p]))
                zero += 1
            pads += 1
    if not pads:
        return rows, 0, 0
    out = []
    for p, r in enumerate(rows):
        out.append(r)
        out.extend(insert_after.get(p, []))
    return out, pads, zero


def _last(mask):
    for i in range(len(mask) - 1, -1, -1):
        if mask[i]:
            return i
    return -1


def _split(x):
    """Move x's last optimised loss token into a new pad row; both keep x's chain."""
    t = _last(x["mask"])
    end = _last(x["chain"]) + 1
    prompt = len(x["tokens"]) - x["response_length"]
    x["mask"] = list(x["mask"])
    x["mask"][t] = 0
    y = dict(x)
    y["tokens"] = x["tokens"][:prompt + end]
    y["response_length"] = end
    y["mask"] = [0] * end
    y["mask"][t] = 1
    y["chain"] = x["chain"][:end]
    y["logp"] = None if x["logp"] is None else x["logp"][:end]
    return y


def _zero_pad(x):
    y = dict(x)
    y["tokens"] = x["tokens"][:2] if len(x["tokens"]) >= 2 else [0, 0]
    y["response_length"] = 1
    y["mask"] = [0]
    y["chain"] = [0]
    y["later"] = 0
    y["logp"] = None if x["logp"] is None else [0.0]
    return y


def check_split(args):
    """Refuse what the per-step token mean cannot survive in miles:
    --indep-dp (also set by --ft-components train) trains fault-tolerant
    replicas whose losses miles reduces only without
    --calculate-per-token-loss (miles/backends/megatron_utils/ft/indep_dp.py:114
    asserts it off), so the step's global token mean is not available there;
    and --use-dynamic-global-batch-size, whose step size miles attaches in its
    own conversion, which a custom convert hook replaces
    (ray/rollout/train_data_conversion.py:60-61, 154-157). miles'
    train-side split alone (--delay-split-train-data-by-dp) is supported:
    pad_steps pads for it."""
    if getattr(args, "indep_dp", False):
        raise NotImplementedError(
            "compactrl: miles' --indep-dp (also set by --ft-components train) reduces losses only without "
            "--calculate-per-token-loss, so the step's global token mean CompactionRL needs is not available; run "
            "without it (--delay-split-train-data-by-dp alone is supported)")
    if getattr(args, "use_dynamic_global_batch_size", False):
        raise NotImplementedError(
            "compactrl: miles' --use-dynamic-global-batch-size is set by miles' own sample conversion, which the "
            "compactrl convert hook replaces; run with a fixed --global-batch-size")


def convert_samples_to_train_data(args, samples):
    """slime convert hook: see the module doc."""
    if not samples:
        raise ValueError("compactrl convert: no samples")
    check_split(args)
    rows, seg_index = [], []
    truncated_status = type(samples[0]).Status.TRUNCATED
    for n, s in enumerate(samples):
        if s.rollout_id is None:
            raise ValueError(f"compactrl convert: sample {n} (index {s.index}) has no rollout_id")
        meta = (s.metadata or {}).get(META_KEY, {})
        seg_index.append(int(meta.get("segment_index", 0)))
        mask = list(s.loss_mask) if s.loss_mask is not None else [1] * s.response_length
        if len(mask) != s.response_length:
            raise ValueError(f"compactrl convert: sample {n}: loss_mask has {len(mask)} entries, response_length {s.response_length}")
        if getattr(s, "remove_sample", False):
            mask = [0] * s.response_length
        s.loss_mask = mask
        rows.append({"rid": int(s.rollout_id), "tokens": list(s.tokens), "response_length": s.response_length,
                     "mask": list(mask), "chain": mask, "reward": _reward(args, s),
                     "truncated": 1 if s.status == truncated_status else 0, "index": s.index,
                     "logp": None if s.rollout_log_probs is None else list(s.rollout_log_probs),
                     "infra": meta.get("episode_status") == "infra_error",
                     "error": f"rollout {s.rollout_id}: {meta.get('error') or 'infra_error episode'}"})
    sums = [int(sum(r["mask"])) for r in rows]
    for r, later in zip(rows, later_tokens([r["rid"] for r in rows], seg_index, sums)):
        r["later"] = later
    total = {}
    for r, m in zip(rows, sums):
        total[r["rid"]] = total.get(r["rid"], 0) + m
    episodes = {}
    for r in rows:
        episodes.setdefault(r["rid"], r)
    n_failed = sum(1 for e in episodes.values() if e["infra"])

    rows, pads, zero = pad_steps(args, rows)
    _log_metrics(args, {"rollout/compactrl/infra_masked": n_failed,
                        "rollout/compactrl/infra_masked_fraction": n_failed / len(episodes),
                        "rollout/compactrl/pads": pads, "rollout/compactrl/zero_mask_pads": zero})
    _check_failures(args, list(episodes.values()))
    if pads:
        logger.info("compactrl convert: %d samples padded in for slime's batch schedule (%d zero-mask)", pads, zero)
    if zero:
        logger.warning("compactrl convert: %d zero-mask pads add %d to the per-token denominator of their steps "
                       "(no sample with 2 optimised tokens to split)", zero, zero)
    rewards = [r["reward"] for r in rows]
    raw = list(rewards)
    n_rollouts = _int(args, "rollout_batch_size", 0) * _int(args, "n_samples_per_prompt", 1)
    if len(episodes) == n_rollouts:
        raw += [r["reward"] for r in episodes.values()]
    data = {
        "tokens": [r["tokens"] for r in rows],
        "response_lengths": [r["response_length"] for r in rows],
        "rewards": rewards,
        "raw_reward": raw,
        "truncated": [r["truncated"] for r in rows],
        "sample_indices": [r["index"] for r in rows],
        "rollout_ids": [r["rid"] for r in rows],
        "loss_masks": [r["mask"] for r in rows],
        "rollout_mask_sums": [total[r["rid"]] for r in rows],
        CARRY_KEY: [r["later"] if r["chain"] is r["mask"] or r["chain"] == r["mask"] else [r["later"], r["chain"]]
                    for r in rows],
    }
    if all(r["logp"] is not None for r in rows):
        data["rollout_log_probs"] = [r["logp"] for r in rows]
    return data


def _log_metrics(args, metrics):
    """Log metrics with slime's rollout metrics (wandb/tensorboard as
    configured) at slime's current rollout step; only to the Python log
    when slime is not importable or has no current rollout id."""
    logger.info("compactrl rollout metrics: %s", metrics)
    try:
        from slime.observability import logging_utils
        from slime.observability.metric_utils import compute_rollout_step
        from slime.rollout import sample_hooks
    except ImportError:
        return
    rollout_id = getattr(sample_hooks, "_current_rollout_id", None)
    if rollout_id is None:
        return
    logging_utils.log(args, dict(metrics, **{"rollout/step": compute_rollout_step(args, rollout_id)}),
                      step_key="rollout/step")


def _check_failures(args, episodes):
    failed = [e for e in episodes if e["infra"]]
    share = len(failed) / len(episodes)
    limit = float(_arg(args, "compactrl_max_infra_fraction"))
    if failed:
        logger.warning("compactrl: %d of %d rollouts masked for engine/infrastructure errors (%.1f%%); first: %s",
                       len(failed), len(episodes), 100 * share, failed[0]["error"])
    if share > limit:
        raise FailureShareExceeded(
            f"compactrl: {len(failed)} of {len(episodes)} rollouts ({100 * share:.1f}%) failed on engine or "
            f"infrastructure errors, above compactrl_max_infra_fraction {limit}; first error: {failed[0]['error']}")
