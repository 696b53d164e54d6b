// Transformer: the vocabulary-parallel ends of a tensor-parallel part (model/tensor_parallel.h): the
// token embedding of this rank's vocabulary rows and the loss's combine over the group. Backend ops
// and the group's collectives only, so they run where the backend computes (host or device).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "lmt/base/check.h"
#include "lmt/model/block.h"
#include "lmt/model/host_access.h"
#include "lmt/model/transformer.h"

namespace lmt::model {

// The batch's tokens of this rank's rows are gathered from its table into the scratch dh (free
// during the forward) and placed at their positions in zeroed rows: a scatter-add of distinct rows
// into zeros, so every row is its table row exactly (as the other ranks' zeros are in the sum).
void Transformer::vocab_parallel_embedding_forward(const int32_t* tokens) {
  const int64_t N = plan_.B * plan_.T;
  const bool sp = sequence_parallel(tensor_parallel());
  Scratch& s = plan_.scratch;
  const TensorView out = sp ? s.f32_nc : plan_.residual[0];  // all N rows
  LMT_CHECK(out.dtype() == DType::kF32 && w_.embed.dtype() == DType::kF32) << "vocabulary-parallel embedding in f32";
  vp_rows_.clear();
  vp_at_.clear();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = static_cast<int64_t>(tokens[n]) - vocab_.begin;
    if (t < 0 || t >= vocab_.rows) continue;
    vp_rows_.push_back(static_cast<int32_t>(t));
    vp_at_.push_back(static_cast<int32_t>(n));
  }
  const int64_t M = static_cast<int64_t>(vp_rows_.size());
  if (!backend_.device().is_host() && dev_vp_rows_.numel() != N) {
    dev_vp_rows_ = Tensor({N}, DType::kI32, backend_.allocator());
    dev_vp_at_ = Tensor({N}, DType::kI32, backend_.allocator());
  }
  backend_.fill(out, 0.0);
  vp_rows_view_ = vp_at_view_ = TensorView();
  if (M > 0) {
    vp_rows_view_ = device_ints(vp_rows_.data(), Shape{M}, dev_vp_rows_);
    vp_at_view_ = device_ints(vp_at_.data(), Shape{M}, dev_vp_at_);
    const TensorView rows = s.dh.slice_rows(0, M);
    backend_.embedding_forward(rows, vp_rows_view_, w_.embed, false);
    backend_.moe_scatter_add_rows(out, rows, vp_at_view_);
  }
  if (sp) sequence_reduce_scatter(tensor_parallel(), out, plan_.residual[0], "the token embedding");
  else tensor_parallel_sum(tensor_parallel(), out, "the token embedding");
}

// d of the embedding at this rank's tokens, gathered into dh (free once every block's backward has
// run), is added to their table rows in batch order, as a whole table's backward adds them.
void Transformer::vocab_parallel_embedding_backward() {
  Scratch& s = plan_.scratch;
  const bool sp = sequence_parallel(tensor_parallel());
  if (sp) sequence_gather(backend_, tensor_parallel(), s.dres, s.dres_full, "d of the embedding");
  const int64_t M = static_cast<int64_t>(vp_rows_.size());
  if (M == 0) return;
  const TensorView rows = s.dh.slice_rows(0, M);
  backend_.moe_gather_rows(rows, sp ? s.dres_full : s.dres, vp_at_view_);
  backend_.embedding_backward(gw_.embed, rows, vp_rows_view_);
}

// On the host (a device backend's rows are copied out and back: [rows] floats per loss chunk):
// every rank's lse gathered, the target logits summed (one rank holds each target), and per row
// log Σ_k exp(lse_k), shifted by the largest, in f64.
void Transformer::combine_vocab_parallel(const TensorView& lse_view, const TensorView& target_logit_view) {
  const int P = tp_.size;
  const int64_t rows = lse_view.numel();
  HostEdit<float> lse(backend_, lse_view), target_logit(backend_, target_logit_view);
  tp_lse_.resize(static_cast<size_t>(P * rows));
  std::memcpy(tp_lse_.data() + tp_.rank * rows, lse.data(), static_cast<size_t>(rows) * sizeof(float));
  Status s = tp_.all_gather(TensorView(tp_lse_.data(), Shape{P, rows}, DType::kF32));
  if (s.ok()) s = tp_.all_reduce(TensorView(target_logit.data(), Shape{rows}, DType::kF32));
  LMT_CHECK(s.ok()) << "tensor-parallel rank " << tp_.rank << " of " << P << ": combining the loss: " << s.ToString();
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY;
    for (int k = 0; k < P; ++k) mx = std::max(mx, static_cast<double>(tp_lse_[static_cast<size_t>(k * rows + r)]));
    double sum = 0;
    for (int k = 0; k < P; ++k) sum += std::exp(static_cast<double>(tp_lse_[static_cast<size_t>(k * rows + r)]) - mx);
    lse.data()[r] = static_cast<float>(mx + std::log(sum));
  }
  lse.store();
  target_logit.store();
}

}  // namespace lmt::model
