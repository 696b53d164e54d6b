// Hugging Face checkpoints: a directory with config.json and model.safetensors.
//
// config_from_hf() maps the architectures this project models (LlamaForCausalLM, Qwen2/Qwen3,
// MistralForCausalLM, GPT2LMHeadModel; MoE: Qwen3MoeForCausalLM, OlmoeForCausalLM) to a ModelConfig. load_hf_weights() copies every tensor
// the layout names into a flat f32 buffer, transposing GPT-2's Conv1D weights and leaving padded
// vocabulary rows at zero. A config and weights that disagree (a missing tensor, a wrong shape, an
// extra tensor the config has no place for) are rejected with the tensor named.
#pragma once

#include <cstdint>
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
// mscale, mscale_all_dim, truncate for yarn), or null when c has none. config_to_hf writes it as
// config.json's "rope_parameters" (transformers < 5 read the same dict under "rope_scaling"), with
// max_position_embeddings = hf_max_position_embeddings(c).
nlohmann::json rope_scaling_to_hf(const ModelConfig& c);

// config.json's max_position_embeddings for c: max_seq_len, except for dynamic scaling, where HF's
// threshold is max_position_embeddings (= rope_scaling.original_max_position_embeddings).
int64_t hf_max_position_embeddings(const ModelConfig& c);

// The inverse of config_from_hf: the config.json that makes transformers build this model. The
// family decides the architecture: gpt2 -> GPT2LMHeadModel; llama naming with q/k norms ->
// Qwen3ForCausalLM; with q/k/v biases but none on the output projection -> Qwen2ForCausalLM;
// MoE (moe.num_experts > 0) with per-head q/k norms -> Qwen3MoeForCausalLM (moe_intermediate_size,
// decoder_sparse_step = moe.every, mlp_only_layers []), with full-width ones (qk_norm_full) ->
// OlmoeForCausalLM (intermediate_size = moe.expert_ffn, every layer MoE); both: num_experts,
// num_experts_per_tok, norm_topk_prob = moe.renormalize, router_aux_loss_coef (0 unless
// balance = aux_loss). Shared experts and MoE models without q/k norms are refused. Reading:
// Qwen3-MoE's mlp_only_layers must list only layers the step makes dense anyway, a non-zero
// shared_expert_intermediate_size (Qwen2-MoE) and OLMoE's clip_qkv are refused;
// num_local_experts (transformers 5) is read as num_experts;
// otherwise LlamaForCausalLM (attention_bias covers q, k, v and o; mlp_bias the MLP). Layouts no
// HF architecture computes (NoPE layers, partial rotary, LayerNorm or a plain MLP in the llama
// family, ...) are refused with kUnimplemented naming the feature. `torch_dtype` ("float32",
// "bfloat16", "float16") is written as both torch_dtype and dtype. bos/eos ids are the caller's.
StatusOr<nlohmann::json> config_to_hf(const ModelConfig& c, const std::string& torch_dtype = "float32");

// Fills params (layout.total_numel() f32 values) from a safetensors file laid out with HF names.
// GPT-2 checkpoints whose keys lack the "transformer." prefix are accepted too.
Status load_hf_weights(const std::string& safetensors_path, const ParamLayout& layout, float* params);

// Writes params (layout.total_numel() f32) as a safetensors file with HF names and shapes: F32,
// padded vocabulary rows dropped, Conv1D weights transposed back, no lm_head when tied. Atomic.
Status save_hf_weights(const std::string& safetensors_path, const ParamLayout& layout, const float* params,
                       const std::map<std::string, std::string>& metadata = {});

// Writes the weights of a Hugging Face directory into `dir` (which must exist): model.safetensors,
// or, when they exceed max_shard_bytes (> 0), model-0000i-of-0000N.safetensors shards (whole
// tensors, each shard at most max_shard_bytes unless one tensor alone is larger) plus
// model.safetensors.index.json. dtype: "F32", "BF16" (round to nearest even) or "F16" (round to
// nearest even; out-of-range values become +-Inf). Same names/shapes as save_hf_weights.
inline constexpr int64_t kDefaultMaxShardBytes = int64_t{5} << 30;  // 5 GiB, as transformers' save_pretrained
Status save_hf_weights_dir(const std::string& dir, const ParamLayout& layout, const float* params, const std::string& dtype,
                           int64_t max_shard_bytes, const std::map<std::string, std::string>& metadata = {});

}  // namespace lmt::model
