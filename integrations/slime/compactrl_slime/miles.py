"""Cross-trajectory GAE in miles (radixark/miles, read at 31f1ca96).

miles, slime's fork, has no --custom-advantage-function-path: its trainer
calls ``compute_advantages_and_returns(args, rollout_data)``
(miles/backends/training_utils/loss.py:28-128), imported by name into
miles/backends/megatron_utils/actor.py (line 43) and called there for the
critic (line 438) and the actor (line 560), with a fixed estimator table
(miles/backends/training_utils/loss_hub/advantages.py:16-103). The one
user hook that runs in every Megatron train process before training is
--custom-megatron-init-path, called with args at the end of Megatron's
initialisation (miles/backends/megatron_utils/initialize.py:129-133).

``install`` is that hook: it rebinds the actor module's
``compute_advantages_and_returns`` to compactrl's cross-trajectory GAE
(advantages.cross_gae, the same function slime calls), so both the critic's
targets and the actor's advantages are cross-GAE. The generate and convert
hooks are the slime ones (miles keeps --custom-generate-function-path and
--custom-convert-samples-to-train-data-path, and forwards ``prompt``, the
key that carries N_{>s}: miles/ray/rollout/train_data_conversion.py:38,
357-371):

    --advantage-estimator ppo
    --custom-generate-function-path compactrl_slime.generate.generate
    --custom-convert-samples-to-train-data-path compactrl_slime.convert.convert_samples_to_train_data
    --custom-megatron-init-path compactrl_slime.miles.install

Megatron backend only (the FSDP actor imports the function separately and
is not patched: install refuses it).
"""

import importlib

from . import advantages
from .convert import check_split

ACTOR_MODULE = "miles.backends.megatron_utils.actor"


def compute_advantages_and_returns(args, rollout_data):
    """Drop-in for miles' compute_advantages_and_returns: cross-GAE where
    the critic's values are present (the last pipeline stage), nothing
    elsewhere (miles returns early there too, loss.py:65-68)."""
    if rollout_data.get("values") is None:
        return
    if getattr(args, "normalize_advantages", False):
        raise NotImplementedError("compactrl (miles): leave --normalize-advantages off; it would whiten cross-GAE")
    if getattr(args, "use_opd", False):
        raise NotImplementedError("compactrl (miles): --use-opd changes the advantages after the estimator; not supported")
    advantages.cross_gae(args, rollout_data)


compute_advantages_and_returns._compactrl = True


def install(args):
    """miles --custom-megatron-init-path hook (see the module doc)."""
    if getattr(args, "train_backend", "megatron") != "megatron":
        raise NotImplementedError("compactrl (miles): only --train-backend megatron is supported")
    if getattr(args, "advantage_estimator", "ppo") != "ppo":
        raise ValueError("compactrl (miles): set --advantage-estimator ppo (miles builds the critic only for ppo)")
    check_split(args)
    actor = importlib.import_module(ACTOR_MODULE)
    if not hasattr(actor, "compute_advantages_and_returns"):
        raise RuntimeError(f"compactrl (miles): {ACTOR_MODULE} has no compute_advantages_and_returns; "
                           "this miles version is not supported")
    actor.compute_advantages_and_returns = compute_advantages_and_returns


__all__ = ["install", "compute_advantages_and_returns"]
