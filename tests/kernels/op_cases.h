// The op cases walked by the universal kernel tests (ggml test-backend-ops style).
//
// A case declares the tensors it needs (generated from a seed, so two backends see identical
// inputs), a forward and a backward as lambdas over a Backend, and which tensors are:
//   outputs  forward results that receive a random cotangent named "d<output>" for backward
//   aux      forward results that are compared but not differentiated (mean, rstd, lse, ...)
//   grads    (input, gradient tensor) pairs produced by backward
// op_test.cpp runs every case on the cpu and ref backends and compares every output, aux and grad;
// gradcheck_test.cpp runs every case with a backward in f64 on ref against central differences.
#pragma once

#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "lmt/kernels/backend.h"
#include "lmt/tensor/tensor.h"

namespace lmt::testing {

enum class Gen {
  kNormal,     // N(0, scale²)
  kPositive,   // 0.5 + U(0,1): norm weights and the like
  kZero,       // outputs and accumulated gradients
  kIds,        // i32 uniform in [0, hi)
  kTargets,    // i32 in [0, hi), ~10% equal to -100 (ignore_index)
  kPositions,  // i32: t within each row of length `hi` (B*T rows flattened)
  kDocIds,     // i32 [B,T]: contiguous runs of random length, including length-1 documents
};

struct TensorSpec {
  std::string name;
  Shape shape;
  Gen gen = Gen::kNormal;
  double scale = 1.0;
  int64_t hi = 0;
  bool gemm_input = false;  // stored as bf16 when the case runs in bf16 mode
  bool bf16_always = false;  // always stored as bf16 (e.g. the optimizer's bf16 weight mirror)
};

class Env {
 public:
  TensorView operator[](const std::string& name) const;
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  std::map<std::string, Tensor>& tensors() { return tensors_; }

 private:
  std::map<std::string, Tensor> tensors_;
};

struct OpCase {
  std::string name;
  std::vector<TensorSpec> specs;
  std::vector<std::string> outputs, aux;
  std::vector<std::pair<std::string, std::string>> grads;
  std::function<void(kernels::Backend&, Env&)> forward;
  std::function<void(kernels::Backend&, Env&)> backward;  // empty when the op has none
  bool bf16 = false;           // gemm_input tensors are bf16 in the cpu-vs-ref comparison
  double tolerance_scale = 1;  // multiplies the dtype's atol and rtol
  bool gradcheck = true;       // run the finite-difference check of the ref backward
  // The scalar whose gradient backward computes; default Σ_o <output_o, d<output_o>>.
  std::function<double(const Env&)> objective;
};

// gtest prints a parameter with this (the case name) instead of its bytes.
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

// Every case; float tensors use `float_dtype` (f32 for cpu vs ref, f64 for gradient checks).
std::vector<OpCase> all_op_cases();

// Builds the tensors of `c` with the given float dtype (bf16 for gemm inputs of bf16 cases unless
// float_dtype is f64). Deterministic in `seed`.
Env make_env(const OpCase& c, DType float_dtype, uint64_t seed);

}  // namespace lmt::testing
