"""Cross-trajectory GAE as slime's custom advantage function.

slime calls ``fn(args, rollout_data)`` on every data-parallel rank of the
last pipeline stage (slime/backends/megatron_utils/loss.py:758-761) with the
rank's share of the step: per-sample lists ``values`` (critic, one entry per
response token; loss.py:607-660), ``rewards``, ``loss_masks``,
``response_lengths``, ``rollout_mask_sums`` (loss.py:735-738,
slime/ray/rollout.py:695-700). The function sets ``advantages`` and
``returns`` (one tensor per sample, aligned with the response).

For segment s of a rollout with optimised tokens 1..n_s (loss mask 1;
mask-0 tokens are skipped: value and advantage pass through them), values
V_i and reward R at the last optimised token:

    δ_i = r_i + γ V_{i+1} − V_i          (V_{n_s+1} = 0: bootstrap 0 at the segment's end)
    A^loc_i = Σ_{ℓ=0}^{n_s−i} (γλ)^ℓ δ_{i+ℓ}
    Â_{s,i} = (γλ)^{N_{>s}} · A^loc_i,    N_{>s} = Σ_{j>s} n_j
    return_i = A^loc_i + V_i             (Â_{s,i} + V_i with compactrl_scaled_returns)
    λ = max(0, 1 − 1/(α·l)),  l = Σ_s n_s = rollout_mask_sums

N_{>s} depends on the other segments of the rollout, which may sit in other
micro-batches or on other ranks; the convert hook (convert.py) computes it
where every sample is visible and carries it in the ``prompt`` key, which
this function pops. Nothing else needs cross-sample data: the bootstrap is
0 at every segment's end. A padded sample (convert.py) carries
[N_{>s}, chain]: GAE runs over the chain mask, and the advantages and
returns are kept where the loss mask is 1 (0 elsewhere).

It also replaces ``raw_reward`` by its per-rollout tail (see convert.py),
so that slime's --log-passrate, which runs after this hook, sees one reward
per rollout.
"""

import torch

from .convert import CARRY_KEY

# Keys of args this module reads (set with slime's --custom-config-path,
# slime/utils/arguments.py:2013-2019) and their defaults.
DEFAULTS = {
    "compactrl_gae_alpha": 1.5,  # α of the length-adaptive λ; 0 selects args.lambd
    "compactrl_scaled_returns": False,  # critic target Â + V instead of A^loc + V
}


def _arg(args, name):
    return getattr(args, name, DEFAULTS[name])


def lambda_for(l, alpha, fixed):
    """λ = max(0, 1 − 1/(α·l)) when α > 0 (0 when l ≤ 0), else the fixed λ."""
    if alpha == 0:
        return fixed
    if l <= 0:
        return 0.0
    return max(0.0, 1.0 - 1.0 / (alpha * l))


# The trainers' own default λ (slime's --lambd, verl's algorithm.lam): a
# fixed λ left at it is "not set".
TRAINER_DEFAULT_LAMBDA = 1.0


def check_lambda(alpha, fixed, alpha_name, lambda_name):
    """The rule compactrl's rl.AdvantageConfig.Validate applies, in a trainer's names.

    α must be finite and ≥ 0; α > 0 selects the length-adaptive λ, so a fixed
    λ set beside it (other than the trainer's default, 1.0) would be ignored
    and is refused; α = 0 selects the fixed λ, which must lie in [0, 1].
    Returns an error message, or None."""
    if not (alpha >= 0) or alpha == float("inf"):
        return f"{alpha_name}: {alpha}: want a finite value ≥ 0 (0 selects the fixed {lambda_name})"
    if alpha > 0 and fixed != TRAINER_DEFAULT_LAMBDA:
        return (f"{lambda_name}: {fixed} is used only with {alpha_name} 0 ({alpha_name} {alpha} selects "
                f"λ = 1 − 1/(α·l)); set {alpha_name} to 0 for a fixed λ")
    if alpha == 0 and not 0 <= fixed <= 1:
        return f"{lambda_name}: {fixed}: want a value in [0, 1]"
    return None


def segment_advantages(values, loss_mask, reward, later, gamma, gl, scaled_returns=False, chain=None):
    """One segment's cross-GAE: returns (advantages, returns) as float lists.

    values, loss_mask: per response token; reward: R at the last optimised
    token; later: N_{>s}; gl: γλ; chain: the tokens GAE runs over (default
    loss_mask). Positions with loss mask 0 get 0 and 0.
    """
    out_mask = loss_mask
    if chain is not None:
        loss_mask = chain
    n = len(loss_mask)
    if len(values) < n:
        raise ValueError(f"values has {len(values)} entries for a response of {n} tokens")
    scale = gl ** later
    ret_scale = scale if scaled_returns else 1.0
    adv = [0.0] * n
    ret = [0.0] * n
    next_v, gae, r = 0.0, 0.0, float(reward)
    for i in range(n - 1, -1, -1):
        if not loss_mask[i]:
            continue
        v = float(values[i])
        gae = r + gamma * next_v - v + gl * gae
        adv[i] = scale * gae
        ret[i] = ret_scale * gae + v
        next_v, r = v, 0.0
    if out_mask is not loss_mask:
        adv = [a if m else 0.0 for a, m in zip(adv, out_mask)]
        ret = [x if m else 0.0 for x, m in zip(ret, out_mask)]
    return adv, ret


def _as_list(x):
    if torch.is_tensor(x):
        return x.detach().cpu().reshape(-1).tolist()
    return list(x)


def cross_gae(args, rollout_data):
    """slime custom advantage function (--custom-advantage-function-path).

    Sets rollout_data["advantages"] and ["returns"]: lists of tensors with
    the dtype and device of rollout_data["values"].
    """
    if getattr(args, "kl_coef", 0.0):
        raise NotImplementedError("compactrl cross_gae: --kl-coef must be 0 (CompactionRL trains without a KL term)")
    if getattr(args, "context_parallel_size", 1) > 1 and not getattr(args, "allgather_cp", False):
        raise NotImplementedError(
            "compactrl cross_gae: context parallelism without --allgather-cp gives each rank a slice of the values; "
            "use --allgather-cp or context_parallel_size 1")
    values = rollout_data.get("values")
    if values is None:
        raise ValueError("compactrl cross_gae: rollout_data has no values: train with a critic (--advantage-estimator ppo)")
    if CARRY_KEY not in rollout_data:
        raise ValueError(
            f"compactrl cross_gae: rollout_data has no {CARRY_KEY!r} key: set "
            "--custom-convert-samples-to-train-data-path compactrl_slime.convert.convert_samples_to_train_data")
    later = rollout_data.pop(CARRY_KEY)
    rewards = rollout_data["rewards"]
    masks = rollout_data["loss_masks"]
    sums = rollout_data["rollout_mask_sums"]
    sums = _as_list(sums)
    if not (len(later) == len(values) == len(rewards) == len(masks) == len(sums)):
        raise ValueError(
            f"compactrl cross_gae: per-sample lists differ in length: values {len(values)}, rewards {len(rewards)}, "
            f"loss_masks {len(masks)}, rollout_mask_sums {len(sums)}, {CARRY_KEY} {len(later)}")
    gamma = float(getattr(args, "gamma", 1.0))
    alpha = float(_arg(args, "compactrl_gae_alpha"))
    fixed = float(getattr(args, "lambd", TRAINER_DEFAULT_LAMBDA))
    bad = check_lambda(alpha, fixed, "compactrl_gae_alpha", "--lambd")
    if bad:
        raise ValueError(f"compactrl cross_gae: {bad}")
    scaled = bool(_arg(args, "compactrl_scaled_returns"))
    _episode_raw_rewards(args, rollout_data)
    advs, rets = [], []
    for i, v in enumerate(values):
        gl = gamma * lambda_for(int(round(float(sums[i]))), alpha, fixed)
        carry, chain = later[i], None
        if isinstance(carry, (list, tuple)):
            carry, chain = carry[0], _as_list(carry[1])
        a, r = segment_advantages(_as_list(v), _as_list(masks[i]), float(rewards[i]), int(carry), gamma, gl, scaled, chain)
        dtype = v.dtype if torch.is_tensor(v) else torch.float32
        device = v.device if torch.is_tensor(v) else "cpu"
        advs.append(torch.tensor(a, dtype=dtype, device=device))
        rets.append(torch.tensor(r, dtype=dtype, device=device))
    rollout_data["advantages"] = advs
    rollout_data["returns"] = rets


def _episode_raw_rewards(args, rollout_data):
    """raw_reward = per-sample rewards ⊕ one per rollout (convert.py): keep
    the per-rollout tail for slime's pass-rate logging (process_rollout_data
    has already taken the per-sample local_raw_reward)."""
    raw = rollout_data.get("raw_reward")
    n = int(getattr(args, "rollout_batch_size", 0) or 0) * int(getattr(args, "n_samples_per_prompt", 1) or 1)
    if raw is not None and n and len(raw) > n:
        rollout_data["raw_reward"] = list(raw[-n:])


__all__ = ["cross_gae", "segment_advantages", "lambda_for", "DEFAULTS"]
