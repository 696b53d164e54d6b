#include "lmt/plan/model_source.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <vector>

namespace lmt::plan {
namespace {

using nlohmann::json;
using model::ModelConfig;

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
                        [](size_t i, ModelConfig& c) { c.family = i == 0 ? model::NamingFamily::kLlama : model::NamingFamily::kGpt2; })},
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
         c.norm = i == 0 ? model::NormKind::kRmsNorm : i == 1 ? model::NormKind::kLayerNorm : model::NormKind::kLayerNormNoBias;
       })},
      {"ffn", choice("ffn", {"glu", "mlp"},
                     [](size_t i, ModelConfig& c) { c.ffn = i == 0 ? model::FfnKind::kGlu : model::FfnKind::kMlp; })},
      {"activation", choice("activation", {"silu", "gelu_tanh", "relu"}, [](size_t i, ModelConfig& c) {
         c.activation = i == 0 ? kernels::Activation::kSilu : i == 1 ? kernels::Activation::kGeluTanh : kernels::Activation::kRelu;
       })},
      {"positions", choice("positions", {"rope", "learned", "none"}, [](size_t i, ModelConfig& c) {
         c.positions = i == 0 ? model::PositionKind::kRope : i == 1 ? model::PositionKind::kLearned : model::PositionKind::kNone;
       })},
      {"norm_eps", real("norm_eps", &ModelConfig::norm_eps)},
      {"rope_theta", real("rope_theta", &ModelConfig::rope_theta)},
      {"rotary_fraction", real("rotary_fraction", &ModelConfig::rotary_fraction)},
      {"init_std", real("init_std", &ModelConfig::init_std)},
      {"qk_norm", boolean("qk_norm", &ModelConfig::qk_norm)},
      {"attn_bias", boolean("attn_bias", &ModelConfig::attn_bias)},
      {"attn_out_bias", boolean("attn_out_bias", &ModelConfig::attn_out_bias)},
      {"mlp_bias", boolean("mlp_bias", &ModelConfig::mlp_bias)},
      {"tied_embeddings", boolean("tied_embeddings", &ModelConfig::tied_embeddings)},
      {"scaled_residual_init", boolean("scaled_residual_init", &ModelConfig::scaled_residual_init)},
  };
}

// Hugging Face config.json keys (Llama, Mistral, Qwen2/3, SmolLM) → ours.
const std::map<std::string, std::string>& hf_keys() {
  static const std::map<std::string, std::string> m = {
      {"vocab_size", "vocab_size"},           {"num_hidden_layers", "n_layers"},
      {"hidden_size", "d_model"},             {"num_attention_heads", "n_heads"},
      {"num_key_value_heads", "n_kv_heads"},  {"head_dim", "head_dim"},
      {"intermediate_size", "ffn_hidden"},    {"max_position_embeddings", "max_seq_len"},
      {"tie_word_embeddings", "tied_embeddings"}, {"rope_theta", "rope_theta"},
      {"rms_norm_eps", "norm_eps"},           {"attention_bias", "attn_bias"},
  };
  return m;
}

}  // namespace

StatusOr<ModelConfig> model_from_json(const json& j, const std::string& source) {
  if (!j.is_object())
    return InvalidArgument(source + ": a model config must be a JSON object, got " + std::string(j.type_name()),
                           "e.g. {\"vocab_size\": 32000, \"n_layers\": 16, \"d_model\": 2048, ...}");
  const auto table = setters(source);
  ModelConfig c;
  c.name = std::filesystem::path(source).stem().string();
  const bool hf = j.contains("num_hidden_layers");
  for (const auto& [key, value] : j.items()) {
    std::string ours = key;
    if (hf) {
      auto it = hf_keys().find(key);
      if (it == hf_keys().end() || value.is_null()) continue;  // HF configs carry many unrelated keys
      ours = it->second;
    }
    auto it = table.find(ours);
    if (it == table.end()) {
      std::string valid;
      for (const auto& [k, s] : table) valid += (valid.empty() ? "" : ", ") + k;
      return InvalidArgument(source + ": unknown key '" + key + "'", "valid keys: " + valid);
    }
    LMT_RETURN_IF_ERROR(it->second(value, c));
  }
  if (hf && j.value("model_type", std::string()) == "qwen3") c.qk_norm = true;
  if (c.n_kv_heads == 0) c.n_kv_heads = c.n_heads;
  if (c.head_dim == 0 && c.n_heads > 0) c.head_dim = c.d_model / c.n_heads;
  if (c.max_seq_len == 0) c.max_seq_len = 2048;
  Status valid = c.validate();
  if (!valid.ok()) return valid.WithContext(source + ": ");
  return c;
}

StatusOr<ModelConfig> load_model(const std::string& arg) {
  namespace fs = std::filesystem;
  const fs::path path(arg);
  const std::string ext = path.extension().string();
  const bool looks_like_file = ext == ".json" || ext == ".toml" || arg.find('/') != std::string::npos;
  std::error_code ec;
  if (!looks_like_file && !fs::exists(path, ec)) {
    auto p = model::preset(arg);
    if (!p.ok())
      return NotFound(p.status().message(), p.status().hint() + "; or pass a path to a .json model config");
    return p;
  }
  if (ext == ".toml")
    return Unimplemented("'" + arg + "': TOML model configs are read by the config module, not yet here",
                         "write the model's keys as a .json file, or use a preset name");
  std::ifstream in(arg);
  if (!in)
    return NotFound("model config file '" + arg + "' does not exist or cannot be read",
                    "pass a preset name (" + std::to_string(model::preset_names().size()) +
                        " known, e.g. llama3.2-1b) or the path of a .json model config");
  std::stringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::parse_error& e) {
    return InvalidArgument("'" + arg + "' is not valid JSON: " + e.what(),
                           "a model config is one JSON object, e.g. {\"n_layers\": 16, ...}");
  }
  return model_from_json(j, arg);
}

StatusOr<double> mfu_from_metrics(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return NotFound("metrics file '" + path + "' does not exist or cannot be read",
                    "pass the metrics.jsonl of a run (runs/<name>/metrics.jsonl) or use --mfu F");
  std::vector<double> values;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
      return DataLoss(path + ":" + std::to_string(line_no) + ": not a JSON object",
                      "metrics.jsonl holds one JSON object per line");
    if (j.is_object() && j.contains("mfu") && j["mfu"].is_number()) values.push_back(j["mfu"].get<double>());
  }
  if (values.empty())
    return InvalidArgument("metrics file '" + path + "' has no line with a numeric \"mfu\"",
                           "the trainer writes \"mfu\" on its step lines; or pass --mfu F");
  std::vector<double> tail(values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2), values.end());
  std::sort(tail.begin(), tail.end());
  return tail[tail.size() / 2];
}

}  // namespace lmt::plan
