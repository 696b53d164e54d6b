// Muon's update of one 2-D matrix: momentum, Newton–Schulz orthogonalisation, scaled step.
//
// Reference: Keller Jordan, "Muon: An optimizer for hidden layers in neural networks" (2024),
// https://github.com/KellerJordan/Muon (muon.py). For a matrix W[R,C] with gradient G:
//   G ← grad_scale · G
//   B ← μ·B + G                                  (momentum buffer, the "sum" form)
//   D ← G + μ·B (Nesterov) or B
//   O ← NS_k(D / (‖D‖_F + 1e-7))                 (quintic Newton–Schulz, k = ns_steps)
//   W ← (1 − lr·wd)·W − lr·max(1, R/C)^½·O
// NS_k iterates X ← aX + (bA + cA²)X with A = XXᵀ and (a, b, c) = (3.4445, −4.7750, 2.0315); when
// R > C it iterates the equivalent X ← aX + X(bA + cA²) with A = XᵀX, so the Gram matrices are
// min(R,C)² as in the reference's transposed form, without materialising a transpose. Everything is
// f32 through Backend ops (matmul, scale, add, convert, sum_squares), so it runs on any backend.
//
// Shapes: param, grad, momentum f32[R,C]; param_bf16 bf16[R,C] or absent.
// Ownership: a MuonUpdater owns its scratch, sized once for the largest matrix it will see.
// Threading: one thread at a time (the scratch is shared between calls).
#pragma once

#include <cstdint>

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

class MuonUpdater {
 public:
  // Scratch for matrices of at most max_numel elements whose smaller side is at most max_side.
  MuonUpdater(int64_t max_numel, int64_t max_side);

  // One Muon step of one matrix (formulas above); updates param, momentum and the mirror in place.
  void update(kernels::Backend& b, const TensorView& param, const TensorView& grad, const TensorView& momentum,
              const TensorView& param_bf16, const MuonStepParams& p);

  // x[R,C] f32 ← NS_steps(x / (‖x‖_F + 1e-7)) in place. x must not be this updater's scratch
  // other than the direction buffer update() passes.
  void orthogonalise(kernels::Backend& b, const TensorView& x, int steps);

 private:
  TensorView scratch(const Tensor& t, int64_t rows, int64_t cols) const;

  int64_t max_numel_, max_side_;
  Tensor direction_, product_;  // f32[max_numel]: D (then X) and the B·X product / μ·B
  Tensor gram_, poly_;          // f32[max_side²]: A and bA + cA²
};

}  // namespace lmt::optim
