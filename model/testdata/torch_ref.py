"""Reference Llama in plain torch ops for the parity test of package model.

usage: torch_ref.py DIR

Reads DIR/config.json (Hugging Face LlamaConfig fields), DIR/model.safetensors
(float32) and DIR/inputs.json: {"seqs": [[ids...], ...], "coef": [[c_1..c_{T-1}], ...]}.
Writes DIR/out.safetensors with, per sequence s, "logits.s" [T, vocab], and
"grad.NAME" for every parameter: the gradient of
    L = sum_s sum_{t>=1} coef[s][t-1] * log_softmax(logits_s[t-1])[ids_s[t]]
Written from the equations of HF LlamaForCausalLM; does not import transformers.
"""
import json
import struct
import sys

import torch


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise ValueError(f"{name}: dtype {info['dtype']} unsupported")
        lo, hi = info["data_offsets"]
        t = torch.frombuffer(bytearray(raw[base + lo : base + hi]), dtype=torch.float32)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().to(torch.float32)
        b = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def forward(p, cfg, ids):
    d = cfg["hidden_size"]
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    hd = d // H
    eps = cfg["rms_norm_eps"]
    T = len(ids)
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    freqs = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x = p["model.embed_tokens.weight"][torch.tensor(ids)]
    mask = torch.full((T, T), float("-inf")).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
        q = (h @ p[pre + "self_attn.q_proj.weight"].T).view(T, H, hd).transpose(0, 1)
        k = (h @ p[pre + "self_attn.k_proj.weight"].T).view(T, KV, hd).transpose(0, 1)
        v = (h @ p[pre + "self_attn.v_proj.weight"].T).view(T, KV, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, dim=0)
        v = v.repeat_interleave(H // KV, dim=0)
        s = q @ k.transpose(1, 2) / (hd ** 0.5) + mask
        a = torch.softmax(s, dim=-1) @ v
        a = a.transpose(0, 1).reshape(T, H * hd)
        x = x + a @ p[pre + "self_attn.o_proj.weight"].T
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        g = h @ p[pre + "mlp.gate_proj.weight"].T
        u = h @ p[pre + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ p[pre + "mlp.down_proj.weight"].T
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else p["lm_head.weight"]
    return x @ head.T


def main():
    d = sys.argv[1]
    torch.set_num_threads(1)
    with open(f"{d}/config.json") as f:
        cfg = json.load(f)
    with open(f"{d}/inputs.json") as f:
        inp = json.load(f)
    p = read_safetensors(f"{d}/model.safetensors")
    for t in p.values():
        t.requires_grad_(True)
    out = {}
    loss = torch.zeros(())
    for s, (ids, coef) in enumerate(zip(inp["seqs"], inp["coef"])):
        logits = forward(p, cfg, ids)
        out[f"logits.{s}"] = logits
        lp = torch.log_softmax(logits[:-1], dim=-1)
        picked = lp.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        loss = loss + (torch.tensor(coef, dtype=torch.float32) * picked).sum()
    loss.backward()
    for name, t in p.items():
        out["grad." + name] = t.grad
    write_safetensors(f"{d}/out.safetensors", out)


if __name__ == "__main__":
    main()
