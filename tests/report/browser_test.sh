#!/usr/bin/env bash
# The HTML report of a real training run, rendered by a real browser (headless Chromium, Debian's
# `chromium`, installed by scripts/setup.sh):
#   1. trains a short real run (30 steps of a small model on tinyshakespeare, validation every 10
#      steps, checkpoints every 15) and a second one with another learning rate;
#   2. `lmtrain report RUN1 RUN2 --out DIR/report.html`;
#   3. chromium --dump-dom: the page's own check (html_report.h) sets the title to "ok" only when
#      every plot draws as many points as it holds and none is empty; each plot's path vertices and
#      dots are counted here too; the loss plot overlays both runs;
#   4. no console error or uncaught exception in chromium's log;
#   5. chromium --screenshot writes a PNG of the page.
# Exit 77 (skipped, with a message) when chromium or the shared corpus is absent.
#
#   tests/report/browser_test.sh LMTRAIN SHARED_DATA WORKDIR
set -euo pipefail
lmtrain=$1 shared=$2 work=$3
browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z "$browser" ]]; then
  echo "SKIPPED: chromium is not installed (run scripts/setup.sh: it installs Debian's chromium)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
cd "$work"

corpus="$shared/corpora/tinyshakespeare.txt"
if [[ ! -f "$corpus" ]]; then
  echo "SKIP: shared test data not found: $corpus (../shared/data is absent)"
  exit 77
fi
"$lmtrain" tokenizer train --input "$corpus" --vocab-size 512 --out tok.json >/dev/null
"$lmtrain" data prepare --tokenizer tok.json --input "$corpus" --out data --val-fraction 0.05 >/dev/null
cat > recipe.toml <<TOML
[model]
preset = "tiny"
n_layers = 2
d_model = 64
n_heads = 4
n_kv_heads = 2
ffn_hidden = 128
[train]
max_steps = 30
micro_batch = 4
seq_len = 64
log_every = 10
[optim]
lr = 3e-3
[schedule]
warmup_steps = 5
[data]
path = "data"
[eval]
every = 10
batches = 4
[checkpoint]
every = 15
TOML
"$lmtrain" train --config recipe.toml --run-dir "runs/lr 3e-3" >/dev/null
"$lmtrain" train --config recipe.toml --run-dir runs/lr1e-3 --set optim.lr=1e-3 >/dev/null

out=$("$lmtrain" report "runs/lr 3e-3" runs/lr1e-3 --out report.html)
[[ "$out" == "report: report.html" ]] || { echo "FAIL: lmtrain report printed '$out'"; exit 1; }
grep -q 'src="http\|href="http\|<link\|src=' report.html && { echo "FAIL: the report refers to an external resource"; exit 1; }

url="file://$PWD/report.html"
flags=(--headless --no-sandbox --disable-gpu --no-first-run --disable-extensions --user-data-dir="$PWD/profile")
"$browser" "${flags[@]}" --enable-logging=stderr --v=0 --dump-dom "$url" > dom.html 2> chromium.log || {
  echo "FAIL: chromium --dump-dom failed"; cat chromium.log; exit 1; }
title=$(python3 -c 'import re, sys; print(re.search(r"<title>(.*?)</title>", open(sys.argv[1]).read(), re.S).group(1))' dom.html)
[[ "$title" == "ok" ]] || { echo "FAIL: the page's self-check says: $title"; exit 1; }

# Every plot has points, counted here in the rendered DOM too; the expected plots are there.
python3 - dom.html <<'PY'
import re, sys
dom = open(sys.argv[1]).read()
plots = re.findall(r'<svg class="plot" id="([^"]+)" data-points="(\d+)"(.*?)</svg>', dom, re.S)
ids = [p[0] for p in plots]
for want in ["loss", "lr", "grad_norm", "tokens_per_s", "mfu", "memory"]:
    assert want in ids, f"plot {want} missing: {ids}"
for pid, n, body in plots:
    drawn = sum(len(re.findall(r"[ML]", d)) for d in re.findall(r'<path class="series"[^>]* d="([^"]*)"', body))
    drawn += len(re.findall(r'<circle class="pt"', body))
    assert drawn == int(n) and drawn > 0, f"{pid}: {drawn} points drawn, {n} expected"
loss = dict(plots=[p for p in plots if p[0] == "loss"])["plots"][0][2]
series = re.findall(r'<path class="series" data-series="([^"]+)"', loss)
# Two runs: raw + smoothed + val each. 30 steps and 3 val points per run.
assert sorted(series) == sorted(f"{r} {w}" for r in ["lr 3e-3", "lr1e-3"] for w in ["loss", "loss (smoothed)", "val loss"]), series
for name in ["lr 3e-3 loss", "lr1e-3 val loss"]:
    d = re.search(r'data-series="%s" d="([^"]*)"' % re.escape(name), loss).group(1)
    assert len(re.findall(r"[ML]", d)) == (30 if name.endswith(" loss") and "val" not in name else 3), (name, d)
assert 'href="runs/lr%203e-3/checkpoints/step_00000015/"' in dom, "checkpoint link missing"
print(f"report: {len(plots)} plots, every one with its points: " + ", ".join(f"{p[0]}={p[1]}" for p in plots))
PY

if grep -E 'CONSOLE|Uncaught|SyntaxError|ReferenceError|TypeError' chromium.log | grep -v 'DevTools listening'; then
  echo "FAIL: console errors in chromium's log (above)"; exit 1
fi

"$browser" "${flags[@]}" --screenshot="$PWD/report.png" --window-size=1400,2400 "$url" > shot.log 2>&1 || {
  echo "FAIL: chromium --screenshot failed"; cat shot.log; exit 1; }
[[ $(head -c 8 report.png | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || { echo "FAIL: no PNG screenshot"; exit 1; }
[[ $(stat -c %s report.png) -gt 10000 ]] || { echo "FAIL: the screenshot is suspiciously small"; exit 1; }
echo "PASS: report rendered by $("$browser" --version 2>/dev/null | head -1); screenshot $PWD/report.png"
