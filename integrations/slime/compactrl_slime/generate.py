"""slime custom generate function: one compacting episode per Sample.

slime awaits ``generate(args, sample, sampling_params)`` for each sample
(passing ``evaluation=`` when the signature has it;
slime/rollout/sglang_rollout.py:252-260) and accepts ``list[Sample]``: the
segments of one rollout (sglang_rollout.py:270-280), which must share an
integer ``rollout_id`` (slime/observability/rollout_data_utils.py:92-121).

This function POSTs the episode to a ``compactrl serve`` process
(/v1/rollouts), naming slime's SGLang router as the engine
(http://{args.sglang_router_ip}:{args.sglang_router_port}, as
sglang_rollout.py:158 builds it), and turns each returned segment into a
copy of ``sample`` with:

    rollout_id        = sample.index (slime's own convention for fan-out,
                        slime/rollout/_fanout_test_helpers.py:71)
    tokens            = prompt ⊕ response (the service's layout = slime's)
    response_length   = len(response); loss_mask, rollout_log_probs over it
    reward            = the episode's reward R on every segment (set, so
                        slime's reward model is not called,
                        sglang_rollout.py:275-279)
    status            = COMPLETED (ok, format_error), TRUNCATED (overlong),
                        FAILED (infra_error, verifier_error)
    metadata["compactrl"] = {segment_index, num_segments, kind, episode_status, task_id}

Masking: infra_error and verifier_error episodes, and overlong ones unless
compactrl_mask_overlong is false, get remove_sample = True and all-zero
loss masks: they train nothing and are never scored 0. An episode the
service could not play because of the engine or the infrastructure (5xx
other than 503, or the service unreachable after compactrl_retries
attempts) comes back as one masked placeholder sample; the convert hook
counts these and stops the run when their share of a rollout step passes
compactrl_max_infra_fraction. A request the service rejects as invalid
(400 and every other 4xx but 408 and 429: a misspelt agent field, an
engine kind the service cannot serve, an unknown task) is a configuration
mistake: RequestRejected is raised with the service's message, which ends
slime's rollout and the run at the first occurrence.

Sampling (slime's sampling_params, sglang_rollout.py:95-107 and 560-583
for eval datasets): temperature, max_new_tokens and sampling_seed are sent
to the service; every other option is either a no-op here (text-decoding
options: the service returns token ids) or refused with ConfigError at the
first call, before any episode is played (check_sampling): top_p < 1
(slime's loss then needs the engine's per-token top-p token sets,
rollout_top_p_token_ids/offsets, which the service does not return, and
compactrl refuses top_p < 1 on SGLang: its log-probs are not the sampling
distribution's), top_k, stop, stop_token_ids, custom_params, penalties,
min_new_tokens.

With evaluation=True (slime's eval rollouts) one Sample per episode is
returned (the last segment, carrying the episode's reward and status), so
slime's eval reward and --log-passrate count episodes, not segments.

The session-affinity key is sent as the request's routing_key (the service
sets X-SMG-Routing-Key on every engine call of the episode): slime's
sample.session_id under --router-policy consistent_hashing
(sglang_rollout.py:196-200), miles' sample.routing_key whenever it is set
(routing_key below).

Configuration (slime --custom-config-path YAML, set on args;
slime/utils/arguments.py:2013-2019), defaults in DEFAULTS.
"""

import asyncio
import copy
import http.client
import json
import logging
import os
import socket
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

from .convert import META_KEY

logger = logging.getLogger(__name__)

DEFAULTS = {
    "compactrl_serve_url": None,  # one URL or a comma-separated list; env COMPACTRL_SERVE_URL
    "compactrl_api_key_file": None,  # file holding the service's API key; env COMPACTRL_SERVE_API_KEY
    "compactrl_engine_kind": "sglang",  # what the service talks to: slime's router is SGLang
    "compactrl_engine_model": "",
    "compactrl_engine_url": None,  # default: slime's router
    "compactrl_agent": None,  # dict: agent fields of the request (context, reserve, keep_last, ...)
    "compactrl_mask_overlong": True,
    "compactrl_timeout": 4 * 3600.0,  # seconds one episode may take
    "compactrl_retries": 20,  # attempts on 429/503/connection errors
    "compactrl_max_concurrency": 1024,  # threads for blocking HTTP calls
    "compactrl_max_infra_fraction": 0.1,  # convert.py: the run stops past this share of infra-failed rollouts
}


def _arg(args, name):
    v = getattr(args, name, None)
    return DEFAULTS[name] if v is None else v


class _Executor:
    """A lazily created thread pool for the blocking HTTP calls (asyncio's
    default pool has about 32 threads; slime keeps hundreds of samples in
    flight)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pool = None

    def get(self, n):
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="compactrl")
            return self._pool


_EXECUTOR = _Executor()


class ServiceError(Exception):
    """An engine or infrastructure failure: the rollout is masked and counted."""


class RequestRejected(Exception):
    """The service rejected the request as invalid (4xx): a configuration
    mistake. Not caught: it stops slime's rollout, and the run."""


class ConfigError(ValueError):
    """A slime setting the hooks cannot honour; raised before any episode is played."""


# slime sampling_params keys (sglang_rollout.py:95-107, 560-583): what the
# service receives, what is a no-op (text decoding: the service works in
# token ids), and the neutral value of every other key (anything else is
# refused).
_SENT = {"temperature", "max_new_tokens", "sampling_seed", "top_p"}
_TEXT_ONLY = {"skip_special_tokens", "no_stop_trim", "spaces_between_special_tokens"}
_NEUTRAL = {  # besides None and empty containers
    "top_k": (-1, 0),
    "stop": (),
    "stop_token_ids": (),
    "custom_params": (),
    "repetition_penalty": (1,),
    "frequency_penalty": (0,),
    "presence_penalty": (0,),
    "min_new_tokens": (0,),
    "min_p": (0,),
}
_WHY = {
    "top_p": "slime's loss then needs the engine's top-p token sets (rollout_top_p_token_ids/offsets, "
             "slime/ray/rollout.py:718-732), which compactrl serve does not return, and compactrl refuses top_p < 1 "
             "on SGLang (its log-probs are not the sampling distribution's): use --rollout-top-p 1.0",
    "top_k": "compactrl serve has no top_k: use --rollout-top-k -1",
    "stop": "the agent loop decides where an action ends: leave --rollout-stop unset",
    "stop_token_ids": "the agent loop decides where an action ends: leave --rollout-stop-token-ids unset",
    "custom_params": "compactrl serve forwards no custom_params",
}


def _neutral(key, v):
    if v is None or (isinstance(v, (str, list, tuple, dict)) and not v):
        return True
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v in _NEUTRAL[key]


def check_sampling(sampling_params):
    """Raise ConfigError naming the first sampling option the hooks cannot
    honour end to end (see the module doc)."""
    for key in sorted(sampling_params):
        v = sampling_params[key]
        if key in _TEXT_ONLY:
            continue
        if key == "top_p":
            if v is not None and float(v) != 1.0:
                raise ConfigError(f"compactrl: sampling top_p={v} is refused: {_WHY['top_p']}")
            continue
        if key in _SENT:
            continue
        if key not in _NEUTRAL:
            raise ConfigError(f"compactrl: sampling option {key}={v!r} is not supported by compactrl serve; remove it")
        if not _neutral(key, v):
            why = _WHY.get(key, "compactrl serve does not apply it; leave it at its default")
            raise ConfigError(f"compactrl: sampling option {key}={v!r} is refused: {why}")


def _api_key(args):
    """The service's API key: the content of compactrl_api_key_file (final
    newline dropped), else $COMPACTRL_SERVE_API_KEY, else None (a service
    on loopback without a key)."""
    path = _arg(args, "compactrl_api_key_file")
    if path:
        with open(path, encoding="utf-8") as f:
            key = f.read().rstrip("\r\n")
        if not key:
            raise ValueError(f"compactrl_api_key_file {path} is empty")
        return key
    return os.environ.get("COMPACTRL_SERVE_API_KEY") or None


def _service_urls(args):
    urls = _arg(args, "compactrl_serve_url") or os.environ.get("COMPACTRL_SERVE_URL", "")
    out = [u.strip().rstrip("/") for u in str(urls).split(",") if u.strip()]
    if not out:
        raise ValueError("compactrl generate: set compactrl_serve_url (custom config) or COMPACTRL_SERVE_URL")
    return out


def build_request(args, sample, sampling_params):
    """The JSON body of POST /v1/rollouts for sample."""
    meta = sample.metadata or {}
    task_id = meta.get("task_id")
    if task_id is None:
        if not isinstance(sample.prompt, str) or not sample.prompt:
            raise ValueError(f"compactrl generate: sample {sample.index} has no metadata['task_id'] and no string prompt")
        task_id = sample.prompt
    if sample.index is None:
        raise ValueError("compactrl generate: sample.index is None; it becomes the integer rollout_id")
    engine_url = _arg(args, "compactrl_engine_url") or f"http://{args.sglang_router_ip}:{args.sglang_router_port}"
    sampling = {
        "temperature": sampling_params.get("temperature"),
        "top_p": sampling_params.get("top_p"),
        "max_new_tokens": sampling_params.get("max_new_tokens"),
        "seed": sampling_params.get("sampling_seed"),
    }
    check_sampling(sampling_params)
    body = {
        "task_id": str(task_id),
        "engine": {"url": engine_url, "kind": _arg(args, "compactrl_engine_kind"), "model": _arg(args, "compactrl_engine_model")},
        "sampling": {k: v for k, v in sampling.items() if v is not None},
        "agent": dict(_arg(args, "compactrl_agent") or {}),
        "rollout_id": int(sample.index),
    }
    key = routing_key(args, sample)
    if key is not None:
        body["routing_key"] = key
    return body


def routing_key(args, sample):
    """The session-affinity key the trainer's own generate would send as
    X-SMG-Routing-Key, or None.

    miles' Sample has ``routing_key`` (miles/utils/types.py), sent whenever it
    is set and required under --sglang-router-policy consistent_hashing or
    manual (miles/rollout/generate_utils/generate_endpoint_utils.py:37-49).
    slime's Sample has ``session_id``, sent only under --router-policy
    consistent_hashing (slime/rollout/sglang_rollout.py:196-200). A Sample
    with neither field is neither trainer's: refused rather than routed
    without affinity.
    """
    fields = getattr(type(sample), "__dataclass_fields__", None) or vars(sample)
    if "routing_key" in fields:
        key = getattr(sample, "routing_key", None)
        if not key and getattr(args, "sglang_router_policy", None) in ("consistent_hashing", "manual"):
            raise ConfigError(f"compactrl: router policy {args.sglang_router_policy} routes by X-SMG-Routing-Key, "
                              f"but sample {sample.index} has no routing_key")
        return str(key) if key else None
    if "session_id" in fields:
        key = getattr(sample, "session_id", None)
        if key and getattr(args, "router_policy", None) == "consistent_hashing":
            return str(key)
        return None
    raise ConfigError(f"compactrl: {type(sample).__module__}.{type(sample).__qualname__} has neither routing_key "
                      "(miles) nor session_id (slime): not a Sample this hook knows")


class _Call:
    """One blocking POST whose socket another thread can shut down (so that
    cancelling the asyncio task disconnects, and the service tears the
    episode's sandbox down)."""

    def __init__(self, url, body, timeout, key=None):
        self.url, self.body, self.timeout, self.key = url, body, timeout, key
        self.conn = None
        self.cancelled = False

    def run(self):
        u = urllib.parse.urlsplit(self.url)
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        self.conn = cls(u.hostname, u.port, timeout=self.timeout)
        try:
            if self.cancelled:
                raise ConnectionAbortedError("cancelled")
            data = json.dumps(self.body).encode()
            headers = {"Content-Type": "application/json"}
            if self.key:
                headers["Authorization"] = "Bearer " + self.key
            self.conn.request("POST", u.path.rstrip("/") + "/v1/rollouts", body=data, headers=headers)
            resp = self.conn.getresponse()
            return resp.status, resp.getheader("Retry-After"), resp.read()
        finally:
            self.conn.close()

    def cancel(self):
        self.cancelled = True
        conn = self.conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


async def post_rollout(args, body):
    """POST body to a service (chosen by rollout_id), retrying 429, 503 and
    connection errors with the server's Retry-After; returns the decoded
    response. Cancelling the awaiting task disconnects from the service."""
    urls = _service_urls(args)
    key = _api_key(args)
    retries = int(_arg(args, "compactrl_retries"))
    pool = _EXECUTOR.get(int(_arg(args, "compactrl_max_concurrency")))
    loop = asyncio.get_running_loop()
    last = None
    for attempt in range(max(retries, 1)):
        url = urls[(body["rollout_id"] + attempt) % len(urls)]
        call = _Call(url, body, float(_arg(args, "compactrl_timeout")), key)
        fut = loop.run_in_executor(pool, call.run)
        # After a cancel the call fails on its shut-down socket; retrieve that
        # error so asyncio does not log "Future exception was never retrieved".
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            status, retry_after, raw = await asyncio.shield(fut)
        except asyncio.CancelledError:
            call.cancel()
            raise
        except OSError as e:
            last = f"{url}: {e}"
            await asyncio.sleep(min(30.0, 0.5 * 2 ** attempt))
            continue
        if status == 200:
            return json.loads(raw)
        if status in (429, 503):
            last = f"{url}: {status} {raw[:200]!r}"
            delay = float(retry_after) if retry_after and retry_after.isdigit() else 1.0
            await asyncio.sleep(delay)
            continue
        text = raw[:2000].decode(errors="replace")
        if 400 <= status < 500 and status != 408:
            try:
                text = json.loads(raw).get("error", text)
            except (ValueError, AttributeError):
                pass
            raise RequestRejected(f"compactrl serve {url} rejected rollout {body['rollout_id']} "
                                  f"(task {body['task_id']!r}) with {status}: {text}")
        raise ServiceError(f"{url}: status {status}: {text[:500]}")
    raise ServiceError(f"no answer after {retries} attempts: {last}")


def _placeholder(sample, why):
    s = copy.deepcopy(sample)
    s.rollout_id = sample.index
    s.tokens = [0, 0]
    s.response_length = 1
    s.loss_mask = [0]
    s.rollout_log_probs = [0.0]
    s.reward = 0.0
    s.remove_sample = True
    s.status = type(sample).Status.FAILED
    s.metadata = dict(sample.metadata or {})
    s.metadata[META_KEY] = {"segment_index": 0, "num_segments": 1, "kind": "none",
                            "episode_status": "infra_error", "error": why}
    return [s]


def is_masked(resp, mask_overlong):
    """rl.Masked on the service's answer: an episode that was not scored (the service's ``scored``:
    infra_error, verifier_error) trains nothing, nor an overlong one under mask_overlong. The service
    defines which statuses are scored; an answer without ``scored`` is from a service older than this
    plug-in and refused."""
    if "scored" not in resp:
        raise ServiceError(f"rollout {resp.get('rollout_id')}: the answer has no 'scored' field "
                           "(a compactrl serve older than this plug-in)")
    return not resp["scored"] or (resp["status"] == "overlong" and mask_overlong)


def samples_from_response(args, sample, resp, evaluation=False):
    """The service's answer as slime Samples (see the module doc); with
    evaluation, only the last segment (one Sample per episode)."""
    status_cls = type(sample).Status
    ep_status = resp["status"]
    masked = is_masked(resp, bool(_arg(args, "compactrl_mask_overlong")))
    segs = resp.get("segments") or []
    if not segs:
        return _placeholder(sample, resp.get("error") or f"episode {ep_status} without segments")
    status = {"ok": status_cls.COMPLETED, "format_error": status_cls.COMPLETED,
              "overlong": status_cls.TRUNCATED, "infra_error": status_cls.FAILED,
              "verifier_error": status_cls.FAILED}.get(ep_status, status_cls.FAILED)
    reward = 0.0 if masked else float(resp["reward"])
    out = []
    for seg in segs:
        s = copy.deepcopy(sample)
        s.rollout_id = int(resp["rollout_id"])
        s.tokens = list(seg["tokens"])
        s.response_length = int(seg["response_length"])
        trainable = seg.get("trainable", True) and not masked
        s.loss_mask = list(seg["loss_mask"]) if trainable else [0] * s.response_length
        s.rollout_log_probs = [float(x) for x in seg["rollout_log_probs"]]
        s.response = ""
        s.reward = reward
        s.status = status
        s.remove_sample = masked
        s.metadata = dict(sample.metadata or {})
        s.metadata[META_KEY] = {"segment_index": int(seg["index"]), "num_segments": len(segs), "kind": seg["kind"],
                                "episode_status": ep_status, "task_id": resp["task_id"], "metrics": resp.get("metrics", {})}
        if resp.get("error"):
            s.metadata[META_KEY]["error"] = resp["error"]
        out.append(s)
    if evaluation:
        last = out[-1]
        last.reward = float(resp.get("reward", 0.0))  # eval reports the episode's reward, masked or not
        return [last]
    return out


async def generate(args, sample, sampling_params, evaluation=False):
    """slime custom generate function (--custom-generate-function-path)."""
    body = build_request(args, sample, sampling_params)
    try:
        resp = await post_rollout(args, body)
    except ServiceError as e:
        logger.warning("compactrl: rollout %s of task %s masked (engine/infrastructure): %s",
                       body["rollout_id"], body["task_id"], e)
        return _placeholder(sample, str(e))
    return samples_from_response(args, sample, resp, evaluation=evaluation)
