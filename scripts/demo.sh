#!/usr/bin/env bash
# `make demo`: what lmtrain can do today on this machine. Until the trainer lands (issue #6) this
# runs the kernel benchmarks on the transformer shapes of gpt2-124m.
set -euo pipefail
build=${1:-build}
bin=$build/bin/lmtrain
echo "== lmtrain $($bin --version | awk '{print $2}'): kernel throughput on this machine =="
for form in linear-fwd linear-dx linear-dw; do
  $bin bench matmul --m 2048 --k 768 --n 3072 --dtype bf16 --form $form | tail -n 1
done
$bin bench matmul --m 2048 --k 768 --n 3072 --dtype fp32 --form linear-fwd | tail -n 1
for backend in naive flash; do
  $bin bench attention --batch 4 --heads 12 --seq 1024 --head-dim 64 --backend $backend --iters 3 | tail -n 1
done
echo "(machine: $($bin bench matmul --m 64 --k 64 --n 64 --iters 1 --warmup 0 | head -n 1 | sed 's/^machine: //'))"
