// Where the planner's inputs come from: a model preset or config file, and a run's measured MFU.
//
// `load_model(arg)`: a preset name (model/config.h), or a path to a JSON file holding either
// ModelConfig fields (vocab_size, n_layers, d_model, n_heads, n_kv_heads, head_dim, ffn_hidden,
// ffn "glu"|"mlp", norm, positions, tied_embeddings, max_seq_len, qk_norm, ...; unknown keys are
// errors, so typos do not silently fall back to defaults) or a Hugging Face config.json (recognised
// by `num_hidden_layers`; its standard Llama/Qwen keys are mapped, the rest ignored). Omitted keys:
// n_kv_heads = n_heads, head_dim = d_model / n_heads, the rest as ModelConfig's defaults. TOML
// configs are the config module's (not yet here): a .toml path is an Unimplemented error.
//
// `mfu_from_metrics(path)`: a run's metrics.jsonl, one JSON object per line; the lines that carry a
// numeric "mfu" are read and the median of their second half is returned (the first half is warm-up:
// compilation, allocator growth, data-loader start).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "lmt/base/status.h"
#include "lmt/model/config.h"

namespace lmt::plan {

StatusOr<model::ModelConfig> load_model(const std::string& preset_or_path);

// `source` names the file in error messages.
StatusOr<model::ModelConfig> model_from_json(const nlohmann::json& j, const std::string& source);

StatusOr<double> mfu_from_metrics(const std::string& path);

}  // namespace lmt::plan
