#include "lmt/model/config.h"

#include <cmath>
#include <cstdio>

#include "lmt/base/limits.h"
#include "lmt/model/rope.h"

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
std::string_view rope_scaling_name(RopeScalingType t) {
  switch (t) {
    case RopeScalingType::kNone: return "none";
    case RopeScalingType::kLinear: return "linear";
    case RopeScalingType::kDynamic: return "dynamic";
    case RopeScalingType::kYarn: return "yarn";
    case RopeScalingType::kLlama3: return "llama3";
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

namespace {

// The moe.* fields (docs/MOE.md). Nothing is checked for a dense model (num_experts == 0) beyond
// num_experts itself: the other fields are then unused.
Status validate_moe(const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  auto bad = [&](const std::string& what, const std::string& hint) {
    return InvalidArgument("model '" + c.name + "': " + what, hint);
  };
  auto size = [&](const char* key, int64_t v, int64_t min, int64_t max) -> Status {
    if (v < min || v > max)
      return bad(std::string("moe.") + key + " = " + std::to_string(v) + " is out of range: it must be in [" +
                     std::to_string(min) + ", " + std::to_string(max) + "]",
                 std::string("set model.moe.") + key + " to a value in that range");
    return Status::Ok();
  };
  using L = ModelLimits;
  LMT_RETURN_IF_ERROR(size("num_experts", m.num_experts, 0, L::kMaxExperts));
  if (!m.enabled()) return Status::Ok();
  LMT_RETURN_IF_ERROR(size("top_k", m.top_k, 1, m.num_experts));
  LMT_RETURN_IF_ERROR(size("expert_ffn", m.expert_ffn, 1, L::kMaxFfnHidden));
  LMT_RETURN_IF_ERROR(size("shared_experts", m.shared_experts, 0, L::kMaxExperts));
  LMT_RETURN_IF_ERROR(size("every", m.every, 1, L::kMaxLayers));
  LMT_RETURN_IF_ERROR(size("local_experts", m.local_experts, 0, m.num_experts));
  LMT_RETURN_IF_ERROR(size("first_expert", m.first_expert, 0, m.num_experts - m.held_experts()));
  LMT_RETURN_IF_ERROR(size("whole_layers", m.whole_layers, 0, L::kMaxLayers));
  LMT_RETURN_IF_ERROR(size("first_layer", m.first_layer, 0, L::kMaxLayers));
  if (m.whole_layers > 0 ? m.first_layer + c.n_layers > m.whole_layers : m.first_layer != 0)
    return bad("moe.first_layer = " + std::to_string(m.first_layer) + " with " + std::to_string(c.n_layers) +
                   " layers is not a part of a " + std::to_string(m.whole_layers) + "-layer model",
               "these are set for pipeline stages only");
  const int64_t layers = m.whole_layers > 0 ? m.whole_layers : c.n_layers;  // a stage may hold no MoE layer
  if (m.every > layers)
    return bad("moe.every = " + std::to_string(m.every) + " is above n_layers = " + std::to_string(layers) +
                   ": no layer would be an MoE layer",
               "MoE layers are those with l % every == every - 1; set model.moe.every <= n_layers, or "
               "model.moe.num_experts = 0 for a dense model");
  auto coef = [&](const char* key, float v) -> Status {
    if (!std::isfinite(v) || v < 0.0f || v > L::kMaxMoeCoef)
      return bad(std::string("moe.") + key + " = " + std::to_string(v) + " must be finite and in [0, 1000]",
                 std::string("e.g. model.moe.") + key + " = 0.001 (0: off)");
    return Status::Ok();
  };
  LMT_RETURN_IF_ERROR(coef("aux_loss_coef", m.aux_loss_coef));
  LMT_RETURN_IF_ERROR(coef("bias_update_rate", m.bias_update_rate));
  LMT_RETURN_IF_ERROR(coef("router_z_loss", m.router_z_loss));
  // capacity = ceil(f·N·K/E) per expert, E·capacity ≈ f·N·K slots in all. Below f = 1/K there are
  // fewer slots than tokens, so even a perfectly balanced router must drop every expert of some
  // tokens; above f = E/K the capacity exceeds N and nothing can be dropped (dropless, spelled 0).
  const double f = m.capacity_factor, lo = 1.0 / static_cast<double>(m.top_k),
               hi = static_cast<double>(m.num_experts) / static_cast<double>(m.top_k);
  if (!std::isfinite(f) || (f != 0.0 && (f < lo * (1 - 1e-6) || f > hi * (1 + 1e-6)))) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "moe.capacity_factor = %g must be 0 (dropless) or in [1/top_k, num_experts/top_k] = [%g, %g]",
                  f, lo, hi);
    return bad(buf, "below 1/top_k the experts have fewer slots than there are tokens; above num_experts/top_k nothing "
                    "can be dropped: use 0 (dropless) or e.g. 1.25");
  }
  if (c.mlp_bias)
    return bad("mlp_bias is set on an MoE model: experts have no biases (as in Qwen3-MoE and OLMoE)",
               "set model.mlp_bias = false, or model.moe.num_experts = 0");
  if (c.family == NamingFamily::kGpt2)
    return bad("the gpt2 naming family has no expert tensor names", "use family = \"llama\" for an MoE model");
  return Status::Ok();
}

}  // namespace

Status ModelConfig::validate() const {
  auto bad = [&](const std::string& what, const std::string& hint) {
    return InvalidArgument("model '" + name + "': " + what, hint);
  };
  // Every size in [1, max] (nope_every in [0, max]).
  auto size = [&](const char* key, int64_t v, int64_t max, int64_t min = 1) -> Status {
    if (v < min || v > max)
      return bad(std::string(key) + " = " + std::to_string(v) + " is out of range: it must be in [" + std::to_string(min) +
                     ", " + std::to_string(max) + "]",
                 "set model." + std::string(key) + " to a size in that range");
    return Status::Ok();
  };
  using L = ModelLimits;
  LMT_RETURN_IF_ERROR(size("vocab_size", vocab_size, L::kMaxVocab));
  LMT_RETURN_IF_ERROR(size("vocab_pad_to", vocab_pad_to, L::kMaxVocabPadTo));
  LMT_RETURN_IF_ERROR(size("max_seq_len", max_seq_len, L::kMaxSeqLen));
  LMT_RETURN_IF_ERROR(size("n_layers", n_layers, L::kMaxLayers));
  LMT_RETURN_IF_ERROR(size("d_model", d_model, L::kMaxDModel));
  LMT_RETURN_IF_ERROR(size("n_heads", n_heads, L::kMaxHeads));
  LMT_RETURN_IF_ERROR(size("n_kv_heads", n_kv_heads, L::kMaxHeads));
  LMT_RETURN_IF_ERROR(size("head_dim", head_dim, L::kMaxHeadDim));
  LMT_RETURN_IF_ERROR(size("ffn_hidden", ffn_hidden, L::kMaxFfnHidden));
  LMT_RETURN_IF_ERROR(size("nope_every", nope_every, L::kMaxLayers, 0));
  if (n_heads % n_kv_heads != 0)
    return bad("n_heads = " + std::to_string(n_heads) + " is not divisible by n_kv_heads = " + std::to_string(n_kv_heads),
               "n_kv_heads must divide n_heads (MHA: equal; MQA: 1; GQA: a divisor)");
  if (positions == PositionKind::kRope) {
    if (!(rotary_fraction > 0.0f) || rotary_fraction > 1.0f)
      return bad("rotary_fraction = " + std::to_string(rotary_fraction) + " must be in (0, 1]", "e.g. 1.0 or 0.25");
    if (rotary_dim() < 2)
      return bad("rotary dim round(head_dim · rotary_fraction) = " + std::to_string(rotary_dim()) + " is below 2",
                 "raise rotary_fraction or head_dim");
    if (!(rope_theta > 0.0f) || rope_theta > L::kMaxRopeTheta)
      return bad("rope_theta = " + std::to_string(rope_theta) + " must be positive and at most 1e12", "e.g. 10000");
  }
  {
    Status scaling = validate_rope_scaling(*this);
    if (!scaling.ok()) return scaling.WithContext("model '" + name + "'");
  }
  if (nope_every > 0 && positions != PositionKind::kRope)
    return bad("nope_every is set but positions is not rope", "set positions = \"rope\" or nope_every = 0");
  if (family == NamingFamily::kGpt2) {
    if (positions != PositionKind::kLearned || norm != NormKind::kLayerNorm || ffn != FfnKind::kMlp ||
        qk_norm || n_kv_heads != n_heads || q_dim() != d_model || attn_bias != mlp_bias)
      return bad("the gpt2 naming family has learned positions, layernorm with bias, a two-matrix MLP, "
                 "multi-head attention with n_heads·head_dim = d_model and no QK-norm",
                 "use family = \"llama\" for other architectures (its names cover every variant)");
  }
  if (qk_norm_full && !qk_norm)
    return bad("qk_norm_full is set but qk_norm is not", "set model.qk_norm = true (qk_norm_full chooses its width), or "
                                                         "model.qk_norm_full = false");
  LMT_RETURN_IF_ERROR(validate_moe(*this));
  if (!(norm_eps > 0.0f) || norm_eps > 1.0f) return bad("norm_eps must be in (0, 1]", "e.g. 1e-5");
  if (!(init_std > 0.0f) || init_std > L::kMaxInitStd) return bad("init_std must be in (0, 10]", "e.g. 0.02");
  const double params = param_count_estimate();
  if (params > L::kMaxParams) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3g", params);
    return bad(std::string("has ") + buf + " parameters, more than the limit of 1e13",
               "check n_layers, d_model, ffn_hidden, n_heads · head_dim and vocab_size");
  }
  return Status::Ok();
}

namespace {

// The parameter count in T (int64_t: exact; double: never overflows). active: only the top_k routed
// experts of each MoE layer.
template <typename T>
T ffn_params(const ModelConfig& c, T H) {
  const T C = static_cast<T>(c.d_model);
  const T up_rows = c.ffn == FfnKind::kGlu ? 2 * H : H;       // gate+up or up
  return up_rows * C + (c.mlp_bias ? up_rows : 0) + H * C + (c.mlp_bias ? C : 0);  // + down
}

template <typename T>
T count_params(const ModelConfig& c, bool active) {
  const T C = static_cast<T>(c.d_model), H = static_cast<T>(c.ffn_hidden), HD = static_cast<T>(c.head_dim);
  const T q = static_cast<T>(c.n_heads) * HD, kv = static_cast<T>(c.n_kv_heads) * HD;
  const T norm_params = c.has_norm_bias() ? 2 * C : C;
  T attn = 0;  // every layer: norms, attention
  attn += norm_params;                                        // attention norm
  attn += C * (q + 2 * kv);                                   // q, k, v
  if (c.attn_bias) attn += q + 2 * kv;
  if (c.qk_norm) attn += c.qk_norm_full ? q + kv : 2 * HD;    // q_norm, k_norm: [NH·HD], [G·HD] or [HD] each
  attn += q * C + (c.attn_out_bias ? C : 0);                  // output projection
  attn += norm_params;                                        // FFN norm
  const T dense_ffn = ffn_params<T>(c, H);
  T moe_ffn = 0;
  if (c.moe.enabled()) {
    const T E = static_cast<T>(c.moe.num_experts);
    const T routed = active ? static_cast<T>(c.moe.top_k) : E;
    moe_ffn = E * C                                           // router [E, C]
              + (routed + static_cast<T>(c.moe.shared_experts)) * ffn_params<T>(c, static_cast<T>(c.moe.expert_ffn));
  }
  const T moe_layers = static_cast<T>(c.moe_layer_count());
  const T layers = static_cast<T>(c.n_layers);
  T total = attn * layers + dense_ffn * (layers - moe_layers) + moe_ffn * moe_layers;
  total += static_cast<T>(c.vocab_size) * C;                  // token embedding
  if (c.positions == PositionKind::kLearned) total += static_cast<T>(c.max_seq_len) * C;
  total += norm_params;                                       // final norm
  if (!c.tied_embeddings) total += static_cast<T>(c.vocab_size) * C;  // LM head
  return total;
}

}  // namespace

int64_t ModelConfig::param_count() const { return count_params<int64_t>(*this, false); }
double ModelConfig::param_count_estimate() const { return count_params<double>(*this, false); }
int64_t ModelConfig::active_param_count() const { return count_params<int64_t>(*this, true); }
double ModelConfig::active_param_count_estimate() const { return count_params<double>(*this, true); }
int64_t ModelConfig::ffn_param_count(int64_t h) const { return ffn_params<int64_t>(*this, h); }

int64_t ModelConfig::moe_layer_count() const {
  if (!moe.enabled() || moe.every < 1 || n_layers < 1) return 0;
  // Whole-model blocks g = every-1, 2·every-1, ... in [first_layer, first_layer + n_layers).
  const int64_t end = moe.first_layer + n_layers;
  return end / moe.every - moe.first_layer / moe.every;
}

StatusOr<ModelConfig> dense_peer(const ModelConfig& c) {
  if (!c.moe.enabled())
    return InvalidArgument("model '" + c.name + "' is dense: it has no dense peer", "use an MoE preset, e.g. tiny-moe");
  if (c.moe.every != 1)
    return InvalidArgument("model '" + c.name + "' has dense layers between its MoE layers (moe.every = " +
                               std::to_string(c.moe.every) + "): one dense FFN size cannot match both",
                           "compare models whose every layer is MoE (moe.every = 1)");
  ModelConfig d = c;
  d.name = c.name + "-dense-peer";
  d.ffn_hidden = (c.moe.top_k + c.moe.shared_experts) * c.moe.expert_ffn;
  d.moe = MoeConfig{};
  return d;
}

Status model_memory_check(const ModelConfig& c, double bytes_per_param, double extra_bytes, const std::string& what,
                          const MemoryTarget& target) {
  const double params = c.param_count_estimate();
  char shape[160];
  std::snprintf(shape, sizeof shape, "%.4g parameters: n_layers %lld, d_model %lld, ffn_hidden %lld, vocab_size %lld", params,
                static_cast<long long>(c.n_layers), static_cast<long long>(c.d_model), static_cast<long long>(c.ffn_hidden),
                static_cast<long long>(c.vocab_size));
  return check_fits_in_memory(params * bytes_per_param + extra_bytes, what + " (model '" + c.name + "', " + shape + ")",
                              "check the model's configuration; `lmtrain plan` estimates the memory a model needs", target);
}

}  // namespace lmt::model
