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

#include "lmt/base/status.h"
#include "lmt/model/config.h"
#include "lmt/model/params.h"

namespace lmt::model {

// Parses `path` (a config.json). The model name is the file's directory name.
StatusOr<ModelConfig> config_from_hf(const std::string& path);

// Fills params (layout.total_numel() f32 values) from a safetensors file laid out with HF names.
// GPT-2 checkpoints whose keys lack the "transformer." prefix are accepted too.
Status load_hf_weights(const std::string& safetensors_path, const ParamLayout& layout, float* params);

// Writes params (layout.total_numel() f32) as a safetensors file with HF names and shapes: F32,
// padded vocabulary rows dropped, Conv1D weights transposed back, no lm_head when tied. Atomic.
Status save_hf_weights(const std::string& safetensors_path, const ParamLayout& layout, const float* params,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace lmt::model
