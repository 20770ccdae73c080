"""PyTorch side of `compactrl bench model`: the training step of the built-in
Llama decoder, written with stock PyTorch modules, timed step by step.

The model is the one package model builds: token embedding, per layer
x += Wo·attn(RoPE(Wq·rms(x)), RoPE(Wk·rms(x)), Wv·rms(x)) and
x += Wd·(silu(Wg·rms(x)) ⊙ Wu·rms(x)), then logits = lm_head·rms(x); RoPE in
the rotate_half layout, no biases, untied head unless --tied. A step is
forward, mean cross-entropy over batch·seq targets, backward, gradient-norm
clipping to 1 and AdamW (lr 1e-4, weight decay 0.01): the same work as
bench.Train. All float32.

usage: torch_train.py --dim D --layers L --heads H --kv-heads KV --ffn F
                      --vocab V --seq T --batch B --threads N --steps S [--tied]
Prints one JSON line: {"engine": ..., "blas": loaded BLAS library, "threads": N, "tokens_per_step": B·T,
"step_s": [one wall time per timed step], "cpu_s": process CPU time of
the timed steps}.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F


def rmsnorm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Layer(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        hd = a.dim // a.heads
        self.heads, self.kv_heads, self.hd = a.heads, a.kv_heads, hd
        self.wq = torch.nn.Linear(a.dim, a.heads * hd, bias=False)
        self.wk = torch.nn.Linear(a.dim, a.kv_heads * hd, bias=False)
        self.wv = torch.nn.Linear(a.dim, a.kv_heads * hd, bias=False)
        self.wo = torch.nn.Linear(a.heads * hd, a.dim, bias=False)
        self.wg = torch.nn.Linear(a.dim, a.ffn, bias=False)
        self.wu = torch.nn.Linear(a.dim, a.ffn, bias=False)
        self.wd = torch.nn.Linear(a.ffn, a.dim, bias=False)
        self.attn_norm = torch.nn.Parameter(torch.ones(a.dim))
        self.mlp_norm = torch.nn.Parameter(torch.ones(a.dim))

    def forward(self, x, cos, sin, mask, eps):
        B, T, _ = x.shape
        h = rmsnorm(x, self.attn_norm, eps)
        q = self.wq(h).view(B, T, self.heads, self.hd).transpose(1, 2)
        k = self.wk(h).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        v = self.wv(h).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.kv_heads != self.heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        s = (q @ k.transpose(-1, -2)) * (self.hd ** -0.5) + mask
        att = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, -1)
        x = x + self.wo(att)
        h = rmsnorm(x, self.mlp_norm, eps)
        return x + self.wd(F.silu(self.wg(h)) * self.wu(h))


class Decoder(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.eps = a.eps
        self.embed = torch.nn.Embedding(a.vocab, a.dim)
        self.layers = torch.nn.ModuleList(Layer(a) for _ in range(a.layers))
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
            x = layer(x, self.cos, self.sin, self.mask, self.eps)
        x = rmsnorm(x, self.norm, self.eps)
        w = self.embed.weight if self.head is None else self.head.weight
        return x @ w.t()


def blas_library():
    """The BLAS shared object this process loaded (torch's generic-BLAS builds
    take whichever libblas.so.3 the dynamic linker finds)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if "blas" in path.rsplit("/", 1)[-1]:
                    return path
    except OSError:
        pass
    return ""


def main():
    p = argparse.ArgumentParser()
    for name in ("dim", "layers", "heads", "kv-heads", "ffn", "vocab", "seq", "batch", "threads", "steps"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--tied", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = Decoder(a)
    decay = [q for n, q in model.named_parameters() if q.dim() == 2]
    no_decay = [q for n, q in model.named_parameters() if q.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g)
    inputs, targets = ids[:, :-1], ids[:, 1:].reshape(-1)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, a.vocab), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    step()  # warm-up: allocator and OpenMP pool
    times, cpu = [], 0.0
    for _ in range(a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        times.append(time.perf_counter() - t0)
        cpu += time.process_time() - c0
    print(json.dumps({"engine": "PyTorch " + torch.__version__, "blas": blas_library(),
                      "threads": torch.get_num_threads(),
                      "tokens_per_step": a.batch * a.seq, "step_s": times, "cpu_s": cpu}))


if __name__ == "__main__":
    main()
