// Statistics the benchmarks report: timings on shared machines are noisy, so each records several
// repetitions and reports their median (docs/PERFORMANCE.md).
#pragma once

#include <algorithm>
#include <vector>

namespace lmt::cli {

// The median of `v` (the upper one for an even count); `v` must not be empty.
inline double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace lmt::cli
