"""The plug-in inside verl 0.9.1's own code, against a real compactrl serve and llama-server.

Run by the Go test TestServeLlamaServerEndToEnd (cmd/compactrl) with the
Python of a venv holding integrations/verl/requirements-ci.txt
(COMPACTRL_VERL_PYTHON); it sets COMPACTRL_SERVE_URL (the service),
COMPACTRL_TEST_ROUTER_IP/PORT (llama-server, standing in for a vLLM replica)
and COMPACTRL_BIN (`compactrl advantages`, the reference).

What is verl's own code here: the Hydra config (trainer/config/ppo_trainer.yaml
composed with overrides), a local Ray cluster and TransferQueue (controller
and storage actors), the v1 agent-loop worker built by its own constructor
(HFModelConfig from models/vault-base, a real LlamaForCausalLM checkpoint with
its tokenizer.json; in the test's process rather than a Ray actor), its ``_run_prompt`` →
``_run_agent_loop`` → ``_agent_loop_postprocess`` (rollout.n sessions, hydra
instantiation of the registered loop, the TransferQueue puts under
{uid}_{session}_{i}, the status tags), LLMServerClient with verl's
GlobalRequestLoadBalancer actor choosing the replica, the v1 trainer's
``_balance_batch`` (its padding samples and DP reorder), and the actor and
critic losses (core_algos' vanilla policy loss, compute_value_loss, agg_loss
token-mean with the DP normaliser every engine uses).

What is stubbed, because it needs a GPU:
- the rollout replica (a vLLM/SGLang server on GPUs): llama-server serves the
  OpenAI-compatible completions it would, and the load balancer holds its
  address with no actor handle;
- the trainer's constructor (resource pools, actor/critic worker groups):
  the trainer object gets the config, and an actor worker group whose only
  member is verl's DP dispatch table (3 ranks);
- the critic's and the actor's forward passes: values and new log-probs are
  deterministic functions of the tokens up to each position, written to
  TransferQueue where verl's _compute_values / _compute_old_log_prob put them.
"""

import asyncio
import hashlib
import json
import math
import os
import subprocess
import types
import unittest
import uuid

URL = os.environ.get("COMPACTRL_SERVE_URL")
BIN = os.environ.get("COMPACTRL_BIN")
ROUTER = (os.environ.get("COMPACTRL_TEST_ROUTER_IP"), os.environ.get("COMPACTRL_TEST_ROUTER_PORT"))
# The episode the pipeline plays: the nano model's "tiny" task by default; the Go test of the real model
# (SmolLM2-135M-Instruct on the vault suite) sets its own task, agent budget and action length.
TASK = os.environ.get("COMPACTRL_TEST_TASK", "tiny")
AGENT = json.loads(os.environ.get("COMPACTRL_TEST_AGENT",
                                  '{"context": 256, "reserve": 96, "keep_last": 2, "max_turns": 6, "max_compactions": 100}'))
MAX_NEW_TOKENS = int(os.environ.get("COMPACTRL_TEST_MAX_NEW_TOKENS", "12"))
DP = 3
# A real Hugging Face checkpoint (LlamaForCausalLM config + tokenizer.json): the repository's shipped base policy.
MODEL = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "models", "vault-base"))


def _h(tokens, salt):
    d = hashlib.blake2b(repr((salt, tuple(tokens))).encode(), digest_size=8).digest()
    return int.from_bytes(d, "little") / 2 ** 64


def stand_in_model(prompt, response):
    """Per response token: (value, new log-prob offset), functions of the tokens up to it (a causal model)."""
    full = list(prompt) + list(response)
    p = len(prompt)
    return ([2 * _h(full[:p + t + 1], "v") - 1 for t in range(len(response))],
            [0.3 * (_h(full[:p + t + 1], "lp") - 0.5) for t in range(len(response))])


def verl_config(overrides):
    import verl
    from hydra import compose, initialize_config_dir
    cdir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=cdir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


BASE = [
    "trainer.v1.trainer_mode=compactrl",
    "actor_rollout_ref.rollout.agent.default_agent_loop=compactrl",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.n=2",
    "algorithm.adv_estimator=gae",
    "data.train_batch_size=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "critic.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "critic.ppo_micro_batch_size_per_gpu=1",
    f"actor_rollout_ref.model.path={MODEL}",
]


def compactrl_overrides():
    return [
        f"+compactrl.serve_url={URL}",
        "+compactrl.engine_kind=llamacpp",
        "+compactrl.mask_overlong=false",
        f"+compactrl.max_new_tokens={MAX_NEW_TOKENS}",
        "+compactrl.agent={" + ",".join(f"{k}:{v}" for k, v in AGENT.items()) + "}",
    ]


class Settings(unittest.TestCase):
    """check_config refuses each verl setting that breaks the method, naming the key."""

    def test_refusals(self):
        from compactrl_verl import settings
        ok = BASE + ["+compactrl.serve_url=http://127.0.0.1:1"]
        settings.check_config(verl_config(ok))
        for override, key in (
            ("trainer.v1.trainer_mode=colocate_async", "trainer.v1.trainer_mode"),
            ("algorithm.adv_estimator=grpo", "algorithm.adv_estimator"),
            ("algorithm.use_kl_in_reward=true", "algorithm.use_kl_in_reward"),
            ("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", "actor_rollout_ref.actor.loss_agg_mode"),
            ("actor_rollout_ref.actor.ppo_mini_batch_size=1", "actor_rollout_ref.actor.ppo_mini_batch_size"),
            ("critic.ppo_mini_batch_size=1", "critic.ppo_mini_batch_size"),
            ("actor_rollout_ref.rollout.top_p=0.9", "actor_rollout_ref.rollout.top_p"),
            ("actor_rollout_ref.rollout.val_kwargs.top_k=20", "actor_rollout_ref.rollout.val_kwargs.top_k"),
            ("actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
             "actor_rollout_ref.rollout.agent.default_agent_loop"),
            ("actor_rollout_ref.rollout.name=trtllm", "actor_rollout_ref.rollout.name"),
            ("+compactrl.gae_alpah=1", "compactrl.gae_alpah"),
            ("algorithm.lam=0.95", "algorithm.lam"),
            ("+compactrl.gae_alpha=-1", "compactrl.gae_alpha"),
            ("reward.reward_model.enable=true", "reward.reward_model.enable"),
            ("actor_rollout_ref.actor.policy_loss.loss_mode=gspo", "actor_rollout_ref.actor.policy_loss.loss_mode"),
            ("actor_rollout_ref.actor.policy_loss.loss_mode=geo_mean", "actor_rollout_ref.actor.policy_loss.loss_mode"),
            ("+trainer.v1.compactrl.parameter_sync_step=2", "trainer.v1.compactrl.parameter_sync_step"),
            ("algorithm.rollout_correction.rollout_is=sequence", "algorithm.rollout_correction.rollout_is"),
            ("algorithm.rollout_correction.rollout_rs=token", "algorithm.rollout_correction.rollout_rs"),
        ):
            cfg = verl_config([o for o in ok if o.split("=")[0] != override.split("=")[0]] + [override])
            with self.assertRaisesRegex(settings.ConfigError, "^" + key.replace(".", r"\.") + "[=:]", msg=override):
                settings.check_config(cfg)
        with self.assertRaisesRegex(settings.ConfigError, "compactrl.serve_url"):
            settings.check_config(verl_config(BASE))
        # The KL loss is aggregated like the policy loss (verl/workers/utils/losses.py: agg_loss with the actor's
        # loss_agg_mode and the step's global token count), so it keeps the global token mean: accepted.
        settings.check_config(verl_config(ok + ["actor_rollout_ref.actor.use_kl_loss=true"]))
        settings.check_config(verl_config(ok + ["algorithm.rollout_correction.rollout_is=token",
                                                "+trainer.v1.compactrl.parameter_sync_step=1"]))
        # A fixed λ is set with α = 0, as in compactrl's own rl section.
        s = settings.check_config(verl_config(ok + ["algorithm.lam=0.95", "+compactrl.gae_alpha=0"]))
        self.assertEqual(s.gae_alpha, 0)

    def test_agent_loop_refuses_other_trainers(self):
        """The agent loop alone (under verl's own async trainer) refuses to play, naming the key."""
        from compactrl_verl import agent_loop, settings
        cfg = verl_config(BASE + ["+compactrl.serve_url=http://127.0.0.1:1", "trainer.v1.trainer_mode=colocate_async"])
        loop = agent_loop.CompactrlAgentLoop.__new__(agent_loop.CompactrlAgentLoop)
        loop.config = cfg
        with self.assertRaisesRegex(settings.ConfigError, r"^trainer\.v1\.trainer_mode="):
            asyncio.run(loop.run({"temperature": 1.0}, uid="u", session_id=0, extra_info={"task_id": "t"}))

    def test_documented_command_line(self):
        """docs/scale.md's verl command line composes with verl's config, passes verl's own validate_config
        (what main_ppo runs first; the checkpoint path is replaced by a local one, as validate_config loads the
        model's config) and check_config."""
        import shlex
        from compactrl_verl import settings
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config
        with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "scale.md"), encoding="utf-8") as f:
            doc = f.read()
        start = doc.index("python -m verl.trainer.main_ppo")
        cmd = doc[start:doc.index("```", start)].replace("\\\n", " ")
        overrides = [o.replace("/ckpt/Qwen3-8B", MODEL) for o in shlex.split(cmd)[3:]]
        self.assertGreater(len(overrides), 20)
        cfg = verl_config(overrides)
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        s = settings.check_config(cfg)
        self.assertEqual(s.serve_url, "http://10.0.0.7:8090,http://10.0.0.8:8090")
        self.assertEqual(s.agent["max_compactions"], 3)


@unittest.skipUnless(URL and BIN and all(ROUTER), "needs COMPACTRL_SERVE_URL, COMPACTRL_BIN and the router address")
class VerlPipeline(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import ray
        import transfer_queue as tq
        from omegaconf import OmegaConf
        # Logical CPUs: the TransferQueue controller, its storage unit and the load balancer are actors of 1 CPU.
        ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
        tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))

    @classmethod
    def tearDownClass(cls):
        import ray
        import transfer_queue as tq
        tq.close()
        ray.shutdown()

    def worker(self, config):
        """verl's AgentLoopWorkerTQ, built by its own constructor in this process (as a Ray actor it would
        be the same object in a worker process), with verl's LLMServerClient and load balancer."""
        from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
        from verl.workers.rollout.llm_server import LLMServerClient
        from verl.workers.rollout.router import get_router_handle
        cls = AgentLoopWorkerTQ.__ray_metadata__.modified_class
        lb = get_router_handle(servers={f"{ROUTER[0]}:{ROUTER[1]}": None})
        return cls(config, LLMServerClient(config, load_balancer_handle=lb), teacher_client=None,
                   reward_loop_worker_handles=None)

    def play(self, config, prompts):
        """verl's own _run_prompt for each prompt (rollout.n sessions each), as generate_sequences spawns it."""
        import transfer_queue as tq
        w = self.worker(config)
        sampling = dict(temperature=1.0, top_p=1.0, top_k=-1, repetition_penalty=1.0, logprobs=True)

        async def go():
            await asyncio.gather(*[w._run_prompt(dict(p), sampling, trajectory={"step": 1, "sample_index": i,
                                                                                "rollout_n": 0, "validate": False})
                                   for i, p in enumerate(prompts)])
        asyncio.run(go())
        uids = {p["uid"] for p in prompts}
        keys, tags = [], []
        listing = tq.kv_list(partition_id="train")
        for key, tag in (listing.get("train", listing) if isinstance(listing, dict) else listing).items():
            if key.split("_")[0] in uids and key not in uids:
                keys.append(key)
                tags.append(tag)
        status = {k: t.get("status") for k, t in
                  (listing.get("train", listing) if isinstance(listing, dict) else listing).items() if k in uids}
        return keys, tags, status

    def test_dataset_tool(self):
        """python -m compactrl_verl.dataset makes parquet rows from the service's own task list that verl's
        RLHFDataset reads and whose task ids the agent loop sends and the service accepts."""
        import tempfile
        from compactrl_verl import agent_loop, dataset
        from verl.utils import hf_tokenizer
        from verl.utils.dataset.rl_dataset import RLHFDataset
        out = tempfile.mkdtemp()
        try:
            ids = dataset.fetch_task_ids(URL, os.environ.get("COMPACTRL_SERVE_API_KEY"))
            args = ["--serve-url", URL, "--out", out] + (["--val", "1"] if len(ids) > 1 else [])
        except SystemExit as e:  # a generated suite (the real-model test serves vault): seeds of its splits
            self.assertIn("split", str(e))
            ids = dataset.fetch_task_ids(URL, os.environ.get("COMPACTRL_SERVE_API_KEY"), "train", 4)
            args = ["--serve-url", URL, "--out", out, "--split", "train", "--count", "4", "--val-split", "test",
                    "--val", "2"]
        self.assertEqual(dataset.main(args), 0)
        cfg = verl_config(BASE)
        ds = RLHFDataset(os.path.join(out, "train.parquet"), hf_tokenizer(MODEL), cfg.data)
        got = [agent_loop.task_of(ds[i], "task_id") for i in range(len(ds))]
        self.assertTrue(set(got) <= set(ids) and got, (got, ids))
        self.assertEqual(ds[0]["agent_name"], "compactrl")
        if TASK in ids:
            self.assertIn(TASK, got + ([agent_loop.task_of(r, "task_id") for r in RLHFDataset(
                os.path.join(out, "val.parquet"), hf_tokenizer(MODEL), cfg.data)] if os.path.exists(
                os.path.join(out, "val.parquet")) else []))

    def test_pipeline(self):
        import torch
        import transfer_queue as tq
        from tensordict import TensorDict
        from transfer_queue import KVBatchMeta
        from verl.trainer.ppo import core_algos
        from verl.utils.config import omega_conf_to_dataclass

        from compactrl_verl import settings
        from compactrl_verl.trainer import CompactrlPPOTrainer

        config = verl_config(BASE + compactrl_overrides())
        prompts = [{"uid": uuid.uuid4().hex, "agent_name": "compactrl", "global_steps": 1, "index": i,
                    "data_source": TASK, "extra_info": {"task_id": TASK},
                    "raw_prompt": [{"role": "user", "content": TASK}]} for i in range(2)]
        keys, tags, status = self.play(config, prompts)
        self.assertEqual(set(status.values()), {"finished"}, status)
        sessions = {k.rsplit("_", 1)[0] for k in keys}
        self.assertEqual(len(sessions), 4, "2 prompts × rollout.n 2 episodes")
        self.assertGreater(len(keys), len(sessions), "the episodes must compact (several segments each)")

        # The step as the sync replay buffer hands it over (whole groups), ordered by key.
        order = sorted(range(len(keys)), key=lambda i: keys[i])
        keys, tags = [keys[i] for i in order], [tags[i] for i in order]
        raw = tq.kv_batch_get(keys=keys, partition_id="train",
                              select_fields=["prompts", "responses", "response_mask", "rollout_log_probs", "rm_scores",
                                             "extra_fields"])
        prompts_t, responses = [t.tolist() for t in raw["prompts"].unbind()], [t.tolist() for t in raw["responses"].unbind()]
        masks = [t.tolist() for t in raw["response_mask"].unbind()]
        rollout_lp = [t.tolist() for t in raw["rollout_log_probs"].unbind()]
        rewards = [sum(t.tolist()) for t in raw["rm_scores"].unbind()]
        extras = list(raw["extra_fields"])
        self.assertTrue(all(e["compactrl"]["status"] != "infra_error" for e in extras), extras[:1])
        self.assertGreater(sum(map(sum, masks)), 0)

        # Critic values and old log-probs, as verl's _compute_values/_compute_old_log_prob write them.
        def write_model_outputs(ks):
            d = tq.kv_batch_get(keys=ks, partition_id="train", select_fields=["prompts", "responses", "rollout_log_probs"])
            vals, olds = [], []
            for p, r, lp in zip(d["prompts"].unbind(), d["responses"].unbind(), d["rollout_log_probs"].unbind()):
                v, _ = stand_in_model(p.tolist(), r.tolist())
                vals.append(torch.tensor(v, dtype=torch.float32))
                olds.append(lp.clone())
            tq.kv_batch_put(keys=ks, partition_id="train", fields=TensorDict({
                "values": torch.nested.as_nested_tensor(vals, layout=torch.jagged),
                "old_log_probs": torch.nested.as_nested_tensor(olds, layout=torch.jagged)}, batch_size=len(ks)))

        trainer = CompactrlPPOTrainer.__new__(CompactrlPPOTrainer)
        trainer.config = config
        trainer.compactrl = settings.check_config(config)
        trainer.actor_rollout_wg = types.SimpleNamespace(_dispatch_info={"actor": list(range(DP))})
        trainer.tokenizer = types.SimpleNamespace(eos_token_id=2, pad_token_id=0)
        trainer.use_critic, trainer.global_steps = True, 1

        def advantage_step(batch):
            write_model_outputs([k for k, t in zip(batch.keys, batch.tags) if not t.get("is_padding")])
            pads = [k for k, t in zip(batch.keys, batch.tags) if t.get("is_padding")]
            if pads:  # verl's pads carry zero masks; the critic still runs on them
                write_model_outputs(pads)
            metrics = {}
            trainer._compute_advantage(batch, metrics)
            d = tq.kv_batch_get(keys=batch.keys, partition_id="train",
                                select_fields=["advantages", "returns", "response_mask", "values", "old_log_probs",
                                               "prompts", "responses"])
            return d, metrics

        # Unpadded step, then the same keys through verl's _balance_batch (pads to lcm(DP, n) and reorders).
        plain, m_plain = advantage_step(KVBatchMeta(partition_id="train", keys=list(keys), tags=list(tags)))
        balanced = trainer._balance_batch(KVBatchMeta(partition_id="train", keys=list(keys), tags=list(tags)), {})
        n_pads = sum(bool(t.get("is_padding")) for t in balanced.tags)
        self.assertEqual(len(balanced) % math.lcm(DP, 2), 0)
        if TASK == "tiny":
            # The nano model's episodes are fixed: DP is chosen so that verl pads them. A real model's episodes
            # (the SmolLM2 variant of this test) vary in their segment count, and may need no padding.
            self.assertGreater(n_pads, 0, f"{len(keys)} samples: choose DP so that verl pads")
        padded, m_padded = advantage_step(balanced)

        # 1. Advantages = `compactrl advantages --estimator cross-gae` on the same episodes (≤ 1e-6).
        episodes = {}
        for i, key in enumerate(keys):
            ep, idx = key.rsplit("_", 1)
            v, _ = stand_in_model(prompts_t[i], responses[i])
            episodes.setdefault(ep, []).append((int(idx), {
                "kind": extras[i]["compactrl"]["kind"], "trainable": True, "prompt_ids": prompts_t[i],
                "response_ids": responses[i], "loss_mask": masks[i], "logprobs": rollout_lp[i], "values": v}, rewards[i]))
        lines = []
        for ep, segs in sorted(episodes.items()):
            segs.sort(key=lambda x: x[0])
            self.assertEqual([s[0] for s in segs], list(range(len(segs))))
            lines.append(json.dumps({"id": ep, "task": TASK, "group": ep, "reward": segs[-1][2], "status": "ok",
                                     "segments": [s[1] for s in segs]}))
        out = subprocess.run([BIN, "advantages", "--estimator", "cross-gae", "--alpha", "1.5", "--gamma", "1.0"],
                             input="\n".join(lines) + "\n", capture_output=True, text=True, check=True,
                             env=dict(os.environ, COMPACTRL_TEST_AS_CLI="1"))
        ref = {}
        for line in out.stdout.splitlines():
            e = json.loads(line)
            for idx, seg in enumerate(e["segments"]):
                ref[f"{e['id']}_{idx}"] = (seg.get("advantages") or [0.0] * len(seg["response_ids"]),
                                           seg.get("returns") or [0.0] * len(seg["response_ids"]))
        got_plain = {k: (a.tolist(), r.tolist()) for k, a, r in
                     zip(keys, plain["advantages"].unbind(), plain["returns"].unbind())}
        nonzero = 0
        for key in keys:
            for which in (0, 1):
                for x, y in zip(got_plain[key][which], ref[key][which], strict=True):
                    self.assertLessEqual(abs(x - y), 1e-6, key)
                    nonzero += x != 0
        self.assertGreater(nonzero, 20)

        # 2. Padding changes nothing: same advantages on every real key; pads get 0 and train nothing.
        got_padded = {k: (a.tolist(), r.tolist()) for k, a, r in
                      zip(balanced.keys, padded["advantages"].unbind(), padded["returns"].unbind())}
        for key in keys:
            self.assertEqual(got_padded[key], got_plain[key], key)
        for k, t in zip(balanced.keys, balanced.tags):
            if t.get("is_padding"):
                self.assertEqual(set(got_padded[k][0]), {0.0})
        self.assertEqual(m_plain["compactrl/optimised_tokens"], m_padded["compactrl/optimised_tokens"])

        # 3. verl's losses: the denominator is every optimised token of the step, on one rank or DP ranks,
        # with or without the pads.
        actor_cfg = omega_conf_to_dataclass(config.actor_rollout_ref.actor)

        def losses(d, ranks):
            adv = d["advantages"].to_padded_tensor(0.0)
            mask = d["response_mask"].to_padded_tensor(0).float()
            old = d["old_log_probs"].to_padded_tensor(0.0)
            vals = d["values"].to_padded_tensor(0.0)
            rets = d["returns"].to_padded_tensor(0.0)
            new = torch.zeros_like(old)
            vpred = torch.zeros_like(vals)
            for i, (p, r) in enumerate(zip(d["prompts"].unbind(), d["responses"].unbind())):
                v, off = stand_in_model(p.tolist(), r.tolist())
                new[i, :len(off)] = old[i, :len(off)] + torch.tensor(off)
                vpred[i, :len(v)] = torch.tensor(v) + 0.5 * torch.tensor(off)
            tokens = int(mask.sum().item())  # all-reduced over DP in every verl engine (forward_backward_batch)
            pg_total, vf_total = 0.0, 0.0
            for part in [list(range(len(mask)))[r::ranks] for r in range(ranks)]:
                actor_cfg.global_batch_info.update(dp_size=ranks, batch_num_tokens=tokens)  # as verl's losses.py sets it
                pg, _ = core_algos.compute_policy_loss_vanilla(old[part], new[part], adv[part], mask[part],
                                                               loss_agg_mode="token-mean", config=actor_cfg)
                vf, _ = core_algos.compute_value_loss(vpred[part], rets[part], vals[part], mask[part],
                                                      cliprange_value=0.5, loss_agg_mode="token-mean",
                                                      dp_size=ranks, batch_num_tokens=tokens)
                pg_total += pg.item() / ranks  # DDP/FSDP average the ranks' gradients
                vf_total += vf.item() / ranks
            # the objective by hand over the same tokens: Σ min(ρA, clip(ρ)A) / |M|
            ratio = torch.exp(new - old)
            lo, hi = actor_cfg.clip_ratio_low, actor_cfg.clip_ratio_high
            obj = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - lo, 1 + hi) * adv)
            c = actor_cfg.get("clip_ratio_c", 3.0)
            obj = torch.where(adv < 0, torch.maximum(obj, -(-adv * c)), obj)
            by_hand = -(obj * mask).sum().item() / tokens
            return pg_total, vf_total, tokens, by_hand

        step_tokens = sum(map(sum, masks))
        pg1, vf1, tok1, hand1 = losses(plain, 1)
        pg3, vf3, tok3, _ = losses(padded, DP)
        self.assertEqual(tok1, step_tokens)
        self.assertEqual(tok3, step_tokens, "pads add no token to the denominator")
        self.assertEqual(m_plain["compactrl/optimised_tokens"], step_tokens)
        self.assertAlmostEqual(pg1, hand1, delta=1e-6)
        self.assertAlmostEqual(pg3, pg1, delta=1e-6)
        self.assertAlmostEqual(vf3, vf1, delta=1e-6)
        self.assertNotEqual(pg1, 0.0)

        # 4. The trainer makes the whole step one mini-batch for verl's update (one optimiser step per epoch).
        seen = {}
        trainer.actor_rollout_wg.update_actor = lambda b: (seen.update(actor=dict(b.extra_info)),
                                                           {"metrics": {"mfu": [0.0]}})[1]
        trainer.distillation_config = None
        trainer._update_actor(balanced, {})
        self.assertEqual(seen["actor"]["mini_batch_size"], len(balanced))
        self.assertEqual(seen["actor"]["global_batch_size"], len(balanced))
        self.assertEqual(int(config.actor_rollout_ref.actor.ppo_mini_batch_size), 2, "config restored")
        trainer.critic_wg = types.SimpleNamespace(train_mini_batch=lambda b: types.SimpleNamespace(
            get=lambda: (seen.update(critic=dict(b.extra_info)), {"metrics": {"mfu": [0.0]}})[1]))
        trainer._update_critic(balanced, {})
        self.assertEqual(seen["critic"]["mini_batch_size"], len(balanced))
        self.assertEqual(int(config.critic.ppo_mini_batch_size), 2, "config restored")


if __name__ == "__main__":
    unittest.main()


class GPUSmokeConfig(unittest.TestCase):
    """tools/gpu_smoke.sh's verl overrides (the run needs a GPU) pass verl's own validate_config and
    check_config here, on a CPU (the model path replaced by a local checkpoint: validate_config reads it)."""

    def test_overrides(self):
        import subprocess
        from compactrl_verl import settings
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config
        script = os.path.join(os.path.dirname(__file__), "..", "tools", "gpu_smoke.sh")
        out = subprocess.run(["bash", script, "--overrides"], capture_output=True, text=True, check=True).stdout
        overrides = [o.replace("/tmp/compactrl-gpu-smoke/smollm2-hf", MODEL) for o in out.splitlines() if o]
        cfg = verl_config(overrides)
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        s = settings.check_config(cfg)
        self.assertEqual(s.agent["context"], 640)


class ServedModel(unittest.TestCase):
    """The engine model name comes from the replica's /v1/models, as verl's vLLM/SGLang servers answer it."""

    def serve(self, models):
        import http.server
        import threading

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in models]}).encode()
                self.send_response(200 if self.path == "/v1/models" else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.shutdown)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    def test_served_model(self):
        from compactrl_slime.generate import ServiceError
        from compactrl_verl import agent_loop
        one = self.serve(["/tmp/verl-local-copy/Qwen3-8B"])
        self.assertEqual(asyncio.run(agent_loop.served_model(one, "hdfs://ckpt/Qwen3-8B")), "/tmp/verl-local-copy/Qwen3-8B")
        two = self.serve(["a", "/ckpt/m"])
        self.assertEqual(asyncio.run(agent_loop.served_model(two, "/ckpt/m")), "/ckpt/m")
        other = self.serve(["a", "b"])
        with self.assertRaisesRegex(ServiceError, "engine_model"):
            asyncio.run(agent_loop.served_model(other, "/ckpt/m"))
        with self.assertRaisesRegex(ServiceError, "/v1/models"):
            asyncio.run(agent_loop.served_model("http://127.0.0.1:1", "/ckpt/m", timeout=2))


class MaskingRule(unittest.TestCase):
    """outputs_from_response masks exactly what Go's rl.Masked masks, for every status (masking.json, written by
    serve/masking_test.go from the service's own answer)."""

    def test_statuses(self):
        from compactrl_verl import agent_loop
        with open(os.path.join(os.path.dirname(__file__), "..", "..", "slime", "tests", "masking.json"),
                  encoding="utf-8") as f:
            masking = json.load(f)
        for status, want in masking.items():
            resp = {"rollout_id": 1, "task_id": "t", "status": status, "scored": want["scored"], "reward": 0.5,
                    "metrics": {}, "segments": [{"index": 0, "kind": "exec", "trainable": True, "tokens": [1, 2, 3, 4],
                                                 "response_length": 2, "loss_mask": [1, 1],
                                                 "rollout_log_probs": [-0.1, -0.2]}]}
            for mask_overlong, key in ((True, "masked_mask_overlong"), (False, "masked_keep_overlong")):
                out = agent_loop.outputs_from_response(resp, mask_overlong)
                masked = not any(m for o in out for m in o.response_mask)
                self.assertEqual(masked, want[key], (status, mask_overlong))
                info = out[-1].extra_fields["reward_extra_info"]
                self.assertEqual(info["compactrl_masked"], float(want[key]))
                self.assertEqual(info["compactrl_infra_error"], float(not want["scored"]))
