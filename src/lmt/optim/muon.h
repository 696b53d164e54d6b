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
// Method (NsMethod): kStandard is the iteration above. kGram (the default; after Zhang, Amsel, Chen
// and Dao, "Gram Newton-Schulz", 2026) is the same polynomial iterated on the m×m Gram matrix
// (m = min(R,C), n = max(R,C)): G = XXᵀ, Z = bG + cG², Q ← (aI + Z)·Q, G ← (aI + Z)·G·(aI + Z),
// touching X only to form G and at the end (X ← Q·X). Every m×m product is symmetric (polynomials
// of G commute), so all run as Backend::matmul_batched_symmetric, as do the standard iteration's
// A = XXᵀ and A². The Gram form restarts before iterations 2, 4, 6, ... (X ← Q·X, G recomputed;
// not at kF32NoRestart, below):
// between restarts G is only carried by the polynomial, and G's rounding, relative to its largest
// eigenvalues, is large for the small ones that the polynomial amplifies ~a ≈ 3.4× per step. With
// bf16 operands and a restart every third iteration the result was 3× further from the f32
// iteration than the standard bf16 one at 768 x 2304; every second, 1.2× (tests/optim/muon_test.cpp
// measures it). GEMM work in units of m³ multiply-adds for 5 steps, r = n/m, s ≈ 5/8 the symmetric
// product's share: standard 5·((1+s)·r + s), Gram 11·s + 3·(1+s)·r. So Gram runs where it pays,
// n ≥ 1.5·m, and only from m = kGramMinSide (below it the iteration costs little and the Gram
// form's rounding weighs more: 2× the standard's distance at m = 64); other matrices keep the
// standard iteration. GPT-2 small's 768 x 2304 and 768 x 3072 matrices: 21.5 and 26.4 units against
// 27.5 and 35.6 standard (35 and 45 before the symmetric products). kGramEverywhere (tests) takes
// the Gram form for every shape.
//
// Precision (NsPrecision): kBF16 runs the three GEMMs of each iteration on bf16 operands with f32
// accumulation (muon.py runs the whole iteration in bf16; here X, A and bA + cA² stay f32 between
// GEMMs and only the GEMM operands are rounded, so it is at least as exact). kF32 is the same
// iteration on f32 operands (the exact reference the tests compare with). kF32NoRestart is kF32
// whose Gram form never restarts: f32 rounding of G is 2^16× smaller than bf16's, so G carried
// through all steps stays within 2.2e-4 of the standard f32 iteration (a low-rank + noise 768 × 256
// case; ~1e-5 for Gaussian matrices), 4.5–3000× closer than kBF16, in 17·s + (1+s)·r units: 15.5
// and 17.1 for GPT-2 small's rectangular matrices. optim.muon_ns_dtype = "bf16" runs it where the
// backend has no native bf16 GEMMs (ns_precision()): bf16 operands would be widened to f32 there.
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
#include <optional>
#include <span>
#include <string_view>

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
// batch's f32 scratch stays near max_elements elements (at least one matrix).
// - On a GPU, kMuonBatchElements (2^23): big batched GEMMs; on gpt2-124m's Muon step 2^23 ran as fast
//   as 2^25 (batches of 4 and 3 instead of 12), with 200 MiB less memory.
// - On the host, kMuonBatchElementsHost (2^21): one matrix at a time for gpt2-124m's rectangular
//   shapes, three for its 768 × 768, so that a batch's operands and products stay in the last-level
//   cache; gpt2-124m's Muon step −6.8% against 2^23 (Zen 5, 32 MiB L3, `lmtrain bench optim`,
//   docs/PERFORMANCE.md).
int64_t muon_batch_size(int64_t count, int64_t numel, int64_t max_elements);
inline constexpr int64_t kMuonBatchElements = int64_t{1} << 23;
inline constexpr int64_t kMuonBatchElementsHost = int64_t{1} << 21;

enum class NsMethod { kStandard, kGram, kGramEverywhere };
enum class NsPrecision { kBF16, kF32, kF32NoRestart };
// The precision optim.muon_ns_dtype ("bf16" or "fp32") asks for, on `b`: "bf16" is kBF16 where b
// has native bf16 GEMMs, else kF32NoRestart (faster there, and more exact); "fp32" is kF32.
NsPrecision ns_precision(std::string_view ns_dtype, const kernels::Backend& b);
// "bf16", "fp32", "fp32 without Gram restarts" (logs and benchmarks).
std::string_view ns_precision_name(NsPrecision p);
inline constexpr int64_t kGramMinSide = 256;
// "standard" or "gram" (optim.muon_ns_method); nullopt for anything else.
std::optional<NsMethod> parse_ns_method(std::string_view name);
// Whether kGram iterates a [rows, cols] matrix in Gram form: the short side at least kGramMinSide
// and the long side at least 1.5× the short.
bool gram_iteration_pays(int64_t rows, int64_t cols);
// Whether the Gram form at precision p restarts before iteration `step`: 2, 4, 6, ... (never with
// kF32NoRestart).
bool gram_restarts_at(int step, NsPrecision p);

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
  MuonUpdater(int64_t max_numel, int64_t max_side, NsMethod method = NsMethod::kGram)
      : MuonUpdater({max_numel, max_side * max_side}, NsPrecision::kF32, method) {}
  // Scratch for batches within `capacity`, at `precision` (see above). Scratch comes from
  // `allocator` (the backend's: the host, or the GPU the update runs on).
  MuonUpdater(MuonCapacity capacity, NsPrecision precision, NsMethod method = NsMethod::kGram,
              Allocator& allocator = host_allocator());

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

  DType ns_dtype() const {  // the GEMM operands' dtype
    return precision_ == NsPrecision::kBF16 ? DType::kBF16 : DType::kF32;
  }
  NsPrecision precision() const { return precision_; }
  NsMethod method() const { return method_; }

 private:
  TensorView scratch(const Tensor& t, Shape shape) const;
  // X f32[nb,R,C], normalised, its bf16 copy in x16_ when ns_dtype is kBF16: `steps` iterations.
  void iterate_standard(kernels::Backend& b, const TensorView& X, int steps);
  void iterate_gram(kernels::Backend& b, const TensorView& X, int steps);

  MuonCapacity capacity_;
  NsPrecision precision_;
  NsMethod method_;
  Tensor direction_, product_;  // f32[capacity.numel]: D (then X) and the products (·X, or m×m for kGram)
  Tensor gram_, poly_;          // f32[capacity.gram]: A = G and bA + cA² = Z
  Tensor q_, gram_poly_;        // f32[capacity.gram] (kGram only): Q's matrix part and G·(aI + Z)
  Tensor x16_, gram16_, poly16_, q16_, gram_poly16_;  // bf16 GEMM operands (kBF16 only) of the above
};

}  // namespace lmt::optim
