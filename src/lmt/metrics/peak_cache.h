// The measured-peak cache: this machine's dense peaks (metrics/hardware.h), measured once and
// reused by every later process, so MFU has the same denominator from run to run.
//
// Why: a start-up measurement on a shared machine moves with the load on the other cores (162 vs
// 451 GFLOP/s seen within one minute), and a low denominator inflates every MFU computed from it.
// A cached best-of-several measurement (refreshed on demand by `lmtrain bench peak`, best of 20)
// does not move.
//
// Where: $LMT_PEAK_CACHE when set (a file path, or "off": no cache, measure every time), else
// $XDG_CACHE_HOME/lmtrain/peaks.json, else $HOME/.cache/lmtrain/peaks.json.
//
// Format (JSON, one file per user, one entry per machine key):
//   {"format": "lmtrain-peaks", "version": 1,
//    "machines": {"<key>": {"cpu": "...", "isa": "avx512f avx512_bf16", "threads": 2,
//                           "fp32_gflops": 451.2, "bf16_gflops": 902.5, "bf16_unit": "avx512_bf16",
//                           "trials": 5, "measured_at": "2026-11-24T19:30:00Z"}}}
// The key is the CPU model (vendor and brand string), the ISA features the measurement used and
// the thread count: another CPU, an ISA the OS no longer grants or another OMP_NUM_THREADS gets
// its own entry, never another machine's figure.
//
// Errors: the cache never stops a run. A missing file or entry is a miss; a file that cannot be
// read or parsed, or a malformed entry, is a miss with a warning (the caller logs it), and the next
// store replaces the damaged file. Stores are atomic (a uniquely named temporary file beside it,
// then rename), so a reader sees the old file or the new one, never a torn one. Two processes that
// store at the same moment may each keep only their own new entry; a later run re-measures.
// Threading: the functions touch only their arguments and the file; callers serialise per process.
#pragma once

#include <optional>
#include <string>

#include "lmt/base/status.h"
#include "lmt/metrics/hardware.h"

namespace lmt::metrics {

// The cache key of `info`: "<vendor> <brand> | <isa flags> | <threads> threads".
std::string peak_cache_key(const CpuInfo& info);

// The cache file this process uses (see the header comment); "" when disabled (LMT_PEAK_CACHE=off)
// or when no directory can be named (no XDG_CACHE_HOME and no HOME).
std::string peak_cache_path();

// The cached peaks for `key` in the file at `path`. nullopt when the file or the entry is absent;
// also nullopt, with `*warning` set (naming the file and what is wrong), when the file cannot be
// read or parsed or the entry is malformed. `warning` may be null.
std::optional<Peaks> read_cached_peaks(const std::string& path, const std::string& key, std::string* warning);

// Stores `peaks` (measured with `trials` trials on the CPU `info` describes) under
// peak_cache_key(info), keeping the file's other entries (a damaged file is replaced). Creates the
// directory. Atomic (temporary file + rename). An error names the path; nothing is left behind.
Status write_cached_peaks(const std::string& path, const CpuInfo& info, const Peaks& peaks, int trials);

}  // namespace lmt::metrics
