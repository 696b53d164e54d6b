// Hugging Face checkpoints: a directory with config.json and model.safetensors.
//
// config_from_hf() maps the architectures this project models (LlamaForCausalLM, Qwen2/Qwen3,
// MistralForCausalLM, GPT2LMHeadModel) to a ModelConfig. load_hf_weights() copies every tensor
// the layout names into a flat f32 buffer, transposing GPT-2's Conv1D weights and leaving padded
// vocabulary rows at zero. A config and weights that disagree (a missing tensor, a wrong shape, an
// extra tensor the config has no place for) are rejected with the tensor named.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "lmt/base/status.h"
#include "lmt/model/config.h"
#include "lmt/model/params.h"

namespace lmt::model {

// Parses `path` (a config.json). The model name is the file's directory name. RoPE scaling comes
// from "rope_parameters" (transformers 5) or "rope_scaling" (older configs, type under "type" or
// "rope_type"; a non-empty one wins over rope_parameters, as in transformers), with transformers'
// defaults; types other than default, linear, dynamic, yarn and
// llama3 (e.g. longrope) are refused with their name. Dynamic: max_seq_len becomes
// max_position_embeddings · factor and rope_scaling.original_max_position_embeddings the HF
// max_position_embeddings (model/rope.h).
StatusOr<ModelConfig> config_from_hf(const std::string& path);

// The RoPE scaling of c as transformers 5's rope_parameters dict (rope_type, rope_theta, factor and
// the type's own keys: original_max_position_embeddings, low/high_freq_factor for llama3;
// original_max_position_embeddings, beta_fast, beta_slow and the set ones of attention_factor,
// mscale, mscale_all_dim, truncate for yarn), or null when c has none. The exporter writes it as
// config.json's "rope_parameters" (transformers < 5 read the same dict under "rope_scaling"), with
// max_position_embeddings = hf_max_position_embeddings(c).
nlohmann::json rope_scaling_to_hf(const ModelConfig& c);

// config.json's max_position_embeddings for c: max_seq_len, except for dynamic scaling, where HF's
// threshold is max_position_embeddings (= rope_scaling.original_max_position_embeddings).
int64_t hf_max_position_embeddings(const ModelConfig& c);

// Fills params (layout.total_numel() f32 values) from a safetensors file laid out with HF names.
// GPT-2 checkpoints whose keys lack the "transformer." prefix are accepted too.
Status load_hf_weights(const std::string& safetensors_path, const ParamLayout& layout, float* params);

// Writes params (layout.total_numel() f32) as a safetensors file with HF names and shapes: F32,
// padded vocabulary rows dropped, Conv1D weights transposed back, no lm_head when tied. Atomic.
Status save_hf_weights(const std::string& safetensors_path, const ParamLayout& layout, const float* params,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace lmt::model
