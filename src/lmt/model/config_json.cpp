#include "lmt/model/config_json.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <iterator>
#include <map>
#include <string_view>
#include <vector>

#include "lmt/model/rope.h"

namespace lmt::model {
namespace {

using nlohmann::json;

using Setter = std::function<Status(const json& v, ModelConfig& c)>;

Status type_error(const std::string& source, const std::string& key, const char* want, const json& v) {
  return InvalidArgument(source + ": key '" + key + "' must be " + want + ", got " + std::string(v.type_name()) +
                             " " + v.dump(),
                         std::string("e.g. \"") + key + "\": " +
                             (std::string(want) == "an integer" ? "32" : std::string(want) == "a boolean" ? "true" : "1.0"));
}

// Table of ModelConfig keys; each setter checks the JSON type.
std::map<std::string, Setter> setters(const std::string& src) {
  auto integer = [src](const char* key, int64_t ModelConfig::*field) -> Setter {
    return [src, key, field](const json& v, ModelConfig& c) -> Status {
      if (!v.is_number_integer()) return type_error(src, key, "an integer", v);
      c.*field = v.get<int64_t>();
      return Status::Ok();
    };
  };
  auto real = [src](const char* key, float ModelConfig::*field) -> Setter {
    return [src, key, field](const json& v, ModelConfig& c) -> Status {
      if (!v.is_number()) return type_error(src, key, "a number", v);
      c.*field = v.get<float>();
      return Status::Ok();
    };
  };
  auto boolean = [src](const char* key, bool ModelConfig::*field) -> Setter {
    return [src, key, field](const json& v, ModelConfig& c) -> Status {
      if (!v.is_boolean()) return type_error(src, key, "a boolean", v);
      c.*field = v.get<bool>();
      return Status::Ok();
    };
  };
  // A string key with named values.
  auto choice = [src](const char* key, std::vector<std::string> names,
                      std::function<void(size_t, ModelConfig&)> set) -> Setter {
    return [src, key, names, set](const json& v, ModelConfig& c) -> Status {
      std::string all;
      for (const auto& n : names) all += (all.empty() ? "\"" : ", \"") + n + "\"";
      if (v.is_string()) {
        auto it = std::find(names.begin(), names.end(), v.get<std::string>());
        if (it != names.end()) {
          set(static_cast<size_t>(it - names.begin()), c);
          return Status::Ok();
        }
      }
      return InvalidArgument(src + ": key '" + key + "' has value " + v.dump(), "valid values: " + all);
    };
  };
  return {
      {"name", [src](const json& v, ModelConfig& c) -> Status {
         if (!v.is_string()) return type_error(src, "name", "a string", v);
         c.name = v.get<std::string>();
         return Status::Ok();
       }},
      {"family", choice("family", {"llama", "gpt2"},
                        [](size_t i, ModelConfig& c) { c.family = i == 0 ? NamingFamily::kLlama : NamingFamily::kGpt2; })},
      {"vocab_size", integer("vocab_size", &ModelConfig::vocab_size)},
      {"vocab_pad_to", integer("vocab_pad_to", &ModelConfig::vocab_pad_to)},
      {"max_seq_len", integer("max_seq_len", &ModelConfig::max_seq_len)},
      {"n_layers", integer("n_layers", &ModelConfig::n_layers)},
      {"d_model", integer("d_model", &ModelConfig::d_model)},
      {"n_heads", integer("n_heads", &ModelConfig::n_heads)},
      {"n_kv_heads", integer("n_kv_heads", &ModelConfig::n_kv_heads)},
      {"head_dim", integer("head_dim", &ModelConfig::head_dim)},
      {"ffn_hidden", integer("ffn_hidden", &ModelConfig::ffn_hidden)},
      {"nope_every", integer("nope_every", &ModelConfig::nope_every)},
      {"norm", choice("norm", {"rmsnorm", "layernorm", "layernorm_nobias"}, [](size_t i, ModelConfig& c) {
         c.norm = i == 0 ? NormKind::kRmsNorm : i == 1 ? NormKind::kLayerNorm : NormKind::kLayerNormNoBias;
       })},
      {"ffn", choice("ffn", {"glu", "mlp"},
                     [](size_t i, ModelConfig& c) { c.ffn = i == 0 ? FfnKind::kGlu : FfnKind::kMlp; })},
      {"activation", choice("activation", {"silu", "gelu_tanh", "relu"}, [](size_t i, ModelConfig& c) {
         c.activation = i == 0 ? kernels::Activation::kSilu : i == 1 ? kernels::Activation::kGeluTanh : kernels::Activation::kRelu;
       })},
      {"positions", choice("positions", {"rope", "learned", "none"}, [](size_t i, ModelConfig& c) {
         c.positions = i == 0 ? PositionKind::kRope : i == 1 ? PositionKind::kLearned : PositionKind::kNone;
       })},
      {"norm_eps", real("norm_eps", &ModelConfig::norm_eps)},
      {"rope_theta", real("rope_theta", &ModelConfig::rope_theta)},
      {"rotary_fraction", real("rotary_fraction", &ModelConfig::rotary_fraction)},
      {"init_std", real("init_std", &ModelConfig::init_std)},
      {"qk_norm", boolean("qk_norm", &ModelConfig::qk_norm)},
      {"qk_norm_full", boolean("qk_norm_full", &ModelConfig::qk_norm_full)},
      {"attn_bias", boolean("attn_bias", &ModelConfig::attn_bias)},
      {"attn_out_bias", boolean("attn_out_bias", &ModelConfig::attn_out_bias)},
      {"mlp_bias", boolean("mlp_bias", &ModelConfig::mlp_bias)},
      {"tied_embeddings", boolean("tied_embeddings", &ModelConfig::tied_embeddings)},
      {"scaled_residual_init", boolean("scaled_residual_init", &ModelConfig::scaled_residual_init)},
  };
}

// One key of the rope_scaling object (names as in Hugging Face's rope_parameters, "type" for rope_type).
Status set_rope_scaling(const std::string& src, const std::string& sub, const json& v, RopeScaling& s) {
  const std::string key = "rope_scaling." + sub;
  auto real = [&](double* field) -> Status {
    if (!v.is_number()) return type_error(src, key, "a number", v);
    *field = v.get<double>();
    return Status::Ok();
  };
  if (sub == "type") {
    if (!v.is_string()) return type_error(src, key, "a string", v);
    auto type = rope_scaling_type_from_name(v.get<std::string>());
    if (!type.ok()) return type.status().WithContext(src + ": key '" + key + "'");
    s.type = *type;
    return Status::Ok();
  }
  if (sub == "factor") return real(&s.factor);
  if (sub == "low_freq_factor") return real(&s.low_freq_factor);
  if (sub == "high_freq_factor") return real(&s.high_freq_factor);
  if (sub == "beta_fast") return real(&s.beta_fast);
  if (sub == "beta_slow") return real(&s.beta_slow);
  if (sub == "attention_factor") return real(&s.attention_factor);
  if (sub == "mscale") return real(&s.mscale);
  if (sub == "mscale_all_dim") return real(&s.mscale_all_dim);
  if (sub == "original_max_position_embeddings") {
    if (!v.is_number_integer()) return type_error(src, key, "an integer", v);
    s.original_max_position_embeddings = v.get<int64_t>();
    return Status::Ok();
  }
  if (sub == "truncate") {
    if (!v.is_boolean()) return type_error(src, key, "a boolean", v);
    s.truncate = v.get<bool>();
    return Status::Ok();
  }
  return InvalidArgument(src + ": unknown key '" + key + "'",
                         "valid rope_scaling keys: type, factor, original_max_position_embeddings, low_freq_factor, "
                         "high_freq_factor, beta_fast, beta_slow, attention_factor, mscale, mscale_all_dim, truncate");
}

constexpr std::string_view kRopeScalingPrefix = "rope_scaling.";
constexpr std::string_view kMoePrefix = "moe.";

constexpr const char* kRouterNames[] = {"softmax_topk", "softmax_topk_renorm"};  // renormalize false, true
constexpr const char* kBalanceNames[] = {"none", "aux_loss", "bias_update"};      // MoeBalance order

// One key of the moe object (recipes: model.moe.KEY).
Status set_moe(const std::string& src, const std::string& sub, const json& v, MoeConfig& m) {
  const std::string key = "moe." + sub;
  auto integer = [&](int64_t* field) -> Status {
    if (!v.is_number_integer()) return type_error(src, key, "an integer", v);
    *field = v.get<int64_t>();
    return Status::Ok();
  };
  auto real = [&](float* field) -> Status {
    if (!v.is_number()) return type_error(src, key, "a number", v);
    *field = v.get<float>();
    return Status::Ok();
  };
  // A string naming one of `names`: its index.
  auto choice = [&](const auto& names, auto set) -> Status {
    std::string all;
    for (const char* n : names) all += (all.empty() ? "\"" : ", \"") + std::string(n) + "\"";
    if (v.is_string())
      for (size_t i = 0; i < std::size(names); ++i)
        if (v.get<std::string>() == names[i]) {
          set(i);
          return Status::Ok();
        }
    return InvalidArgument(src + ": key '" + key + "' has value " + v.dump(), "valid values: " + all);
  };
  if (sub == "num_experts") return integer(&m.num_experts);
  if (sub == "top_k") return integer(&m.top_k);
  if (sub == "expert_ffn") return integer(&m.expert_ffn);
  if (sub == "shared_experts") return integer(&m.shared_experts);
  if (sub == "every") return integer(&m.every);
  if (sub == "router") return choice(kRouterNames, [&](size_t i) { m.renormalize = i == 1; });
  if (sub == "balance") return choice(kBalanceNames, [&](size_t i) { m.balance = static_cast<MoeBalance>(i); });
  if (sub == "aux_loss_coef") return real(&m.aux_loss_coef);
  if (sub == "bias_update_rate") return real(&m.bias_update_rate);
  if (sub == "router_z_loss") return real(&m.router_z_loss);
  if (sub == "capacity_factor") return real(&m.capacity_factor);
  return InvalidArgument(src + ": unknown key '" + key + "'",
                         "valid moe keys: num_experts, top_k, expert_ffn, shared_experts, every, router, balance, "
                         "aux_loss_coef, bias_update_rate, router_z_loss, capacity_factor");
}

}  // namespace

StatusOr<ModelConfig> model_config_from_json(const json& j, const std::string& source) {
  if (!j.is_object())
    return InvalidArgument(source + ": a model config must be a JSON object, got " + std::string(j.type_name()),
                           "e.g. {\"vocab_size\": 32000, \"n_layers\": 16, \"d_model\": 2048, ...}");
  const auto table = setters(source);
  ModelConfig c;
  c.name = std::filesystem::path(source).stem().string();
  // rope_scaling: an object of its keys, or (recipes: model.rope_scaling.KEY) dotted "rope_scaling.KEY"
  // keys, applied after the object so that they override it.
  for (const auto& [key, value] : j.items()) {
    if (key.rfind(kRopeScalingPrefix, 0) == 0 || key.rfind(kMoePrefix, 0) == 0) continue;
    if (key == "rope_scaling") {
      if (!value.is_object()) return type_error(source, key, "an object", value);
      for (const auto& [sub, v] : value.items()) LMT_RETURN_IF_ERROR(set_rope_scaling(source, sub, v, c.rope_scaling));
      continue;
    }
    if (key == "moe") {
      if (!value.is_object()) return type_error(source, key, "an object", value);
      for (const auto& [sub, v] : value.items()) LMT_RETURN_IF_ERROR(set_moe(source, sub, v, c.moe));
      continue;
    }
    auto it = table.find(key);
    if (it == table.end()) {
      std::string valid;
      for (const auto& [k, s] : table) valid += (valid.empty() ? "" : ", ") + k;
      return InvalidArgument(source + ": unknown key '" + key + "'", "valid keys: " + valid + ", rope_scaling, moe");
    }
    LMT_RETURN_IF_ERROR(it->second(value, c));
  }
  for (const auto& [key, value] : j.items()) {
    if (key.rfind(kRopeScalingPrefix, 0) != 0) continue;
    LMT_RETURN_IF_ERROR(set_rope_scaling(source, key.substr(kRopeScalingPrefix.size()), value, c.rope_scaling));
  }
  for (const auto& [key, value] : j.items()) {
    if (key.rfind(kMoePrefix, 0) != 0) continue;
    LMT_RETURN_IF_ERROR(set_moe(source, key.substr(kMoePrefix.size()), value, c.moe));
  }
  if (c.n_kv_heads == 0) c.n_kv_heads = c.n_heads;
  if (c.head_dim == 0 && c.n_heads > 0) c.head_dim = c.d_model / c.n_heads;
  if (c.max_seq_len == 0) c.max_seq_len = 2048;
  Status valid = c.validate();
  if (!valid.ok()) return valid.WithContext(source);
  return c;
}

json model_config_to_json(const ModelConfig& c) {
  return json{{"name", c.name},
              {"family", family_name(c.family)},
              {"vocab_size", c.vocab_size},
              {"vocab_pad_to", c.vocab_pad_to},
              {"max_seq_len", c.max_seq_len},
              {"n_layers", c.n_layers},
              {"d_model", c.d_model},
              {"n_heads", c.n_heads},
              {"n_kv_heads", c.n_kv_heads},
              {"head_dim", c.head_dim},
              {"ffn_hidden", c.ffn_hidden},
              {"nope_every", c.nope_every},
              {"norm", norm_name(c.norm)},
              {"ffn", ffn_name(c.ffn)},
              {"activation", kernels::activation_name(c.activation)},
              {"positions", position_name(c.positions)},
              {"norm_eps", c.norm_eps},
              {"rope_theta", c.rope_theta},
              {"rotary_fraction", c.rotary_fraction},
              {"init_std", c.init_std},
              {"qk_norm", c.qk_norm},
              {"qk_norm_full", c.qk_norm_full},
              {"attn_bias", c.attn_bias},
              {"attn_out_bias", c.attn_out_bias},
              {"mlp_bias", c.mlp_bias},
              {"tied_embeddings", c.tied_embeddings},
              {"scaled_residual_init", c.scaled_residual_init},
              {"rope_scaling", json{{"type", rope_scaling_name(c.rope_scaling.type)},
                                    {"factor", c.rope_scaling.factor},
                                    {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings},
                                    {"low_freq_factor", c.rope_scaling.low_freq_factor},
                                    {"high_freq_factor", c.rope_scaling.high_freq_factor},
                                    {"beta_fast", c.rope_scaling.beta_fast},
                                    {"beta_slow", c.rope_scaling.beta_slow},
                                    {"attention_factor", c.rope_scaling.attention_factor},
                                    {"mscale", c.rope_scaling.mscale},
                                    {"mscale_all_dim", c.rope_scaling.mscale_all_dim},
                                    {"truncate", c.rope_scaling.truncate}}},
              {"moe", json{{"num_experts", c.moe.num_experts},
                           {"top_k", c.moe.top_k},
                           {"expert_ffn", c.moe.expert_ffn},
                           {"shared_experts", c.moe.shared_experts},
                           {"every", c.moe.every},
                           {"router", kRouterNames[c.moe.renormalize ? 1 : 0]},
                           {"balance", kBalanceNames[static_cast<size_t>(c.moe.balance)]},
                           {"aux_loss_coef", c.moe.aux_loss_coef},
                           {"bias_update_rate", c.moe.bias_update_rate},
                           {"router_z_loss", c.moe.router_z_loss},
                           {"capacity_factor", c.moe.capacity_factor}}}};
}

}  // namespace lmt::model
