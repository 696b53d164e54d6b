#!/usr/bin/env bash
# The kernel benchmarks recorded in docs/PERFORMANCE.md: the GEMMs of a gpt2-124m layer at
# M = 2048 tokens and causal attention at T = 256 and 1024, head dim 64. One JSON object per line.
# Run alone: timings of two benchmarks at once on a 2-core machine mean nothing.
set -euo pipefail
build=${1:-build}
bin=$build/bin/lmtrain
for dtype in bf16 fp32; do
  for kn in "768 768" "768 3072" "3072 768" "768 50304"; do
    set -- $kn
    for form in linear-fwd linear-dx linear-dw; do
      $bin bench matmul --m 2048 --k "$1" --n "$2" --dtype $dtype --form $form --iters 7 --json
    done
  done
done
for seq in 256 1024; do
  for attention in naive flash; do
    $bin bench attention --micro-batch 4 --heads 12 --seq-len $seq --head-dim 64 --attention $attention --iters 5 --json
  done
done
