#!/usr/bin/env bash
# The data-cleaning benchmark recorded in docs/PERFORMANCE.md ("Data cleaning"): `lmtrain data
# clean --threads 1` with the default config against datatrove 0.10.1 (bench/clean_datatrove.py
# --filters: the same four quality filters with the same settings, then MinHash word 5-grams 14 x 8,
# one process, one worker) on the same input, alternating, RUNS times each, in one script run.
# Prints one JSON object per line: the machine; lmtrain (median wall seconds, median MB/s per stage,
# peak RSS); datatrove (median seconds, peak RSS); the speed ratio per core; the documents removed
# per filter and by MinHash by each tool, with their differences. The removal counts must be the
# same in every run (else the script fails). Run it alone: timings taken while other jobs share the
# cores are noisy. Needs the venv group `clean` (scripts/venv.sh BUILD clean).
#
#   scripts/bench_clean.sh [build_dir] [--runs N] [--quick] [--input FILE.jsonl]
#     --runs N   runs of each tool (default 3; the medians are reported)
#     --quick    one run of each (a check that it works end to end, not a measurement)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=build
if [[ $# -gt 0 && $1 != --* ]]; then build=$1; shift; fi
runs=3
data=${LMT_SHARED_DATA:-$root/../shared/data}
input=$data/corpora/medium_prose.jsonl
while [[ $# -gt 0 ]]; do
  case $1 in
    --runs) runs=${2:?--runs needs a number}; shift 2 ;;
    --quick) runs=1; shift ;;
    --input) input=${2:?--input needs a file}; shift 2 ;;
    *) echo "bench_clean: unknown argument $1 (usage: scripts/bench_clean.sh [build_dir] [--runs N] [--quick] [--input FILE])" >&2; exit 2 ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "bench_clean: --runs must be a positive integer, got '$runs'" >&2; exit 2; }
bin=$build/bin/lmtrain
py=${LMT_VENV:-$build/venv}/bin/python
[[ -x $bin ]] || { echo "bench_clean: $bin not found; build first (make build)" >&2; exit 1; }
[[ -f $input ]] || { echo "bench_clean: $input not found (see ../shared/data/README.md)" >&2; exit 1; }
[[ -f ${LMT_VENV:-$build/venv}/.lmt-clean ]] || {
  echo "bench_clean: datatrove is not installed in ${LMT_VENV:-$build/venv}; run: scripts/venv.sh $build clean" >&2; exit 1; }
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
# One thread for the numeric libraries datatrove uses (numpy for the MinHash permutations).
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }
for ((i = 1; i <= runs; i++)); do
  echo "bench_clean: run $i of $runs: lmtrain" >&2
  t0=$(now)
  "$bin" data clean --input "$input" --out "$tmp/lmt$i" --threads 1 --json > "$tmp/lmt$i.json"
  t1=$(now)
  echo "{\"start\": $t0, \"end\": $t1}" > "$tmp/lmt$i.wall"
  cp "$tmp/lmt$i/clean_report.json" "$tmp/lmt$i.report.json"
  rm -rf "$tmp/lmt$i"
  echo "bench_clean: run $i of $runs: datatrove" >&2
  t0=$(now)
  "$py" "$root/bench/clean_datatrove.py" --filters --norm none --input "$input" --work "$tmp/dt_work$i" \
    --out "$tmp/dt$i.json" 2> "$tmp/dt$i.log" || { tail -20 "$tmp/dt$i.log" >&2; exit 1; }
  t1=$(now)
  echo "{\"start\": $t0, \"end\": $t1}" > "$tmp/dt$i.wall"
  rm -rf "$tmp/dt_work$i"
done

"$py" - "$tmp" "$runs" "$input" <<'EOF'
import json, os, statistics, sys

tmp, runs, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
load = lambda p: json.load(open(os.path.join(tmp, p)))
med = statistics.median
wall = lambda p: load(p)["end"] - load(p)["start"]
lmt = [load(f"lmt{i}.report.json") for i in range(1, runs + 1)]
lmt_wall = [wall(f"lmt{i}.wall") for i in range(1, runs + 1)]
dt = [load(f"dt{i}.json") for i in range(1, runs + 1)]
dt_wall = [wall(f"dt{i}.wall") for i in range(1, runs + 1)]

cpu = "unknown"
with open("/proc/cpuinfo") as f:
    for line in f:
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
print(json.dumps({"bench": "data clean", "machine": {"cpu": cpu, "cores": os.cpu_count(),
                  "load_average_1m": os.getloadavg()[0]},
                  "input": os.path.abspath(path), "bytes": os.path.getsize(path),
                  "documents": lmt[0]["documents_in"], "runs": runs}))

# lmtrain: the process's wall time, and each stage's MB/s (clean_report.json "timing").
stages = {}
for t in (r["timing"]["stages"] for r in lmt):
    for s in t:
        stages.setdefault(s["stage"], []).append(s)
lmt_seconds = med(lmt_wall)
print(json.dumps({"tool": "lmtrain", "workers": 1, "seconds": round(lmt_seconds, 3),
                  "seconds_runs": [round(x, 3) for x in lmt_wall],
                  "mb_per_s": round(os.path.getsize(path) / 1e6 / lmt_seconds, 3),
                  "stages": {k: {"mb_per_s": round(med(x["mb_per_s"] for x in v), 3),
                                 "seconds": round(med(x["seconds"] for x in v), 3),
                                 "bytes_in": v[0]["bytes_in"]} for k, v in stages.items()},
                  "peak_rss_mb": round(max(r["timing"]["peak_rss_bytes"] for r in lmt) / 1e6, 1)}))

# datatrove: the pipeline's wall time (interpreter start and imports left out, see import_seconds).
dt_seconds = med(d["seconds"] for d in dt)
print(json.dumps({"tool": "datatrove 0.10.1", "workers": 1, "seconds": round(dt_seconds, 3),
                  "seconds_runs": [round(d["seconds"], 3) for d in dt],
                  "mb_per_s": round(os.path.getsize(path) / 1e6 / dt_seconds, 3),
                  "stages": {k: {"seconds": round(med(d["stage_seconds"][k] for d in dt), 3)}
                             for k in dt[0]["stage_seconds"]},
                  "process_seconds": round(med(dt_wall), 3),
                  "import_seconds": round(med(d["import_seconds"] for d in dt), 3),
                  "peak_rss_mb": round(max(d["peak_rss_bytes"] for d in dt) / 1e6, 1)}))

# One worker each: the ratio of the wall times is the ratio per core. lmtrain's time is its whole
# process; datatrove's leaves out its interpreter start and imports (in its favour).
print(json.dumps({"speed_ratio_per_core": round(dt_seconds / lmt_seconds, 2),
                  "lmtrain_seconds": round(lmt_seconds, 3), "datatrove_seconds": round(dt_seconds, 3)}))

# Documents removed: per filter (the reason's prefix in lmtrain) and by MinHash.
def lmt_removed(r):
    out = {}
    for reason, c in r["removed"].items():
        k = reason.split(":")[0]
        out[k] = out.get(k, 0) + c["documents"]
    return out
lr, dr = [lmt_removed(r) for r in lmt], [d["removed"] for d in dt]
status = 0
if any(x != lr[0] for x in lr) or any(x != dr[0] for x in dr):
    print("bench_clean: the documents removed differ between runs of the same tool", file=sys.stderr)
    status = 1
n = lmt[0]["documents_in"]
rows = {}
for k in ["normalize", "gopher_repetition", "gopher_quality", "c4", "fineweb", "exact_dedup", "minhash",
          "decontaminate"]:
    a, b = lr[0].get(k, 0), dr[0].get(k)
    if b is None and a == 0:
        continue
    row = {"lmtrain": a, "datatrove": b}
    if b is None:
        row["note"] = "not run on the datatrove side"
    else:
        row["relative_difference"] = round(abs(a - b) / max(a, b), 3) if max(a, b) else 0.0
        row["difference_of_documents_in"] = round(abs(a - b) / n, 4)
    rows[k] = row
reasons = {}
for reason, c in lmt[0]["removed"].items():
    reasons.setdefault(reason, {"lmtrain": 0, "datatrove": 0})["lmtrain"] = c["documents"]
for reason, c in dt[0]["removed_reasons"].items():
    reasons.setdefault(reason, {"lmtrain": 0, "datatrove": 0})["datatrove"] = c
print(json.dumps({"removed": rows, "removed_reasons": dict(sorted(reasons.items())),
                  "documents_in": n, "documents_out": {"lmtrain": lmt[0]["documents_out"],
                                                       "datatrove": dt[0]["documents_out"]}}))
sys.exit(status)
EOF
