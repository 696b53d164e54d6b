// One transformer block, forward and backward (pre-norm):
//   res_mid = res_in + o_proj(attention(rope(qk_norm(q,k)), v))   with q,k,v = proj(norm1(res_in))
//   res_out = res_mid + down(act(up(norm2(res_mid))))              (act: GLU over gate·up, or pointwise)
// In bf16 mode every GEMM reads bf16 (weights from the mirror, activations converted once) and
// writes f32; everything else is f32.
#include <cmath>

#include "lmt/base/trace.h"
#include "lmt/model/transformer.h"

namespace lmt::model {

void Transformer::forward_block(int64_t l, BlockActs& a) {
  const ModelConfig& c = config();
  const int64_t N = plan_.B * plan_.T, NH = c.n_heads, G = c.n_kv_heads, HD = c.head_dim;
  const bool bf = plan_.options.compute == DType::kBF16;
  const BlockViews& w = w_.blocks[l];
  const BlockViews& wc = wc_.blocks[l];
  Scratch& s = plan_.scratch;
  const TensorView& res_in = plan_.residual[l];
  const TensorView& res_out = plan_.residual[l + 1];
  kernels::Backend& be = backend_;

  {  // Attention.
    LMT_TRACE_SCOPE("attention");
    const TensorView h1 = bf ? s.f32_nc : a.h1;
    norm_forward(h1, a.norm1_mean, a.norm1_rstd, res_in, w.attn_norm_w, w.attn_norm_b);
    if (bf) be.convert(a.h1, h1);
    const TensorView q = a.q.reshape({N, NH * HD}), k = a.k.reshape({N, G * HD});
    be.linear_forward(c.qk_norm ? a.q_pre : q, a.h1, wc.q_w, w.q_b);
    be.linear_forward(c.qk_norm ? a.k_pre : k, a.h1, wc.k_w, w.k_b);
    be.linear_forward(a.v.reshape({N, G * HD}), a.h1, wc.v_w, w.v_b);
    if (c.qk_norm) {
      be.rmsnorm_forward(a.q.reshape({N * NH, HD}), a.q_rstd, a.q_pre.reshape({N * NH, HD}), w.q_norm_w, c.norm_eps);
      be.rmsnorm_forward(a.k.reshape({N * G, HD}), a.k_rstd, a.k_pre.reshape({N * G, HD}), w.k_norm_w, c.norm_eps);
    }
    if (c.layer_uses_rope(l)) {
      const TensorView q3 = a.q.reshape({N, NH, HD}), k3 = a.k.reshape({N, G, HD});
      be.rope_forward(q3, q3, s.positions, c.rope_theta, c.rotary_dim());
      be.rope_forward(k3, k3, s.positions, c.rope_theta, c.rotary_dim());
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
    be.attention_forward(plan_.attention, a.att, a.lse, a.q, a.k, a.v, doc_ids_, scale);
    if (bf) be.convert(a.att_c, a.att);
    be.linear_forward(s.f32_nc, a.att_c.reshape({N, NH * HD}), wc.o_w, w.o_b);
    be.add(a.res_mid, res_in, s.f32_nc);
  }

  // Feed-forward.
  LMT_TRACE_SCOPE("mlp");
  const TensorView h2 = bf ? s.f32_nc : a.h2;
  norm_forward(h2, a.norm2_mean, a.norm2_rstd, a.res_mid, w.ffn_norm_w, w.ffn_norm_b);
  if (bf) be.convert(a.h2, h2);
  be.linear_forward(a.u, a.h2, wc.up_w, w.up_b);
  const TensorView act = bf ? s.f32_nh : a.a;
  if (c.ffn == FfnKind::kGlu)
    be.glu_forward(c.activation, act, a.u);
  else
    be.activation_forward(c.activation, act, a.u);
  if (bf) be.convert(a.a, act);
  be.linear_forward(s.f32_nc, a.a, wc.down_w, w.down_b);
  be.add(res_out, a.res_mid, s.f32_nc);
}

void Transformer::backward_block(int64_t l, BlockActs& a) {
  const ModelConfig& c = config();
  const int64_t N = plan_.B * plan_.T, NH = c.n_heads, G = c.n_kv_heads, HD = c.head_dim;
  const BlockViews& w = w_.blocks[l];
  const BlockViews& wc = wc_.blocks[l];
  const BlockViews& gw = gw_.blocks[l];
  Scratch& s = plan_.scratch;
  kernels::Backend& be = backend_;

  // Feed-forward: s.dres holds d res_out; the residual passes it to res_mid unchanged.
  {
    LMT_TRACE_SCOPE("mlp_backward");
    be.linear_backward(s.da, gw.down_w, gw.down_b, compute_copy(s.dres), a.a, wc.down_w);
    if (c.ffn == FfnKind::kGlu)
      be.glu_backward(c.activation, s.du, s.da, a.u);
    else
      be.activation_backward(c.activation, s.du, s.da, a.u);
    be.linear_backward(s.dh, gw.up_w, gw.up_b, compute_copy(s.du), a.h2, wc.up_w);
    norm_backward(s.dres, gw.ffn_norm_w, gw.ffn_norm_b, s.dh, a.res_mid, w.ffn_norm_w, a.norm2_mean, a.norm2_rstd,
                  /*accumulate=*/true);
  }

  // Attention: s.dres now holds d res_mid.
  LMT_TRACE_SCOPE("attention_backward");
  be.linear_backward(s.datt.reshape({N, NH * HD}), gw.o_w, gw.o_b, compute_copy(s.dres), a.att_c.reshape({N, NH * HD}),
                     wc.o_w);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  be.attention_backward(plan_.attention, s.dq, s.dk, s.dv, s.datt, a.q, a.k, a.v, a.att, a.lse, doc_ids_, scale);
  if (c.layer_uses_rope(l)) {
    const TensorView dq3 = s.dq.reshape({N, NH, HD}), dk3 = s.dk.reshape({N, G, HD});
    be.rope_backward(dq3, dq3, s.positions, c.rope_theta, c.rotary_dim());
    be.rope_backward(dk3, dk3, s.positions, c.rope_theta, c.rotary_dim());
  }
  TensorView dq = s.dq.reshape({N, NH * HD}), dk = s.dk.reshape({N, G * HD});
  if (c.qk_norm) {
    be.rmsnorm_backward(s.dq_pre.reshape({N * NH, HD}), gw.q_norm_w, s.dq.reshape({N * NH, HD}),
                        a.q_pre.reshape({N * NH, HD}), w.q_norm_w, a.q_rstd, false);
    be.rmsnorm_backward(s.dk_pre.reshape({N * G, HD}), gw.k_norm_w, s.dk.reshape({N * G, HD}),
                        a.k_pre.reshape({N * G, HD}), w.k_norm_w, a.k_rstd, false);
    dq = s.dq_pre;
    dk = s.dk_pre;
  }
  // d h1 = dq·Wq + dk·Wk + dv·Wv: the first GEMM writes, the others accumulate.
  be.linear_backward(s.dh, gw.q_w, gw.q_b, compute_copy(dq), a.h1, wc.q_w);
  const TensorView gk = compute_copy(dk);
  be.linear_backward(TensorView(), gw.k_w, gw.k_b, gk, a.h1, wc.k_w);
  be.matmul(s.dh, gk, wc.k_w, false, false, /*accumulate=*/true);
  const TensorView gv = compute_copy(s.dv.reshape({N, G * HD}));
  be.linear_backward(TensorView(), gw.v_w, gw.v_b, gv, a.h1, wc.v_w);
  be.matmul(s.dh, gv, wc.v_w, false, false, /*accumulate=*/true);
  norm_backward(s.dres, gw.attn_norm_w, gw.attn_norm_b, s.dh, plan_.residual[l], w.attn_norm_w, a.norm1_mean,
                a.norm1_rstd, /*accumulate=*/true);
}

}  // namespace lmt::model
