// One transformer block for training: the attention sub-block, then the FFN sub-block, on the
// residual stream (block.h). The math lives in attention_block.cpp and ffn_block.cpp, which the
// decoder (eval/decode.cpp) calls too; here the Transformer only hands them its views.
#include "lmt/base/trace.h"
#include "lmt/model/attention_block.h"
#include "lmt/model/ffn_block.h"
#include "lmt/kernels/moe_routing.h"
#include "lmt/model/moe_block.h"
#include "lmt/model/norm.h"
#include "lmt/model/transformer.h"

namespace lmt::model {

TensorView gemm_input(kernels::Backend& be, const TensorView& buffer, const TensorView& g) {
  if (!buffer.present()) return g;
  TensorView c(buffer.data(), g.shape(), buffer.dtype(), buffer.device());
  be.convert(c, g);
  return c;
}

TensorView row_parallel_bias(const TensorParallel* tp, const TensorView& bias) {
  return tp != nullptr && tp->rank != 0 ? TensorView() : bias;
}

void tensor_parallel_sum(const TensorParallel* tp, const TensorView& x, const char* what) {
  if (tp == nullptr || !tp->enabled()) return;
  const Status s = tp->all_reduce(x);
  LMT_CHECK(s.ok()) << "tensor-parallel rank " << tp->rank << " of " << tp->size << ": summing " << what << ": "
                    << s.ToString();
}

void sequence_gather(kernels::Backend& be, const TensorParallel* tp, const TensorView& part, const TensorView& full,
                     const char* what) {
  const int64_t n = part.dim(0);
  LMT_CHECK(full.dim(0) == n * tp->size && full.dtype() == DType::kF32 && part.dtype() == DType::kF32)
      << "sequence gather of " << what << ": " << part.to_string() << " into " << full.to_string();
  be.copy(full.slice_rows(tp->rank * n, (tp->rank + 1) * n), part);
  const Status s = tp->all_gather(full.reshape({tp->size, full.numel() / tp->size}));
  LMT_CHECK(s.ok()) << "tensor-parallel rank " << tp->rank << " of " << tp->size << ": gathering " << what << ": "
                    << s.ToString();
}

void sequence_reduce_scatter(const TensorParallel* tp, const TensorView& full, const TensorView& part, const char* what) {
  const Status s = tp->reduce_scatter(full, part);
  LMT_CHECK(s.ok()) << "tensor-parallel rank " << tp->rank << " of " << tp->size << ": reduce-scattering " << what
                    << ": " << s.ToString();
}

void norm_all_rows(kernels::Backend& be, const ModelConfig& c, const TensorParallel* tp, const TensorView& out,
                   const TensorView& mean, const TensorView& rstd, const Residual& res, const TensorView& w,
                   const TensorView& b, const TensorView& seq_nc, const TensorView& f32_full, const char* what) {
  if (!sequence_parallel(tp)) {
    norm_forward(be, c, out, mean, rstd, res, w, b);
    return;
  }
  norm_forward(be, c, seq_nc, mean, rstd, res, w, b);  // this rank's rows, then everyone's
  if (out.dtype() != DType::kBF16) {
    sequence_gather(be, tp, seq_nc, out, what);
    return;
  }
  sequence_gather(be, tp, seq_nc, f32_full, what);
  be.convert(out, f32_full);
}

Residual row_parallel_output(kernels::Backend& be, const TensorParallel* tp, const TensorView& res_out,
                             const TensorView& res_in, const TensorView& partial, const TensorView& seq_nc,
                             const char* what) {
  if (sequence_parallel(tp)) {  // this rank's rows of the sum
    sequence_reduce_scatter(tp, partial, seq_nc, what);
    be.add(res_out, res_in, seq_nc);
    return res_out;
  }
  tensor_parallel_sum(tp, partial, what);
  return Residual(res_out, res_in, partial);
}

TensorView column_parallel_input_grad(const TensorParallel* tp, const TensorView& dh, const TensorView& seq_nc,
                                      const char* what) {
  if (!sequence_parallel(tp)) {
    tensor_parallel_sum(tp, dh, what);
    return dh;
  }
  sequence_reduce_scatter(tp, dh, seq_nc, what);
  return seq_nc;
}

Residual Transformer::forward_block(int64_t l, BlockActs& a, const Residual& in) {
  const BlockPass pass{plan_.options.compute, plan_.attention, plan_.scratch.positions, doc_ids_, plan_.scratch.seq_nc};
  Scratch& s = plan_.scratch;
  Residual mid = [&] {
    LMT_TRACE_SCOPE("attention");
    return AttentionBlock(backend_, config(), l, tensor_parallel())
        .forward(a.res_mid, in, AttentionWeights::of(w_.blocks[l], wc_.blocks[l]), a.attn, pass, s.f32_nc);
  }();
  LMT_TRACE_SCOPE("mlp");
  if (config().moe.is_moe_layer(l)) {
    materialize(backend_, mid);  // the MoE block's norm reads a written stream
    const MoeConfig& m = config().moe;
    const int64_t capacity = train_pass_ ? kernels::moe_capacity(m.capacity_factor, plan_.B * plan_.T, m.top_k,
                                                                 m.num_experts)
                                         : 0;
    // Expert parallelism exchanges in training passes, and in every pass when this model holds
    // only its rank's experts (moe.local_experts).
    const bool exchange = train_pass_ || m.experts_sharded();
    const MoeStats st = MoeBlock(backend_, config(), exchange ? &ep_ : nullptr, tensor_parallel())
                            .forward(plan_.residual[l + 1], a.res_mid, MoeWeights::of(w_.blocks[l], wc_.blocks[l]),
                                     a.moe, pass.compute, selection_bias(l), capacity, s.f32_nc, s.moe.f32_wide, &s.moe,
                                     s.seq_nc);
    if (train_pass_ && !recomputing_) moe_stats_[l].add(st);
    return plan_.residual[l + 1];
  }
  return FfnBlock(backend_, config(), tensor_parallel())
      .forward(plan_.residual[l + 1], mid, FfnWeights::of(w_.blocks[l], wc_.blocks[l]), a.ffn, s.f32_nc, s.seq_nc);
}

// s.dres holds d res_out on entry (from the next block or the final norm) and d res_in on exit.
// With the layer's written_block_grads stale (zero_grads), the sub-blocks write them over.
void Transformer::backward_block(int64_t l, BlockActs& a) {
  BlockPass pass{plan_.options.compute, plan_.attention, plan_.scratch.positions, doc_ids_, plan_.scratch.seq_nc};
  const size_t li = static_cast<size_t>(l);
  if (li < stale_block_grads_.size() && stale_block_grads_[li] != 0) {
    pass.weight_grads = kernels::GradWrite::kOverwrite;
    stale_block_grads_[li] = 0;
  }
  const BlockViews &w = w_.blocks[l], &wc = wc_.blocks[l], &gw = gw_.blocks[l];
  Scratch& s = plan_.scratch;
  {
    LMT_TRACE_SCOPE("mlp_backward");
    if (config().moe.is_moe_layer(l))
      MoeBlock(backend_, config(), &ep_, tensor_parallel())
          .backward(a.res_mid, MoeWeights::of(w, wc), MoeWeights::of(gw, gw), a.moe, s, s.moe, loss_scale_);
    else
      FfnBlock(backend_, config(), tensor_parallel())
          .backward(a.res_mid, FfnWeights::of(w, wc), FfnWeights::of(gw, gw), a.ffn, s, pass.weight_grads);
  }
  LMT_TRACE_SCOPE("attention_backward");
  AttentionBlock(backend_, config(), l, tensor_parallel())
      .backward(plan_.residual[l], AttentionWeights::of(w, wc), AttentionWeights::of(gw, gw), a.attn, pass, s);
}

std::vector<TensorView> Transformer::written_block_grads(int64_t l) const {
  const BlockViews& g = gw_.blocks[l];
  std::vector<TensorView> out = AttentionBlock::written_grads(AttentionWeights::of(g, g));
  if (!config().moe.is_moe_layer(l))  // an MoE layer's FFN gradients accumulate (MoeBlock)
    for (const TensorView& t : FfnBlock::written_grads(FfnWeights::of(g, g))) out.push_back(t);
  std::erase_if(out, [](const TensorView& t) { return !t.present(); });
  return out;
}

}  // namespace lmt::model
