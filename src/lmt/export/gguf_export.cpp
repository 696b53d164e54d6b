// Maps an lmtrain model onto one of llama.cpp's architectures (docs/INTEROP.md (GGUF export)):
//
//   family llama, RMSNorm, SwiGLU, RoPE         -> "llama"  (q/k rows permuted: rotate-half -> pairs)
//   ... with QK-norm                            -> "qwen3"  (NEOX RoPE: rotate-half, no permutation)
//   ... with q/k/v biases (no QK-norm)          -> "qwen2"  (NEOX RoPE)
//   family gpt2 (LayerNorm, GELU MLP, learned)  -> "gpt2"   (fused attn_qkv, position_embd)
//
// Mixture-of-experts models (every layer MoE, no shared experts, softmax top-k router):
//   llama family, renormalised top-k (Mixtral)  -> "llama"    (q/k permuted as above)
//   ... with per-head QK-norm, renormalised     -> "qwen3moe"
//   ... with full-width QK-norm, not renormalised -> "olmoe"
// with the experts stacked per layer: ffn_gate_inp [E, C] (kept f32), ffn_gate_exps / ffn_up_exps
// [E, He, C] and ffn_down_exps [E, C, He] (GGUF ne reversed).
//
// RoPE scaling: linear as rope.scaling.* metadata; llama3 as the rope_freqs tensor (per-frequency
// divisors, llama architecture only); dynamic and yarn are refused.
// Anything else (NoPE layers, learned or no positions in the llama family, LayerNorm or a plain
// MLP in the llama family, GELU-gated FFNs, ...) is refused with an error naming the feature.
#include "lmt/export/gguf_export.h"

#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "lmt/export/gguf_quant.h"
#include "lmt/export/gguf_vocab.h"
#include "lmt/export/gguf_writer.h"
#include "lmt/model/rope.h"

namespace lmt::exporter {
namespace {

using gguf::GgmlType;

// Rows of one f32 [rows, cols] storage tensor, optionally gathered through `row_map`.
struct Source {
  const float* base = nullptr;  // nullptr: zeros
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> row_map;  // output row r = base row row_map[r] (empty: identity)
  int64_t planes = 1;            // > 1: a stack of `planes` matrices of rows/planes rows (experts)
  bool keep_f32 = false;         // a matrix written F32 whatever --dtype (MoE routers)
};

// The rows of q (or k): each head's first `rot` rows go from rotate-half order (i, i + rot/2) to
// llama.cpp's interleaved pairs (2i, 2i+1), as convert_hf_to_gguf.py's LlamaModel.permute does.
std::vector<int64_t> rope_pair_permutation(int64_t heads, int64_t head_dim, int64_t rot) {
  std::vector<int64_t> map(static_cast<size_t>(heads * head_dim));
  const int64_t half = rot / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t r = 0; r < head_dim; ++r)
      map[h * head_dim + r] = h * head_dim + (r < rot ? (r % 2) * half + r / 2 : r);
  return map;
}

class Exporter {
 public:
  Exporter(const ExportModel& m, ExportDType dtype) : m_(m), c_(m.config), dtype_(dtype) {}

  Status run(const std::string& out_path);

 private:
  Status choose_arch();
  Status choose_moe_arch();
  Status add_experts(const std::string& gguf_block, const std::string& layer_prefix);
  Status add_metadata(const gguf::GgufVocab& vocab);
  Status add_tensors();
  // A parameter by its lmtrain (HF) name, nullptr if absent.
  const float* param(const std::string& name, int64_t* rows = nullptr, int64_t* cols = nullptr) const;
  Status add(const std::string& name, Source src, bool matrix);
  Status add_param(const std::string& gguf_name, const std::string& name, bool matrix,
                   std::vector<int64_t> row_map = {}, int64_t take_rows = -1);
  GgmlType matrix_type(int64_t cols) const;
  std::string key(const std::string& k) const { return arch_ + "." + k; }

  const ExportModel& m_;
  const model::ModelConfig& c_;
  ExportDType dtype_;
  std::string arch_;
  bool permute_qk_ = false;
  std::vector<float> rope_factors_;  // llama3 RoPE scaling: llama.cpp's rope_freqs tensor
  gguf::GgufWriter w_;
};

const float* Exporter::param(const std::string& name, int64_t* rows, int64_t* cols) const {
  const model::ParamInfo* p = m_.layout->find(name);
  if (p == nullptr) return nullptr;
  if (rows) *rows = p->shape.rank() >= 1 ? p->shape[0] : 1;
  if (cols) *cols = p->shape.rank() >= 2 ? p->shape[1] : 1;
  return m_.params + p->offset;
}

GgmlType Exporter::matrix_type(int64_t cols) const {
  switch (dtype_) {
    case ExportDType::kF32:
      return GgmlType::kF32;
    case ExportDType::kF16:
      return GgmlType::kF16;
    case ExportDType::kBf16:
      return GgmlType::kBf16;
    case ExportDType::kQ8_0:
      // Rows that are not whole q8_0 blocks fall back to f16, as llama.cpp's converter does.
      return cols % gguf::kQ8BlockSize == 0 ? GgmlType::kQ8_0 : GgmlType::kF16;
  }
  return GgmlType::kF32;
}

Status Exporter::add(const std::string& name, Source src, bool matrix) {
  // 1-D tensors (norms, biases) stay f32, as llama.cpp's converter keeps them.
  const GgmlType type = matrix && !src.keep_f32 ? matrix_type(src.cols) : GgmlType::kF32;
  std::vector<int64_t> ne =
      matrix ? std::vector<int64_t>{src.cols, src.rows} : std::vector<int64_t>{src.rows * src.cols};
  if (matrix && src.planes > 1) ne = {src.cols, src.rows / src.planes, src.planes};
  auto s = std::make_shared<Source>(std::move(src));
  return w_.add_tensor(name, ne, type, [s, type] {
    std::vector<float> buf(static_cast<size_t>(s->rows * s->cols), 0.0f);
    if (s->base != nullptr) {
      for (int64_t r = 0; r < s->rows; ++r) {
        const int64_t from = s->row_map.empty() ? r : s->row_map[static_cast<size_t>(r)];
        std::memcpy(buf.data() + r * s->cols, s->base + from * s->cols, static_cast<size_t>(s->cols) * 4);
      }
    }
    std::string out;
    gguf::encode(buf.data(), static_cast<int64_t>(buf.size()), type, &out);
    return out;
  });
}

Status Exporter::add_param(const std::string& gguf_name, const std::string& name, bool matrix,
                           std::vector<int64_t> row_map, int64_t take_rows) {
  int64_t rows = 0, cols = 0;
  const float* p = param(name, &rows, &cols);
  if (p == nullptr) return Internal("the layout has no parameter '" + name + "' for GGUF tensor " + gguf_name);
  Source s{p, take_rows >= 0 ? take_rows : rows, cols, std::move(row_map)};
  if (!matrix) {  // a vector: one row of `rows` values
    s.cols = s.rows;
    s.rows = 1;
  }
  return add(gguf_name, std::move(s), matrix);
}

Status Exporter::choose_arch() {
  auto refuse = [&](const std::string& feature) {
    return Unimplemented("GGUF export: llama.cpp has no architecture for " + feature + " (model '" + c_.name + "')",
                         "export to Hugging Face (--format hf) instead, or train a layout llama.cpp supports "
                         "(docs/INTEROP.md (GGUF export))");
  };
  if (c_.family == model::NamingFamily::kGpt2) {
    if (c_.activation != kernels::Activation::kGeluTanh)
      return refuse("a gpt2-family model whose MLP activation is not gelu (tanh)");
    arch_ = "gpt2";
    return Status::Ok();
  }
  if (c_.qk_norm_full && !c_.moe.enabled()) return refuse("QK-norm over whole q/k rows (qk_norm_full) in a dense model");
  if (c_.positions == model::PositionKind::kLearned) return refuse("learned positions in a llama-family model");
  if (c_.positions == model::PositionKind::kNone) return refuse("a model without positions (NoPE in every layer)");
  if (c_.nope_every > 0) return refuse("NoPE every " + std::to_string(c_.nope_every) + " layers");
  if (c_.norm != model::NormKind::kRmsNorm) return refuse("LayerNorm in a llama-family model");
  if (c_.ffn != model::FfnKind::kGlu) return refuse("a two-matrix MLP in a llama-family model");
  if (c_.activation != kernels::Activation::kSilu) return refuse("a gated FFN whose activation is not SiLU");
  // RoPE scaling: linear is llama.cpp metadata, llama3 its per-frequency rope_freqs tensor (llama
  // architecture); llama.cpp's yarn and dynamic-NTK differ from transformers' in their details, so
  // they are refused rather than written approximately.
  const model::RopeScalingType scaling = c_.rope_scaling.type;
  if (scaling == model::RopeScalingType::kDynamic) return refuse("dynamic (NTK) RoPE scaling");
  if (scaling == model::RopeScalingType::kYarn) return refuse("yarn RoPE scaling as transformers computes it");
  if (scaling == model::RopeScalingType::kLlama3 && (c_.qk_norm || c_.attn_bias))
    return refuse("llama3 RoPE scaling outside the llama architecture");
  if (c_.moe.enabled()) return choose_moe_arch();
  if (c_.qk_norm) {
    if (c_.attn_bias || c_.attn_out_bias || c_.mlp_bias) return refuse("QK-norm together with biases");
    arch_ = "qwen3";
    return Status::Ok();
  }
  if (c_.attn_bias) {
    if (c_.attn_out_bias || c_.mlp_bias) return refuse("q/k/v biases together with output or MLP biases");
    arch_ = "qwen2";
    return Status::Ok();
  }
  arch_ = "llama";
  permute_qk_ = true;
  return Status::Ok();
}

// The dense checks above (RMSNorm, SwiGLU, RoPE, its scaling) have passed.
Status Exporter::choose_moe_arch() {
  const model::MoeConfig& m = c_.moe;
  auto refuse = [&](const std::string& feature, const std::string& hint) {
    return Unimplemented("GGUF export: llama.cpp has no architecture for an MoE model with " + feature + " (model '" +
                             c_.name + "')",
                         hint + "; or export to Hugging Face (--format hf) (docs/INTEROP.md (GGUF export))");
  };
  if (m.every != 1)
    return refuse("dense layers between the MoE layers (moe.every = " + std::to_string(m.every) + ")",
                  "llama.cpp's MoE architectures make every layer MoE: train with model.moe.every = 1");
  if (m.shared_experts > 0)
    return refuse("shared experts (moe.shared_experts = " + std::to_string(m.shared_experts) + ")",
                  "llama, qwen3moe and olmoe have none: train with model.moe.shared_experts = 0");
  if (m.balance == model::MoeBalance::kBiasUpdate)
    return refuse("the aux-loss-free selection bias (moe.balance = bias_update), which changes which experts run",
                  "llama.cpp's selection bias exists only for DeepSeek-style models: train with model.moe.balance = "
                  "aux_loss or none");
  if (c_.attn_bias || c_.attn_out_bias)
    return refuse("attention biases", "llama, qwen3moe and olmoe have none: train with model.attn_bias = false and "
                                      "model.attn_out_bias = false");
  if (c_.qk_norm_full) {  // OLMoE: full-width q/k norms, top-k weights used as they are
    if (m.renormalize)
      return refuse("full-width q/k norms and renormalised top-k weights",
                    "llama.cpp's olmoe uses the top-k probabilities as they are: train with model.moe.renormalize = false");
    if (c_.n_kv_heads != c_.n_heads)
      return refuse("full-width q/k norms and grouped-query attention", "llama.cpp's olmoe has as many kv heads as heads: train with model.n_kv_heads = model.n_heads");
    arch_ = "olmoe";
    return Status::Ok();
  }
  if (!m.renormalize)
    return refuse(std::string(c_.qk_norm ? "per-head q/k norms" : "no q/k norms") + " and top-k weights not renormalised",
                  std::string("llama.cpp's ") + (c_.qk_norm ? "qwen3moe" : "llama") +
                      " divides the top-k weights by their sum: train with model.moe.renormalize = true");
  if (c_.qk_norm) {
    arch_ = "qwen3moe";
    return Status::Ok();
  }
  arch_ = "llama";  // Mixtral's layout
  permute_qk_ = true;
  return Status::Ok();
}

// One MoE layer's FFN: the router and the experts' matrices stacked. The rows are found through
// each expert's parameter, so nothing is assumed about where the experts sit in the buffer.
Status Exporter::add_experts(const std::string& b, const std::string& p) {
  const int64_t E = c_.moe.num_experts, He = c_.moe.expert_ffn, C = c_.d_model;
  int64_t rows = 0, cols = 0;
  const float* router = param(p + "mlp.gate.weight", &rows, &cols);
  if (router == nullptr) return Internal("the layout has no router '" + p + "mlp.gate.weight'");
  // Kept f32 whatever --dtype: a rounded router can pick other experts (llama.cpp's converter keeps it
  // f32 as well).
  Source r{router, rows, cols, {}};
  r.keep_f32 = true;
  LMT_RETURN_IF_ERROR(add(b + "ffn_gate_inp.weight", std::move(r), true));
  const auto stack = [&](const std::string& gguf_name, const std::string& proj, int64_t r_per, int64_t c_per) -> Status {
    const std::string first = p + "mlp.experts.0." + proj + ".weight";
    const float* base = param(first);
    if (base == nullptr) return Internal("the layout has no parameter '" + first + "'");
    Source s{base, E * r_per, c_per, {}, E};
    s.row_map.resize(static_cast<size_t>(E * r_per));
    for (int64_t e = 0; e < E; ++e) {
      const std::string name = p + "mlp.experts." + std::to_string(e) + "." + proj + ".weight";
      int64_t er = 0, ec = 0;
      const float* w = param(name, &er, &ec);
      if (w == nullptr || er != r_per || ec != c_per || (w - base) % c_per != 0)
        return Internal("the layout's '" + name + "' is not a [" + std::to_string(r_per) + ", " + std::to_string(c_per) +
                        "] matrix on a row boundary of expert 0's");
      for (int64_t r = 0; r < r_per; ++r) s.row_map[static_cast<size_t>(e * r_per + r)] = (w - base) / c_per + r;
    }
    return add(gguf_name, std::move(s), true);
  };
  LMT_RETURN_IF_ERROR(stack(b + "ffn_gate_exps.weight", "gate_proj", He, C));
  LMT_RETURN_IF_ERROR(stack(b + "ffn_up_exps.weight", "up_proj", He, C));
  return stack(b + "ffn_down_exps.weight", "down_proj", C, He);
}

Status Exporter::add_metadata(const gguf::GgufVocab& v) {
  using gguf::FileType;
  FileType ft = FileType::kAllF32;
  if (dtype_ == ExportDType::kF16) ft = FileType::kMostlyF16;
  if (dtype_ == ExportDType::kBf16) ft = FileType::kMostlyBf16;
  if (dtype_ == ExportDType::kQ8_0) ft = FileType::kMostlyQ8_0;
  auto u32 = [](int64_t x) { return static_cast<uint32_t>(x); };
  LMT_RETURN_IF_ERROR(w_.add_string("general.architecture", arch_));
  LMT_RETURN_IF_ERROR(w_.add_string("general.name", c_.name.empty() ? std::string("lmtrain") : c_.name));
  LMT_RETURN_IF_ERROR(w_.add_u32("general.file_type", static_cast<uint32_t>(ft)));
  LMT_RETURN_IF_ERROR(w_.add_u32("general.quantization_version", 2));
  LMT_RETURN_IF_ERROR(w_.add_u32("general.alignment", gguf::kAlignment));
  LMT_RETURN_IF_ERROR(w_.add_u32(key("vocab_size"), u32(c_.vocab_size)));
  LMT_RETURN_IF_ERROR(w_.add_u32(key("context_length"), u32(c_.max_seq_len)));
  LMT_RETURN_IF_ERROR(w_.add_u32(key("embedding_length"), u32(c_.d_model)));
  LMT_RETURN_IF_ERROR(w_.add_u32(key("block_count"), u32(c_.n_layers)));
  // llama.cpp's llama and olmoe size their experts by feed_forward_length; qwen3moe by
  // expert_feed_forward_length (its feed_forward_length is the dense FFN's, as in the HF config).
  const bool moe = c_.moe.enabled();
  LMT_RETURN_IF_ERROR(
      w_.add_u32(key("feed_forward_length"), u32(moe && arch_ != "qwen3moe" ? c_.moe.expert_ffn : c_.ffn_hidden)));
  if (moe) {
    LMT_RETURN_IF_ERROR(w_.add_u32(key("expert_count"), u32(c_.moe.num_experts)));
    LMT_RETURN_IF_ERROR(w_.add_u32(key("expert_used_count"), u32(c_.moe.top_k)));
    if (arch_ == "qwen3moe") LMT_RETURN_IF_ERROR(w_.add_u32(key("expert_feed_forward_length"), u32(c_.moe.expert_ffn)));
  }
  LMT_RETURN_IF_ERROR(w_.add_u32(key("attention.head_count"), u32(c_.n_heads)));
  LMT_RETURN_IF_ERROR(w_.add_u32(key("attention.head_count_kv"), u32(c_.n_kv_heads)));
  if (c_.head_dim * c_.n_heads != c_.d_model) {
    LMT_RETURN_IF_ERROR(w_.add_u32(key("attention.key_length"), u32(c_.head_dim)));
    LMT_RETURN_IF_ERROR(w_.add_u32(key("attention.value_length"), u32(c_.head_dim)));
  }
  if (arch_ == "gpt2") {
    LMT_RETURN_IF_ERROR(w_.add_f32(key("attention.layer_norm_epsilon"), c_.norm_eps));
  } else {
    LMT_RETURN_IF_ERROR(w_.add_f32(key("attention.layer_norm_rms_epsilon"), c_.norm_eps));
    LMT_RETURN_IF_ERROR(w_.add_f32(key("rope.freq_base"), c_.rope_theta));
    LMT_RETURN_IF_ERROR(w_.add_u32(key("rope.dimension_count"), u32(c_.rotary_dim())));
    if (c_.rope_scaling.type == model::RopeScalingType::kLinear) {
      LMT_RETURN_IF_ERROR(w_.add_string(key("rope.scaling.type"), "linear"));
      LMT_RETURN_IF_ERROR(w_.add_f32(key("rope.scaling.factor"), static_cast<float>(c_.rope_scaling.factor)));
    }
  }
  LMT_RETURN_IF_ERROR(w_.add_string("tokenizer.ggml.model", v.model));
  if (!v.pre.empty()) LMT_RETURN_IF_ERROR(w_.add_string("tokenizer.ggml.pre", v.pre));
  LMT_RETURN_IF_ERROR(w_.add_string_array("tokenizer.ggml.tokens", v.tokens));
  if (!v.scores.empty()) LMT_RETURN_IF_ERROR(w_.add_f32_array("tokenizer.ggml.scores", v.scores));
  LMT_RETURN_IF_ERROR(w_.add_i32_array("tokenizer.ggml.token_type", v.types));
  if (!v.merges.empty()) LMT_RETURN_IF_ERROR(w_.add_string_array("tokenizer.ggml.merges", v.merges));
  if (v.bos >= 0) LMT_RETURN_IF_ERROR(w_.add_u32("tokenizer.ggml.bos_token_id", u32(v.bos)));
  if (v.eos >= 0) LMT_RETURN_IF_ERROR(w_.add_u32("tokenizer.ggml.eos_token_id", u32(v.eos)));
  if (v.unk >= 0) LMT_RETURN_IF_ERROR(w_.add_u32("tokenizer.ggml.unknown_token_id", u32(v.unk)));
  if (v.pad >= 0) LMT_RETURN_IF_ERROR(w_.add_u32("tokenizer.ggml.padding_token_id", u32(v.pad)));
  LMT_RETURN_IF_ERROR(w_.add_bool("tokenizer.ggml.add_bos_token", v.add_bos));
  LMT_RETURN_IF_ERROR(w_.add_bool("tokenizer.ggml.add_eos_token", false));
  return Status::Ok();
}

Status Exporter::add_tensors() {
  const int64_t V = c_.vocab_size;
  const bool gpt2 = arch_ == "gpt2";
  const int64_t C = c_.d_model;
  // Only the vocab_size real rows of the (padded) embedding and LM head.
  LMT_RETURN_IF_ERROR(
      add_param("token_embd.weight", gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight", true, {}, V));
  if (gpt2) LMT_RETURN_IF_ERROR(add_param("position_embd.weight", "transformer.wpe.weight", true));
  // A LayerNorm bias llama.cpp requires but the model lacks is written as zeros (same function).
  auto norm = [&](const std::string& gguf_prefix, const std::string& prefix) -> Status {
    LMT_RETURN_IF_ERROR(add_param(gguf_prefix + ".weight", prefix + ".weight", false));
    if (!gpt2) return Status::Ok();
    if (param(prefix + ".bias")) return add_param(gguf_prefix + ".bias", prefix + ".bias", false);
    return add(gguf_prefix + ".bias", Source{nullptr, 1, C, {}}, false);
  };
  for (int64_t l = 0; l < c_.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    if (gpt2) {
      const std::string p = "transformer.h." + std::to_string(l) + ".";
      LMT_RETURN_IF_ERROR(norm(b + "attn_norm", p + "ln_1"));
      LMT_RETURN_IF_ERROR(add_param(b + "attn_qkv.weight", p + "attn.c_attn.weight", true));
      LMT_RETURN_IF_ERROR(add_param(b + "attn_qkv.bias", p + "attn.c_attn.bias", false));
      LMT_RETURN_IF_ERROR(add_param(b + "attn_output.weight", p + "attn.c_proj.weight", true));
      LMT_RETURN_IF_ERROR(add_param(b + "attn_output.bias", p + "attn.c_proj.bias", false));
      LMT_RETURN_IF_ERROR(norm(b + "ffn_norm", p + "ln_2"));
      LMT_RETURN_IF_ERROR(add_param(b + "ffn_up.weight", p + "mlp.c_fc.weight", true));
      LMT_RETURN_IF_ERROR(add_param(b + "ffn_up.bias", p + "mlp.c_fc.bias", false));
      LMT_RETURN_IF_ERROR(add_param(b + "ffn_down.weight", p + "mlp.c_proj.weight", true));
      LMT_RETURN_IF_ERROR(add_param(b + "ffn_down.bias", p + "mlp.c_proj.bias", false));
      continue;
    }
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<int64_t> q_map, k_map;
    if (permute_qk_) {
      q_map = rope_pair_permutation(c_.n_heads, c_.head_dim, c_.rotary_dim());
      k_map = rope_pair_permutation(c_.n_kv_heads, c_.head_dim, c_.rotary_dim());
    }
    LMT_RETURN_IF_ERROR(norm(b + "attn_norm", p + "input_layernorm"));
    LMT_RETURN_IF_ERROR(add_param(b + "attn_q.weight", p + "self_attn.q_proj.weight", true, q_map));
    LMT_RETURN_IF_ERROR(add_param(b + "attn_k.weight", p + "self_attn.k_proj.weight", true, k_map));
    LMT_RETURN_IF_ERROR(add_param(b + "attn_v.weight", p + "self_attn.v_proj.weight", true));
    if (c_.attn_bias) {  // qwen2 only (no permutation)
      LMT_RETURN_IF_ERROR(add_param(b + "attn_q.bias", p + "self_attn.q_proj.bias", false));
      LMT_RETURN_IF_ERROR(add_param(b + "attn_k.bias", p + "self_attn.k_proj.bias", false));
      LMT_RETURN_IF_ERROR(add_param(b + "attn_v.bias", p + "self_attn.v_proj.bias", false));
    }
    if (c_.qk_norm) {
      LMT_RETURN_IF_ERROR(add_param(b + "attn_q_norm.weight", p + "self_attn.q_norm.weight", false));
      LMT_RETURN_IF_ERROR(add_param(b + "attn_k_norm.weight", p + "self_attn.k_norm.weight", false));
    }
    LMT_RETURN_IF_ERROR(add_param(b + "attn_output.weight", p + "self_attn.o_proj.weight", true));
    if (c_.attn_out_bias) LMT_RETURN_IF_ERROR(add_param(b + "attn_output.bias", p + "self_attn.o_proj.bias", false));
    LMT_RETURN_IF_ERROR(norm(b + "ffn_norm", p + "post_attention_layernorm"));
    if (c_.moe.enabled()) {
      LMT_RETURN_IF_ERROR(add_experts(b, p));
      continue;
    }
    LMT_RETURN_IF_ERROR(add_param(b + "ffn_gate.weight", p + "mlp.gate_proj.weight", true));
    LMT_RETURN_IF_ERROR(add_param(b + "ffn_up.weight", p + "mlp.up_proj.weight", true));
    LMT_RETURN_IF_ERROR(add_param(b + "ffn_down.weight", p + "mlp.down_proj.weight", true));
    if (c_.mlp_bias) {
      LMT_RETURN_IF_ERROR(add_param(b + "ffn_gate.bias", p + "mlp.gate_proj.bias", false));
      LMT_RETURN_IF_ERROR(add_param(b + "ffn_up.bias", p + "mlp.up_proj.bias", false));
      LMT_RETURN_IF_ERROR(add_param(b + "ffn_down.bias", p + "mlp.down_proj.bias", false));
    }
  }
  LMT_RETURN_IF_ERROR(norm("output_norm", gpt2 ? "transformer.ln_f" : "model.norm"));
  if (c_.rope_scaling.type == model::RopeScalingType::kLlama3) {
    // llama.cpp divides each frequency by rope_freqs[i] (convert_hf_to_gguf.py writes the llama3
    // factors): the unscaled inv_freq over the scaled one, which for llama3 does not depend on length.
    const kernels::RopeFreqs base = kernels::RopeFreqs::from_theta(c_.rope_theta, c_.rotary_dim());
    const kernels::RopeFreqs scaled = model::rope_frequencies(c_, 1);
    rope_factors_.resize(base.inv_freq.size());
    for (size_t i = 0; i < rope_factors_.size(); ++i)
      rope_factors_[i] = static_cast<float>(base.inv_freq[i] / scaled.inv_freq[i]);
    LMT_RETURN_IF_ERROR(add("rope_freqs.weight", Source{rope_factors_.data(), 1, static_cast<int64_t>(rope_factors_.size()), {}}, false));
  }
  // Tied: no output tensor; llama.cpp reuses token_embd.
  if (!c_.tied_embeddings) LMT_RETURN_IF_ERROR(add_param("output.weight", "lm_head.weight", true, {}, V));
  return Status::Ok();
}

Status Exporter::run(const std::string& out_path) {
  if (m_.layout == nullptr || m_.params == nullptr) return Internal("export_gguf: the model has no parameters");
  LMT_RETURN_IF_ERROR(choose_arch());
  LMT_ASSIGN_OR_RETURN(gguf::GgufVocab vocab, gguf::load_gguf_vocab(m_.tokenizer_path, c_.vocab_size));
  LMT_RETURN_IF_ERROR(add_metadata(vocab));
  LMT_RETURN_IF_ERROR(add_tensors());
  return w_.write(out_path);
}

}  // namespace

Status export_gguf(const ExportModel& m, const std::string& out_path, ExportDType dtype) {
  return Exporter(m, dtype).run(out_path).WithContext("export to GGUF " + out_path);
}

}  // namespace lmt::exporter
