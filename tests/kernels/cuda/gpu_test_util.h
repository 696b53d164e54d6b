// What the GPU tests of tests/kernels/cuda share: the cuda backend (or null where no GPU is visible,
// with SKIP_WITHOUT_GPU() skipping the test and saying why) and the relative distance their
// precision bounds are written in (op_compare.h).
#pragma once

#include "../backend_under_test.h"
#include "../op_compare.h"

namespace lmt::gpu_test {

// The registered cuda backend, or nullptr where it is not built or no GPU is visible.
inline kernels::Backend* cuda() { return testing::backend_or_null("cuda"); }

using testing::relative_distance;  // op_compare.h

}  // namespace lmt::gpu_test

// Skips the current test, with the backend's reason, where no GPU is visible.
#define SKIP_WITHOUT_GPU() LMT_SKIP_WITHOUT_BACKEND("cuda")
