#include "lmt/optim/muon.h"

#include <algorithm>
#include <cmath>

#include "lmt/base/check.h"

namespace lmt::optim {
namespace {
// Keller Jordan's quintic coefficients: chosen to push singular values into roughly [0.7, 1.2]
// as fast as possible rather than to converge to exactly 1 (muon.py explains the trade-off).
constexpr float kNsA = 3.4445f, kNsB = -4.7750f, kNsC = 2.0315f;
constexpr double kNormEps = 1e-7;
}  // namespace

float muon_shape_scale(int64_t rows, int64_t cols) {
  return static_cast<float>(std::sqrt(std::max(1.0, static_cast<double>(rows) / static_cast<double>(cols))));
}

MuonUpdater::MuonUpdater(int64_t max_numel, int64_t max_side)
    : max_numel_(max_numel),
      max_side_(max_side),
      direction_(Shape{max_numel}, DType::kF32),
      product_(Shape{max_numel}, DType::kF32),
      gram_(Shape{max_side * max_side}, DType::kF32),
      poly_(Shape{max_side * max_side}, DType::kF32) {
  LMT_CHECK(max_numel > 0 && max_side > 0) << "MuonUpdater needs a matrix: " << max_numel << ", " << max_side;
}

TensorView MuonUpdater::scratch(const Tensor& t, int64_t rows, int64_t cols) const {
  LMT_CHECK(rows * cols <= t.numel()) << "Muon scratch of " << t.numel() << " for [" << rows << "," << cols << "]";
  return TensorView(t.view().data(), Shape{rows, cols}, DType::kF32, t.view().device());
}

void MuonUpdater::orthogonalise(kernels::Backend& b, const TensorView& x, int steps) {
  LMT_CHECK(x.rank() == 2 && x.dtype() == DType::kF32) << "orthogonalise: " << x.to_string();
  const int64_t R = x.dim(0), C = x.dim(1), side = std::min(R, C);
  LMT_CHECK(R * C <= max_numel_ && side <= max_side_)
      << "orthogonalise: " << x.to_string() << " exceeds the scratch (" << max_numel_ << ", side " << max_side_ << ")";
  LMT_CHECK(x.data() != product_.view().data()) << "orthogonalise: x aliases the product scratch";
  const bool wide = R <= C;  // Gram on the smaller side: XXᵀ for wide, XᵀX for tall
  const TensorView gram = scratch(gram_, side, side), poly = scratch(poly_, side, side);
  const TensorView product = scratch(product_, R, C);

  const double norm = std::sqrt(b.sum_squares(x));
  b.scale(x, static_cast<float>(1.0 / (norm + kNormEps)));
  for (int k = 0; k < steps; ++k) {
    b.matmul(gram, x, x, /*trans_a=*/!wide, /*trans_b=*/wide, false);
    b.matmul(poly, gram, gram, false, false, false);
    b.scale(poly, kNsC);
    b.scale(gram, kNsB);
    b.add(poly, poly, gram);  // bA + cA² (symmetric, so it may multiply X from either side)
    if (wide)
      b.matmul(product, poly, x, false, false, false);
    else
      b.matmul(product, x, poly, false, false, false);
    b.scale(x, kNsA);
    b.add(x, x, product);
  }
}

void MuonUpdater::update(kernels::Backend& b, const TensorView& param, const TensorView& grad,
                         const TensorView& momentum, const TensorView& param_bf16, const MuonStepParams& p) {
  LMT_CHECK(param.rank() == 2 && param.dtype() == DType::kF32) << "Muon param " << param.to_string();
  LMT_CHECK(grad.shape() == param.shape() && momentum.shape() == param.shape())
      << "Muon: param " << param.to_string() << ", grad " << grad.to_string() << ", momentum " << momentum.to_string();
  const int64_t R = param.dim(0), C = param.dim(1);
  const TensorView direction = scratch(direction_, R, C), product = scratch(product_, R, C);

  b.convert(direction, grad);  // a copy: the caller's gradients stay untouched
  if (p.grad_scale != 1.0f) b.scale(direction, p.grad_scale);
  b.scale(momentum, p.momentum);
  b.add(momentum, momentum, direction);
  if (p.nesterov) {
    b.convert(product, momentum);
    b.scale(product, p.momentum);
    b.add(direction, direction, product);
  } else {
    b.convert(direction, momentum);
  }
  orthogonalise(b, direction, p.ns_steps);

  b.scale(direction, -p.lr * muon_shape_scale(R, C));
  if (p.weight_decay != 0.0f)
    b.scale(param, static_cast<float>(1.0 - static_cast<double>(p.lr) * static_cast<double>(p.weight_decay)));
  b.add(param, param, direction);
  if (param_bf16.present()) b.convert(param_bf16, param);
}

}  // namespace lmt::optim
