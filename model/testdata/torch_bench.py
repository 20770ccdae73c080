"""PyTorch anchor for `compactrl bench model`: training tokens/s of the same
Llama shape as the built-in model (forward + backward + AdamW step).

usage: torch_bench.py [--dim 256 --layers 4 --heads 4 --kv-heads 4 --ffn 688
                       --vocab 1024 --seq 512 --batch 8 --threads 2 --steps 5]
Prints one JSON line: {"tokens_per_s": ..., "tokens_per_cpu_s": ..., "step_s": ..., ...}
(tokens_per_cpu_s uses process CPU time: steadier than wall time on a shared machine).
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, d, h, kv, ffn):
        super().__init__()
        self.h, self.kv, self.hd = h, kv, d // h
        self.q = torch.nn.Linear(d, h * self.hd, bias=False)
        self.k = torch.nn.Linear(d, kv * self.hd, bias=False)
        self.v = torch.nn.Linear(d, kv * self.hd, bias=False)
        self.o = torch.nn.Linear(h * self.hd, d, bias=False)
        self.gate = torch.nn.Linear(d, ffn, bias=False)
        self.up = torch.nn.Linear(d, ffn, bias=False)
        self.down = torch.nn.Linear(ffn, d, bias=False)
        self.n1 = torch.nn.Parameter(torch.ones(d))
        self.n2 = torch.nn.Parameter(torch.ones(d))


def rms(x, w, eps=1e-5):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rot(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Llama(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.emb = torch.nn.Embedding(a.vocab, a.dim)
        self.blocks = torch.nn.ModuleList(Block(a.dim, a.heads, a.kv_heads, a.ffn) for _ in range(a.layers))
        self.norm = torch.nn.Parameter(torch.ones(a.dim))
        self.head = torch.nn.Linear(a.dim, a.vocab, bias=False)
        hd = a.dim // a.heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        f = torch.arange(a.seq).float()[:, None] * inv[None]
        e = torch.cat((f, f), -1)
        self.register_buffer("cos", e.cos())
        self.register_buffer("sin", e.sin())
        self.register_buffer("mask", torch.full((a.seq, a.seq), float("-inf")).triu(1))

    def forward(self, ids):
        B, T = ids.shape
        x = self.emb(ids)
        for b in self.blocks:
            h = rms(x, b.n1)
            q = b.q(h).view(B, T, b.h, b.hd).transpose(1, 2)
            k = b.k(h).view(B, T, b.kv, b.hd).transpose(1, 2)
            v = b.v(h).view(B, T, b.kv, b.hd).transpose(1, 2)
            q = q * self.cos + rot(q) * self.sin
            k = k * self.cos + rot(k) * self.sin
            if b.kv != b.h:
                k = k.repeat_interleave(b.h // b.kv, dim=1)
                v = v.repeat_interleave(b.h // b.kv, dim=1)
            s = q @ k.transpose(-1, -2) / (b.hd ** 0.5) + self.mask[:T, :T]
            a = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, -1)
            x = x + b.o(a)
            h = rms(x, b.n2)
            x = x + b.down(F.silu(b.gate(h)) * b.up(h))
        return self.head(rms(x, self.norm))


def main():
    p = argparse.ArgumentParser()
    for name, v in [("dim", 256), ("layers", 4), ("heads", 4), ("kv-heads", 4), ("ffn", 688),
                    ("vocab", 1024), ("seq", 512), ("batch", 8), ("threads", 2), ("steps", 5)]:
        p.add_argument("--" + name, type=int, default=v)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = Llama(a)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.01)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1))

    def step():
        opt.zero_grad(set_to_none=True)
        logits = m(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, a.vocab), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()

    step()  # warm-up
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(a.steps):
        step()
    dt = (time.perf_counter() - t0) / a.steps
    cpu = (time.process_time() - c0) / a.steps
    toks = a.batch * a.seq
    print(json.dumps({"engine": "pytorch " + torch.__version__, "threads": a.threads, "step_s": dt,
                      "cpu_s_per_step": cpu, "tokens_per_step": toks, "tokens_per_s": toks / dt,
                      "tokens_per_cpu_s": toks / cpu}))


if __name__ == "__main__":
    main()
