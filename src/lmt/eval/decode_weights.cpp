// DecodeWeights: master views plus the GEMM views in the decode dtype (see decode_weights.h).
#include "lmt/eval/decode_weights.h"

#include "lmt/base/check.h"

namespace lmt::eval {

DecodeWeights::DecodeWeights(model::Transformer& model, DType weights)
    : dtype_(weights), master_(model.param_views()), V_(model.config().vocab_size) {
  LMT_CHECK(model.master() == DType::kF32) << "decoding computes from an f32 master";
  LMT_CHECK(weights == DType::kF32 || weights == DType::kBF16) << "decode weights must be f32 or bf16, not " << dtype_name(weights);
  if (weights == DType::kF32) {
    gemm_ = master_;
    return;
  }
  const TensorView mirror = model.compute_mirror();
  if (mirror.present() && mirror.dtype() == DType::kBF16) {
    gemm_ = model.layout().views(mirror.data(), DType::kBF16, mirror.device());
    return;
  }
  copy_ = Tensor({model.layout().total_numel()}, DType::kBF16, model.backend().allocator());
  model.backend().convert(copy_.view(), model.params());
  gemm_ = model.layout().views(copy_.view().data(), DType::kBF16, copy_.device());
}

int64_t DecodeWeights::bytes_per_token() const {
  int64_t bytes = 0;
  auto add = [&](const TensorView& t) {
    if (t.present()) bytes += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
  };
  for (const model::BlockViews& b : gemm_.blocks)
    for (const TensorView* t : {&b.q_w, &b.k_w, &b.v_w, &b.o_w, &b.up_w, &b.down_w}) add(*t);
  add(gemm_.lm_head.slice_rows(0, V_));
  const int64_t C = master_.embed.dim(1);
  bytes += C * static_cast<int64_t>(dtype_size(master_.embed.dtype())) * (master_.pos_embed.present() ? 2 : 1);
  return bytes;
}

}  // namespace lmt::eval
