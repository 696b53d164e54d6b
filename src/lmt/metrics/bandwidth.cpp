// Memory read bandwidth, STREAM-like (see bandwidth.h).
#include "lmt/metrics/bandwidth.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "lmt/base/check.h"

namespace lmt::metrics {

Bandwidth measure_read_bandwidth(int64_t bytes, int trials) {
  LMT_CHECK(bytes >= 1024 && trials >= 1) << "measure_read_bandwidth(" << bytes << ", " << trials << ")";
  const int64_t n = bytes / static_cast<int64_t>(sizeof(float)) / 64 * 64;
  std::vector<float> buf(static_cast<size_t>(n));
  const int threads = omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i & 7);
  double best = 0, sink = 0;
  for (int t = 0; t < trials; ++t) {
    const auto start = std::chrono::steady_clock::now();
    double total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
      const int64_t chunk = (n / 64 + nt - 1) / nt * 64, lo = std::min(n, id * chunk), hi = std::min(n, lo + chunk);
      float a0[16] = {}, a1[16] = {}, a2[16] = {}, a3[16] = {};
      for (int64_t i = lo; i < hi; i += 64) {
#pragma omp simd
        for (int e = 0; e < 16; ++e) {
          a0[e] += buf[i + e];
          a1[e] += buf[i + 16 + e];
          a2[e] += buf[i + 32 + e];
          a3[e] += buf[i + 48 + e];
        }
      }
      for (int e = 0; e < 16; ++e) total += a0[e] + a1[e] + a2[e] + a3[e];
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    sink += total;
    best = std::max(best, static_cast<double>(n) * sizeof(float) / s / 1e9);
  }
  volatile double keep = sink;  // the sums must not be optimised away
  (void)keep;
  return {best, n * static_cast<int64_t>(sizeof(float)), threads, trials};
}

}  // namespace lmt::metrics
