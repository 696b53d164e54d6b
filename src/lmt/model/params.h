// ParamLayout: every parameter of a ModelConfig as a named, offset slice of one flat buffer.
//
// Names are the Hugging Face ones, so checkpoints and exports need no renaming:
//   llama family: model.embed_tokens.weight, model.layers.L.input_layernorm.weight,
//     model.layers.L.self_attn.{q,k,v,o}_proj.{weight,bias}, model.layers.L.self_attn.{q,k}_norm.weight,
//     model.layers.L.post_attention_layernorm.weight, model.layers.L.mlp.{gate,up,down}_proj.{weight,bias},
//     model.norm.weight, lm_head.weight (untied only). LayerNorm variants add ".bias" to the norms.
//   gpt2 family: transformer.wte.weight, transformer.wpe.weight, transformer.h.L.ln_1.{weight,bias},
//     transformer.h.L.attn.c_attn.{weight,bias} (q,k,v fused), transformer.h.L.attn.c_proj.{weight,bias},
//     transformer.h.L.ln_2.*, transformer.h.L.mlp.c_fc.*, transformer.h.L.mlp.c_proj.*, transformer.ln_f.*.
//   MoE layers (config.moe.is_moe_layer(L); Qwen3-MoE / OLMoE / Qwen2-MoE names) replace the dense
//     mlp.* with model.layers.L.mlp.gate.weight [E, C] (the router; role kMatrix: decayed and
//     Muon-updated like every block matrix), model.layers.L.mlp.experts.e.{gate,up,down}_proj.weight
//     ([He, C], [He, C], [C, He]; no gate_proj with FfnKind::kMlp) and, with shared_experts > 0,
//     model.layers.L.mlp.shared_expert.{gate,up,down}_proj.weight with hidden Hs = shared_experts·He.
//     The shared experts are ungated (no Qwen2-MoE shared_expert_gate): their output is added as is.
//     All experts' gate|up rows are adjacent (expert 0 gate, expert 0 up, expert 1 gate, ...), so they
//     are one [E, 2He, C] tensor, and all down matrices follow as one [E, C, He] tensor.
// Storage is always nn.Linear's [out, in]. GPT-2's HF checkpoints use Conv1D ([in, out]); such
// tensors are marked `hf_transposed` and io transposes them on import/export.
//
// Adjacency is part of the contract: q, k, v (and their biases) are consecutive, so together they
// are one [(NH+2G)·HD, C] matrix; gate and up are consecutive ([2H, C], gate first), matching
// glu_forward's fused input. The token embedding has padded_vocab() rows; rows >= vocab_size are
// zero and never read (the HF shape has vocab_size rows). Every tensor starts 64-byte aligned except
// the later members of a fused group (k, v; up), which follow their predecessor without a gap.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmt/model/config.h"
#include "lmt/tensor/tensor.h"

namespace lmt::model {

enum class ParamRole : uint8_t {
  kEmbedding,  // token embedding (and the tied LM head)
  kPosition,   // learned position embedding
  kLmHead,     // untied LM head
  kMatrix,     // a 2-D weight inside a block (attention or FFN): weight decay, Muon
  kNorm,       // norm weight (QK-norm included)
  kBias,       // any bias (norm biases included)
};

struct ParamInfo {
  std::string name;
  Shape shape;             // storage shape ([out, in] for matrices; [padded_vocab, C] for embeddings)
  Shape hf_shape;          // the shape in a Hugging Face checkpoint
  int64_t offset = 0;      // elements into the flat buffer
  int64_t numel = 0;       // elements of storage
  int64_t layer = -1;      // block index, -1 outside blocks
  ParamRole role = ParamRole::kMatrix;
  bool hf_transposed = false;
  float init_std = 0.0f;   // normal(0, init_std) for matrices and embeddings; norms 1, biases 0
};

// Views of one block's parameters in some flat buffer (params, grads or the bf16 mirror).
// Absent views for parameters the config does not have.
struct BlockViews {
  TensorView attn_norm_w, attn_norm_b;
  TensorView qkv_w;             // [(NH+2G)·HD, C]: q rows, then k, then v
  TensorView q_w, k_w, v_w;     // row slices of qkv_w
  TensorView qkv_b, q_b, k_b, v_b;
  TensorView q_norm_w, k_norm_w;  // [HD]
  TensorView o_w, o_b;          // [C, NH·HD], [C]
  TensorView ffn_norm_w, ffn_norm_b;
  TensorView up_w, up_b;        // [2H, C] gate then up (GLU) or [H, C] (MLP)
  TensorView down_w, down_b;    // [C, H]
  // MoE layers (config.moe.is_moe_layer): up_w/down_w are the shared experts' ([Us, C], [C, Hs];
  // absent without shared experts) and there are no FFN biases.
  TensorView router_w;          // [E, C]
  TensorView experts_up_w;      // [E, Ue, C]: expert e's gate rows then up rows (GLU), or up rows
  TensorView experts_down_w;    // [E, C, He]
  // (With sharded experts, moe.local_experts: E = the held experts, from moe.first_expert.)
};

// Calls f on every view of b (sub-views such as q_w, q_b included), for code that remaps them
// all (train/zero3.cpp). A field added to BlockViews is added here too.
template <typename F>
void for_each_view(BlockViews& b, F&& f) {
  for (TensorView* v : {&b.attn_norm_w, &b.attn_norm_b, &b.qkv_w, &b.q_w, &b.k_w, &b.v_w, &b.qkv_b, &b.q_b, &b.k_b,
                        &b.v_b, &b.q_norm_w, &b.k_norm_w, &b.o_w, &b.o_b, &b.ffn_norm_w, &b.ffn_norm_b, &b.up_w,
                        &b.up_b, &b.down_w, &b.down_b, &b.router_w, &b.experts_up_w, &b.experts_down_w})
    f(*v);
}
static_assert(sizeof(BlockViews) == 23 * sizeof(TensorView), "for_each_view must list every BlockViews field");

struct ModelViews {
  TensorView embed;       // [padded_vocab, C]
  TensorView pos_embed;   // [max_seq_len, C] (learned positions only)
  std::vector<BlockViews> blocks;
  TensorView final_norm_w, final_norm_b;
  TensorView lm_head;     // [padded_vocab, C]: == embed when tied
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  int64_t total_numel() const { return total_; }  // including alignment gaps and vocab padding
  const ParamInfo* find(const std::string& name) const;

  // Views into a flat buffer of total_numel() elements of any dtype, living on `device`.
  ModelViews views(void* base, DType dtype, Device device = Device::host()) const;
  TensorView view(const ParamInfo& p, void* base, DType dtype, Device device = Device::host()) const;

 private:
  // `joined`: the next tensor continues this one without an alignment gap (members of a fused
  // q|k|v or gate|up group must be contiguous, whatever their sizes).
  void add(std::string name, Shape shape, ParamRole role, int64_t layer, float init_std,
           bool hf_transposed = false, Shape hf_shape = Shape(), bool joined = false);
  ModelConfig config_;
  std::vector<ParamInfo> params_;
  int64_t total_ = 0;
};

// Fills params (f32, total_numel()) with the initialisation: normal(0, init_std) for matrices and
// embeddings (output projections scaled by 1/sqrt(2·n_layers) when configured), 1 for norm
// weights, 0 for biases and padding. Deterministic in seed.
void init_params(const ParamLayout& layout, float* params, uint64_t seed);

}  // namespace lmt::model
