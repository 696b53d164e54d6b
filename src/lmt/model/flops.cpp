#include "lmt/model/flops.h"

namespace lmt::model {

FlopsPerToken flops_per_token(const ModelConfig& c, int64_t seq_len) {
  const double C = static_cast<double>(c.d_model), H = static_cast<double>(c.ffn_hidden);
  const double q = static_cast<double>(c.q_dim()), kv = static_cast<double>(c.kv_dim());
  const double T = static_cast<double>(seq_len), L = static_cast<double>(c.n_layers);
  const double ffn_mats = c.ffn == FfnKind::kGlu ? 3.0 : 2.0;
  const double per_layer_dense = 2 * C * (q + 2 * kv) + 2 * q * C + 2 * C * H * ffn_mats;
  FlopsPerToken f;
  f.attention_forward = 4 * T * q * L;
  f.lm_head_forward = 2 * C * static_cast<double>(c.vocab_size);
  f.forward = per_layer_dense * L + f.attention_forward + f.lm_head_forward;
  f.training = 3 * f.forward;
  f.six_n = 6 * static_cast<double>(c.param_count());
  return f;
}

}  // namespace lmt::model
