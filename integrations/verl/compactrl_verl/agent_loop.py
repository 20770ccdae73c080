"""verl agent loop ``compactrl``: one compacting episode, one output per segment.

verl's agent-loop worker calls ``run(sampling_params, **fields)`` once per
rollout (uid, session_id and the dataset's fields; verl
experimental/agent_loop/agent_loop.py, trainer/ppo/v1/agent_loop_tq.py). This
loop POSTs the episode to a ``compactrl serve`` process (/v1/rollouts), which
plays it with compaction against the rollout replica verl's own load balancer
picks for the episode (sticky for all its engine calls), and returns the
segments as a list of AgentLoopOutput, which the v1 worker stores in
TransferQueue under ``{uid}_{session_id}_{i}``, i the segment index:

    prompt_ids        = the segment's prompt (mask 0: system prompt, summary, kept steps)
    response_ids      = the segment's response (policy and observation tokens)
    response_mask     = loss mask (1 on the policy's tokens, summary included)
    response_logprobs = the engine's log-probs of the response tokens
    reward_score      = the episode's reward R (on the last output; verl copies it to the others)
    extra_fields      = {"compactrl": {segment, segments, status, ...}, "reward_extra_info": {...}}

Masking: infra_error and verifier_error episodes, and overlong ones unless
compactrl.mask_overlong is false, get all-zero response masks (they train
nothing and are never scored 0 in the gradient). An episode the service could
not play (engine or infrastructure: 5xx, unreachable) is one masked
placeholder output; a request the service rejects (4xx) is one placeholder
that carries the service's message, and the trainer (trainer.py) stops the
run on it: a configuration mistake must not be retried forever. The trainer
also stops the run when a step's share of infra-failed episodes passes
compactrl.max_infra_fraction.

Every call checks the whole configuration (settings.check_config): an agent
loop under another trainer mode raises ConfigError naming the key, which verl
logs for each failed rollout.

Sampling: temperature is sent; top_p must be 1 and top_k −1 (settings.py says
why); repetition_penalty must be 1; logprobs is a no-op (the service always
returns them).
"""

import asyncio
import hashlib
import json
import logging
import time
import urllib.request

from compactrl_slime.generate import RequestRejected, ServiceError, is_masked, post_rollout
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from . import settings as cfg

logger = logging.getLogger(__name__)

META = "compactrl"


def check_sampling(sampling_params):
    """Raise ConfigError naming the first sampling option the service cannot honour."""
    for key, v in sorted(sampling_params.items()):
        if key in ("temperature", "logprobs"):
            continue
        if key == "top_p" and (v is None or float(v) == 1.0):
            continue
        if key == "top_k" and (v is None or int(v) in (-1, 0)):
            continue
        if key == "repetition_penalty" and (v is None or float(v) == 1.0):
            continue
        raise cfg.ConfigError(f"compactrl: sampling option {key}={v!r} is not supported by compactrl serve "
                              "(top_p 1, top_k -1, repetition_penalty 1 only)")


def task_of(fields, key):
    """The task id of a dataset row: fields[key], else fields['extra_info'][key]."""
    v = fields.get(key)
    if v is None and isinstance(fields.get("extra_info"), dict):
        v = fields["extra_info"].get(key)
    if v is None or str(v) == "":
        raise cfg.ConfigError(f"compactrl: the dataset row (uid {fields.get('uid')!r}) has no {key!r} field, "
                              f"top level or in extra_info (compactrl.task_key={key!r})")
    return str(v)


def rollout_id(uid, session_id):
    """A 63-bit integer id of rollout (uid, session_id) for the service."""
    d = hashlib.blake2b(f"{uid}_{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(d, "little") >> 1


def _reward_info(status, reward, metrics, masked, scored):
    return {"compactrl_reward": float(reward), "compactrl_masked": float(masked),
            "compactrl_overlong": float(status == "overlong"), "compactrl_infra_error": float(not scored),
            "compactrl_compactions": float(metrics.get("compactions", 0.0)),
            "compactrl_sampled_tokens": float(metrics.get("sampled_tokens", 0.0))}


def placeholder(task_id, why, fatal=False):
    """One masked output standing for an episode the service did not play."""
    info = {"segment": 0, "segments": 1, "status": "infra_error", "scored": False, "task_id": task_id, "error": why,
            "fatal": why if fatal else None}
    return [AgentLoopOutput(prompt_ids=[0], response_ids=[0], response_mask=[0], response_logprobs=[0.0],
                            reward_score=0.0, num_turns=0, metrics=AgentLoopMetrics(),
                            extra_fields={META: info, "reward_extra_info": _reward_info("infra_error", 0.0, {}, True, False)})]


def outputs_from_response(resp, mask_overlong, elapsed=0.0):
    """The service's answer as AgentLoopOutputs (see the module doc)."""
    status = resp["status"]
    segs = resp.get("segments") or []
    if not segs:
        return placeholder(resp.get("task_id", ""), resp.get("error") or f"episode {status} without segments")
    masked = is_masked(resp, mask_overlong)
    reward = float(resp.get("reward", 0.0))
    metrics = resp.get("metrics") or {}
    out = []
    for seg in segs:
        tokens, n = list(seg["tokens"]), int(seg["response_length"])
        if not 0 < n < len(tokens) or len(seg["loss_mask"]) != n or len(seg["rollout_log_probs"]) != n:
            raise ServiceError(f"malformed segment {seg.get('index')} of rollout {resp.get('rollout_id')}")
        trainable = seg.get("trainable", True) and not masked
        info = {"segment": int(seg["index"]), "segments": len(segs), "kind": seg["kind"], "status": status,
                "scored": bool(resp["scored"]),
                "task_id": resp["task_id"], "error": resp.get("error"), "fatal": None}
        out.append(AgentLoopOutput(
            prompt_ids=tokens[:-n], response_ids=tokens[-n:],
            response_mask=[int(m) for m in seg["loss_mask"]] if trainable else [0] * n,
            response_logprobs=[float(x) for x in seg["rollout_log_probs"]],
            num_turns=int(metrics.get("turns", 0)), metrics=AgentLoopMetrics(generate_sequences=elapsed),
            extra_fields={META: info}))
    out[-1].reward_score = reward
    out[-1].extra_fields["reward_extra_info"] = _reward_info(status, reward, metrics, masked, bool(resp["scored"]))
    return out


_SERVED = {}  # replica URL -> the model name it serves (one lookup per replica and process)


def _fetch_models(url, timeout):
    with urllib.request.urlopen(url.rstrip("/") + "/v1/models", timeout=timeout) as r:
        return [str(m["id"]) for m in json.load(r).get("data", [])]


async def served_model(url, path, timeout=30.0):
    """The model name the engine at url serves (its OpenAI-compatible /v1/models): verl starts vLLM and
    SGLang with the checkpoint's local path, which differs from actor_rollout_ref.model.path when verl copied
    a remote checkpoint. One model: its name; several: the one equal to path, else an error naming them.
    An engine that cannot be asked is a ServiceError (the episode is masked), never a guessed name."""
    if url in _SERVED:
        return _SERVED[url]
    loop = asyncio.get_running_loop()
    try:
        ids = await loop.run_in_executor(None, _fetch_models, url, timeout)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ServiceError(f"engine {url}: cannot read the served model name from /v1/models ({e}); "
                           "set compactrl.engine_model") from e
    if len(ids) == 1:
        name = ids[0]
    elif path in ids:
        name = path
    else:
        raise ServiceError(f"engine {url} serves {ids or 'no model'}, none of them {path!r}: set compactrl.engine_model")
    _SERVED[url] = name
    return name


@register(cfg.AGENT_LOOP)
class CompactrlAgentLoop(AgentLoopBase):
    """The ``compactrl`` agent loop (see the module doc)."""

    async def run(self, sampling_params, **fields):
        # The whole configuration, not only the compactrl section: with another trainer mode verl would
        # compute its own (whitened, per-segment) advantages on these segments without a word.
        s = cfg.check_config(self.config)
        check_sampling(sampling_params)
        task_id = task_of(fields, s.task_key)
        uid, session = fields.get("uid"), fields.get("session_id", 0)
        rid = rollout_id(uid, session)
        body = {
            "task_id": task_id,
            "engine": {"kind": cfg.engine_kind(self.config, s)},
            "sampling": {"temperature": float(sampling_params.get("temperature", 1.0)), "top_p": 1.0},
            "agent": dict(s.agent),
            "rollout_id": rid,
        }
        if s.max_new_tokens:
            body["sampling"]["max_new_tokens"] = int(s.max_new_tokens)
        start = time.monotonic()
        request_id = f"compactrl-{uid}-{session}"
        server_id = None
        try:
            if s.engine_url:
                body["engine"]["url"] = s.engine_url
            else:
                # verl's own load balancer (sticky + least in flight) picks the replica; its id is the
                # replica's OpenAI-compatible HTTP address (workers/rollout/llm_server.py, router.py).
                server_id, _ = await self.server_manager._acquire_server(request_id)
                body["engine"]["url"] = server_id if "://" in server_id else f"http://{server_id}"
            body["engine"]["model"] = s.engine_model or await served_model(
                body["engine"]["url"], str(self.config.actor_rollout_ref.model.path))
            resp = await post_rollout(cfg.service_args(s), body)
        except RequestRejected as e:
            logger.error("compactrl: %s", e)
            return placeholder(task_id, str(e), fatal=True)
        except ServiceError as e:
            logger.warning("compactrl: rollout %s of task %s masked (engine/infrastructure): %s", rid, task_id, e)
            return placeholder(task_id, str(e))
        finally:
            if server_id is not None:
                self.server_manager._release_server(server_id, request_id)
        return outputs_from_response(resp, bool(s.mask_overlong), time.monotonic() - start)
