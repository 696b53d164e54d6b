// Limits of this machine that input checks compare against: its memory and its thread count.
//
// Every size or count a user gives (a batch, a model shape, --threads, OMP_NUM_THREADS) is checked
// against these before anything is allocated or started, so an absurd value is refused at once with
// a message naming it, instead of ending in an out-of-memory abort, a crash inside a library, or a
// machine that swaps for minutes. Header-only.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "lmt/base/status.h"

namespace lmt {

// Bytes of memory this process can use: the machine's physical memory, or the cgroup (container)
// limit when that is lower. 0 when unknown (then memory checks pass).
inline double usable_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  double bytes = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
  if (FILE* f = std::fopen("/sys/fs/cgroup/memory.max", "r")) {  // cgroup v2; "max" when unlimited
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, f)) {
      char* end = nullptr;
      const double limit = std::strtod(buf, &end);
      if (end != buf && limit > 0 && (bytes == 0 || limit < bytes)) bytes = limit;
    }
    std::fclose(f);
  }
  return bytes;
}

// "23.5 GiB", "54.6 TiB", "2.29e+05 TiB".
inline std::string gib_text(double bytes) {
  char buf[64];
  const double gib = bytes / 1073741824.0;
  if (gib < 1024) std::snprintf(buf, sizeof buf, "%.1f GiB", gib);
  else if (gib < 1024.0 * 10000) std::snprintf(buf, sizeof buf, "%.1f TiB", gib / 1024);
  else std::snprintf(buf, sizeof buf, "%.3g TiB", gib / 1024);
  return buf;
}

// The memory a check compares against: this machine's (the default), or a device's, e.g. the free
// memory of the GPU a backend computes on.
struct MemoryTarget {
  double bytes = 0;                    // 0: usable_memory_bytes()
  std::string name = "this machine";   // for the message: "cuda:0 (NVIDIA H100 80GB HBM3)"
};

// OK when `bytes` (what `what` needs) fits in the target's memory; otherwise an error naming both
// sizes, with `hint` saying which value to lower.
inline Status check_fits_in_memory(double bytes, const std::string& what, const std::string& hint,
                                   const MemoryTarget& target = {}) {
  const double have = target.bytes > 0 ? target.bytes : usable_memory_bytes();
  if (!(bytes >= 0) || !std::isfinite(bytes) || (have > 0 && bytes > have))
    return InvalidArgument(what + " needs " + (std::isfinite(bytes) ? gib_text(bytes) : std::string("an unbounded amount")) +
                               " of memory, more than " + target.name + " has (" + gib_text(have) + ")",
                           hint);
  return Status::Ok();
}

inline int hardware_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// The most threads a thread count (--threads, OMP_NUM_THREADS) may ask for: 4 x the
// hardware threads, but at least 64 and at most 1024. More only oversubscribes the cores; far
// more crashes inside oneDNN and the OpenMP runtime or exhausts the system's thread limit.
inline int64_t max_threads() { return std::clamp<int64_t>(int64_t{4} * hardware_threads(), 64, 1024); }

// `n` threads asked for by `what` (e.g. "--threads"): OK in [min, max_threads()]. Pass min = 0 where
// 0 means "the default".
inline Status check_thread_count(int64_t n, const std::string& what, int64_t min = 0) {
  if (n < min || n > max_threads())
    return InvalidArgument(what + " " + std::to_string(n) + " is out of range: it must be in [" + std::to_string(min) + ", " +
                               std::to_string(max_threads()) + "]",
                           "the limit is 4 x this machine's " + std::to_string(hardware_threads()) +
                               " hardware threads (at least 64, at most 1024)" +
                               (min == 0 ? "; 0 means one per hardware thread" : ""));
  return Status::Ok();
}

// OMP_NUM_THREADS, when set: a comma-separated list (one entry per nesting level) of thread counts,
// each in [1, max_threads()]. The OpenMP runtime reads it at start-up; an absurd value (70000)
// crashes the first parallel region, so it is checked before any computation.
inline Status check_omp_num_threads() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env == nullptr || *env == '\0') return Status::Ok();
  const std::string value = env;
  const std::string hint = "unset OMP_NUM_THREADS (one thread per core) or give a count in [1, " +
                           std::to_string(max_threads()) + "], e.g. OMP_NUM_THREADS=" + std::to_string(hardware_threads());
  size_t i = 0;
  while (i <= value.size()) {
    const size_t comma = std::min(value.find(',', i), value.size());
    const std::string entry = value.substr(i, comma - i);
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(entry.c_str(), &end, 10);
    if (entry.empty() || end == entry.c_str() || *end != '\0' || errno == ERANGE || n < 1 || n > max_threads())
      return InvalidArgument("OMP_NUM_THREADS=" + value + " is out of range: each entry must be a thread count in [1, " +
                                 std::to_string(max_threads()) + "]",
                             hint);
    i = comma + 1;
  }
  return Status::Ok();
}

}  // namespace lmt
