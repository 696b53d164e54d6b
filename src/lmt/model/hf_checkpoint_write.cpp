// The writing half of hf_checkpoint.h: config_to_hf() and save_hf_weights_dir().
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "lmt/base/bf16.h"
#include "lmt/io/atomic_file.h"
#include "lmt/io/f16.h"
#include "lmt/io/safetensors.h"
#include "lmt/model/hf_checkpoint.h"

namespace lmt::model {
namespace {

using nlohmann::json;

Status refuse(const ModelConfig& c, const std::string& feature, const std::string& hint) {
  return Unimplemented("model '" + c.name + "' uses " + feature + ", which no Hugging Face transformers architecture computes",
                       hint + "; export to GGUF or keep the model in lmtrain");
}

// The shortest decimal that reads back as `f` (1e-05, not 9.999999747378752e-06).
double short_float(float f) {
  char buf[32];
  for (int p = 1; p <= 9; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, static_cast<double>(f));
    const double d = std::strtod(buf, nullptr);
    if (static_cast<float>(d) == f) return d;
  }
  return static_cast<double>(f);
}

}  // namespace

StatusOr<json> config_to_hf(const ModelConfig& c, const std::string& torch_dtype) {
  LMT_RETURN_IF_ERROR(c.validate());
  if (c.nope_every > 0)
    return refuse(c, "NoPE every " + std::to_string(c.nope_every) + " layers (model.nope_every)", "set model.nope_every = 0");
  if (c.rotary_fraction != 1.0f && c.positions == PositionKind::kRope)
    return refuse(c, "partial rotary embeddings (model.rotary_fraction = " + std::to_string(c.rotary_fraction) + ")",
                  "Llama, Qwen2 and Qwen3 rotate the whole head");
  json j;
  j["vocab_size"] = c.vocab_size;
  j["initializer_range"] = short_float(c.init_std);
  j["torch_dtype"] = torch_dtype;
  j["dtype"] = torch_dtype;
  j["use_cache"] = true;
  if (c.family == NamingFamily::kGpt2) {
    if (c.norm != NormKind::kLayerNorm) return refuse(c, "RMSNorm or bias-free LayerNorm in the gpt2 family", "GPT-2 uses LayerNorm with bias");
    if (c.ffn != FfnKind::kMlp) return refuse(c, "a gated FFN in the gpt2 family", "GPT-2 uses a plain MLP");
    if (c.activation != kernels::Activation::kGeluTanh)
      return refuse(c, "an activation other than gelu (tanh) in the gpt2 family", "GPT-2 uses gelu_new");
    if (c.positions != PositionKind::kLearned) return refuse(c, "non-learned positions in the gpt2 family", "GPT-2 learns its positions");
    if (!c.attn_bias || !c.attn_out_bias || !c.mlp_bias) return refuse(c, "bias-free linear layers in the gpt2 family", "GPT-2 has all biases");
    if (c.n_kv_heads != c.n_heads) return refuse(c, "grouped-query attention in the gpt2 family", "GPT-2 is multi-head");
    if (c.head_dim * c.n_heads != c.d_model) return refuse(c, "n_heads * head_dim != d_model in the gpt2 family", "GPT-2 splits d_model");
    if (!c.tied_embeddings) return refuse(c, "an untied LM head in the gpt2 family", "GPT-2 ties its LM head");
    if (c.qk_norm) return refuse(c, "q/k norms in the gpt2 family", "set model.qk_norm = false");
    j["model_type"] = "gpt2";
    j["architectures"] = {"GPT2LMHeadModel"};
    j["n_embd"] = c.d_model;
    j["n_layer"] = c.n_layers;
    j["n_head"] = c.n_heads;
    j["n_positions"] = c.max_seq_len;
    j["n_ctx"] = c.max_seq_len;
    j["n_inner"] = c.ffn_hidden;
    j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = short_float(c.norm_eps);
    j["resid_pdrop"] = j["embd_pdrop"] = j["attn_pdrop"] = 0.0;
    j["scale_attn_weights"] = true;
    j["tie_word_embeddings"] = true;
    return j;
  }
  if (c.norm != NormKind::kRmsNorm) return refuse(c, "LayerNorm in the llama family", "Llama, Qwen2 and Qwen3 use RMSNorm");
  if (c.ffn != FfnKind::kGlu || c.activation != kernels::Activation::kSilu)
    return refuse(c, "an FFN other than SwiGLU (silu, gated) in the llama family", "Llama, Qwen2 and Qwen3 use SwiGLU");
  if (c.positions != PositionKind::kRope) return refuse(c, "non-RoPE positions in the llama family", "Llama, Qwen2 and Qwen3 use RoPE");
  if (c.attn_out_bias && !c.attn_bias)
    return refuse(c, "a bias on the attention output without q/k/v biases", "Llama's attention_bias covers q, k, v and o together");
  std::string type = "llama", arch = "LlamaForCausalLM";
  if (c.qk_norm_full && !c.moe.enabled())
    return refuse(c, "full-width q/k norms in a dense model", "set model.qk_norm_full = false (OLMoE, an MoE model, has them)");
  if (c.moe.enabled()) {
    const MoeConfig& m = c.moe;
    if (m.shared_experts > 0)
      return refuse(c, "shared experts (model.moe.shared_experts)", "Qwen3-MoE and OLMoE have none");
    if (m.balance == MoeBalance::kBiasUpdate)  // the bias is not a weight: the export would route differently
      return refuse(c, "the aux-loss-free selection bias (moe.balance = bias_update), which changes which experts run",
                    "Qwen3-MoE and OLMoE route by the probabilities alone; train with moe.balance = aux_loss or none to export");
    if (!c.qk_norm) return refuse(c, "an MoE model without q/k norms", "Qwen3-MoE (per head) and OLMoE (full width) have them");
    if (c.attn_bias != c.attn_out_bias)
      return refuse(c, "q/k/v biases without an output bias", "Qwen3-MoE's and OLMoE's attention_bias covers q, k, v and o");
    if (c.qk_norm_full) {
      if (m.every != 1) return refuse(c, "dense layers between MoE layers with full-width q/k norms (OLMoE)", "OLMoE: every layer is MoE");
      if (c.head_dim * c.n_heads != c.d_model)
        return refuse(c, "n_heads * head_dim != d_model with full-width q/k norms (OLMoE)", "OLMoE splits hidden_size into heads");
      type = "olmoe", arch = "OlmoeForCausalLM";
    } else {
      type = "qwen3_moe", arch = "Qwen3MoeForCausalLM";
    }
  } else if (c.qk_norm) {
    if (c.attn_bias != c.attn_out_bias)
      return refuse(c, "q/k norms with q/k/v biases but none on the output", "Qwen3's attention_bias covers q, k, v and o");
    if (c.mlp_bias) return refuse(c, "q/k norms with MLP biases", "Qwen3's MLP has no biases");
    type = "qwen3", arch = "Qwen3ForCausalLM";
  } else if (c.attn_bias && !c.attn_out_bias) {
    if (c.mlp_bias) return refuse(c, "q/k/v biases without an output bias, with MLP biases", "Qwen2's MLP has no biases");
    type = "qwen2", arch = "Qwen2ForCausalLM";
  }
  j["model_type"] = type;
  j["architectures"] = {arch};
  j["hidden_size"] = c.d_model;
  j["intermediate_size"] = type == "olmoe" ? c.moe.expert_ffn : c.ffn_hidden;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = hf_max_position_embeddings(c);
  j["rms_norm_eps"] = short_float(c.norm_eps);
  j["rope_theta"] = short_float(c.rope_theta);
  if (nlohmann::json rope = rope_scaling_to_hf(c); !rope.is_null()) j["rope_parameters"] = std::move(rope);
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = c.tied_embeddings;
  if (type != "qwen2") j["attention_bias"] = c.attn_bias;
  if (type == "llama") j["mlp_bias"] = c.mlp_bias;
  j["attention_dropout"] = 0.0;
  if (c.moe.enabled()) {
    j["num_experts"] = c.moe.num_experts;
    j["num_experts_per_tok"] = c.moe.top_k;
    j["norm_topk_prob"] = c.moe.renormalize;
    j["router_aux_loss_coef"] = c.moe.balance == MoeBalance::kAuxLoss ? short_float(c.moe.aux_loss_coef) : 0.0;
    j["output_router_logits"] = false;
    if (type == "olmoe") {
      j["clip_qkv"] = nullptr;
      return j;
    }
    j["moe_intermediate_size"] = c.moe.expert_ffn;
    j["decoder_sparse_step"] = c.moe.every;
    j["mlp_only_layers"] = json::array();
  }
  if (type != "llama") {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = c.n_layers;
  }
  return j;
}

namespace {

// Every parameter as HF names and shapes it (padded vocabulary rows dropped, Conv1D weights
// transposed back), in `dtype`. Tensors that need no conversion point into params; the others are
// converted into `owned`, one buffer per tensor.
std::vector<io::TensorToWrite> hf_tensors(const ParamLayout& layout, const float* params, const std::string& dtype,
                                          std::vector<std::vector<char>>* owned) {
  const size_t elem = dtype == "F32" ? 4 : 2;
  std::vector<io::TensorToWrite> tensors;
  std::vector<float> transposed;
  owned->reserve(layout.params().size());
  for (const ParamInfo& p : layout.params()) {
    io::TensorToWrite t{p.name, dtype, {}, nullptr};
    for (int i = 0; i < p.hf_shape.rank(); ++i) t.shape.push_back(p.hf_shape[i]);
    const int64_t n = p.hf_shape.numel();
    const float* src = params + p.offset;  // padded vocab rows sit after the real ones: a prefix
    if (p.hf_transposed) {
      const int64_t rows = p.hf_shape[0], cols = p.hf_shape[1];  // storage [cols, rows] -> HF [rows, cols]
      transposed.resize(static_cast<size_t>(n));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t col = 0; col < cols; ++col) transposed[static_cast<size_t>(r * cols + col)] = src[col * rows + r];
      src = transposed.data();
    }
    if (dtype == "F32" && !p.hf_transposed) {
      t.data = src;
    } else {
      std::vector<char>& bytes = owned->emplace_back(static_cast<size_t>(n) * elem);
      if (dtype == "F32") {
        std::memcpy(bytes.data(), src, bytes.size());
      } else {
        auto* out = reinterpret_cast<uint16_t*>(bytes.data());
        for (int64_t i = 0; i < n; ++i) out[i] = dtype == "BF16" ? bf16(src[i]).bits : io::float_to_f16(src[i]);
      }
      t.data = bytes.data();
    }
    tensors.push_back(std::move(t));
  }
  return tensors;
}

}  // namespace

Status save_hf_weights(const std::string& safetensors_path, const ParamLayout& layout, const float* params,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<std::vector<char>> owned;
  return io::write_safetensors(safetensors_path, hf_tensors(layout, params, "F32", &owned), metadata);
}

Status save_hf_weights_dir(const std::string& dir, const ParamLayout& layout, const float* params, const std::string& dtype,
                           int64_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  if (dtype != "F32" && dtype != "BF16" && dtype != "F16")
    return InvalidArgument("weights dtype '" + dtype + "' cannot be written to a Hugging Face directory", "use F32, BF16 or F16");
  const size_t elem = dtype == "F32" ? 4 : 2;
  std::vector<std::vector<char>> owned;
  const std::vector<io::TensorToWrite> tensors = hf_tensors(layout, params, dtype, &owned);
  auto bytes_of = [&](const io::TensorToWrite& t) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    return n * static_cast<int64_t>(elem);
  };
  // Greedy sharding in layout order: a new shard when the next tensor would overflow this one.
  std::vector<std::vector<size_t>> shards(1);
  int64_t cur = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t b = bytes_of(tensors[i]);
    if (max_shard_bytes > 0 && cur > 0 && cur + b > max_shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(i);
    cur += b;
    total += b;
  }
  auto to_write = [&](const std::vector<size_t>& idx) {
    std::vector<io::TensorToWrite> w;
    for (size_t i : idx) w.push_back(tensors[i]);
    return w;
  };
  if (shards.size() == 1) return io::write_safetensors(dir + "/model.safetensors", to_write(shards[0]), metadata);
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", json::object()}};
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    LMT_RETURN_IF_ERROR(io::write_safetensors(dir + "/" + name, to_write(shards[s]), metadata));
    for (size_t i : shards[s]) index["weight_map"][tensors[i].name] = name;
  }
  return io::write_file_atomically(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
}

}  // namespace lmt::model
