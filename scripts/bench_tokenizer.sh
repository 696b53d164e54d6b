#!/usr/bin/env bash
# The tokenizer encode benchmark recorded in docs/PERFORMANCE.md: lmtrain vs the npm `tiktoken`
# package (the WASM build of OpenAI's Rust core), single-threaded, on the same documents
# (../shared/data/corpora/medium_prose.jsonl), with cl100k_base and with a 32k vocabulary trained
# here by `lmtrain tokenizer train`. One JSON object per line; the token counts of each pair must
# be equal (a mismatch is reported and the script fails). Run alone: timings taken while other
# jobs share the 2 cores are noisy.
#
#   scripts/bench_tokenizer.sh [build_dir] [--threads N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
threads=1
if [[ "${2:-}" == "--threads" ]]; then threads=${3:?--threads needs a number}; fi
bin=$build/bin/lmtrain
data=${LMT_SHARED_DATA:-$root/../shared/data}
input=$data/corpora/medium_prose.jsonl
cl100k=$data/tokenizers/tiktoken/cl100k_base.tiktoken
[[ -x $bin ]] || { echo "bench_tokenizer: $bin not found; build first (make build)" >&2; exit 1; }
[[ -f $input ]] || { echo "bench_tokenizer: $input not found (see ../shared/data/README.md)" >&2; exit 1; }

npm_dir=$root/bench/tiktoken_npm
have_node=1
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "bench_tokenizer: node/npm not installed: the tiktoken baseline is skipped" >&2
  have_node=0
elif [[ ! -d $npm_dir/node_modules/tiktoken ]]; then
  (cd "$npm_dir" && npm install --no-audit --no-fund --silent) >&2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" tokenizer train --input "$input" --vocab-size 32000 --out "$tmp/trained32k.json" >&2

tokens_of() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tokens"])' "$1"; }
status=0
compare() {  # name, lmtrain JSON line, tiktoken JSON line
  echo "$2"
  [[ -n "$3" ]] || return 0
  echo "$3"
  if [[ $(tokens_of "$2") != $(tokens_of "$3") ]]; then
    echo "bench_tokenizer: $1: token counts differ between lmtrain and tiktoken" >&2
    status=1
  fi
}

ours=$("$bin" bench tokenizer --tokenizer "$cl100k" --input "$input" --threads "$threads" --json)
theirs=""
if ((have_node)); then theirs=$(node "$npm_dir/bench.mjs" --input "$input" --encoding cl100k_base); fi
compare cl100k_base "$ours" "$theirs"

ours=$("$bin" bench tokenizer --tokenizer "$tmp/trained32k.json" --input "$input" --threads "$threads" --json)
theirs=""
if ((have_node)); then theirs=$(node "$npm_dir/bench.mjs" --input "$input" --tokenizer-json "$tmp/trained32k.json"); fi
compare trained32k "$ours" "$theirs"
exit $status
