// The feed-forward sub-block: forward and backward (see ffn_block.h for the contract).
#include "lmt/model/ffn_block.h"

#include "lmt/model/activations.h"
#include "lmt/model/block.h"
#include "lmt/model/norm.h"

namespace lmt::model {

FfnWeights FfnWeights::of(const BlockViews& master, const BlockViews& gemm) {
  FfnWeights w;
  w.norm_w = master.ffn_norm_w;
  w.norm_b = master.ffn_norm_b;
  w.up_w = gemm.up_w;
  w.up_b = master.up_b;
  w.down_w = gemm.down_w;
  w.down_b = master.down_b;
  return w;
}

FfnActs FfnBlock::plan(const ModelConfig& c, int64_t N, DType cd, DType f, Arena& arena, int64_t norm_rows) {
  const int64_t C = c.d_model, H = c.ffn_hidden, U = c.ffn == FfnKind::kGlu ? 2 * H : H;
  FfnActs a;
  const int64_t n = norm_rows < 0 ? N : norm_rows;
  a.norm_mean = arena.allocate({n}, f, "norm2_mean");
  a.norm_rstd = arena.allocate({n}, f, "norm2_rstd");
  a.h = arena.allocate({N, C}, cd, "h2");
  a.u = arena.allocate({N, U}, f, "u");
  a.a = arena.allocate({N, H}, cd, "a");
  return a;
}

Residual FfnBlock::forward(const TensorView& res_out, const Residual& res_in, const FfnWeights& w, const FfnActs& a,
                           const TensorView& f32_nc, const TensorView& seq_nc) {
  norm_all_rows(be_, c_, tp_, a.h, a.norm_mean, a.norm_rstd, res_in, w.norm_w, w.norm_b, seq_nc, f32_nc,
                "the FFN norm's output");
  be_.linear_forward(a.u, a.h, w.up_w, w.up_b);
  // a.a is bf16 in bf16 mode: the activation ops round their f32 result into it (backend.h).
  if (c_.ffn == FfnKind::kGlu)
    be_.glu_forward(c_.activation, a.a, a.u);
  else
    be_.activation_forward(c_.activation, a.a, a.u);
  be_.linear_forward(f32_nc, a.a, w.down_w, row_parallel_bias(tp_, w.down_b));
  return row_parallel_output(be_, tp_, res_out, res_in.value, f32_nc, seq_nc, "the FFN output");
}

void FfnBlock::backward(const TensorView& res_in, const FfnWeights& w, const FfnWeights& g, const FfnActs& a,
                        Scratch& s, kernels::GradWrite weight_grads) {
  const bool sp = sequence_parallel(tp_);
  if (sp) sequence_gather(be_, tp_, s.dres, s.dres_full, "d res of the FFN sub-block");
  be_.linear_backward(s.da, g.down_w, g.down_b, gemm_input(be_, s.grad_c, sp ? s.dres_full : s.dres), a.a, w.down_w,
                      weight_grads);
  // In bf16 mode d u goes to the up projection's GEMMs as bf16: the activation backward rounds it
  // straight into grad_c (what gemm_input would have converted it into).
  const TensorView du = s.grad_c.present()
                            ? TensorView(s.grad_c.data(), a.u.shape(), s.grad_c.dtype(), s.grad_c.device())
                            : s.du;
  if (c_.ffn == FfnKind::kGlu)
    be_.glu_backward(c_.activation, du, s.da, a.u);
  else
    be_.activation_backward(c_.activation, du, s.da, a.u);
  be_.linear_backward(s.dh, g.up_w, g.up_b, du, a.h, w.up_w, weight_grads);
  const TensorView dh = column_parallel_input_grad(tp_, s.dh, s.seq_nc, "d h of the up projection");
  norm_backward(be_, c_, s.dres, g.norm_w, g.norm_b, dh, res_in, w.norm_w, a.norm_mean, a.norm_rstd,
                /*accumulate=*/true);
}

}  // namespace lmt::model
