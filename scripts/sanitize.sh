#!/usr/bin/env bash
# `make test-sanitize` and `make test-tsan`: build with sanitizers and run the tests under them
# (docs/RELIABILITY.md, "Sanitizers").
#
#   scripts/sanitize.sh address [BUILD_DIR] [JOBS]   ASan+UBSan (+LeakSanitizer), every test
#   scripts/sanitize.sh thread  [BUILD_DIR] [JOBS]   TSan, the tests labelled "threads"
#
# Extra CMake flags come from $CMAKE_FLAGS and extra ctest arguments from $CTEST_FLAGS
# (e.g. CTEST_FLAGS="-R Loader" to run a few tests).
#
# Every ASan, LSan and TSan report goes to a file under BUILD_DIR/sanitizer-logs (log_path), not to
# stderr. A test that runs `lmtrain` as a child and expects it to fail, or kills it, would otherwise not
# notice a report in the child; here any report fails the run, and the reports are printed at the end.
set -euo pipefail
mode=${1:?usage: scripts/sanitize.sh address|thread [BUILD_DIR] [JOBS]}
root=$(cd "$(dirname "$0")/.." && pwd)
case "$mode" in
  address) build=${2:-build-asan} ;;
  thread) build=${2:-build-tsan} ;;
  *) echo "sanitize.sh: unknown mode '$mode' (address or thread)" >&2; exit 2 ;;
esac
jobs=${3:-$(nproc)}
[[ "$build" == /* ]] || build="$root/$build"
supp="$root/tests/sanitizers"
logs="$build/sanitizer-logs"

# A report exits with status 86, which no lmtrain code path uses, so a test that checks the status of a
# child sees the difference between "failed as expected" and "the sanitizer stopped it".
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:exitcode=86:check_initialization_order=1:strict_init_order=1:log_path=$logs/asan"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=86:suppressions=$supp/ubsan.supp:log_path=$logs/ubsan"
# TSan: libgomp is not instrumented, so TSan cannot see the barriers that end an OpenMP parallel region
# and reports every region as a race. With one OpenMP thread a region runs on the calling thread and
# TSan sees everything; lmtrain's own std::threads (the subject of this build) are unaffected.
export TSAN_OPTIONS="halt_on_error=1:exitcode=86:second_deadlock_stack=1:suppressions=$supp/tsan.supp:log_path=$logs/tsan"
if [[ "$mode" == thread ]]; then export OMP_NUM_THREADS=1; fi

# Cleared before the build: gtest discovery runs the instrumented test binaries during the build.
rm -rf "$logs"
mkdir -p "$logs"
t0=$(date +%s)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLMT_SANITIZE="$mode" \
  -DLMT_BUILD_BENCH=OFF ${CMAKE_FLAGS:-} >/dev/null
if [[ "$mode" == address ]]; then
  cmake --build "$build" -j "$jobs"
  labels=()
else
  cmake --build "$build" -j "$jobs" --target lmt_threaded_tests
  labels=(-L threads)
fi
t1=$(date +%s)

rc=0
(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 1200 "${labels[@]}" ${CTEST_FLAGS:-}) || rc=$?
t2=$(date +%s)

reports=$(find "$logs" -type f | sort)
if [[ -n "$reports" ]]; then
  echo "== sanitizer reports ($(echo "$reports" | wc -l) files in $logs):"
  for f in $reports; do echo "---- $f"; cat "$f"; done
  rc=1
fi
# GCC's UBSan runtime, loaded next to ASan's, ignores log_path and reports on stderr (then exits 86):
# look for its reports in the output of every test, passed or not.
if grep -n "runtime error: " "$build"/Testing/Temporary/LastTest*.log 2>/dev/null; then
  echo "== UndefinedBehaviorSanitizer reports above (in $build/Testing/Temporary/LastTest.log)"
  rc=1
fi
echo "sanitize.sh $mode: build $((t1 - t0)) s, tests $((t2 - t1)) s, status $rc"
exit $rc
