#!/usr/bin/env python3
"""Sums oneDNN's verbose log by GEMM implementation and shape: calls, milliseconds, share and GFLOP/s.

Reads `ONEDNN_VERBOSE=1` output on stdin (its `onednn_verbose,exec,cpu,matmul,...` lines; others are
skipped) and prints one row per (implementation, shape), the costliest first. A shape is oneDNN's
`src:weights:dst` dims, e.g. `768x768:768x3072:768x3072` or, batched, `3x768x768:...`; the FLOPs of
a call are 2 * batch * M * K * N. The timings include oneDNN's per-call overhead.

  ONEDNN_VERBOSE=1 build/bin/lmtrain bench optim --preset gpt2-124m --iters 2 --ns-method gram \\
    | scripts/onednn_verbose_summary.py --top 10
"""
import argparse
import collections
import sys


def flops(shape):
    src, wei = ([int(d) for d in part.split("x")] for part in shape.split(":")[:2])
    batch = src[0] if len(src) == 3 else 1
    return 2.0 * batch * src[-2] * src[-1] * wei[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=20, help="rows to print")
    args = ap.parse_args()
    calls = collections.defaultdict(lambda: [0, 0.0])  # (impl, shape) -> [count, ms]
    for line in sys.stdin:
        f = line.strip().split(",")
        if len(f) < 8 or f[0] != "onednn_verbose" or f[1] != "exec" or f[3] != "matmul":
            continue
        row = calls[(f[4], f[-2])]
        row[0] += 1
        row[1] += float(f[-1])
    total = sum(ms for _, ms in calls.values())
    if total == 0:
        sys.exit("no oneDNN matmul exec lines on stdin (hint: run the command with ONEDNN_VERBOSE=1)")
    print(f"{'ms':>10} {'share':>6} {'calls':>6} {'GFLOP/s':>8}  implementation  shape")
    for (impl, shape), (n, ms) in sorted(calls.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"{ms:10.1f} {100 * ms / total:5.1f}% {n:6d} {flops(shape) * n / ms / 1e6:8.0f}  {impl}  {shape}")
    print(f"{total:10.1f} ms in all")


if __name__ == "__main__":
    main()
