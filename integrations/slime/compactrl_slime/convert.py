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

Rewards are the raw rewards: slime normalises rewards only for its
group estimators (rollout.py:613-631), and CompactionRL's estimator is PPO
with a critic. Segments are ordered by their metadata segment_index
(generate.py writes it); a sample with remove_sample set trains nothing
(loss mask zeroed, as rollout.py:680-681 does).
"""

CARRY_KEY = "prompt"
META_KEY = "compactrl"


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


def convert_samples_to_train_data(args, samples):
    """slime convert hook: see the module doc."""
    if not samples:
        raise ValueError("compactrl convert: no samples")
    rollout_ids, seg_index, masks = [], [], []
    for n, s in enumerate(samples):
        if s.rollout_id is None:
            raise ValueError(f"compactrl convert: sample {n} (index {s.index}) has no rollout_id")
        meta = (s.metadata or {}).get(META_KEY, {})
        rollout_ids.append(int(s.rollout_id))
        seg_index.append(int(meta.get("segment_index", 0)))
        mask = list(s.loss_mask) if s.loss_mask is not None else [1] * s.response_length
        if len(mask) != s.response_length:
            raise ValueError(f"compactrl convert: sample {n}: loss_mask has {len(mask)} entries, response_length {s.response_length}")
        if getattr(s, "remove_sample", False):
            mask = [0] * s.response_length
        s.loss_mask = mask
        masks.append(mask)
    sums = [int(sum(m)) for m in masks]
    total = {}
    for rid, m in zip(rollout_ids, sums):
        total[rid] = total.get(rid, 0) + m
    rewards = [_reward(args, s) for s in samples]
    truncated_status = type(samples[0]).Status.TRUNCATED
    data = {
        "tokens": [list(s.tokens) for s in samples],
        "response_lengths": [s.response_length for s in samples],
        "rewards": rewards,
        "raw_reward": list(rewards),
        "truncated": [1 if s.status == truncated_status else 0 for s in samples],
        "sample_indices": [s.index for s in samples],
        "rollout_ids": rollout_ids,
        "loss_masks": masks,
        "rollout_mask_sums": [total[rid] for rid in rollout_ids],
        CARRY_KEY: later_tokens(rollout_ids, seg_index, sums),
    }
    if all(s.rollout_log_probs is not None for s in samples):
        data["rollout_log_probs"] = [list(s.rollout_log_probs) for s in samples]
    return data
