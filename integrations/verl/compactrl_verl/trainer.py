"""verl v1 trainer ``compactrl``: cross-trajectory GAE over a step's segments.

verl hands a registered advantage estimator neither the critic's values nor
the keys that tie segments to their episode (trainer/ppo/ray_trainer.py:249-279),
and its own GAE whitens. This trainer is PPOTrainerSync (v1, colocated,
synchronous) with three steps replaced:

``_compute_advantage``: reads the step's response masks, rewards and critic
values from TransferQueue, groups the keys ``{uid}_{session}_{i}`` into
episodes (segment i; the sync replay buffer hands over every key of a
selected uid, so every segment of an episode is in the step), and writes
back, for segment s of an episode with optimised tokens 1..n_s,

    δ_i = r_i + γ V_{i+1} − V_i            (V_{n_s+1} = 0, r_{n_s} = R, else 0)
    A^loc_i = Σ_{ℓ=0}^{n_s−i} (γλ)^ℓ δ_{i+ℓ}
    Â_{s,i} = (γλ)^{N_{>s}} · A^loc_i,     N_{>s} = Σ_{j>s} n_j
    returns_i = A^loc_i + V_i              (Â_{s,i} + V_i with compactrl.scaled_returns)
    λ = max(0, 1 − 1/(α·l)), l = Σ_s n_s   (α = compactrl.gae_alpha; 0: algorithm.lam)

with γ = algorithm.gamma, mask-0 tokens skipped (0 there), no whitening.
verl's padding samples (tag is_padding, all-zero masks) get 0.

``_get_required_batch_multiple``, ``_update_actor``, ``_update_critic``: one
optimiser step (per PPO epoch) over every sample of the step. verl counts a
mini-batch in samples (ppo_mini_batch_size × rollout.n), and a compacted
episode is several samples, so verl's own sizing would cut a step's segments
into optimiser steps of their own; instead the step is padded to a multiple
of lcm(dp, n) and the mini-batch is the whole step. verl's token-mean then
divides by every optimised token of the step (its loss_mask sum, all-reduced
over DP), which is the method's global token mean.

It also logs compactrl/* metrics and stops the run (CompactrlRunStopped) on a
rejected request or when the step's share of infra-failed episodes passes
compactrl.max_infra_fraction. settings.check_config runs at construction.
"""

import contextlib
import logging
from collections import defaultdict

import torch
import transfer_queue as tq
from omegaconf import open_dict
from tensordict import TensorDict
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from compactrl_slime.advantages import lambda_for, segment_advantages

from . import settings as cfg
from .agent_loop import META

logger = logging.getLogger(__name__)


class CompactrlRunStopped(RuntimeError):
    """A rejected request or too many infra-failed episodes: the run stops."""


def episode_of(key):
    """(episode, segment index) of a TransferQueue key {uid}_{session}_{i}."""
    parts = key.rsplit("_", 2)
    if len(parts) != 3 or not parts[2].isdigit():
        raise ValueError(f"compactrl: TransferQueue key {key!r} is not {{uid}}_{{session}}_{{index}}")
    return f"{parts[0]}_{parts[1]}", int(parts[2])


def cross_gae_step(keys, padding, masks, rewards, values, gamma, alpha, lam, scaled_returns=False):
    """Cross-trajectory GAE over one step (see the module doc).

    keys: TransferQueue keys; padding: per key, True for verl's padding
    samples; masks, values: per key, lists over the response; rewards: per
    key, the episode's R. Returns (advantages, returns, token_count), lists
    per key, token_count the number of optimised tokens of the step."""
    episodes = defaultdict(list)
    for k, key in enumerate(keys):
        if not padding[k]:
            ep, idx = episode_of(key)
            episodes[ep].append((idx, k))
    advs = [[0.0] * len(m) for m in masks]
    rets = [[0.0] * len(m) for m in masks]
    count = 0
    for ep, segs in episodes.items():
        segs.sort()
        if [i for i, _ in segs] != list(range(len(segs))):
            raise ValueError(f"compactrl: episode {ep} has segments {[i for i, _ in segs]} in the step, "
                             "not 0..K-1: a step must hold whole episodes")
        counts = [sum(1 for m in masks[k] if m) for _, k in segs]
        total = sum(counts)
        count += total
        gl = gamma * lambda_for(total, alpha, lam)
        later = total
        for (_, k), n in zip(segs, counts):
            later -= n
            advs[k], rets[k] = segment_advantages(values[k], masks[k], rewards[k], later, gamma, gl, scaled_returns)
    return advs, rets, count


def _rows(nested):
    return [t.tolist() for t in nested.unbind()]


@register_trainer(cfg.TRAINER)
class CompactrlPPOTrainer(PPOTrainerSync):
    """PPOTrainerSync with cross-trajectory GAE and one optimiser step per step (see the module doc)."""

    def __init__(self, config):
        self.compactrl = cfg.check_config(config)
        super().__init__(config)

    def _get_required_batch_multiple(self, dp_size):
        return cfg.required_multiple(dp_size, self.config.actor_rollout_ref.rollout.n)

    @contextlib.contextmanager
    def _whole_step(self, node, batch):
        n = int(self.config.actor_rollout_ref.rollout.n)
        if len(batch) % n:
            raise RuntimeError(f"compactrl: a step of {len(batch)} samples is not a multiple of rollout.n={n}")
        old = node.ppo_mini_batch_size
        with open_dict(node):
            node.ppo_mini_batch_size = len(batch) // n
        try:
            yield
        finally:
            with open_dict(node):
                node.ppo_mini_batch_size = old

    def _update_actor(self, batch, metrics):
        with self._whole_step(self.config.actor_rollout_ref.actor, batch):
            return super()._update_actor(batch, metrics)

    def _update_critic(self, batch, metrics):
        with self._whole_step(self.config.critic, batch):
            return super()._update_critic(batch, metrics)

    def _compute_advantage(self, batch, metrics):
        s = self.compactrl
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                               select_fields=["response_mask", "rm_scores", "values", "extra_fields"])
        response_mask = data["response_mask"]
        masks, scores, values = _rows(response_mask), _rows(data["rm_scores"]), _rows(data["values"])
        extras = list(data["extra_fields"])
        padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        self._check_episodes(batch.keys, padding, extras, metrics)
        algo = self.config.algorithm
        advs, rets, count = cross_gae_step(batch.keys, padding, masks, [sum(r) for r in scores], values,
                                           float(algo.gamma), float(s.gae_alpha), float(algo.lam),
                                           bool(s.scaled_returns))
        metrics["compactrl/optimised_tokens"] = count
        out = TensorDict({
            "advantages": torch.nested.as_nested_tensor([torch.tensor(a, dtype=torch.float32) for a in advs],
                                                        layout=torch.jagged),
            "returns": torch.nested.as_nested_tensor([torch.tensor(r, dtype=torch.float32) for r in rets],
                                                     layout=torch.jagged),
        }, batch_size=len(batch))
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=out)

    def _check_episodes(self, keys, padding, extras, metrics):
        """compactrl/* metrics per episode; stop on a fatal placeholder or too many infra failures."""
        statuses, unscored, segments = {}, {}, defaultdict(int)
        for key, pad, extra in zip(keys, padding, extras):
            if pad:
                continue
            info = (extra or {}).get(META)
            if info is None:
                raise CompactrlRunStopped(f"compactrl: sample {key} was not played by the compactrl agent loop "
                                          f"(set actor_rollout_ref.rollout.agent.default_agent_loop={cfg.AGENT_LOOP})")
            if info.get("fatal"):
                raise CompactrlRunStopped(f"compactrl: the service rejected a rollout request: {info['fatal']}")
            ep, _ = episode_of(key)
            statuses[ep] = info["status"]
            unscored[ep] = not info.get("scored", False)
            segments[ep] += 1
        if not statuses:
            return
        n = len(statuses)
        infra = sum(unscored.values())
        metrics["compactrl/episodes"] = n
        metrics["compactrl/infra_masked_fraction"] = infra / n
        metrics["compactrl/overlong_fraction"] = sum(st == "overlong" for st in statuses.values()) / n
        metrics["compactrl/segments_per_episode"] = sum(segments.values()) / n
        if infra / n > float(self.compactrl.max_infra_fraction):
            raise CompactrlRunStopped(f"compactrl: {infra} of {n} episodes of the step failed on the engine or "
                                      f"infrastructure, more than compactrl.max_infra_fraction="
                                      f"{self.compactrl.max_infra_fraction}")
