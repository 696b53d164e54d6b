#include "lmt/optim/muon.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "lmt/base/check.h"

namespace lmt::optim {
namespace {
// Keller Jordan's quintic coefficients: chosen to push singular values into roughly [0.7, 1.2]
// as fast as possible rather than to converge to exactly 1 (muon.py explains the trade-off).
constexpr float kNsA = 3.4445f, kNsB = -4.7750f, kNsC = 2.0315f;
constexpr double kNormEps = 1e-7;

// Matrix i of a stack t[nb, R, C] (or t itself when it is [R, C]), as an [R, C] view.
TensorView item(const TensorView& t, int64_t i) {
  if (t.rank() == 2) return t;
  const Shape s{t.dim(1), t.dim(2)};
  char* base = static_cast<char*>(t.data()) + static_cast<size_t>(i * s.numel()) * dtype_size(t.dtype());
  return TensorView(base, s, t.dtype(), t.device());
}
}  // namespace

float muon_shape_scale(int64_t rows, int64_t cols) {
  return static_cast<float>(std::sqrt(std::max(1.0, static_cast<double>(rows) / static_cast<double>(cols))));
}

std::optional<NsMethod> parse_ns_method(std::string_view name) {
  if (name == "gram") return NsMethod::kGram;
  if (name == "standard") return NsMethod::kStandard;
  return std::nullopt;
}

NsPrecision ns_precision(std::string_view ns_dtype, const kernels::Backend& b) {
  if (ns_dtype != "bf16") return NsPrecision::kF32;
  return b.native_bf16_gemms() ? NsPrecision::kBF16 : NsPrecision::kF32NoRestart;
}

std::string_view ns_precision_name(NsPrecision p) {
  switch (p) {
    case NsPrecision::kBF16: return "bf16";
    case NsPrecision::kF32: return "fp32";
    case NsPrecision::kF32NoRestart: return "fp32 without Gram restarts";
  }
  return "?";
}

int64_t muon_batch_size(int64_t count, int64_t numel, int64_t max_elements) {
  return std::clamp<int64_t>(max_elements / std::max<int64_t>(numel, 1), 1, std::max<int64_t>(count, 1));
}

MuonUpdater::MuonUpdater(MuonCapacity capacity, NsPrecision precision, NsMethod method, Allocator& allocator)
    : capacity_(capacity),
      precision_(precision),
      method_(method),
      direction_(Shape{capacity.numel}, DType::kF32, allocator),
      product_(Shape{capacity.numel}, DType::kF32, allocator),
      gram_(Shape{capacity.gram}, DType::kF32, allocator),
      poly_(Shape{capacity.gram}, DType::kF32, allocator) {
  LMT_CHECK(capacity.numel > 0 && capacity.gram > 0)
      << "MuonUpdater needs a matrix: " << capacity.numel << ", " << capacity.gram;
  LMT_CHECK(capacity.gram <= capacity.numel) << "MuonUpdater: a Gram matrix larger than its matrix";
  const bool gram = method != NsMethod::kStandard;
  if (gram) {
    q_ = Tensor(Shape{capacity.gram}, DType::kF32, allocator);
    gram_poly_ = Tensor(Shape{capacity.gram}, DType::kF32, allocator);
  }
  if (precision_ == NsPrecision::kBF16) {
    x16_ = Tensor(Shape{capacity.numel}, DType::kBF16, allocator);
    gram16_ = Tensor(Shape{capacity.gram}, DType::kBF16, allocator);
    poly16_ = Tensor(Shape{capacity.gram}, DType::kBF16, allocator);
    if (gram) {
      q16_ = Tensor(Shape{capacity.gram}, DType::kBF16, allocator);
      gram_poly16_ = Tensor(Shape{capacity.gram}, DType::kBF16, allocator);
    }
  }
}

TensorView MuonUpdater::scratch(const Tensor& t, Shape shape) const {
  LMT_CHECK(shape.numel() <= t.numel()) << "Muon scratch of " << t.numel() << " for " << shape.to_string();
  return TensorView(t.view().data(), shape, t.dtype(), t.view().device());
}

bool gram_iteration_pays(int64_t rows, int64_t cols) {
  return std::min(rows, cols) >= kGramMinSide && 2 * std::max(rows, cols) >= 3 * std::min(rows, cols);
}

bool gram_restarts_at(int step, NsPrecision p) {
  return p != NsPrecision::kF32NoRestart && step >= 2 && step % 2 == 0;
}

void MuonUpdater::orthogonalise(kernels::Backend& b, const TensorView& x, int steps) {
  LMT_CHECK((x.rank() == 2 || x.rank() == 3) && x.dtype() == DType::kF32) << "orthogonalise: " << x.to_string();
  const int64_t nb = x.rank() == 3 ? x.dim(0) : 1;
  const int64_t R = x.dim(x.rank() - 2), C = x.dim(x.rank() - 1), side = std::min(R, C);
  LMT_CHECK(nb * R * C <= capacity_.numel && nb * side * side <= capacity_.gram)
      << "orthogonalise: " << x.to_string() << " exceeds the scratch (" << capacity_.numel << ", gram "
      << capacity_.gram << ")";
  LMT_CHECK(x.data() != product_.view().data()) << "orthogonalise: x aliases the product scratch";
  const TensorView X = x.reshape(Shape{nb, R, C});
  for (int64_t i = 0; i < nb; ++i) {
    const TensorView xi = item(X, i);
    b.scale(xi, static_cast<float>(1.0 / (std::sqrt(b.sum_squares(xi)) + kNormEps)));
  }
  if (precision_ == NsPrecision::kBF16) b.convert(scratch(x16_, {nb, R, C}), X);
  if (method_ == NsMethod::kGramEverywhere || (method_ == NsMethod::kGram && gram_iteration_pays(R, C)))
    iterate_gram(b, X, steps);
  else
    iterate_standard(b, X, steps);
}

void MuonUpdater::iterate_standard(kernels::Backend& b, const TensorView& X, int steps) {
  const int64_t nb = X.dim(0), R = X.dim(1), C = X.dim(2), side = std::min(R, C);
  const bool wide = R <= C;  // Gram on the smaller side: XXᵀ for wide, XᵀX for tall
  const bool bf16 = precision_ == NsPrecision::kBF16;
  const TensorView A = scratch(gram_, {nb, side, side}), P = scratch(poly_, {nb, side, side});
  const TensorView Y = scratch(product_, {nb, R, C});
  // The GEMM operands: bf16 copies refreshed by the pass that writes each f32 value, or the f32 values.
  const TensorView X_op = bf16 ? scratch(x16_, {nb, R, C}) : X;
  const TensorView A_op = bf16 ? scratch(gram16_, {nb, side, side}) : A;
  const TensorView P_op = bf16 ? scratch(poly16_, {nb, side, side}) : P;
  const TensorView none;
  for (int k = 0; k < steps; ++k) {
    b.matmul_batched_symmetric(A, X_op, X_op, /*trans_a=*/!wide, /*trans_b=*/wide);
    if (bf16) b.convert(A_op, A);
    b.matmul_batched_symmetric(P, A_op, A_op, false, false);
    b.axpby(P, kNsC, P, kNsB, A, bf16 ? P_op : none);  // bA + cA² (symmetric: multiplies X from either side)
    if (wide)
      b.matmul_batched(Y, P_op, X_op, false, false, false);
    else
      b.matmul_batched(Y, X_op, P_op, false, false, false);
    b.axpby(X, kNsA, X, 1.0f, Y, bf16 && k + 1 < steps ? X_op : none);
  }
}

// Gram form (see muon.h): with P_k = aI + Z_k, Z_k = bG_k + cG_k², X_k = Q_k·X_0 and G_k = X_kX_kᵀ,
// every G_k, Z_k, Q_k is a polynomial of G_0 (they commute), so G_{k+1} = P_k·G_k·P_k and
// Q_{k+1} = P_k·Q_k. Q is held as q·I + Qm (q a scalar, a^k), so no identity matrix is needed.
void MuonUpdater::iterate_gram(kernels::Backend& b, const TensorView& X, int steps) {
  const int64_t nb = X.dim(0), R = X.dim(1), C = X.dim(2), side = std::min(R, C);
  const bool wide = R <= C;
  const bool bf16 = precision_ == NsPrecision::kBF16;
  const Shape square{nb, side, side};
  const TensorView G = scratch(gram_, square), GP = scratch(gram_poly_, square);
  TensorView Z = scratch(poly_, square), Qm = scratch(q_, square);  // swapped when Q = aI + Z
  const TensorView S = scratch(product_, square), Y = scratch(product_, {nb, R, C});  // never live together
  const TensorView X_op = bf16 ? scratch(x16_, {nb, R, C}) : X;
  const TensorView G_op = bf16 ? scratch(gram16_, square) : G, GP_op = bf16 ? scratch(gram_poly16_, square) : GP;
  TensorView Z_op = bf16 ? scratch(poly16_, square) : Z, Q_op = bf16 ? scratch(q16_, square) : Qm;
  const TensorView none;

  const auto gram_of_x = [&] {
    b.matmul_batched_symmetric(G, X_op, X_op, /*trans_a=*/!wide, /*trans_b=*/wide);
    if (bf16) b.convert(G_op, G);
  };
  const auto apply_q = [&](float q, bool refresh_op) {  // X ← q·X + Qm·X (Xᵀ·Qm for tall X)
    if (wide)
      b.matmul_batched(Y, Q_op, X_op, false, false, false);
    else
      b.matmul_batched(Y, X_op, Q_op, false, false, false);
    b.axpby(X, q, X, 1.0f, Y, bf16 && refresh_op ? X_op : none);
  };

  gram_of_x();
  float q = 1.0f;
  bool q_is_identity = true;
  for (int k = 0; k < steps; ++k) {
    if (gram_restarts_at(k, precision_)) {  // fold Q into X, G afresh from X (see muon.h: drift)
      apply_q(q, true);
      gram_of_x();
      q = 1.0f;
      q_is_identity = true;
    }
    b.matmul_batched_symmetric(S, G_op, G_op, false, false);
    b.axpby(Z, kNsC, S, kNsB, G, bf16 ? Z_op : none);  // Z = bG + cG²
    if (!q_is_identity) {  // Q ← aQ + Q·Z: q ← a·q, Qm ← a·Qm + Qm·Z + q·Z (Q = aI + Z below)
      b.matmul_batched_symmetric(S, Q_op, Z_op, false, false);
      b.axpby(Qm, kNsA, Qm, 1.0f, S, none);
      b.axpby(Qm, 1.0f, Qm, q, Z, bf16 ? Q_op : none);
    }
    q *= kNsA;
    if (k + 1 < steps && !gram_restarts_at(k + 1, precision_)) {  // G ← (aI + Z)·G·(aI + Z)
      b.matmul_batched_symmetric(S, G_op, Z_op, false, false);
      b.axpby(GP, kNsA, G, 1.0f, S, bf16 ? GP_op : none);  // GP = G·(aI + Z)
      b.matmul_batched_symmetric(S, Z_op, GP_op, false, false);
      b.axpby(G, kNsA, GP, 1.0f, S, bf16 ? G_op : none);  // G = (aI + Z)·GP
    }
    if (q_is_identity) {  // Q = aI + Z: Qm takes Z's buffers, Z Qm's (rewritten before it is read)
      std::swap(Qm, Z);
      std::swap(Q_op, Z_op);
      q_is_identity = false;
    }
  }
  apply_q(q, false);
}

void MuonUpdater::update(kernels::Backend& b, std::span<const Matrix> batch, const MuonStepParams& p) {
  LMT_CHECK(!batch.empty()) << "Muon: an empty batch";
  const TensorView& first = batch.front().param;
  LMT_CHECK(first.rank() == 2 && first.dtype() == DType::kF32) << "Muon param " << first.to_string();
  const int64_t nb = static_cast<int64_t>(batch.size()), R = first.dim(0), C = first.dim(1);
  for (const Matrix& m : batch)
    LMT_CHECK(m.param.shape() == first.shape() && m.param.dtype() == DType::kF32 && m.grad.shape() == first.shape() &&
              m.momentum.shape() == first.shape())
        << "Muon: param " << m.param.to_string() << ", grad " << m.grad.to_string() << ", momentum "
        << m.momentum.to_string() << " in a batch of " << first.to_string();
  const TensorView direction = scratch(direction_, {nb, R, C});

  for (int64_t i = 0; i < nb; ++i) {
    const Matrix& m = batch[static_cast<size_t>(i)];
    const TensorView d = item(direction, i);
    b.axpby(m.momentum, p.momentum, m.momentum, p.grad_scale, m.grad, TensorView());  // B ← μB + sG
    if (p.nesterov)
      b.axpby(d, p.grad_scale, m.grad, p.momentum, m.momentum, TensorView());  // D ← sG + μB
    else
      b.copy(d, m.momentum);
  }
  orthogonalise(b, direction, p.ns_steps);

  const float decay =
      static_cast<float>(1.0 - static_cast<double>(p.lr) * static_cast<double>(p.weight_decay));
  const float step = -p.lr * muon_shape_scale(R, C);
  for (int64_t i = 0; i < nb; ++i) {
    const Matrix& m = batch[static_cast<size_t>(i)];
    b.axpby(m.param, decay, m.param, step, item(direction, i), m.param_bf16);  // and the bf16 mirror
  }
}

}  // namespace lmt::optim
