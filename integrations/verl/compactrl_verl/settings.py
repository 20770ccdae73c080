"""The compactrl section of a verl config, and the verl settings the method needs.

Every compactrl setting lives under one top-level key of verl's Hydra config,
``compactrl`` (added on the command line with ``+compactrl.KEY=VALUE``);
DEFAULTS lists them. ``check_config`` refuses, before anything is played or
trained, every verl setting under which the plug-in would not train
CompactionRL, naming the key and the value it needs.
"""

import math
import types

from compactrl_slime.advantages import TRAINER_DEFAULT_LAMBDA, check_lambda
from omegaconf import OmegaConf

DEFAULTS = {
    "serve_url": None,  # one `compactrl serve` URL or a list of them (required)
    "api_key_file": None,  # file holding the service's API key (default: env COMPACTRL_SERVE_API_KEY)
    "engine_url": None,  # default: the rollout replica verl's load balancer picks for the episode
    "engine_kind": None,  # default: actor_rollout_ref.rollout.name (vllm or sglang)
    "engine_model": None,  # model name sent to the engine; default: what the replica serves (its /v1/models)
    "agent": {},  # agent fields of the request: context, reserve, keep_last, max_compactions, max_turns, ...
    "task_key": "task_id",  # dataset field (top level or in extra_info) that names the task
    "max_new_tokens": None,  # cap of one action, sent to the service; default: the service's own
    "mask_overlong": True,  # overlong episodes train nothing (the paper); false scores them as failures
    "timeout": 4 * 3600.0,  # seconds one episode may take
    "retries": 20,  # attempts on 429/503/connection errors
    "max_concurrency": 1024,  # threads for the blocking HTTP calls
    "max_infra_fraction": 0.1,  # the run stops when a step's share of infra-failed episodes passes this
    "gae_alpha": 1.5,  # λ = 1 − 1/(α·l), l the episode's optimised tokens; 0 uses algorithm.lam
    "scaled_returns": False,  # critic target Â + V instead of A^loc + V
}

AGENT_LOOP = "compactrl"
TRAINER = "compactrl"


class ConfigError(ValueError):
    """A verl or compactrl setting the plug-in cannot honour."""


def _get(config, dotted, default=None):
    v = OmegaConf.select(config, dotted, default=default)
    return default if v is None else v


def settings(config):
    """The compactrl section merged over DEFAULTS, as a namespace.

    Unknown keys are refused (a misspelt key would otherwise fall back to a
    default silently)."""
    section = OmegaConf.select(config, "compactrl", default=None)
    raw = {} if section is None else OmegaConf.to_container(section, resolve=True)
    unknown = sorted(set(raw) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"compactrl.{unknown[0]}: unknown setting (known: {', '.join(sorted(DEFAULTS))})")
    out = dict(DEFAULTS, **raw)
    if isinstance(out["serve_url"], (list, tuple)):
        out["serve_url"] = ",".join(str(u) for u in out["serve_url"])
    if not out["serve_url"]:
        raise ConfigError("compactrl.serve_url: set it to one or more `compactrl serve` URLs (+compactrl.serve_url=...)")
    if not 0 <= float(out["max_infra_fraction"]) <= 1:
        raise ConfigError(f"compactrl.max_infra_fraction: {out['max_infra_fraction']} is not in [0, 1]")
    if not isinstance(out["agent"], dict):
        raise ConfigError("compactrl.agent: must be a mapping of agent fields")
    return types.SimpleNamespace(**out)


def service_args(s):
    """The namespace compactrl_slime.generate.post_rollout reads (its compactrl_* names)."""
    return types.SimpleNamespace(compactrl_serve_url=s.serve_url, compactrl_api_key_file=s.api_key_file,
                                 compactrl_timeout=float(s.timeout),
                                 compactrl_retries=int(s.retries), compactrl_max_concurrency=int(s.max_concurrency))


def engine_kind(config, s):
    kind = s.engine_kind or _get(config, "actor_rollout_ref.rollout.name")
    if kind not in ("vllm", "sglang", "llamacpp"):
        raise ConfigError(f"actor_rollout_ref.rollout.name: {kind!r} has no compactrl engine client "
                          "(vllm or sglang; or set compactrl.engine_kind)")
    return kind


def _need(config, key, ok, want):
    v = _get(config, key)
    if not ok(v):
        raise ConfigError(f"{key}={v!r} breaks CompactionRL: {want}")


def check_sampling_config(config):
    """Sampling settings the agent loop cannot record faithfully (train and validation)."""
    for pre in ("actor_rollout_ref.rollout", "actor_rollout_ref.rollout.val_kwargs"):
        _need(config, f"{pre}.top_p", lambda v: v is None or float(v) == 1.0,
              "set it to 1.0: the engine's log-probs are then not the sampling distribution's (SGLang), "
              "and verl's loss would compare against the untruncated policy")
        _need(config, f"{pre}.top_k", lambda v: v is None or int(v) in (-1, 0),
              "set it to -1: compactrl serve samples from the full distribution")


def check_config(config):
    """Refuse every setting under which verl would not train CompactionRL."""
    s = settings(config)
    engine_kind(config, s)
    _need(config, "trainer.use_v1", lambda v: bool(v), "set it to true: the plug-in is a v1 trainer")
    _need(config, "trainer.v1.trainer_mode", lambda v: v == TRAINER,
          f"set it to {TRAINER}: only that trainer computes cross-trajectory GAE across a rollout's segments "
          "(the async modes mix policy versions within one rollout)")
    _need(config, "actor_rollout_ref.rollout.agent.default_agent_loop", lambda v: v == AGENT_LOOP,
          f"set it to {AGENT_LOOP}: every episode must be played by compactrl serve")
    _need(config, "algorithm.adv_estimator", lambda v: v == "gae",
          "set it to gae: verl builds the critic only for gae, and the plug-in replaces its advantages "
          "by cross-trajectory GAE (without whitening)")
    _need(config, "algorithm.use_kl_in_reward", lambda v: not v,
          "set it to false: cross-trajectory GAE takes the episode's reward at each segment's last optimised token")
    for role in ("actor_rollout_ref.actor", "critic"):
        _need(config, f"{role}.loss_agg_mode", lambda v: v == "token-mean",
              "set it to token-mean: one global token mean over every optimised token of the step")
        bs = _get(config, "data.train_batch_size")
        _need(config, f"{role}.ppo_mini_batch_size", lambda v: v is not None and int(v) == int(bs),
              f"set it to data.train_batch_size ({bs}): verl counts mini-batches in samples, and a step's "
              "segments would be split over several optimiser steps, each with its own token mean; the plug-in "
              "runs one optimiser step (per epoch) over every segment of the step")
    _need(config, "reward.reward_model.enable", lambda v: not v,
          "set it to false: a colocated reward model writes its scores over rm_scores, which carry the "
          "verifier's reward from compactrl serve (a standalone one would only idle: episodes come scored)")
    _need(config, "reward_model.enable", lambda v: not v,
          "set it to false (the legacy reward_model section): the episode's reward is the verifier's")
    _need(config, "actor_rollout_ref.actor.policy_loss.loss_mode", lambda v: v in (None, "vanilla"),
          "set it to vanilla: the method's PPO clip objective per token; the other modes change it (gspo and "
          "geo_mean take a sequence-level ratio, which here would be one segment's)")
    _need(config, f"trainer.v1.{TRAINER}.parameter_sync_step", lambda v: v is None or int(v) == 1,
          "set it to 1 (or leave it out): more splits a step into several optimiser steps on parts of its "
          "segments, each with its own token mean, and samples later parts off-policy")
    _need(config, "algorithm.rollout_correction.rollout_is", lambda v: v in (None, "token"),
          "set it to token or null: sequence-level importance weights would weight each segment as a sequence")
    _need(config, "algorithm.rollout_correction.rollout_rs", lambda v: v is None,
          "set it to null: rejection sampling drops tokens or segments from the step's token mean")
    bad = check_lambda(float(s.gae_alpha), float(_get(config, "algorithm.lam", TRAINER_DEFAULT_LAMBDA)),
                       "compactrl.gae_alpha", "algorithm.lam")
    if bad:
        raise ConfigError(bad)
    check_sampling_config(config)
    return s


def required_multiple(dp_size, n):
    """Samples per step must be a multiple of this (DP ranks get equal shares; the step's mini-batch, counted
    by verl as ppo_mini_batch_size × rollout.n, must be a whole number)."""
    return math.lcm(int(dp_size), int(n))
