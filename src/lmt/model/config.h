// ModelConfig: a decoder-only transformer described as data. A preset only chooses block variants
// and sizes; there is one transformer implementation for all of them.
//
// Two naming families decide the Hugging Face tensor names (params.h): "gpt2" (transformer.h.N...,
// learned positions, fused c_attn) and "llama" (model.layers.N..., used for Llama, SmolLM, Qwen).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/kernels/backend.h"

namespace lmt::model {

enum class NormKind : uint8_t { kLayerNorm, kLayerNormNoBias, kRmsNorm };
enum class FfnKind : uint8_t { kMlp, kGlu };  // two matrices with an activation, or gated (SwiGLU)
enum class PositionKind : uint8_t { kLearned, kRope, kNone };
enum class NamingFamily : uint8_t { kGpt2, kLlama };
// RoPE scaling (Hugging Face rope_type): how the frequencies are stretched for long contexts.
// Semantics and formulas: model/rope.h.
enum class RopeScalingType : uint8_t { kNone, kLinear, kDynamic, kYarn, kLlama3 };

// The parameters of Hugging Face's rope_parameters / rope_scaling (same names). Fields a type does
// not use are ignored (and not written to HF configs). validate() checks the ones the type uses.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;                        // linear, dynamic, yarn, llama3: >= 1
  int64_t original_max_position_embeddings = 0;  // dynamic (HF's max_position_embeddings), yarn, llama3: >= 1
  double low_freq_factor = 1.0;               // llama3: > 0
  double high_freq_factor = 4.0;              // llama3: > low_freq_factor
  double beta_fast = 32.0;                    // yarn: >= beta_slow > 0
  double beta_slow = 1.0;                     // yarn
  double attention_factor = 0.0;              // yarn: scale of cos/sin; 0 = derived from factor, mscale
  double mscale = 0.0;                        // yarn: 0 = absent
  double mscale_all_dim = 0.0;                // yarn: 0 = absent
  bool truncate = true;                       // yarn: floor/ceil the correction range

  bool operator==(const RopeScaling&) const = default;
};

// Structural limits of a ModelConfig: far above any real model, low enough that no size computation
// (parameter counts, tensor shapes, FLOPs) can overflow. validate() enforces them; the recipe
// schema's model.* ranges (config/schema.cpp) repeat them. Whether a model that passes fits in this
// machine's memory is checked separately (model_memory_check) before it is allocated.
struct ModelLimits {
  static constexpr int64_t kMaxVocab = int64_t{1} << 24;
  static constexpr int64_t kMaxVocabPadTo = int64_t{1} << 16;
  static constexpr int64_t kMaxSeqLen = int64_t{1} << 24;
  static constexpr int64_t kMaxLayers = int64_t{1} << 14;
  static constexpr int64_t kMaxDModel = int64_t{1} << 20;
  static constexpr int64_t kMaxHeads = int64_t{1} << 16;
  static constexpr int64_t kMaxHeadDim = int64_t{1} << 16;
  static constexpr int64_t kMaxFfnHidden = int64_t{1} << 22;
  static constexpr double kMaxRopeTheta = 1e12;
  static constexpr double kMaxInitStd = 10;
  static constexpr double kMaxParams = 1e13;  // 10 trillion
  static constexpr int64_t kMaxExperts = int64_t{1} << 16;        // moe.num_experts, moe.shared_experts
  static constexpr double kMaxMoeCoef = 1e3;                      // aux_loss_coef, bias_update_rate, router_z_loss
};

// Mixture-of-Experts FFN (docs/MOE.md). A layer l is an MoE layer when num_experts > 0 and
// l % every == every - 1 (Hugging Face's decoder_sparse_step); other layers keep the dense FFN of
// ModelConfig::ffn_hidden. Each routed expert is an FFN of the model's kind (ffn, activation) with
// hidden size expert_ffn; shared_experts always-on experts of the same size run beside them.
// Router: logits = x · router_wᵀ [N, E], p = softmax(logits); the top_k experts by p (ties: the
// lower expert index wins; under kBiasUpdate by p + bias, the bias steering selection only);
// weights = the chosen p, divided by their sum when renormalize.
enum class MoeBalance : uint8_t {
  kNone,
  kAuxLoss,     // Switch/Qwen auxiliary loss: aux_loss_coef · E · Σ_e f_e · P_e
  kBiasUpdate,  // DeepSeek-V3 aux-loss-free: bias_e += bias_update_rate · sign(mean load - load_e)
};

struct MoeConfig {
  int64_t num_experts = 0;     // E; 0: a dense model
  int64_t top_k = 0;           // K in [1, E]
  int64_t expert_ffn = 0;      // hidden size of each expert
  int64_t shared_experts = 0;  // always-on experts (hidden expert_ffn each)
  int64_t every = 1;           // MoE layers: l % every == every - 1
  bool renormalize = true;     // divide the top-k weights by their sum (Qwen3-MoE: true, OLMoE: false)
  MoeBalance balance = MoeBalance::kAuxLoss;
  float aux_loss_coef = 0.01f;       // kAuxLoss
  float bias_update_rate = 1e-3f;    // kBiasUpdate
  float router_z_loss = 0.0f;        // coefficient of mean(logsumexp(logits)²); 0: off
  float capacity_factor = 0.0f;      // 0: dropless; else capacity = ceil(factor · N · K / E) tokens per expert
  // A pipeline stage's config (model/pipeline_split.h) is blocks [first_layer, first_layer +
  // n_layers) of a whole model of whole_layers blocks, and keeps that model's MoE pattern; a whole
  // model has first_layer = whole_layers = 0. Not recipe keys, never in model.json.
  int64_t first_layer = 0;
  int64_t whole_layers = 0;
  // Expert parallelism with sharded experts (train/expert_shard_plan.h): this model holds routed
  // experts [first_expert, first_expert + local_experts) of num_experts in every MoE layer
  // (local_experts 0: all of them); the router stays [num_experts, C]. Internal, like first_layer.
  int64_t local_experts = 0;
  int64_t first_expert = 0;

  bool enabled() const { return num_experts > 0; }
  int64_t held_experts() const { return local_experts > 0 ? local_experts : num_experts; }
  bool experts_sharded() const { return local_experts > 0 && local_experts < num_experts; }
  // Block `layer` of this model (the whole model's block first_layer + layer) is an MoE layer.
  bool is_moe_layer(int64_t layer) const { return enabled() && (first_layer + layer) % every == every - 1; }
  bool operator==(const MoeConfig&) const = default;
};

struct ModelConfig {
  std::string name;
  NamingFamily family = NamingFamily::kLlama;

  int64_t vocab_size = 0;   // V: real vocabulary (what the tokenizer produces)
  int64_t vocab_pad_to = 64;  // the embedding/LM-head rows are padded to a multiple of this
  int64_t max_seq_len = 0;  // positions (learned table size; RoPE limit)
  int64_t n_layers = 0;
  int64_t d_model = 0;      // C
  int64_t n_heads = 0;      // NH
  int64_t n_kv_heads = 0;   // G (== NH: MHA; 1: MQA; else GQA)
  int64_t head_dim = 0;     // HD (NH·HD need not equal C)
  int64_t ffn_hidden = 0;   // H

  NormKind norm = NormKind::kRmsNorm;
  float norm_eps = 1e-5f;
  FfnKind ffn = FfnKind::kGlu;
  kernels::Activation activation = kernels::Activation::kSilu;

  PositionKind positions = PositionKind::kRope;
  float rope_theta = 10000.0f;
  float rotary_fraction = 1.0f;  // partial RoPE: rotary_dim = round(HD · fraction) (even)
  RopeScaling rope_scaling;      // none by default (model/rope.h)
  int64_t nope_every = 0;        // > 0: every N-th layer (l % N == N-1) uses no positions (NoPE)

  bool qk_norm = false;       // RMSNorm over each head of q and k (Qwen3)
  bool qk_norm_full = false;  // with qk_norm: over the whole q [NH·HD] and k [G·HD] rows instead (OLMoE)
  bool attn_bias = false;     // biases on q, k, v
  bool attn_out_bias = false; // bias on the attention output projection
  bool mlp_bias = false;      // biases on the FFN matrices
  bool tied_embeddings = true;

  MoeConfig moe;              // num_experts == 0: no MoE layers

  float init_std = 0.02f;
  bool scaled_residual_init = true;  // output projections get init_std / sqrt(2·n_layers)

  int64_t padded_vocab() const { return (vocab_size + vocab_pad_to - 1) / vocab_pad_to * vocab_pad_to; }
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  int64_t rotary_dim() const;
  bool layer_uses_rope(int64_t layer) const;
  bool has_norm_bias() const { return norm == NormKind::kLayerNorm; }

  // Checks every constraint; the message names the offending values and the hint says how to fix.
  Status validate() const;
  // Exact trainable parameter count (unpadded vocabulary; tied embeddings counted once). MoE layers
  // count every routed expert, the router [E, C] and the shared experts.
  int64_t param_count() const;
  // The same count in floating point: defined (no overflow) for any field values.
  double param_count_estimate() const;
  // Parameters one token uses: param_count() minus (E - top_k) routed experts per MoE layer (router,
  // shared experts, embeddings and the LM head counted in full). == param_count() for dense models.
  int64_t active_param_count() const;
  double active_param_count_estimate() const;
  // Parameters of one FFN of hidden size h of this model's kind (ffn, mlp_bias): up (+gate) and down.
  int64_t ffn_param_count(int64_t h) const;
  // Layers l with moe.is_moe_layer(l).
  int64_t moe_layer_count() const;
};

// The dense model an MoE model is measured against (`lmtrain bench train --dense-peer`): every FFN
// dense with hidden (top_k + shared_experts) · expert_ffn and no routers, so its parameters are the
// MoE model's active ones minus the routers' E·C per layer (an FFN's parameters are linear in its
// hidden size). InvalidArgument for a dense model, or moe.every > 1 (the dense layers would change).
StatusOr<ModelConfig> dense_peer(const ModelConfig& c);

// OK when a model of `c` (parameters in `bytes_per_param` bytes each, plus `extra_bytes`) fits in
// the target's memory (this machine's by default, or a device's: Backend::memory_target()); otherwise an error naming `what`, the sizes and the model's shape. Run
// before allocating the parameters, so that a huge config is refused at once.
Status model_memory_check(const ModelConfig& c, double bytes_per_param, double extra_bytes, const std::string& what,
                          const MemoryTarget& target = {});

// Known presets: gpt2-124m, gpt2-350m, gpt2-1.3b, llama-124m, llama2-1.3b, llama3-2.2b,
// llama3.2-1b, smollm-360m, smollm2-135m, qwen3-1.8b, tiny; MoE: olmoe-1b-7b, qwen3-30b-a3b, tiny-moe.
StatusOr<ModelConfig> preset(const std::string& name);
std::vector<std::string> preset_names();

std::string_view norm_name(NormKind k);
std::string_view ffn_name(FfnKind k);
std::string_view position_name(PositionKind k);
std::string_view family_name(NamingFamily f);
std::string_view rope_scaling_name(RopeScalingType t);  // "none", "linear", "dynamic", "yarn", "llama3"

}  // namespace lmt::model
