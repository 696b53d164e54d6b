#include "lmt/model/hf_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmt/io/safetensors.h"
#include "lmt/model/rope.h"

namespace lmt::model {

using io::SafetensorsFile;
using io::TensorInfo;
using io::TensorToWrite;
using io::write_safetensors;

namespace {

using nlohmann::json;

// Reads key as T; a missing key yields `fallback` when given, else an error naming file and key.
template <typename T>
Status get(const json& j, const std::string& path, const char* key, T* out, const T* fallback = nullptr) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) {
      *out = *fallback;
      return Status::Ok();
    }
    return InvalidArgument(path + ": missing key '" + key + "'", "a Hugging Face config.json has it; re-export the model");
  }
  auto wrong_type = [&] {
    return InvalidArgument(path + ": key '" + key + "' has the wrong type (" + it->dump() + ")",
                           "compare with the model's published config.json");
  };
  // An integer key may hold a float with an integral value (64.0); any other float (64.5, 1e300) is
  // the wrong type: get<int64_t>() would truncate it or, beyond int64's range, be undefined.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (it->is_number_float()) {
      const double d = it->get<double>();
      if (!(std::abs(d) < 0x1p62) || d != std::floor(d)) return wrong_type();
      *out = static_cast<T>(d);
      return Status::Ok();
    }
  }
  try {
    *out = it->get<T>();
  } catch (const json::exception&) {
    return wrong_type();
  }
  return Status::Ok();
}

// The RoPE dict of an HF config: "rope_parameters" (transformers 5) or "rope_scaling" (older, its
// type under "type" or "rope_type"; it wins when both are there and it is not empty, as in
// transformers' convert_rope_params_to_dict), with the defaults transformers applies (modeling_rope_utils.py:
// standardize_rope_params and the ROPE_INIT_FUNCTIONS). Its rope_theta wins over the top-level one
// (*theta). Needs c->max_seq_len (max_position_embeddings) already read; for dynamic it is raised
// to max_position_embeddings · factor, the context the scaling is for (rope.h).
Status rope_from_hf(const json& j, const std::string& path, double* theta, ModelConfig* c) {
  // transformers: a non-empty rope_scaling wins over rope_parameters (its rope_theta then comes from
  // the top level).
  const char* key = "rope_scaling";
  auto it = j.find(key);
  if (it == j.end() || it->is_null() || (it->is_object() && it->empty())) {
    key = "rope_parameters";
    it = j.find(key);
  }
  if (it == j.end() || it->is_null()) return Status::Ok();
  const std::string where = path + ": " + key;
  if (!it->is_object()) return InvalidArgument(where + " must be an object, got " + it->dump(), "compare with the model's published config.json");
  const json& r = *it;
  for (const auto& [k, v] : r.items()) {
    if (v.is_object())
      return Unimplemented(where + " has per-layer-type RoPE parameters ('" + k + "')",
                           "lmtrain supports one RoPE for all layers (llama, mistral, qwen2, qwen3)");
  }
  std::string type = "default";
  const std::string* fallback = &type;
  std::string legacy;
  LMT_RETURN_IF_ERROR(get(r, where, "type", &legacy, fallback));
  LMT_RETURN_IF_ERROR(get(r, where, "rope_type", &type, &legacy));
  auto parsed = rope_scaling_type_from_name(type);
  if (!parsed.ok()) {
    return Unimplemented(where + ": rope_type '" + type + "' is not supported",
                         "supported: default, linear, dynamic, yarn, llama3");
  }
  LMT_RETURN_IF_ERROR(get(r, where, "rope_theta", theta, theta));
  RopeScaling& s = c->rope_scaling;
  s = RopeScaling{};
  s.type = *parsed;
  if (s.type == RopeScalingType::kNone) return Status::Ok();
  LMT_RETURN_IF_ERROR(get(r, where, "factor", &s.factor));
  const int64_t max_pos = c->max_seq_len;
  switch (s.type) {
    case RopeScalingType::kDynamic: {
      // HF's dynamic starts scaling past max_position_embeddings; lmtrain's max_seq_len is the
      // context the scaling reaches.
      s.original_max_position_embeddings = max_pos;
      const double reach = std::floor(static_cast<double>(max_pos) * s.factor);
      if (std::isfinite(reach) && reach > static_cast<double>(max_pos) && reach <= static_cast<double>(ModelLimits::kMaxSeqLen))
        c->max_seq_len = static_cast<int64_t>(reach);
      break;
    }
    case RopeScalingType::kYarn:
    case RopeScalingType::kLlama3: {
      // transformers: a top-level original_max_position_embeddings wins, then the dict's, then
      // max_position_embeddings.
      int64_t orig = max_pos;
      LMT_RETURN_IF_ERROR(get(r, where, "original_max_position_embeddings", &orig, &orig));
      LMT_RETURN_IF_ERROR(get(j, path, "original_max_position_embeddings", &orig, &orig));
      s.original_max_position_embeddings = orig;
      if (s.type == RopeScalingType::kLlama3) {
        LMT_RETURN_IF_ERROR(get(r, where, "low_freq_factor", &s.low_freq_factor));
        LMT_RETURN_IF_ERROR(get(r, where, "high_freq_factor", &s.high_freq_factor));
      } else {
        // HF: beta_fast/beta_slow "or" their defaults (0 and null both mean absent); attention_factor,
        // mscale, mscale_all_dim: null means absent (lmtrain's 0).
        const double zero = 0;
        const bool yes = true;
        LMT_RETURN_IF_ERROR(get(r, where, "beta_fast", &s.beta_fast, &zero));
        LMT_RETURN_IF_ERROR(get(r, where, "beta_slow", &s.beta_slow, &zero));
        if (s.beta_fast == 0) s.beta_fast = 32;
        if (s.beta_slow == 0) s.beta_slow = 1;
        LMT_RETURN_IF_ERROR(get(r, where, "attention_factor", &s.attention_factor, &zero));
        LMT_RETURN_IF_ERROR(get(r, where, "mscale", &s.mscale, &zero));
        LMT_RETURN_IF_ERROR(get(r, where, "mscale_all_dim", &s.mscale_all_dim, &zero));
        LMT_RETURN_IF_ERROR(get(r, where, "truncate", &s.truncate, &yes));
      }
      break;
    }
    default: break;
  }
  return Status::Ok();
}

Status llama_like(const json& j, const std::string& path, ModelConfig* c) {
  int64_t heads = 0;
  c->family = model::NamingFamily::kLlama;
  LMT_RETURN_IF_ERROR(get(j, path, "vocab_size", &c->vocab_size));
  LMT_RETURN_IF_ERROR(get(j, path, "hidden_size", &c->d_model));
  LMT_RETURN_IF_ERROR(get(j, path, "intermediate_size", &c->ffn_hidden));
  LMT_RETURN_IF_ERROR(get(j, path, "num_hidden_layers", &c->n_layers));
  LMT_RETURN_IF_ERROR(get(j, path, "num_attention_heads", &heads));
  c->n_heads = heads;
  LMT_RETURN_IF_ERROR(get(j, path, "num_key_value_heads", &c->n_kv_heads, &heads));
  const int64_t default_hd = heads > 0 ? c->d_model / heads : 0;
  LMT_RETURN_IF_ERROR(get(j, path, "head_dim", &c->head_dim, &default_hd));
  const int64_t default_pos = 2048;
  LMT_RETURN_IF_ERROR(get(j, path, "max_position_embeddings", &c->max_seq_len, &default_pos));
  const double default_eps = 1e-6, default_theta = 10000.0;
  double eps = 0, theta = 0;
  LMT_RETURN_IF_ERROR(get(j, path, "rms_norm_eps", &eps, &default_eps));
  LMT_RETURN_IF_ERROR(get(j, path, "rope_theta", &theta, &default_theta));
  c->norm_eps = static_cast<float>(eps);
  LMT_RETURN_IF_ERROR(rope_from_hf(j, path, &theta, c));
  c->rope_theta = static_cast<float>(theta);
  const bool no = false;
  bool tied = false;
  LMT_RETURN_IF_ERROR(get(j, path, "tie_word_embeddings", &tied, &no));
  c->tied_embeddings = tied;
  LMT_RETURN_IF_ERROR(get(j, path, "attention_bias", &c->attn_bias, &no));
  LMT_RETURN_IF_ERROR(get(j, path, "mlp_bias", &c->mlp_bias, &no));
  std::string act;
  const std::string silu = "silu";
  LMT_RETURN_IF_ERROR(get(j, path, "hidden_act", &act, &silu));
  if (act != "silu")
    return Unimplemented(path + ": hidden_act '" + act + "' is not supported for this architecture",
                         "lmtrain models SwiGLU (silu) Llama-family MLPs");
  c->norm = model::NormKind::kRmsNorm;
  c->ffn = model::FfnKind::kGlu;
  c->activation = kernels::Activation::kSilu;
  c->positions = model::PositionKind::kRope;
  return Status::Ok();
}

Status gpt2_like(const json& j, const std::string& path, ModelConfig* c) {
  c->family = model::NamingFamily::kGpt2;
  LMT_RETURN_IF_ERROR(get(j, path, "vocab_size", &c->vocab_size));
  LMT_RETURN_IF_ERROR(get(j, path, "n_embd", &c->d_model));
  LMT_RETURN_IF_ERROR(get(j, path, "n_layer", &c->n_layers));
  LMT_RETURN_IF_ERROR(get(j, path, "n_head", &c->n_heads));
  LMT_RETURN_IF_ERROR(get(j, path, "n_positions", &c->max_seq_len));
  const double default_eps = 1e-5;
  double eps = 0;
  LMT_RETURN_IF_ERROR(get(j, path, "layer_norm_epsilon", &eps, &default_eps));
  c->norm_eps = static_cast<float>(eps);
  c->n_kv_heads = c->n_heads;
  c->head_dim = c->n_heads > 0 ? c->d_model / c->n_heads : 0;
  const int64_t inner = c->d_model > 0 && c->d_model <= INT64_MAX / 4 ? 4 * c->d_model : 0;  // validate() names d_model
  LMT_RETURN_IF_ERROR(get(j, path, "n_inner", &c->ffn_hidden, &inner));
  c->norm = model::NormKind::kLayerNorm;
  c->ffn = model::FfnKind::kMlp;
  c->activation = kernels::Activation::kGeluTanh;
  c->positions = model::PositionKind::kLearned;
  c->attn_bias = c->attn_out_bias = c->mlp_bias = true;
  c->tied_embeddings = true;
  return Status::Ok();
}

// The MoE keys of Qwen3MoeForCausalLM (model_type qwen3_moe) and OlmoeForCausalLM (olmoe), after
// llama_like(). Both route with softmax top-k (norm_topk_prob: renormalise) and balance with
// router_aux_loss_coef; what lmtrain cannot compute is refused by key.
Status moe_from_hf(const json& j, const std::string& path, const std::string& type, ModelConfig* c) {
  MoeConfig& m = c->moe;
  // transformers 5 writes Qwen3-MoE's num_experts as num_local_experts; published configs say num_experts.
  int64_t experts = 0;
  LMT_RETURN_IF_ERROR(get(j, path, "num_local_experts", &experts, &experts));
  LMT_RETURN_IF_ERROR(get(j, path, "num_experts", &m.num_experts, &experts));
  LMT_RETURN_IF_ERROR(get(j, path, "num_experts_per_tok", &m.top_k));
  const bool no = false;
  LMT_RETURN_IF_ERROR(get(j, path, "norm_topk_prob", &m.renormalize, &no));
  double aux = 0.0;
  LMT_RETURN_IF_ERROR(get(j, path, "router_aux_loss_coef", &aux, &aux));
  m.aux_loss_coef = static_cast<float>(aux);
  m.balance = MoeBalance::kAuxLoss;
  if (type == "olmoe") {
    m.expert_ffn = c->ffn_hidden;  // OLMoE's intermediate_size is the experts'
    m.every = 1;
    c->qk_norm = c->qk_norm_full = true;  // q_norm over hidden_size, k_norm over kv heads · head_dim
    c->attn_out_bias = c->attn_bias;      // attention_bias covers q, k, v and o
    auto clip = j.find("clip_qkv");
    if (clip != j.end() && !clip->is_null())
      return Unimplemented(path + ": clip_qkv = " + clip->dump() + " (clamping q, k, v) is not supported",
                           "lmtrain computes OLMoE without clip_qkv; use a checkpoint trained with clip_qkv = null");
    return Status::Ok();
  }
  // qwen3_moe
  c->qk_norm = true;
  c->attn_out_bias = c->attn_bias;
  LMT_RETURN_IF_ERROR(get(j, path, "moe_intermediate_size", &m.expert_ffn));
  const int64_t one = 1;
  LMT_RETURN_IF_ERROR(get(j, path, "decoder_sparse_step", &m.every, &one));
  int64_t shared = 0;
  LMT_RETURN_IF_ERROR(get(j, path, "shared_expert_intermediate_size", &shared, &shared));
  if (shared != 0)
    return Unimplemented(path + ": shared_expert_intermediate_size = " + std::to_string(shared) +
                             " (Qwen2-MoE's sigmoid-gated shared expert) is not supported",
                         "lmtrain's shared experts (moe.shared_experts) are ungated; Qwen3-MoE has none");
  std::vector<int64_t> dense_layers;
  LMT_RETURN_IF_ERROR(get(j, path, "mlp_only_layers", &dense_layers, &dense_layers));
  // HF: layer l is sparse when l is not in mlp_only_layers and (l + 1) % decoder_sparse_step == 0.
  // Expressible only when every listed layer is already dense by the step rule.
  for (int64_t l : dense_layers) {
    if (m.every >= 1 && m.is_moe_layer(l) && l < c->n_layers)
      return Unimplemented(path + ": mlp_only_layers lists layer " + std::to_string(l) +
                               ", which decoder_sparse_step = " + std::to_string(m.every) + " makes an MoE layer",
                           "lmtrain's MoE layers are every decoder_sparse_step-th layer (moe.every) without exceptions; "
                           "mlp_only_layers may only list layers that are dense anyway");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ModelConfig> config_from_hf(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open " + path, "a Hugging Face model directory holds config.json");
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return InvalidArgument(path + " is not a JSON object", "check the file is a Hugging Face config.json");
  ModelConfig c;
  c.name = std::filesystem::path(path).parent_path().filename().string();
  std::string type;
  LMT_RETURN_IF_ERROR(get(j, path, "model_type", &type));
  if (type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3") {
    LMT_RETURN_IF_ERROR(llama_like(j, path, &c));
    if (type == "qwen2") c.attn_bias = true;  // Qwen2 has q/k/v biases without saying so
    if (type == "qwen3") c.qk_norm = true;
    // Llama's and Qwen3's attention_bias puts a bias on o_proj too; Qwen2's and Mistral's o_proj has none.
    if (type == "llama" || type == "qwen3") c.attn_out_bias = c.attn_bias;
  } else if (type == "qwen3_moe" || type == "olmoe") {
    LMT_RETURN_IF_ERROR(llama_like(j, path, &c));
    LMT_RETURN_IF_ERROR(moe_from_hf(j, path, type, &c));
  } else if (type == "gpt2") {
    LMT_RETURN_IF_ERROR(gpt2_like(j, path, &c));
  } else {
    return Unimplemented(path + ": model_type '" + type + "' is not supported",
                         "supported: llama, mistral, qwen2, qwen3, qwen3_moe, olmoe, gpt2");
  }
  Status valid = c.validate();
  if (!valid.ok()) return valid.WithContext(path);
  return c;
}

json rope_scaling_to_hf(const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  if (c.positions != PositionKind::kRope || s.type == RopeScalingType::kNone) return json(nullptr);
  json r{{"rope_type", rope_scaling_name(s.type)}, {"rope_theta", static_cast<double>(c.rope_theta)}, {"factor", s.factor}};
  switch (s.type) {
    case RopeScalingType::kLlama3:
      r["original_max_position_embeddings"] = s.original_max_position_embeddings;
      r["low_freq_factor"] = s.low_freq_factor;
      r["high_freq_factor"] = s.high_freq_factor;
      break;
    case RopeScalingType::kYarn:
      r["original_max_position_embeddings"] = s.original_max_position_embeddings;
      r["beta_fast"] = s.beta_fast;
      r["beta_slow"] = s.beta_slow;
      if (s.attention_factor > 0) r["attention_factor"] = s.attention_factor;
      if (s.mscale != 0) r["mscale"] = s.mscale;
      if (s.mscale_all_dim != 0) r["mscale_all_dim"] = s.mscale_all_dim;
      if (!s.truncate) r["truncate"] = false;
      break;
    default: break;  // linear: factor only; dynamic: its threshold is max_position_embeddings
  }
  return r;
}

int64_t hf_max_position_embeddings(const ModelConfig& c) {
  if (c.positions == PositionKind::kRope && c.rope_scaling.type == RopeScalingType::kDynamic)
    return c.rope_scaling.original_max_position_embeddings;
  return c.max_seq_len;
}

Status load_hf_weights(const std::string& safetensors_path, const model::ParamLayout& layout, float* params) {
  LMT_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(safetensors_path));
  const bool gpt2 = layout.config().family == model::NamingFamily::kGpt2;
  std::set<std::string> used;
  std::vector<float> buf;
  for (const model::ParamInfo& p : layout.params()) {
    std::string key = p.name;
    const TensorInfo* t = file.find(key);
    if (!t && gpt2 && key.rfind("transformer.", 0) == 0) {  // some GPT-2 exports drop the prefix
      key = key.substr(std::string("transformer.").size());
      t = file.find(key);
    }
    if (!t)
      return InvalidArgument(safetensors_path + ": tensor '" + p.name + "' is missing",
                             "the config (" + layout.config().name + ") and the weights disagree; use the config.json "
                             "that came with these weights");
    used.insert(key);
    std::vector<int64_t> want;
    for (int i = 0; i < p.hf_shape.rank(); ++i) want.push_back(p.hf_shape[i]);
    if (t->shape != want) {
      std::string got;
      for (int64_t d : t->shape) got += (got.empty() ? "" : ",") + std::to_string(d);
      return InvalidArgument(safetensors_path + ": tensor '" + p.name + "' has shape [" + got + "], the config needs " +
                                 p.hf_shape.to_string(),
                             "the config and the weights disagree; use the config.json that came with these weights");
    }
    const int64_t n = p.hf_shape.numel();
    float* dst = params + p.offset;
    if (!p.hf_transposed) {
      LMT_RETURN_IF_ERROR(file.read_f32(key, dst, n));  // padded vocab rows (beyond n) stay as they are
      continue;
    }
    buf.resize(static_cast<size_t>(n));
    LMT_RETURN_IF_ERROR(file.read_f32(key, buf.data(), n));
    const int64_t rows = p.hf_shape[0], cols = p.hf_shape[1];  // HF [in, out] -> storage [out, in]
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = buf[static_cast<size_t>(r * cols + c)];
  }
  for (const TensorInfo& t : file.tensors()) {
    const bool buffer = t.name.find(".attn.bias") != std::string::npos || t.name.find(".attn.masked_bias") != std::string::npos ||
                        t.name.find("rotary_emb.inv_freq") != std::string::npos;  // non-parameter buffers
    if (!used.count(t.name) && !buffer &&
        !(layout.config().tied_embeddings && t.name == "lm_head.weight"))
      return InvalidArgument(safetensors_path + ": tensor '" + t.name + "' has no place in the config",
                             "the config and the weights disagree; use the config.json that came with these weights");
  }
  return Status::Ok();
}

}  // namespace lmt::model
