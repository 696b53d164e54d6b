// Statistics the benchmarks report: timings on shared machines are noisy, so each records several
// repetitions and reports their median (docs/PERFORMANCE.md).
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include "lmt/base/timer.h"
#include "lmt/kernels/backend.h"

namespace lmt::cli {

// The median of `v` (the upper one for an even count); `v` must not be empty.
inline double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

struct Timing {
  double median = 0, best = 0;
};

// Times fn on `be` over `iters` repetitions after `warmup` untimed ones, waiting for a device
// backend's queued work before each reading; `before` (untimed) runs ahead of each timed one.
inline Timing time_it(kernels::Backend& be, int warmup, int iters, const std::function<void()>& fn,
                      const std::function<void()>& before = nullptr) {
  for (int i = 0; i < warmup; ++i) fn();
  be.synchronize();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    if (before) before();
    Timer timer;
    fn();
    be.synchronize();
    t.push_back(timer.seconds());
  }
  return {median(t), *std::min_element(t.begin(), t.end())};
}

}  // namespace lmt::cli
