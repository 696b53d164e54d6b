#include "lmt/model/flops.h"

namespace lmt::model {

FlopsPerToken flops_per_token(const ModelConfig& c, int64_t seq_len) {
  const double C = static_cast<double>(c.d_model), H = static_cast<double>(c.ffn_hidden);
  const double q = static_cast<double>(c.q_dim()), kv = static_cast<double>(c.kv_dim());
  const double T = static_cast<double>(seq_len), L = static_cast<double>(c.n_layers);
  const double ffn_mats = c.ffn == FfnKind::kGlu ? 3.0 : 2.0;
  const double attn_proj = 2 * C * (q + 2 * kv) + 2 * q * C;
  const double dense_ffn = 2 * C * H * ffn_mats;
  double moe_ffn = 0;
  if (c.moe.enabled()) {
    const double E = static_cast<double>(c.moe.num_experts), F = static_cast<double>(c.moe.expert_ffn);
    const double experts = static_cast<double>(c.moe.top_k + c.moe.shared_experts);
    moe_ffn = 2 * C * E + experts * 2 * C * F * ffn_mats;  // router GEMM + the experts a token runs
  }
  const double moe_layers = static_cast<double>(c.moe_layer_count());
  FlopsPerToken f;
  f.attention_forward = 4 * T * q * L;
  f.lm_head_forward = 2 * C * static_cast<double>(c.vocab_size);
  f.ffn_forward = dense_ffn * (L - moe_layers) + moe_ffn * moe_layers;
  f.forward = attn_proj * L + f.ffn_forward + f.attention_forward + f.lm_head_forward;
  f.training = 3 * f.forward;
  f.six_n = 6 * c.active_param_count_estimate();
  return f;
}

}  // namespace lmt::model
