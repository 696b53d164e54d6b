#!/usr/bin/env bash
# Data-parallel scaling recorded in docs/PERFORMANCE.md: `lmtrain bench train` as one process with
# one thread, then as 2 MPI ranks with one thread each (shared-memory reduction, ZeRO 0 and 1; MPI
# messages, ZeRO 1), in interleaved rounds so that slow phases of a shared machine hit every layout
# alike. Prints every run's JSON line, then per layout the median tokens/s and its ratio to the
# median single process. Run alone: two benchmarks at once on a 2-core machine mean nothing.
#
#   scripts/bench_dist.sh [BUILD_DIR] [ROUNDS] [extra bench train flags, e.g. --preset tiny]
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
shift $(( $# > 2 ? 2 : $# )) || true
bin=$build/bin/lmtrain
# As root Open MPI needs --allow-run-as-root; the vader (shared-memory) transport without its CMA
# single-copy path works in containers that forbid process_vm_readv (docs/DIST.md).
mpi=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none
     -x OMP_NUM_THREADS -np 2)
args=(--preset gpt2-124m --batch 4 --seq 256 --dtype bf16 --warmup 1 --iters 5 --json "$@")
export OMP_NUM_THREADS=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((r = 1; r <= rounds; r++)); do
  echo "round $r/$rounds" >&2
  "$bin" bench train "${args[@]}" | sed 's/^/single /' | tee -a "$out"
  "${mpi[@]}" "$bin" bench train "${args[@]}" --zero 0 | sed 's/^/shm-zero0 /' | tee -a "$out"
  "${mpi[@]}" "$bin" bench train "${args[@]}" --zero 1 | sed 's/^/shm-zero1 /' | tee -a "$out"
  "${mpi[@]}" "$bin" bench train "${args[@]}" --zero 1 --shared-memory false | sed 's/^/mpi-zero1 /' | tee -a "$out"
done
/usr/bin/env python3 - "$out" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    label, js = line.split(' ', 1)
    runs.setdefault(label, []).append(json.loads(js))
base = statistics.median(r['tokens_per_s'] for r in runs['single'])
print(f"{'layout':<10} {'tokens/s (median)':>18} {'scaling':>8} {'reduce exposed/alone/hidden ms':>32} {'gather ms':>10}")
for label, rs in runs.items():
    tps = statistics.median(r['tokens_per_s'] for r in rs)
    t = {k: statistics.median(r['time'].get(k, 0.0) for r in rs) * 1e3 for k in
         ('grad_reduce', 'grad_reduce_alone', 'hidden_by_overlap', 'param_gather')}
    print(f"{label:<10} {tps:>18.0f} {tps / base:>7.2f}x "
          f"{t['grad_reduce']:>10.1f}/{t['grad_reduce_alone']:.1f}/{t['hidden_by_overlap']:.1f}{'':>12} {t['param_gather']:>10.1f}")
print("machine:", runs['single'][0]['machine'])
PY
