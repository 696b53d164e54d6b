#!/usr/bin/env bash
# Training throughput of two lmtrain binaries (e.g. main before a change, and after it), measured
# in interleaved rounds so that slow phases of a shared machine hit both alike: `lmtrain bench
# train --json` of each binary in turn, ROUNDS times. Prints the machine, every run's tokens/s and
# step time, then per binary the median tokens/s and the ratio after/before. Run alone: nothing else
# may use the cores meanwhile (docs/PERFORMANCE.md).
#
#   scripts/bench_before_after.sh BEFORE_BIN AFTER_BIN [ROUNDS] [extra bench train flags]
#   e.g. git worktree add /tmp/old <rev> && make -C /tmp/old build && \
#        scripts/bench_before_after.sh /tmp/old/build/bin/lmtrain build/bin/lmtrain 5 --preset llama-124m
set -euo pipefail
before=${1:?usage: bench_before_after.sh BEFORE_BIN AFTER_BIN [ROUNDS] [flags]}
after=${2:?usage: bench_before_after.sh BEFORE_BIN AFTER_BIN [ROUNDS] [flags]}
rounds=${3:-5}
shift $(( $# > 3 ? 3 : $# )) || true
args=(--json "$@")
# --batch/--seq are the pre-docs/CLI.md spellings, kept here on purpose: BEFORE_BIN may predate the
# renames (--micro-batch/--seq-len), and the new binary still accepts them with a warning on stderr.
# A default is added only when neither spelling of its flag was given.
for kv in "--preset gpt2-124m -" "--batch 4 --micro-batch" "--seq 256 --seq-len" "--dtype bf16 -" "--warmup 1 -" "--iters 5 -"; do
  set -- $kv
  [[ " ${args[*]} " == *" $1 "* || " ${args[*]} " == *" $3 "* ]] || args+=("$1" "$2")
done
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
echo "flags: ${args[*]}"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((r = 1; r <= rounds; r++)); do
  for which in before after; do
    bin=$before
    [[ $which == after ]] && bin=$after
    line=$("$bin" bench train "${args[@]}" | tail -1)
    echo "$which $line" >> "$out"
    python3 - "$r" "$which" "$line" <<'PY'
import json, sys
j = json.loads(sys.argv[3])
print(f"round {sys.argv[1]} {sys.argv[2]}: {j['tokens_per_s']:.1f} tokens/s, step {1000 * j['seconds']:.0f} ms, MFU {j['mfu']:.3f}")
PY
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
tps = {"before": [], "after": []}
for line in open(sys.argv[1]):
    which, js = line.split(" ", 1)
    tps[which].append(json.loads(js)["tokens_per_s"])
print("machine:", json.loads(open(sys.argv[1]).readline().split(" ", 1)[1])["machine"])
b, a = statistics.median(tps["before"]), statistics.median(tps["after"])
print(f"median tokens/s: before {b:.1f}, after {a:.1f}; after/before = {a / b:.3f}")
PY
