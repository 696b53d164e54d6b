#!/usr/bin/env bash
# `make demo`: train a small language model for real, end to end, in a few minutes on 2 cores.
#
#   1. corpus     the King James Bible (public domain, 4.3 MB), from Debian's bible-kjv-text package
#                 (installed by scripts/setup.sh), one plain-text file per chapter; cached in .demo/
#   2. tokenizer  a 4096-token byte-level BPE trained on it (lmtrain tokenizer train)
#   3. data       token shards with a 5% validation split (lmtrain data prepare)
#   4. train      configs/demo.toml: 1000 steps; loss every 50 steps, validation loss every 250
#   5. generate   a sample from the trained model
#   6. report     RUN/report.html: plots, summary, config (lmtrain report); its path is printed last
# Steps 1-3 are skipped when their output exists; every run gets a fresh run directory.
set -euo pipefail
build=${1:-build}
bin="$build/bin/lmtrain"
cache=.demo
mkdir -p "$cache"

corpus="$cache/kjv"
if [[ ! -d "$corpus" ]]; then
  echo "== corpus: the King James Bible from Debian's bible-kjv-text (public domain)"
  if ! command -v bible >/dev/null || [[ ! -f /usr/lib/bible.data ]]; then
    echo "demo: the 'bible' program or /usr/lib/bible.data is missing" >&2
    echo "hint: run scripts/setup.sh (it installs Debian's bible-kjv and bible-kjv-text)" >&2
    exit 1
  fi
  rm -rf "$corpus.tmp"
  mkdir -p "$corpus.tmp"
  # `bible` prints "Book N" headers, then verses as "  V text" wrapped at 80 columns. One file per
  # chapter: its header line, then one unwrapped verse per line without the verse number.
  bible -p /usr/lib gen1:1-rev22:21 | awk -v dir="$corpus.tmp" '
    function flush() { if (verse != "") print verse > out; verse = "" }
    /^([1-3] )?[A-Z][A-Za-z ]+ [0-9]+$/ { flush(); if (out) close(out); out = sprintf("%s/%04d.txt", dir, ++n); print $0 > out; next }
    /^  [0-9]+ / { flush(); sub(/^  [0-9]+ /, ""); verse = $0; next }
    /^$/ { next }
    { verse = verse " " $0 }
    END { flush() }'
  if [[ $(ls "$corpus.tmp" | wc -l) -ne 1189 ]]; then
    echo "demo: expected 1189 chapters from 'bible', got $(ls "$corpus.tmp" | wc -l)" >&2
    exit 1
  fi
  mv "$corpus.tmp" "$corpus"
fi
echo "== corpus: $(ls "$corpus" | wc -l) chapters, $(du -sh --apparent-size "$corpus" | cut -f1)"

if [[ ! -f "$cache/kjv.tokenizer.json" ]]; then
  echo "== tokenizer: training a 4096-token byte-level BPE"
  "$bin" tokenizer train --input "$corpus" --vocab-size 4096 --out "$cache/kjv.tokenizer.json"
fi

if [[ ! -d "$cache/kjv.data" ]]; then
  echo "== data: tokenising into shards (5% validation)"
  "$bin" data prepare --tokenizer "$cache/kjv.tokenizer.json" --input "$corpus" --out "$cache/kjv.data" --val-fraction 0.05
fi

run="runs/demo-$(date +%Y%m%d-%H%M%S)"
echo "== train: configs/demo.toml -> $run"
"$bin" train --config configs/demo.toml --run-dir "$run" --set data.path="$cache/kjv.data"
echo "== sample from the trained model (lmtrain generate, temperature 0.8, top-k 40):"
"$bin" generate --checkpoint "$run" --prompt "And it came to pass, when the king" \
  --max-tokens 80 --temperature 0.8 --top-k 40 --seed 1
echo "== report: the run's curves, summary and config in one HTML file (lmtrain report)"
"$bin" report "$run" --out "$run/report.html" >/dev/null
echo "== done: metrics in $run/metrics.jsonl; checkpoints in $run/checkpoints/"
echo "report: $(realpath "$run/report.html")   (open it in a browser)"
