// The compute dtype a user names: "bf16" (bf16 matmul inputs, fp32 master weights, optimizer state
// and accumulation) or "fp32" ("f32" is accepted as a spelling of fp32). Every flag (--dtype) and
// config key (train.dtype) that takes one parses it here, so they accept the same names and fail
// with the same message. Header-only: it is a few comparisons.
#pragma once

#include <string>
#include <string_view>

#include "lmt/base/status.h"
#include "lmt/tensor/dtype.h"

namespace lmt {

// `value` as a compute dtype. `where` names the flag or key it came from ("--dtype", "train.dtype");
// the error names it and the value, and its hint lists the valid names.
inline StatusOr<DType> parse_compute_dtype(std::string_view value, std::string_view where) {
  if (value == "bf16") return DType::kBF16;
  if (value == "fp32" || value == "f32") return DType::kF32;
  return InvalidArgument(std::string(where) + " '" + std::string(value) + "' is not a compute dtype",
                         "use bf16 (bf16 compute, fp32 master weights and optimizer state) or fp32");
}

// The name parse_compute_dtype reads back: "bf16" or "fp32" (other dtypes: dtype_name).
constexpr std::string_view compute_dtype_name(DType t) { return t == DType::kBF16 ? "bf16" : t == DType::kF32 ? "fp32" : dtype_name(t); }

}  // namespace lmt
