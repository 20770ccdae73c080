"""PyTorch side of `compactrl bench model`: the training step of the built-in
Llama decoder in the configurations a PyTorch user would pick, timed in rounds
that the Go side interleaves with its own.

The model is the one package model builds: token embedding, per layer
x += Wo·attn(RoPE(Wq·rms(x)), RoPE(Wk·rms(x)), Wv·rms(x)) and
x += Wd·(silu(Wg·rms(x)) ⊙ Wu·rms(x)), then logits = lm_head·rms(x); RoPE in
the rotate_half layout, no biases, untied head unless --tied. A step is
forward, mean cross-entropy over batch·seq targets, backward, gradient-norm
clipping to 1 and AdamW (lr 1e-4, betas 0.9/0.999, eps 1e-8, weight decay
0.01 on the matrices): the same work as bench.Train.

Configurations (--configs, comma-separated):
  eager    float32; causal attention written out (T×T scores + additive mask,
           softmax, ·V), RMSNorm written out, AdamW's default implementation
  sdpa     float32; F.scaled_dot_product_attention(is_causal=True),
           F.rms_norm, AdamW(fused=True)   (torch ≥ 2.4)
  compile  sdpa's model under torch.compile (default mode), AdamW(fused=True)
  bf16     sdpa's model with its forward under torch.autocast("cpu",
           torch.bfloat16); float32 weights, gradients and optimiser: not a
           float32 measurement
Every configuration gets its own model from the same seed and the same batch.

usage: torch_train.py --dim D --layers L --heads H --kv-heads KV --ffn F
                      --vocab V --seq T --batch B --threads N --configs C,...
                      [--rope-theta R] [--eps E] [--tied]

Protocol (one JSON object a line on stdout):
  1. after building every configuration and running two untimed warm-up
     steps of each (torch.compile compiles then), a hello line:
     {"engine", "version", "threads", "tokens_per_step", "configs",
      "blas": what torch multiplies with (from torch.__config__.show()),
      "blas_library": the libblas.so.3 the process loaded ("" if none),
      "mkl": bool, "mkldnn": bool, "cpu_capability", "warmup_s": {config: s}}
  2. then, for each line "run CONFIG STEPS" read from stdin, STEPS timed
     steps of CONFIG: {"config", "step_s": [wall s per step],
     "cpu_s": process CPU time of those steps, "loss": last loss}
  3. "quit" or end of input ends the process.
A failure prints {"error": "..."} and exits with status 1.
"""
import argparse
import json
import os
import re
import sys
import time

import torch
import torch.nn.functional as F

CONFIGS = ("eager", "sdpa", "compile", "bf16")


def rmsnorm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Layer(torch.nn.Module):
    def __init__(self, a, fast):
        super().__init__()
        hd = a.dim // a.heads
        self.heads, self.kv_heads, self.hd, self.fast, self.eps = a.heads, a.kv_heads, hd, fast, a.eps
        self.wq = torch.nn.Linear(a.dim, a.heads * hd, bias=False)
        self.wk = torch.nn.Linear(a.dim, a.kv_heads * hd, bias=False)
        self.wv = torch.nn.Linear(a.dim, a.kv_heads * hd, bias=False)
        self.wo = torch.nn.Linear(a.heads * hd, a.dim, bias=False)
        self.wg = torch.nn.Linear(a.dim, a.ffn, bias=False)
        self.wu = torch.nn.Linear(a.dim, a.ffn, bias=False)
        self.wd = torch.nn.Linear(a.ffn, a.dim, bias=False)
        self.attn_norm = torch.nn.Parameter(torch.ones(a.dim))
        self.mlp_norm = torch.nn.Parameter(torch.ones(a.dim))

    def norm(self, x, w):
        if self.fast:
            return F.rms_norm(x, (x.shape[-1],), w, self.eps)
        return rmsnorm(x, w, self.eps)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        h = self.norm(x, self.attn_norm)
        q = self.wq(h).view(B, T, self.heads, self.hd).transpose(1, 2)
        k = self.wk(h).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        v = self.wv(h).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.kv_heads != self.heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        if self.fast:
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-1, -2)) * (self.hd ** -0.5) + mask
            att = torch.softmax(s, dim=-1) @ v
        x = x + self.wo(att.transpose(1, 2).reshape(B, T, -1))
        h = self.norm(x, self.mlp_norm)
        return x + self.wd(F.silu(self.wg(h)) * self.wu(h))


class Decoder(torch.nn.Module):
    def __init__(self, a, fast):
        super().__init__()
        self.eps, self.fast = a.eps, fast
        self.embed = torch.nn.Embedding(a.vocab, a.dim)
        self.layers = torch.nn.ModuleList(Layer(a, fast) for _ in range(a.layers))
        self.norm = torch.nn.Parameter(torch.ones(a.dim))
        self.head = None if a.tied else torch.nn.Linear(a.dim, a.vocab, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)
        hd = a.dim // a.heads
        inv = a.rope_theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.arange(a.seq, dtype=torch.float64)[:, None] * inv[None, :]
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos().float())
        self.register_buffer("sin", ang.sin().float())
        self.register_buffer("mask", torch.full((a.seq, a.seq), float("-inf")).triu(1))

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.mask)
        x = F.rms_norm(x, (x.shape[-1],), self.norm, self.eps) if self.fast else rmsnorm(x, self.norm, self.eps)
        w = self.embed.weight if self.head is None else self.head.weight
        return x @ w.t()


def blas_info():
    """What torch multiplies float32 matrices with, from its build
    configuration: MKL / oneDNN versions and BLAS_INFO, not a guess from the
    libraries mapped into the process (numpy's OpenBLAS may be mapped too)."""
    show = torch.__config__.show()
    parts = []
    m = re.search(r"Math Kernel Library Version ([0-9.]+)", show)
    if m and torch.backends.mkl.is_available():
        parts.append("MKL " + m.group(1))
    info = re.search(r"BLAS_INFO=([^,\s]+)", show)
    if info:
        parts.append("BLAS_INFO=" + info.group(1))
    lib = blas_library()
    if lib:
        real = os.path.realpath(lib)
        note = " (Debian's netlib reference BLAS, unoptimised)" if "/blas/libblas.so" in real else ""
        parts.append("libblas.so.3 → " + real + note)
    m = re.search(r"MKL-DNN v([0-9.]+)", show)
    if m and torch.backends.mkldnn.is_available():
        parts.append("oneDNN " + m.group(1))
    return ", ".join(parts) or "unknown (torch.__config__.show() names no BLAS)"


def blas_library():
    """The generic-BLAS library (libblas.so.3) this process loaded: Debian's
    torch takes whichever one the dynamic linker finds."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if path.rsplit("/", 1)[-1].startswith("libblas.so"):
                    return path
    except OSError:
        pass
    return ""


def cpu_capability():
    try:
        return torch.backends.cpu.get_cpu_capability()
    except AttributeError:
        return ""


def supported(config):
    """Why this torch cannot run config ("" when it can)."""
    if config == "eager":
        return ""
    need = []
    if not hasattr(F, "scaled_dot_product_attention"):
        need.append("F.scaled_dot_product_attention")
    if not hasattr(F, "rms_norm"):
        need.append("F.rms_norm")
    if config == "compile" and not hasattr(torch, "compile"):
        need.append("torch.compile")
    if need:
        return "torch %s lacks %s" % (torch.__version__, ", ".join(need))
    return ""


class Runner:
    def __init__(self, a, config, ids):
        torch.manual_seed(1)
        fast = config != "eager"
        self.config, self.vocab = config, a.vocab
        self.model = Decoder(a, fast)
        self.forward = torch.compile(self.model) if config == "compile" else self.model
        decay = [q for q in self.model.parameters() if q.dim() == 2]
        no_decay = [q for q in self.model.parameters() if q.dim() != 2]
        groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
        kw = {"fused": True} if fast else {}
        self.opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, **kw)
        self.inputs, self.targets = ids[:, :-1], ids[:, 1:].reshape(-1)

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        if self.config == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = self.forward(self.inputs)
            logits = logits.float()
        else:
            logits = self.forward(self.inputs)
        loss = F.cross_entropy(logits.reshape(-1, self.vocab), self.targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        return loss.item()


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    p = argparse.ArgumentParser()
    for name in ("dim", "layers", "heads", "kv-heads", "ffn", "vocab", "seq", "batch", "threads"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--configs", required=True)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--tied", action="store_true")
    a = p.parse_args()
    configs = a.configs.split(",")
    for c in configs:
        if c not in CONFIGS:
            raise SystemExit("unknown configuration %r (have %s)" % (c, ", ".join(CONFIGS)))
        why = supported(c)
        if why:
            raise SystemExit("configuration %s: %s" % (c, why))
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g)
    runners, warm = {}, {}
    for c in configs:
        t0 = time.perf_counter()
        r = Runner(a, c, ids)
        for _ in range(2):  # allocator, OpenMP pool, torch.compile's compilation
            loss = r.step()
            if loss != loss:
                raise SystemExit("configuration %s: warm-up loss is NaN" % c)
        runners[c], warm[c] = r, time.perf_counter() - t0
    emit({"engine": "PyTorch " + torch.__version__, "version": torch.__version__,
          "threads": torch.get_num_threads(), "tokens_per_step": a.batch * a.seq,
          "configs": configs, "blas": blas_info(), "blas_library": blas_library(),
          "mkl": torch.backends.mkl.is_available(), "mkldnn": torch.backends.mkldnn.is_available(),
          "cpu_capability": cpu_capability(), "warmup_s": warm})
    for line in sys.stdin:
        f = line.split()
        if not f:
            continue
        if f == ["quit"]:
            break
        if len(f) != 3 or f[0] != "run" or f[1] not in runners or not f[2].isdigit() or int(f[2]) <= 0:
            emit({"error": "bad command %r: want \"run CONFIG STEPS\" with CONFIG one of %s" % (line.strip(), ", ".join(configs))})
            sys.exit(1)
        r, times, cpu, loss = runners[f[1]], [], 0.0, 0.0
        for _ in range(int(f[2])):
            t0, c0 = time.perf_counter(), time.process_time()
            loss = r.step()
            times.append(time.perf_counter() - t0)
            cpu += time.process_time() - c0
        emit({"config": f[1], "step_s": times, "cpu_s": cpu, "loss": loss})


if __name__ == "__main__":
    try:
        main()
    except SystemExit as e:
        if isinstance(e.code, str):
            emit({"error": e.code})
            sys.exit(1)
        raise
    except Exception as e:  # reported to the Go side, which prints stderr too
        emit({"error": "%s: %s" % (type(e).__name__, e)})
        sys.exit(1)
