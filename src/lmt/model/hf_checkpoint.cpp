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
  } else if (type == "gpt2") {
    LMT_RETURN_IF_ERROR(gpt2_like(j, path, &c));
  } else {
    return Unimplemented(path + ": model_type '" + type + "' is not supported",
                         "supported: llama, mistral, qwen2, qwen3, gpt2");
  }
  Status valid = c.validate();
  if (!valid.ok()) return valid.WithContext(path);
  return c;
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

Status save_hf_weights(const std::string& safetensors_path, const model::ParamLayout& layout, const float* params,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorToWrite> tensors;
  std::vector<std::vector<float>> transposed;  // owned copies of Conv1D weights in HF layout
  transposed.reserve(layout.params().size());
  for (const model::ParamInfo& p : layout.params()) {
    std::vector<int64_t> shape;
    for (int i = 0; i < p.hf_shape.rank(); ++i) shape.push_back(p.hf_shape[i]);
    const float* src = params + p.offset;  // padded vocab rows sit after the real ones: a prefix
    if (p.hf_transposed) {
      const int64_t rows = p.hf_shape[0], cols = p.hf_shape[1];  // storage [cols, rows] -> HF [rows, cols]
      std::vector<float>& t = transposed.emplace_back(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(r * cols + c)] = src[c * rows + r];
      src = t.data();
    }
    tensors.push_back({p.name, "F32", shape, src});
  }
  return write_safetensors(safetensors_path, tensors, metadata);
}

}  // namespace lmt::model
