#include "lmt/model/config.h"

#include <cmath>

namespace lmt::model {

std::string_view norm_name(NormKind k) {
  switch (k) {
    case NormKind::kLayerNorm: return "layernorm";
    case NormKind::kLayerNormNoBias: return "layernorm_nobias";
    case NormKind::kRmsNorm: return "rmsnorm";
  }
  return "?";
}
std::string_view ffn_name(FfnKind k) { return k == FfnKind::kMlp ? "mlp" : "glu"; }
std::string_view position_name(PositionKind k) {
  switch (k) {
    case PositionKind::kLearned: return "learned";
    case PositionKind::kRope: return "rope";
    case PositionKind::kNone: return "none";
  }
  return "?";
}
std::string_view family_name(NamingFamily f) { return f == NamingFamily::kGpt2 ? "gpt2" : "llama"; }

int64_t ModelConfig::rotary_dim() const {
  int64_t r = static_cast<int64_t>(std::lround(static_cast<double>(head_dim) * rotary_fraction));
  return r - r % 2;
}

bool ModelConfig::layer_uses_rope(int64_t layer) const {
  if (positions != PositionKind::kRope) return false;
  return nope_every <= 0 || layer % nope_every != nope_every - 1;
}

Status ModelConfig::validate() const {
  auto bad = [&](const std::string& what, const std::string& hint) {
    return InvalidArgument("model '" + name + "': " + what, hint);
  };
  auto positive = [&](const char* key, int64_t v) -> Status {
    if (v <= 0) return bad(std::string(key) + " = " + std::to_string(v) + " must be positive", "set model." + std::string(key));
    return Status::Ok();
  };
  LMT_RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  LMT_RETURN_IF_ERROR(positive("vocab_pad_to", vocab_pad_to));
  LMT_RETURN_IF_ERROR(positive("max_seq_len", max_seq_len));
  LMT_RETURN_IF_ERROR(positive("n_layers", n_layers));
  LMT_RETURN_IF_ERROR(positive("d_model", d_model));
  LMT_RETURN_IF_ERROR(positive("n_heads", n_heads));
  LMT_RETURN_IF_ERROR(positive("n_kv_heads", n_kv_heads));
  LMT_RETURN_IF_ERROR(positive("head_dim", head_dim));
  LMT_RETURN_IF_ERROR(positive("ffn_hidden", ffn_hidden));
  if (n_heads % n_kv_heads != 0)
    return bad("n_heads = " + std::to_string(n_heads) + " is not divisible by n_kv_heads = " + std::to_string(n_kv_heads),
               "n_kv_heads must divide n_heads (MHA: equal; MQA: 1; GQA: a divisor)");
  if (positions == PositionKind::kRope) {
    if (rotary_fraction <= 0.0f || rotary_fraction > 1.0f)
      return bad("rotary_fraction = " + std::to_string(rotary_fraction) + " must be in (0, 1]", "e.g. 1.0 or 0.25");
    if (rotary_dim() < 2)
      return bad("rotary dim round(head_dim · rotary_fraction) = " + std::to_string(rotary_dim()) + " is below 2",
                 "raise rotary_fraction or head_dim");
    if (rope_theta <= 0.0f) return bad("rope_theta must be positive", "e.g. 10000");
  }
  if (nope_every < 0) return bad("nope_every must be >= 0", "0 disables NoPE layers");
  if (nope_every > 0 && positions != PositionKind::kRope)
    return bad("nope_every is set but positions is not rope", "set positions = \"rope\" or nope_every = 0");
  if (family == NamingFamily::kGpt2) {
    if (positions != PositionKind::kLearned || norm != NormKind::kLayerNorm || ffn != FfnKind::kMlp ||
        qk_norm || n_kv_heads != n_heads || q_dim() != d_model || attn_bias != mlp_bias)
      return bad("the gpt2 naming family has learned positions, layernorm with bias, a two-matrix MLP, "
                 "multi-head attention with n_heads·head_dim = d_model and no QK-norm",
                 "use family = \"llama\" for other architectures (its names cover every variant)");
  }
  if (!(norm_eps > 0.0f)) return bad("norm_eps must be positive", "e.g. 1e-5");
  if (!(init_std > 0.0f)) return bad("init_std must be positive", "e.g. 0.02");
  return Status::Ok();
}

int64_t ModelConfig::param_count() const {
  const int64_t C = d_model, H = ffn_hidden;
  const int64_t norm_params = has_norm_bias() ? 2 * C : C;
  int64_t per_layer = 0;
  per_layer += norm_params;                                   // attention norm
  per_layer += C * (q_dim() + 2 * kv_dim());                  // q, k, v
  if (attn_bias) per_layer += q_dim() + 2 * kv_dim();
  if (qk_norm) per_layer += 2 * head_dim;
  per_layer += q_dim() * C + (attn_out_bias ? C : 0);         // output projection
  per_layer += norm_params;                                   // FFN norm
  const int64_t up_rows = ffn == FfnKind::kGlu ? 2 * H : H;   // gate+up or up
  per_layer += up_rows * C + (mlp_bias ? up_rows : 0);
  per_layer += H * C + (mlp_bias ? C : 0);                    // down
  int64_t total = per_layer * n_layers;
  total += vocab_size * C;                                    // token embedding
  if (positions == PositionKind::kLearned) total += max_seq_len * C;
  total += norm_params;                                       // final norm
  if (!tied_embeddings) total += vocab_size * C;              // LM head
  return total;
}

}  // namespace lmt::model
