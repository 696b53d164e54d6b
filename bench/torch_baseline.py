#!/usr/bin/python3
"""PyTorch baseline for `lmtrain bench model` / `bench train` on the same machine.

Times forward + backward (and optionally an AdamW step) of a GPT-2-style or Llama-style model in
PyTorch with bf16 autocast, the way a tuned PyTorch user would run it on a CPU (nanoGPT's model,
all threads, a warm allocator). Prints one JSON object like `lmtrain bench model --json`.

Run with Debian's torch: /usr/bin/python3 bench/torch_baseline.py --preset gpt2-124m --batch 4 --seq 256
"""
import argparse
import json
import math
import os
import platform
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    # name: (vocab, layers, d_model, heads, kv_heads, ffn, style)
    "gpt2-124m": (50257, 12, 768, 12, 12, 3072, "gpt2"),
    "llama-124m": (50257, 12, 768, 12, 12, 2048, "llama"),  # SwiGLU with ~the same params as gpt2-124m
}


class Block(nn.Module):
    def __init__(self, d, heads, kv_heads, ffn, style):
        super().__init__()
        self.style, self.heads, self.kv_heads, self.hd = style, heads, kv_heads, d // heads
        bias = style == "gpt2"
        self.n1 = nn.LayerNorm(d) if bias else nn.RMSNorm(d) if hasattr(nn, "RMSNorm") else RMSNorm(d)
        self.n2 = nn.LayerNorm(d) if bias else nn.RMSNorm(d) if hasattr(nn, "RMSNorm") else RMSNorm(d)
        self.qkv = nn.Linear(d, (heads + 2 * kv_heads) * self.hd, bias=bias)
        self.o = nn.Linear(d, d, bias=bias)
        if style == "gpt2":
            self.up, self.down = nn.Linear(d, ffn, bias=True), nn.Linear(ffn, d, bias=True)
        else:
            self.gate_up, self.down = nn.Linear(d, 2 * ffn, bias=False), nn.Linear(ffn, d, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        h = self.n1(x)
        q, k, v = self.qkv(h).split([self.heads * self.hd, self.kv_heads * self.hd, self.kv_heads * self.hd], -1)
        q = q.view(B, T, self.heads, self.hd).transpose(1, 2)
        k = k.view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        v = v.view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        if self.style == "llama":
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.o(y)
        h = self.n2(x)
        if self.style == "gpt2":
            return x + self.down(F.gelu(self.up(h), approximate="tanh"))
        g, u = self.gate_up(h).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.w, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w


def rope(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin


class Model(nn.Module):
    def __init__(self, vocab, layers, d, heads, kv_heads, ffn, style, seq):
        super().__init__()
        self.style = style
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d) if style == "gpt2" else None
        self.blocks = nn.ModuleList(Block(d, heads, kv_heads, ffn, style) for _ in range(layers))
        self.nf = nn.LayerNorm(d) if style == "gpt2" else RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight
        hd = d // heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(seq).float(), inv)
        self.register_buffer("cos", torch.cat([ang.cos(), ang.cos()], -1), persistent=False)
        self.register_buffer("sin", torch.cat([ang.sin(), ang.sin()], -1), persistent=False)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1), persistent=False)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x, self.cos[:T], self.sin[:T], self.mask[:T, :T])
        logits = self.head(self.nf(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gpt2-124m", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--optimizer", action="store_true", help="include an AdamW step (a full training step)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    vocab, layers, d, heads, kv, ffn, style = PRESETS[a.preset]
    model = Model(vocab, layers, d, heads, kv, ffn, style, a.seq)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4) if a.optimizer else None
    idx = torch.randint(0, vocab, (a.batch, a.seq))
    tgt = torch.randint(0, vocab, (a.batch, a.seq))
    times = []
    for i in range(a.warmup + a.iters):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = model(idx, tgt)
        loss.backward()
        if opt is not None:
            opt.step()
        model.zero_grad(set_to_none=False)
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    secs = statistics.median(times)
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"bench": "torch_baseline", "preset": a.preset, "batch": a.batch, "seq": a.seq,
                      "dtype": a.dtype, "optimizer": a.optimizer, "params": params, "seconds": secs,
                      "tokens_per_s": a.batch * a.seq / secs, "torch": torch.__version__,
                      "threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine()}))


if __name__ == "__main__":
    main()
