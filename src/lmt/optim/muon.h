// Muon's update of 2-D matrices: momentum, Newton–Schulz orthogonalisation, scaled step.
//
// Reference: Keller Jordan, "Muon: An optimizer for hidden layers in neural networks" (2024),
// https://github.com/KellerJordan/Muon (muon.py). For a matrix W[R,C] with gradient G:
//   B ← μ·B + grad_scale·G                       (momentum buffer, the "sum" form)
//   D ← grad_scale·G + μ·B (Nesterov) or B
//   O ← NS_k(D / (‖D‖_F + 1e-7))                 (quintic Newton–Schulz, k = ns_steps)
//   W ← (1 − lr·wd)·W − lr·max(1, R/C)^½·O
// NS_k iterates X ← aX + (bA + cA²)X with A = XXᵀ and (a, b, c) = (3.4445, −4.7750, 2.0315); when
// R > C it iterates the equivalent X ← aX + X(bA + cA²) with A = XᵀX, so the Gram matrices are
// min(R,C)² as in the reference's transposed form, without materialising a transpose.
//
// Precision (ns_dtype): kBF16 runs the three GEMMs of each iteration on bf16 operands with f32
// accumulation (muon.py runs the whole iteration in bf16; here X, A and bA + cA² stay f32 between
// GEMMs and only the GEMM operands are rounded, so it is at least as exact). kF32 is the same
// iteration on f32 operands (the exact reference the tests compare with).
//
// Batching: update() takes several matrices of one shape at once and runs each Newton–Schulz GEMM
// as one Backend::matmul_batched over all of them; the small elementwise parts are fused
// (Backend::axpby: momentum, direction, each iteration's combination with its bf16 copy, and the
// weight update with the bf16 mirror). A matrix's result does not depend on the batch it is in
// (matmul_batched's contract), so a ZeRO shard, which batches a subset, stays bit-identical.
//
// Shapes: param, grad, momentum f32[R,C]; param_bf16 bf16[R,C] or absent.
// Ownership: a MuonUpdater owns its scratch, sized once for the largest batch it will see.
// Threading: one thread at a time (the scratch is shared between calls).
#pragma once

#include <cstdint>
#include <span>

#include "lmt/kernels/backend.h"
#include "lmt/tensor/tensor.h"

namespace lmt::optim {

struct MuonStepParams {
  float lr = 0.02f;        // muon_lr · lr_mult
  float momentum = 0.95f;  // μ
  bool nesterov = true;
  int ns_steps = 5;
  float weight_decay = 0.0f;  // decoupled: W ← (1 − lr·wd)·W
  float grad_scale = 1.0f;
};

// The reference's shape factor max(1, rows/cols)^½ (rows = output features of an [out, in] weight):
// it keeps the update's RMS per element comparable across aspect ratios.
float muon_shape_scale(int64_t rows, int64_t cols);

// How many of `count` matrices of `numel` elements one batch takes: all of them, capped so that a
// batch's f32 scratch stays near kMuonBatchElements elements (at least one matrix).
inline constexpr int64_t kMuonBatchElements = int64_t{1} << 25;
int64_t muon_batch_size(int64_t count, int64_t numel);

// Scratch a MuonUpdater needs for its largest batch: Σ R·C and Σ min(R,C)² over the batch.
struct MuonCapacity {
  int64_t numel = 0, gram = 0;
};

class MuonUpdater {
 public:
  struct Matrix {  // one matrix's tensors (see Shapes above)
    TensorView param, grad, momentum, param_bf16;
  };

  // Scratch for one matrix of at most max_numel elements whose smaller side is at most max_side,
  // Newton–Schulz in f32 (the original single-matrix form).
  MuonUpdater(int64_t max_numel, int64_t max_side) : MuonUpdater({max_numel, max_side * max_side}, DType::kF32) {}
  // Scratch for batches within `capacity`; ns_dtype kBF16 or kF32 (GEMM operands, see above).
  // Scratch comes from `allocator` (the backend's: the host, or the GPU the update runs on).
  MuonUpdater(MuonCapacity capacity, DType ns_dtype, Allocator& allocator = host_allocator());

  // One Muon step of each matrix (formulas above), all of one shape [R,C], within the capacity;
  // updates params, momenta and mirrors in place. Gradients are not modified.
  void update(kernels::Backend& b, std::span<const Matrix> batch, const MuonStepParams& p);
  void update(kernels::Backend& b, const TensorView& param, const TensorView& grad, const TensorView& momentum,
              const TensorView& param_bf16, const MuonStepParams& p) {
    const Matrix m{param, grad, momentum, param_bf16};
    update(b, std::span<const Matrix>(&m, 1), p);
  }

  // x f32[R,C] or f32[nb,R,C] (nb matrices): each ← NS_steps(x / (‖x‖_F + 1e-7)) in place. x must
  // not be this updater's scratch other than the direction buffer update() passes.
  void orthogonalise(kernels::Backend& b, const TensorView& x, int steps);

  DType ns_dtype() const { return ns_dtype_; }

 private:
  TensorView scratch(const Tensor& t, Shape shape) const;

  MuonCapacity capacity_;
  DType ns_dtype_;
  Tensor direction_, product_;  // f32[capacity.numel]: D (then X) and the (bA + cA²)·X product
  Tensor gram_, poly_;          // f32[capacity.gram]: A and bA + cA²
  Tensor x16_, gram16_, poly16_;  // bf16 GEMM operands (kBF16 only): X, A, bA + cA²
};

}  // namespace lmt::optim
