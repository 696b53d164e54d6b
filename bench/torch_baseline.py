#!/usr/bin/python3
"""PyTorch baseline for `lmtrain bench model` / `bench train` on the same machine.

Times forward + backward (and optionally an AdamW step) of a GPT-2-style or Llama-style model in
PyTorch with bf16 autocast, the way a tuned PyTorch user would run it on a CPU (nanoGPT's model,
all threads, a warm allocator). Prints one JSON object like `lmtrain bench model --json`.

Run with Debian's torch: /usr/bin/python3 bench/torch_baseline.py --preset gpt2-124m --batch 4 --seq 256

PyTorch 2.x (the project venv, scripts/venv.sh interop: torch 2.15 from PyPI) adds two things:
  --compile          the model under torch.compile (inductor, CPU) instead of eager
  --suite            full training steps (AdamW) of each --presets model in this order: lmtrain
                     (`--lmtrain BIN bench train --json`), PyTorch eager, PyTorch compiled; prints the
                     machine, one row per preset with tokens/s and lmtrain / PyTorch ratios, and a
                     final JSON object. Attention is F.scaled_dot_product_attention (causal) where
                     torch has it (2.x), the masked softmax otherwise (1.13): the same math.
  build/venv/bin/python bench/torch_baseline.py --suite --lmtrain build/bin/lmtrain
"""
import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    # name: (vocab, layers, d_model, heads, kv_heads, ffn, style)
    "gpt2-124m": (50257, 12, 768, 12, 12, 3072, "gpt2"),
    "llama-124m": (50257, 12, 768, 12, 12, 2048, "llama"),  # SwiGLU with ~the same params as gpt2-124m
    "tiny": (4096, 4, 256, 8, 4, 688, "llama"),  # lmtrain's `tiny` preset: for smoke runs
}


class Block(nn.Module):
    def __init__(self, d, heads, kv_heads, ffn, style):
        super().__init__()
        self.style, self.heads, self.kv_heads, self.hd = style, heads, kv_heads, d // heads
        bias = style == "gpt2"
        self.n1 = nn.LayerNorm(d) if bias else nn.RMSNorm(d, eps=1e-5) if hasattr(nn, "RMSNorm") else RMSNorm(d)
        self.n2 = nn.LayerNorm(d) if bias else nn.RMSNorm(d, eps=1e-5) if hasattr(nn, "RMSNorm") else RMSNorm(d)
        self.qkv = nn.Linear(d, (heads + 2 * kv_heads) * self.hd, bias=bias)
        self.o = nn.Linear(heads * self.hd, d, bias=bias)
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
        if self.kv_heads != self.heads:  # grouped-query heads: query head h reads kv head h / (NH/G)
            k = k.repeat_interleave(self.heads // self.kv_heads, 1)
            v = v.repeat_interleave(self.heads // self.kv_heads, 1)
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch 2.x: fused (flash) attention
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
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


def time_steps(a, preset, compile_mode):
    """Median seconds of a training step (forward, backward, AdamW if a.optimizer) of `preset`."""
    torch.manual_seed(0)
    vocab, layers, d, heads, kv, ffn, style = PRESETS[preset]
    model = Model(vocab, layers, d, heads, kv, ffn, style, a.seq)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4) if a.optimizer else None
    run = torch.compile(model, backend="inductor") if compile_mode else model
    idx = torch.randint(0, vocab, (a.batch, a.seq))
    tgt = torch.randint(0, vocab, (a.batch, a.seq))
    times = []
    for i in range(a.warmup + a.iters):  # the first warm-up step of a compiled model compiles it
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = run(idx, tgt)
        loss.backward()
        if opt is not None:
            opt.step()
        model.zero_grad(set_to_none=False)
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times), sum(p.numel() for p in model.parameters())


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"


def run_lmtrain(a, preset):
    cmd = [a.lmtrain, "bench", "train", "--preset", preset, "--batch", str(a.batch), "--seq", str(a.seq),
           "--dtype", a.dtype, "--warmup", str(a.warmup), "--iters", str(a.iters), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def suite(a):
    print(f"machine: {machine()}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"B={a.batch} T={a.seq} {a.dtype}, full training steps (AdamW), medians of {a.iters}", flush=True)
    rows = []
    for preset in a.presets.split(","):
        row = {"preset": preset}
        tokens = a.batch * a.seq
        if a.lmtrain:
            j = run_lmtrain(a, preset)
            row["lmtrain"] = j["tokens_per_s"]
            row["lmtrain_machine"] = j.get("machine")
        for name, compiled in (("eager", False), ("compiled", True)):
            secs, _ = time_steps(a, preset, compiled)
            row[f"torch_{name}"] = tokens / secs
        for name in ("eager", "compiled"):
            if "lmtrain" in row:
                row[f"ratio_{name}"] = row["lmtrain"] / row[f"torch_{name}"]
        rows.append(row)
        lm = f"{row['lmtrain']:.1f}" if "lmtrain" in row else "-"
        ratios = "".join(f", lmtrain/{n} {row[f'ratio_{n}']:.2f}x" for n in ("eager", "compiled") if f"ratio_{n}" in row)
        print(f"{preset}: tokens/s lmtrain {lm}, torch eager {row['torch_eager']:.1f}, "
              f"torch compiled {row['torch_compiled']:.1f}{ratios}", flush=True)
    print(json.dumps({"bench": "torch_suite", "machine": machine(), "torch": torch.__version__,
                      "threads": torch.get_num_threads(), "batch": a.batch, "seq": a.seq, "dtype": a.dtype,
                      "rows": rows}))


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
    ap.add_argument("--compile", action="store_true", help="torch.compile (inductor) the model (PyTorch 2.x)")
    ap.add_argument("--suite", action="store_true",
                    help="lmtrain vs PyTorch eager vs compiled, full training steps, one row per --presets")
    ap.add_argument("--presets", default="gpt2-124m,llama-124m", help="--suite: comma-separated presets")
    ap.add_argument("--lmtrain", default="", help="--suite: the lmtrain binary (absent: PyTorch figures only)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if (a.compile or a.suite) and not hasattr(torch, "compile"):
        raise SystemExit(f"--compile and --suite need PyTorch 2.x (this is {torch.__version__}); "
                         "run with the project venv: build/venv/bin/python (scripts/venv.sh interop)")
    if a.suite:
        a.optimizer = True
        for p in a.presets.split(","):
            if p not in PRESETS:
                raise SystemExit(f"--presets: unknown preset '{p}' (known: {', '.join(sorted(PRESETS))})")
        suite(a)
        return
    secs, params = time_steps(a, a.preset, a.compile)
    print(json.dumps({"bench": "torch_baseline", "preset": a.preset, "batch": a.batch, "seq": a.seq,
                      "dtype": a.dtype, "optimizer": a.optimizer, "compile": a.compile, "params": params,
                      "seconds": secs,
                      "tokens_per_s": a.batch * a.seq / secs, "torch": torch.__version__,
                      "threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine()}))


if __name__ == "__main__":
    main()
