#!/usr/bin/env bash
# Multiple-choice evaluation throughput, before and after shared-prefix scoring (issue #21, goal 4):
# `lmtrain eval --scoring full` (every choice its own row, logits at every position) vs
# `--scoring shared-prefix` (the item's context once through a KV cache, logits only where scored),
# on PIQA, HellaSwag and ARC-Easy, in one run. Prints, per task, the median items/s of --runs runs of
# each path, their ratio, and checks that both paths gave the same accuracies (the script fails if
# not). The model is a preset with random weights (default gpt2-124m, seed 1): accuracies are chance,
# only the throughput means anything. Run alone on a quiet machine: timings taken while other jobs
# share the cores are noisy.
#
#   scripts/bench_eval.sh [--build DIR] [--preset NAME] [--tokenizer DIR] [--limit N] [--runs N] [--tasks "piqa hellaswag arc_easy"]
#
# Smoke run (seconds, no timing value): scripts/bench_eval.sh --limit 4 --runs 1 --tasks arc_easy
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build preset=gpt2-124m limit=200 runs=3 tasks="piqa hellaswag arc_easy"
data=${LMT_SHARED_DATA:-$root/../shared/data}
tokenizer=$data/tokenizers/gpt2
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --preset) preset=$2; shift 2 ;;
    --tokenizer) tokenizer=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --tasks) tasks=$2; shift 2 ;;
    *) echo "bench_eval: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
bin=$build/bin/lmtrain
[[ -x $bin ]] || { echo "bench_eval: $bin not found; build lmtrain first" >&2; exit 1; }
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "bench_eval: --runs must be a positive integer, got '$runs'" >&2; exit 2; }
file_of() {
  case $1 in
    piqa) echo "$data/eval/piqa/valid.jsonl" ;;
    hellaswag) echo "$data/eval/hellaswag/hellaswag_val.llamacpp.jsonl" ;;
    arc_easy) echo "$data/eval/arc/arc_easy.llmfoundry.jsonl" ;;
    arc_challenge) echo "$data/eval/arc/arc_challenge.llmfoundry.jsonl" ;;
    *) echo "bench_eval: no data file known for task '$1'" >&2; return 1 ;;
  esac
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for task in $tasks; do
  f=$(file_of "$task")
  [[ -f $f ]] || { echo "bench_eval: $f not found (see ../shared/data/README.md)" >&2; exit 1; }
  for r in $(seq "$runs"); do
    for s in full shared-prefix; do  # interleaved, so a change in machine load hits both paths
      "$bin" eval --preset "$preset" --tokenizer "$tokenizer" --task "$task" --data "$f" --limit "$limit" \
        --scoring "$s" --json >"$tmp/$task.$s.$r.json"
    done
  done
done
python3 - "$tmp" "$preset" "$limit" "$runs" $tasks <<'PY'
import json, statistics, sys, glob, os
tmp, preset, limit, runs, tasks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
ok = True
machine = None
print(f"# model: {preset} (random weights, seed 1), first {limit} items, median of {runs} runs, fp32")
print(f"{'task':<10} {'items':>6} {'full items/s':>13} {'shared-prefix items/s':>22} {'ratio':>6}  accuracies equal")
for t in tasks:
    res = {s: [json.load(open(os.path.join(tmp, f"{t}.{s}.{r}.json"))) for r in range(1, runs + 1)] for s in ("full", "shared-prefix")}
    med = {s: statistics.median(j["items_per_s"] for j in res[s]) for s in res}
    keys = ("acc", "acc_norm_token", "acc_norm_char")
    same = all(res["full"][0][k] == j[k] for s in res for j in res[s] for k in keys)
    ok &= same
    machine = res["full"][0]["machine"]
    print(f"{t:<10} {res['full'][0]['items']:>6} {med['full']:>13.3f} {med['shared-prefix']:>22.3f} {med['shared-prefix'] / med['full']:>5.2f}x  {'yes' if same else 'NO'}")
print(f"# machine: {machine}")
sys.exit(0 if ok else 1)
PY
