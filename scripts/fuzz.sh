#!/usr/bin/env bash
# `make fuzz`, `make fuzz-smoke` and the end of `make test`: builds the libFuzzer targets of
# tests/fuzz in their own build directory (clang, -DLMT_FUZZ=ON; the gcc build in build/ is not
# touched) and runs each for a fixed time, one after the other (docs/RELIABILITY.md, "Fuzzing").
#
#   scripts/fuzz.sh [BUILD_DIR] [SECONDS] [TARGET...]     defaults: build-fuzz, 60, every target
#
# Prints one line per target (executions, executions per second, corpus size) and, alone on the
# last line, "fuzz: N passed, M failed". Exits 1 when a target crashed, hit a sanitizer report,
# an escaped exception, a failed check, a timeout (10 s per input) or the memory limit (2 GiB);
# its log is printed and the input that did it is kept under BUILD_DIR/fuzz/artifacts/TARGET/.
# Reproduce one with: BUILD_DIR/bin/TARGET ARTIFACT_FILE
#
# Corpora, per target, under BUILD_DIR/fuzz/: corpus/TARGET (kept between runs: the fuzzer adds
# what reaches new code), gen/TARGET (valid inputs the target writes itself: LMT_FUZZ_WRITE_SEEDS),
# shared/TARGET (cut from ../shared/data when it exists), and tests/fuzz/seeds/TARGET (committed:
# small excerpts of the shared data, and every input that once crashed).
# $JOBS sets the build parallelism (default 2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-fuzz}
seconds=${2:-60}
shift $(($# < 2 ? $# : 2))
[[ "$build" = /* ]] || build="$root/$build"
jobs=${JOBS:-2}
shared="$root/../shared/data"

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ is missing; run scripts/setup.sh (it installs clang and libclang-rt-14-dev)" >&2
  exit 1
fi
if [[ ! -f "$build/build.ninja" ]]; then
  CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DLMT_FUZZ=ON -DLMT_BUILD_TESTS=OFF -DLMT_BUILD_BENCH=OFF >/dev/null
fi
mkdir -p "$build/fuzz"
if ! cmake --build "$build" -j "$jobs" --target fuzz_all >"$build/fuzz/build.log" 2>&1; then
  tail -n 60 "$build/fuzz/build.log"
  echo "fuzz: the build failed (log: $build/fuzz/build.log)"
  echo "fuzz: 0 passed, 1 failed"
  exit 1
fi

if (($# > 0)); then targets=("$@"); else mapfile -t targets < "$build/fuzz_targets.txt"; fi

work="$build/fuzz"
tmp=$(mktemp -d "${LMT_FUZZ_TMPDIR:-/dev/shm}/lmt-fuzz-run.XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Largest input per target (bytes): enough for the format's interesting structure, small enough
# to mutate quickly.
max_len() {
  case "$1" in
    tokenizer_json_fuzz | tiktoken_fuzz | gguf_vocab_fuzz) echo 8192 ;;
    gpt2_files_fuzz) echo 16384 ;;
    *) echo 4096 ;;
  esac
}

# Seeds cut from the shared data: the first lines of files too large to copy into the repository.
shared_seeds() {
  local t=$1 out=$2
  case "$t" in
    tiktoken_fuzz)
      { printf '\x00'; head -n 300 "$shared/tokenizers/tiktoken/r50k_base.tiktoken"; } > "$out/r50k_head"
      { printf '\x02'; head -n 300 "$shared/tokenizers/tiktoken/cl100k_base.tiktoken"; } > "$out/cl100k_head"
      { printf '\x03'; sed -n '1,256p;20000,20040p' "$shared/tokenizers/tiktoken/o200k_base.tiktoken"; } > "$out/o200k_sparse"
      ;;
    eval_tasks_fuzz)
      { printf '\x04'; sed -n '100,102p' "$shared/eval/hellaswag/hellaswag_val.llamacpp.jsonl"; } > "$out/hellaswag_mid"
      ;;
  esac
}

if [[ ! -d "$shared" ]]; then
  echo "fuzz: $shared is absent: running without the seeds cut from the shared data (tiktoken, eval)"
fi

passed=0
failed=0
failed_names=()
for t in "${targets[@]}"; do
  bin="$build/bin/$t"
  [[ -x "$bin" ]] || { echo "fuzz: no target $t in $build/bin" >&2; failed=$((failed + 1)); failed_names+=("$t"); continue; }
  corpus="$work/corpus/$t" gen="$work/gen/$t" cut="$work/shared/$t" art="$work/artifacts/$t"
  mkdir -p "$corpus" "$art" "$work/logs"
  rm -rf "$gen" "$cut"
  mkdir -p "$cut"
  dirs=("$corpus")
  if LMT_FUZZ_TMP="$tmp" LMT_FUZZ_WRITE_SEEDS="$gen" "$bin" >"$work/logs/$t.seeds.log" 2>&1; then
    dirs+=("$gen")
  else
    echo "fuzz: $t could not write its seeds:"; cat "$work/logs/$t.seeds.log"
    failed=$((failed + 1)); failed_names+=("$t"); continue
  fi
  [[ -d "$shared" ]] && shared_seeds "$t" "$cut"
  [[ -n "$(ls -A "$cut")" ]] && dirs+=("$cut")
  [[ -d "$root/tests/fuzz/seeds/$t" ]] && dirs+=("$root/tests/fuzz/seeds/$t")
  [[ "$t" == config_toml_fuzz ]] && dirs+=("$root/configs")
  # Boundary numbers for the formats that carry JSON or TOML numbers (all but the binary shard).
  dict=()
  [[ "$t" != shard_fuzz ]] && dict=(-dict="$root/tests/fuzz/numbers.dict")
  log="$work/logs/$t.log"
  rc=0
  LMT_FUZZ_TMP="$tmp" "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len "$t")" \
    "${dict[@]}" -print_final_stats=1 -artifact_prefix="$art/" "${dirs[@]}" >"$log" 2>&1 || rc=$?
  rm -rf "${tmp:?}"/lmt-fuzz-*
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  units=$(find "$corpus" -type f | wc -l)
  if ((rc == 0)); then
    passed=$((passed + 1))
    printf 'fuzz: %-26s ok      %9s execs  %6s/s  corpus %5s  (%ss)\n' "$t" "${execs:-?}" "${rate:-?}" "$units" "$seconds"
  else
    failed=$((failed + 1))
    failed_names+=("$t")
    printf 'fuzz: %-26s FAILED  (exit %s) after %s execs; log: %s\n' "$t" "$rc" "${execs:-?}" "$log"
    grep -v '^#[0-9]' "$log" | tail -n 60
    echo "fuzz: reproduce with $bin $(ls -t "$art" 2>/dev/null | head -1 | sed "s|^|$art/|")"
  fi
done
if ((failed > 0)); then echo "fuzz: failed: ${failed_names[*]}"; fi
echo "fuzz: $passed passed, $failed failed"
((failed == 0))
