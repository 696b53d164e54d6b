// Where the planner's inputs come from: a model preset or config file, and a run's measured MFU.
//
// `load_model(arg)`: a preset name (model/config.h), or a path to a JSON file holding either
// ModelConfig fields (vocab_size, n_layers, d_model, n_heads, n_kv_heads, head_dim, ffn_hidden,
// ffn "glu"|"mlp", norm, positions, tied_embeddings, max_seq_len, qk_norm, ...: model/config_json.h)
// or a Hugging Face config.json (recognised by `model_type`: model/hf_checkpoint.h). TOML
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

StatusOr<double> mfu_from_metrics(const std::string& path);

}  // namespace lmt::plan
