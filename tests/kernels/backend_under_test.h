// For a test source built once per backend (a compile definition names the registry entry, e.g.
// bf16_outputs_test for "cpu" and cuda_bf16_outputs_test for "cuda"): the backend, or nullptr where
// it is not usable here (no GPU visible, backend not linked), and a skip that says why.
#pragma once

#include <gtest/gtest.h>

#include <string_view>

#include "lmt/kernels/registry.h"

namespace lmt::testing {

inline kernels::Backend* backend_or_null(std::string_view name) {
  StatusOr<kernels::Backend*> be = kernels::find_backend(name);
  return be.ok() ? *be : nullptr;
}

}  // namespace lmt::testing

// Skips the current test, with the registry's reason, unless backend `name` is usable.
#define LMT_SKIP_WITHOUT_BACKEND(name)                        \
  if (::lmt::testing::backend_or_null(name) == nullptr)       \
  GTEST_SKIP() << ::lmt::kernels::find_backend(name).status().ToString()
