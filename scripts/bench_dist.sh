#!/usr/bin/env bash
# Data-parallel scaling recorded in docs/PERFORMANCE.md: `lmtrain bench train` as one process with
# one thread, then as 2 MPI ranks with one thread each (shared-memory reduction, ZeRO 0 and 1; MPI
# messages, ZeRO 1 and 3; tensor parallelism, --tp 2, with and without --sp; pipeline parallelism,
# --pp 2 over 8 micro-batches),
# in interleaved rounds so that slow phases of a shared machine hit every layout
# alike. The "2-independent" layout runs two single processes at once with no communication: the
# sum of their tokens/s is what the two cores give together without data parallelism (they slow
# each other down through memory bandwidth, caches and the VM host), the reference for a 2-rank
# layout. Prints every run's JSON line, then per layout the median tokens/s, its ratio to the
# median single process, and its ratio to 2-independent. Run alone: nothing else may use the cores meanwhile.
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
# Defaults, each unless the extra flags set it (lmtrain takes every option once).
args=(--json "$@")
for kv in "--preset gpt2-124m" "--micro-batch 4" "--seq-len 256" "--dtype bf16" "--warmup 1" "--iters 5"; do
  set -- $kv
  [[ " ${args[*]} " == *" $1 "* ]] || args+=("$1" "$2")
done
export OMP_NUM_THREADS=1
out=$(mktemp)
trap 'rm -f "$out" "$out.a" "$out.b"' EXIT
for ((r = 1; r <= rounds; r++)); do
  echo "round $r/$rounds" >&2
  "$bin" bench train "${args[@]}" | sed 's/^/single /' | tee -a "$out"
  "$bin" bench train "${args[@]}" > "$out.a" & "$bin" bench train "${args[@]}" > "$out.b"; wait
  /usr/bin/env python3 -c 'import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]); a["tokens_per_s"]+=b["tokens_per_s"]; print(json.dumps(a))' \
    "$out.a" "$out.b" | sed 's/^/2-independent /' | tee -a "$out"
  "${mpi[@]}" "$bin" bench train "${args[@]}" --zero 0 | sed 's/^/shm-zero0 /' | tee -a "$out"
  "${mpi[@]}" "$bin" bench train "${args[@]}" --zero 1 | sed 's/^/shm-zero1 /' | tee -a "$out"
  "${mpi[@]}" "$bin" bench train "${args[@]}" --zero 1 --no-shared-memory | sed 's/^/mpi-zero1 /' | tee -a "$out"
  "${mpi[@]}" "$bin" bench train "${args[@]}" --zero 3 | sed 's/^/mpi-zero3 /' | tee -a "$out"
  "${mpi[@]}" "$bin" bench train "${args[@]}" --tp 2 | sed 's/^/mpi-tp2 /' | tee -a "$out"
  "${mpi[@]}" "$bin" bench train "${args[@]}" --tp 2 --sp | sed 's/^/mpi-tp2-sp /' | tee -a "$out"
  # 1F1B needs several micro-batches per step: 8 (ideal bubble 1/9), the other layouts use 1.
  "${mpi[@]}" "$bin" bench train "${args[@]}" --pp 2 --grad-accum 8 | sed 's/^/mpi-pp2-m8 /' | tee -a "$out"
done
/usr/bin/env python3 - "$out" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    label, js = line.split(' ', 1)
    runs.setdefault(label, []).append(json.loads(js))
base = statistics.median(r['tokens_per_s'] for r in runs['single'])
reference = statistics.median(r['tokens_per_s'] for r in runs['2-independent'])
print(f"{'layout':<14} {'tokens/s (median)':>18} {'scaling':>8} {'vs 2-indep':>11} {'reduce exposed/alone/hidden ms':>32} {'gather ms':>10} {'zero3 comm ms':>14} {'tp comm ms':>11} {'pp wait ms':>11} {'states MiB/rank':>16}")
for label, rs in runs.items():
    tps = statistics.median(r['tokens_per_s'] for r in rs)
    t = {k: statistics.median(r['time'].get(k, 0.0) for r in rs) * 1e3 for k in
         ('grad_reduce', 'grad_reduce_alone', 'hidden_by_overlap', 'param_gather', 'zero3_comm', 'tp_comm', 'pp_wait')}
    mem = statistics.median(r.get('memory_per_rank', {}).get('model_states', 0) for r in rs) / 2**20
    print(f"{label:<14} {tps:>18.0f} {tps / base:>7.2f}x {100 * tps / reference:>10.0f}% "
          f"{t['grad_reduce']:>10.1f}/{t['grad_reduce_alone']:.1f}/{t['hidden_by_overlap']:.1f}{'':>12} {t['param_gather']:>10.1f}"
          f" {t['zero3_comm']:>14.1f} {t['tp_comm']:>11.1f} {t['pp_wait']:>11.1f} {mem:>16.0f}")
print("machine:", runs['single'][0]['machine'])
PY
