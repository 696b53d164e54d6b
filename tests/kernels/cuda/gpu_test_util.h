// What the GPU tests of tests/kernels/cuda share: the cuda backend (or null where no GPU is visible,
// with SKIP_WITHOUT_GPU() skipping the test and saying why) and the relative distance their
// precision bounds are written in.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "lmt/kernels/registry.h"

namespace lmt::gpu_test {

// The registered cuda backend, or nullptr where it is not built or no GPU is visible.
inline kernels::Backend* cuda() {
  StatusOr<kernels::Backend*> be = kernels::find_backend("cuda");
  return be.ok() ? *be : nullptr;
}

// ‖got − want‖ / ‖want‖ (Frobenius); where want is all zero, the root mean square of got instead.
inline double relative_distance(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0, n = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = static_cast<double>(got[i]) - want[i];
    e += diff * diff;
    n += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(e / (n > 0 ? n : static_cast<double>(got.size())));
}

}  // namespace lmt::gpu_test

// Skips the current test, with the backend's reason, where no GPU is visible.
#define SKIP_WITHOUT_GPU()                 \
  if (::lmt::gpu_test::cuda() == nullptr) \
  GTEST_SKIP() << ::lmt::kernels::find_backend("cuda").status().ToString()
