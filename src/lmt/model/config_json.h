// ModelConfig <-> JSON with our own key names (those of ModelConfig: vocab_size, n_layers,
// d_model, n_heads, n_kv_heads, head_dim, ffn_hidden, ffn "glu"|"mlp", norm, positions, ...).
// Nested objects: rope_scaling {type, factor, ...} and moe {num_experts, top_k, expert_ffn,
// shared_experts, every, router "softmax_topk"|"softmax_topk_renorm" (= renormalize false|true),
// balance "none"|"aux_loss"|"bias_update", aux_loss_coef, bias_update_rate, router_z_loss,
// capacity_factor}; dotted keys "rope_scaling.KEY" / "moe.KEY" (recipes) override the objects.
// Used by model config files, checkpoints (the resolved config) and golden-test dumps.
//
// from_json: unknown keys are errors naming the key and listing the valid ones (typos must not
// fall back to defaults silently); wrong types name the key; omitted keys take ModelConfig's
// defaults, except n_kv_heads = n_heads, head_dim = d_model / n_heads and max_seq_len = 2048.
// The result is validated. to_json writes every key, so from_json(to_json(c)) == c.
// Hugging Face config.json files use other names: model/hf_checkpoint.h reads those.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "lmt/base/status.h"
#include "lmt/model/config.h"

namespace lmt::model {

// `source` names the file (or other origin) in error messages.
StatusOr<ModelConfig> model_config_from_json(const nlohmann::json& j, const std::string& source);
nlohmann::json model_config_to_json(const ModelConfig& c);

}  // namespace lmt::model
