#!/usr/bin/env bash
# The tokenizer benchmark recorded in docs/PERFORMANCE.md ("Tokenizers"): lmtrain against the PyPI
# peers, OpenAI's tiktoken and Hugging Face tokenizers (both native Rust; venv group `tokenizers`,
# scripts/venv.sh), on the same documents (default ../shared/data/corpora/medium_prose.jsonl).
#
#  1. BPE training: `lmtrain tokenizer train` and HF tokenizers' BpeTrainer (the same pre-tokenizer:
#     lmtrain's Split regex, then ByteLevel; all 256 bytes; <|endoftext|>), same corpus and vocabulary
#     size, RUNS times each: median wall seconds and peak RSS; then how many merges and vocabulary
#     entries the two results share, and where they first differ.
#  2. Encoding: cl100k_base (lmtrain vs tiktoken), GPT-2 (vs tiktoken r50k_base and HF tokenizers on
#     encoder.json + vocab.bpe), Qwen3's tokenizer.json and the vocabulary trained in 1 (vs HF
#     tokenizers); with 1 thread and with all hardware threads; medians of RUNS passes after a warm-up
#     pass, MB/s (10^6 bytes of text) and tokens/s. The token ids of every document must be equal to
#     lmtrain's (`lmtrain tokenizer encode`): a difference is reported and the script fails.
# Prints the machine first, then one JSON object per line, then the ratios (lmtrain / peer, from the
# medians of one script run). Run it alone: timings taken while other jobs share the cores are noisy.
#
#   scripts/bench_tokenizer.sh [build_dir] [--runs N] [--input FILE.jsonl] [--vocab-size V] [--check]
#     --runs N   timed passes / training runs of each tool (default 3; medians are reported)
#     --check    the correctness part alone, on a small input cut from FILE (40 documents of at most
#                3000 characters, vocabulary 1000): ids equal, the trained tokenizer.json valid (HF
#                tokenizers loads it, gives lmtrain's ids, decodes to the text), the first differing
#                merge a tie. No timing. The ctest `bench_tokenizer_check` runs this.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=build
if [[ $# -gt 0 && $1 != --* ]]; then build=$1; shift; fi
runs=3
vocab=32000
check=0
data=${LMT_SHARED_DATA:-$root/../shared/data}
input=$data/corpora/medium_prose.jsonl
usage="usage: scripts/bench_tokenizer.sh [build_dir] [--runs N] [--input FILE.jsonl] [--vocab-size V] [--check]"
while [[ $# -gt 0 ]]; do
  case $1 in
    --runs) runs=${2:?--runs needs a number}; shift 2 ;;
    --input) input=${2:?--input needs a file}; shift 2 ;;
    --vocab-size) vocab=${2:?--vocab-size needs a number}; shift 2 ;;
    --check) check=1; shift ;;
    *) echo "bench_tokenizer: unknown argument $1 ($usage)" >&2; exit 2 ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "bench_tokenizer: --runs must be a positive integer, got '$runs'" >&2; exit 2; }
[[ $vocab =~ ^[1-9][0-9]*$ ]] || { echo "bench_tokenizer: --vocab-size must be a positive integer, got '$vocab'" >&2; exit 2; }
[[ "$build" = /* ]] || build="$root/$build"
bin=$build/bin/lmtrain
venv=${LMT_VENV:-$build/venv}
py=$venv/bin/python
peers=$root/bench/tokenizer_peers.py
toks=$data/tokenizers
[[ -x $bin ]] || { echo "bench_tokenizer: $bin not found; build first (make build)" >&2; exit 1; }
[[ -f $input ]] || { echo "bench_tokenizer: $input not found (see ../shared/data/README.md)" >&2; exit 1; }
[[ -d $toks/tiktoken ]] || { echo "bench_tokenizer: $toks not found (see ../shared/data/README.md)" >&2; exit 1; }
if [[ ! -x $py ]] || ! "$py" -c 'import tiktoken, tokenizers' 2>/dev/null; then
  echo "bench_tokenizer: tiktoken / tokenizers are not installed in $venv; run: scripts/venv.sh $build tokenizers" >&2
  exit 1
fi
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
all=$(nproc)
thread_counts=(1)
((all > 1)) && thread_counts+=("$all")
if ((check)); then
  "$py" - "$input" "$tmp/docs.jsonl" <<'EOF'
import json, sys
with open(sys.argv[1], encoding="utf-8") as f, open(sys.argv[2], "w", encoding="utf-8") as out:
    for i, line in enumerate(f):
        if i == 40:
            break
        out.write(json.dumps({"text": json.loads(line)["text"][:3000]}) + "\n")
EOF
  input=$tmp/docs.jsonl
  vocab=1000
  runs=0
  thread_counts=(1)
fi
results=$tmp/results.jsonl
status=0
emit() { echo "$1"; echo "$1" >> "$results"; }

# The machine: CPU, cores, load, the versions compared.
emit "$("$py" - "$bin" <<'EOF'
import json, os, subprocess, sys
import tiktoken, tokenizers
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
version = subprocess.run([sys.argv[1], "--version"], capture_output=True, text=True).stdout.strip()
print(json.dumps({"bench": "tokenizer", "machine": {"cpu": cpu, "cores": os.cpu_count(),
                  "load_average_1m": os.getloadavg()[0]}, "lmtrain": version,
                  "tiktoken": tiktoken.__version__, "tokenizers": tokenizers.__version__}))
EOF
)"

# 1. BPE training, side by side. Both use every hardware thread (lmtrain --threads 0, HF's Rayon pool).
trained=$tmp/lmt_trained.json
# The wall time and peak RSS of one child process (the only child, so RUSAGE_CHILDREN is its own).
measure_child='import json, resource, subprocess, sys, time
t = time.perf_counter()
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
seconds = time.perf_counter() - t
print(json.dumps({"seconds": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
sys.exit(r.returncode)'
for ((i = 1; i <= (runs > 0 ? runs : 1); i++)); do
  echo "bench_tokenizer: training run $i: lmtrain tokenizer train, vocabulary $vocab" >&2
  line=$("$py" -c "$measure_child" "$bin" tokenizer train --input "$input" --vocab-size "$vocab" --out "$trained" \
    --force 2>"$tmp/train.log") || { cat "$tmp/train.log" >&2; exit 1; }
  emit "{\"train\": \"lmtrain\", \"run\": $i, \"vocab_size\": $vocab, ${line#\{}"
  echo "bench_tokenizer: training run $i: HF tokenizers BpeTrainer" >&2
  line=$("$py" "$peers" train --input "$input" --vocab-size "$vocab" --pattern-from "$trained" --out "$tmp/hf_trained.json")
  emit "{\"train\": \"hf\", \"run\": $i, ${line#\{}"
done
explain=()
((check)) && explain=(--explain "$input")
line=$("$py" "$peers" compare "$trained" "$tmp/hf_trained.json" "${explain[@]}") || {
  echo "bench_tokenizer: the first merge where lmtrain and HF tokenizers differ is not a tie" >&2; status=1; }
emit "{\"train\": \"compare\", ${line#\{}"
"$bin" tokenizer encode --tokenizer "$trained" --input "$input" --json > "$tmp/trained.ids"
line=$("$py" "$peers" check-trained "$trained" "$input" --lmt-ids "$tmp/trained.ids") || {
  echo "bench_tokenizer: the trained tokenizer.json is not valid in HF tokenizers" >&2; status=1; }
emit "$line"

# 2. Encoding: name | lmtrain's tokenizer | peer:tokenizer[:encoding] ...
cases=(
  "cl100k_base|$toks/tiktoken/cl100k_base.tiktoken|tiktoken:$toks/tiktoken/cl100k_base.tiktoken"
  "gpt2|$toks/gpt2|tiktoken:$toks/tiktoken/r50k_base.tiktoken hf:$toks/gpt2"
  "qwen3|$toks/qwen3/tokenizer.json|hf:$toks/qwen3/tokenizer.json"
  "trained_$vocab|$trained|hf:$trained"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name tok peer_list <<< "$c"
  echo "bench_tokenizer: encode $name" >&2
  "$bin" tokenizer encode --tokenizer "$tok" --input "$input" --json > "$tmp/ids.jsonl"
  for t in "${thread_counts[@]}"; do
    if ((runs > 0)); then
      line=$("$bin" bench tokenizer --tokenizer "$tok" --input "$input" --threads "$t" --iters "$runs" --json)
      emit "{\"encode\": \"$name\", \"tool\": \"lmtrain\", ${line#\{}"
    fi
    for p in $peer_list; do
      line=$("$py" "$peers" encode --peer "${p%%:*}" --tokenizer "${p#*:}" --input "$input" --threads "$t" \
        --runs "$runs" --lmt-ids "$tmp/ids.jsonl") || {
        echo "bench_tokenizer: $name: token ids differ between lmtrain and ${p%%:*} (see first_difference)" >&2
        status=1; }
      emit "{\"encode\": \"$name\", \"peer\": \"${p%%:*}\", ${line#\{}"
    done
  done
done

# Ratios, from the medians above.
"$py" - "$results" "$check" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
check = sys.argv[2] == "1"
ids = [r for r in rows if "ids_equal" in r]
print(json.dumps({"ids_equal": sum(r["ids_equal"] for r in ids), "ids_compared": len(ids)}))
if check:
    sys.exit(0)
med = lambda xs: sorted(xs)[len(xs) // 2]
train = {t: [r for r in rows if r.get("train") == t] for t in ("lmtrain", "hf")}
print(json.dumps({"ratio": "train seconds, hf / lmtrain",
                  "value": med([r["seconds"] for r in train["hf"]]) / med([r["seconds"] for r in train["lmtrain"]]),
                  "peak_rss_mb": {t: med([r["peak_rss_mb"] for r in train[t]]) for t in train}}))
for r in rows:
    if "encode" in r and "peer" in r and "mb_per_s" in r:
        ours = next(x for x in rows if x.get("encode") == r["encode"] and x.get("tool") == "lmtrain"
                    and x["threads"] == r["threads"])
        print(json.dumps({"ratio": f"encode {r['encode']}, {r['threads']} thread(s), lmtrain / {r['peer']}",
                          "lmtrain_mb_per_s": ours["aggregate_mb_per_s"],
                          "lmtrain_tokens_per_s": ours["tokens"] / ours["seconds"],
                          "peer_mb_per_s": r["mb_per_s"], "peer_tokens_per_s": r["tokens_per_s"],
                          "value": ours["aggregate_mb_per_s"] / r["mb_per_s"]}))
EOF
exit $status
