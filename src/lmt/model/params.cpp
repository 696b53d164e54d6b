#include "lmt/model/params.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "lmt/base/rng.h"

namespace lmt::model {
namespace {
constexpr int64_t kAlignElems = 16;  // 64 bytes of f32
int64_t align_up(int64_t n) { return (n + kAlignElems - 1) / kAlignElems * kAlignElems; }
}  // namespace

void ParamLayout::add(std::string name, Shape shape, ParamRole role, int64_t layer, float init_std,
                      bool hf_transposed, Shape hf_shape, bool joined) {
  ParamInfo p;
  p.name = std::move(name);
  p.shape = shape;
  p.numel = shape.numel();
  if (hf_shape.rank() == 0) {
    hf_shape = shape;
    if (hf_transposed) hf_shape = Shape{shape[1], shape[0]};
  }
  p.hf_shape = hf_shape;
  p.offset = total_;
  p.layer = layer;
  p.role = role;
  p.hf_transposed = hf_transposed;
  p.init_std = init_std;
  total_ = joined ? total_ + p.numel : align_up(total_ + p.numel);
  params_.push_back(std::move(p));
}

ParamLayout::ParamLayout(const ModelConfig& c) : config_(c) {
  const int64_t C = c.d_model, V = c.vocab_size, Vp = c.padded_vocab(), H = c.ffn_hidden;
  const int64_t qkv_rows = c.q_dim() + 2 * c.kv_dim();
  const float std = c.init_std;
  const float out_std = c.scaled_residual_init ? std / std::sqrt(2.0f * static_cast<float>(c.n_layers)) : std;
  const int64_t up_rows = c.ffn == FfnKind::kGlu ? 2 * H : H;
  const bool gpt2 = c.family == NamingFamily::kGpt2;
  auto norm = [&](const std::string& prefix, int64_t layer) {
    add(prefix + ".weight", {C}, ParamRole::kNorm, layer, 0);
    if (c.has_norm_bias()) add(prefix + ".bias", {C}, ParamRole::kBias, layer, 0);
  };

  // An MoE layer's FFN (params.h): router, every expert's gate|up (all experts adjacent: one
  // [E, U_e, C] block), every expert's down ([E, C, He]), then the shared experts' FFN. With
  // sharded experts (moe.local_experts) only experts [e0, e1), named by their whole-model index.
  auto add_moe = [&](const std::string& p, int64_t l, float in_std, float o_std) {
    const MoeConfig& m = c.moe;
    const int64_t E = m.num_experts, He = m.expert_ffn, Hs = m.shared_experts * m.expert_ffn;
    const int64_t e0 = m.first_expert, e1 = m.first_expert + m.held_experts();
    const bool glu = c.ffn == FfnKind::kGlu, join = true;
    add(p + "mlp.gate.weight", {E, C}, ParamRole::kMatrix, l, in_std);
    for (int64_t e = e0; e < e1; ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      if (glu) add(x + "gate_proj.weight", {He, C}, ParamRole::kMatrix, l, in_std, false, {}, join);
      add(x + "up_proj.weight", {He, C}, ParamRole::kMatrix, l, in_std, false, {}, /*joined=*/e + 1 < e1);
    }
    for (int64_t e = e0; e < e1; ++e)
      add(p + "mlp.experts." + std::to_string(e) + ".down_proj.weight", {C, He}, ParamRole::kMatrix, l, o_std,
          false, {}, /*joined=*/e + 1 < e1);
    if (Hs > 0) {
      const std::string x = p + "mlp.shared_expert.";
      if (glu) add(x + "gate_proj.weight", {Hs, C}, ParamRole::kMatrix, l, in_std, false, {}, join);
      add(x + "up_proj.weight", {Hs, C}, ParamRole::kMatrix, l, in_std);
      add(x + "down_proj.weight", {C, Hs}, ParamRole::kMatrix, l, o_std);
    }
  };

  if (gpt2) {
    add("transformer.wte.weight", {Vp, C}, ParamRole::kEmbedding, -1, std, false, {V, C});
    add("transformer.wpe.weight", {c.max_seq_len, C}, ParamRole::kPosition, -1, std);
  } else {
    add("model.embed_tokens.weight", {Vp, C}, ParamRole::kEmbedding, -1, std, false, {V, C});
    if (c.positions == PositionKind::kLearned)
      add("model.embed_positions.weight", {c.max_seq_len, C}, ParamRole::kPosition, -1, std);
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (gpt2) {
      const std::string p = "transformer.h." + std::to_string(l) + ".";
      norm(p + "ln_1", l);
      add(p + "attn.c_attn.weight", {qkv_rows, C}, ParamRole::kMatrix, l, std, true);
      add(p + "attn.c_attn.bias", {qkv_rows}, ParamRole::kBias, l, 0);
      add(p + "attn.c_proj.weight", {C, c.q_dim()}, ParamRole::kMatrix, l, out_std, true);
      add(p + "attn.c_proj.bias", {C}, ParamRole::kBias, l, 0);
      norm(p + "ln_2", l);
      add(p + "mlp.c_fc.weight", {H, C}, ParamRole::kMatrix, l, std, true);
      add(p + "mlp.c_fc.bias", {H}, ParamRole::kBias, l, 0);
      add(p + "mlp.c_proj.weight", {C, H}, ParamRole::kMatrix, l, out_std, true);
      add(p + "mlp.c_proj.bias", {C}, ParamRole::kBias, l, 0);
      continue;
    }
    const std::string p = "model.layers." + std::to_string(l) + ".";
    norm(p + "input_layernorm", l);
    const bool join = true;  // q|k|v are one matrix (and one bias vector)
    add(p + "self_attn.q_proj.weight", {c.q_dim(), C}, ParamRole::kMatrix, l, std, false, {}, join);
    add(p + "self_attn.k_proj.weight", {c.kv_dim(), C}, ParamRole::kMatrix, l, std, false, {}, join);
    add(p + "self_attn.v_proj.weight", {c.kv_dim(), C}, ParamRole::kMatrix, l, std);
    if (c.attn_bias) {
      add(p + "self_attn.q_proj.bias", {c.q_dim()}, ParamRole::kBias, l, 0, false, {}, join);
      add(p + "self_attn.k_proj.bias", {c.kv_dim()}, ParamRole::kBias, l, 0, false, {}, join);
      add(p + "self_attn.v_proj.bias", {c.kv_dim()}, ParamRole::kBias, l, 0);
    }
    if (c.qk_norm) {
      add(p + "self_attn.q_norm.weight", {c.qk_norm_full ? c.q_dim() : c.head_dim}, ParamRole::kNorm, l, 0);
      add(p + "self_attn.k_norm.weight", {c.qk_norm_full ? c.kv_dim() : c.head_dim}, ParamRole::kNorm, l, 0);
    }
    add(p + "self_attn.o_proj.weight", {C, c.q_dim()}, ParamRole::kMatrix, l, out_std);
    if (c.attn_out_bias) add(p + "self_attn.o_proj.bias", {C}, ParamRole::kBias, l, 0);
    norm(p + "post_attention_layernorm", l);
    if (c.moe.is_moe_layer(l)) {
      add_moe(p, l, std, out_std);
      continue;
    }
    if (c.ffn == FfnKind::kGlu) {
      add(p + "mlp.gate_proj.weight", {H, C}, ParamRole::kMatrix, l, std, false, {}, join);
      add(p + "mlp.up_proj.weight", {H, C}, ParamRole::kMatrix, l, std);
      if (c.mlp_bias) {
        add(p + "mlp.gate_proj.bias", {H}, ParamRole::kBias, l, 0, false, {}, join);
        add(p + "mlp.up_proj.bias", {H}, ParamRole::kBias, l, 0);
      }
    } else {
      add(p + "mlp.up_proj.weight", {H, C}, ParamRole::kMatrix, l, std);
      if (c.mlp_bias) add(p + "mlp.up_proj.bias", {H}, ParamRole::kBias, l, 0);
    }
    add(p + "mlp.down_proj.weight", {C, H}, ParamRole::kMatrix, l, out_std);
    if (c.mlp_bias) add(p + "mlp.down_proj.bias", {C}, ParamRole::kBias, l, 0);
  }
  norm(gpt2 ? "transformer.ln_f" : "model.norm", -1);
  if (!c.tied_embeddings) add("lm_head.weight", {Vp, C}, ParamRole::kLmHead, -1, std, false, {V, C});
  (void)up_rows;
}

const ParamInfo* ParamLayout::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

TensorView ParamLayout::view(const ParamInfo& p, void* base, DType dtype, Device device) const {
  char* ptr = static_cast<char*>(base) + static_cast<size_t>(p.offset) * dtype_size(dtype);
  return TensorView(ptr, p.shape, dtype, device);
}

ModelViews ParamLayout::views(void* base, DType dtype, Device device) const {
  const ModelConfig& c = config_;
  ModelViews m;
  m.blocks.resize(c.n_layers);
  // Consecutive tensors (q,k,v; gate,up; their biases) are joined into one view.
  auto join = [&](const ParamInfo& first, int64_t rows, int64_t cols) {
    char* ptr = static_cast<char*>(base) + static_cast<size_t>(first.offset) * dtype_size(dtype);
    return cols > 0 ? TensorView(ptr, Shape{rows, cols}, dtype, device) : TensorView(ptr, Shape{rows}, dtype, device);
  };
  const int64_t C = c.d_model, qkv_rows = c.q_dim() + 2 * c.kv_dim();
  const int64_t up_rows = c.ffn == FfnKind::kGlu ? 2 * c.ffn_hidden : c.ffn_hidden;
  for (const ParamInfo& p : params_) {
    TensorView v = view(p, base, dtype, device);  // (fused groups are contiguous: see add()'s `joined`)
    const std::string& n = p.name;
    auto ends = [&](const std::string& suffix) {
      const size_t s = suffix.size();
      return n.size() >= s && n.compare(n.size() - s, s, suffix) == 0;
    };
    if (p.layer < 0) {
      if (p.role == ParamRole::kEmbedding) m.embed = v;
      else if (p.role == ParamRole::kPosition) m.pos_embed = v;
      else if (p.role == ParamRole::kLmHead) m.lm_head = v;
      else if (p.role == ParamRole::kNorm) m.final_norm_w = v;
      else if (p.role == ParamRole::kBias) m.final_norm_b = v;
      continue;
    }
    BlockViews& b = m.blocks[p.layer];
    if (c.moe.is_moe_layer(p.layer) && n.find(".mlp.") != std::string::npos) {
      const MoeConfig& me = c.moe;
      const int64_t E = me.held_experts(), He = me.expert_ffn, Ue = c.ffn == FfnKind::kGlu ? 2 * He : He;
      const int64_t Hs = me.shared_experts * He, Us = c.ffn == FfnKind::kGlu ? 2 * Hs : Hs;
      const std::string first = ".experts." + std::to_string(me.first_expert) + ".";  // the first held expert
      if (ends("mlp.gate.weight")) {
        b.router_w = v;
      } else if (ends(first + "gate_proj.weight") || (ends(first + "up_proj.weight") && Ue == He)) {
        b.experts_up_w = TensorView(v.data(), Shape{E, Ue, C}, dtype, device);
      } else if (ends(first + "down_proj.weight")) {
        b.experts_down_w = TensorView(v.data(), Shape{E, C, He}, dtype, device);
      } else if (n.find(".shared_expert.") != std::string::npos) {
        if (ends("gate_proj.weight") || (ends("up_proj.weight") && Us == Hs)) b.up_w = join(p, Us, C);
        else if (ends("down_proj.weight")) b.down_w = v;
      }
      continue;
    }
    if (ends("ln_1.weight") || ends("input_layernorm.weight")) b.attn_norm_w = v;
    else if (ends("ln_1.bias") || ends("input_layernorm.bias")) b.attn_norm_b = v;
    else if (ends("c_attn.weight") || ends("q_proj.weight")) b.qkv_w = join(p, qkv_rows, C);
    else if (ends("c_attn.bias") || ends("q_proj.bias")) b.qkv_b = join(p, qkv_rows, 0);
    else if (ends("q_norm.weight")) b.q_norm_w = v;
    else if (ends("k_norm.weight")) b.k_norm_w = v;
    else if (ends("c_proj.weight") && n.find(".attn.") != std::string::npos) b.o_w = v;
    else if (ends("c_proj.bias") && n.find(".attn.") != std::string::npos) b.o_b = v;
    else if (ends("o_proj.weight")) b.o_w = v;
    else if (ends("o_proj.bias")) b.o_b = v;
    else if (ends("ln_2.weight") || ends("post_attention_layernorm.weight")) b.ffn_norm_w = v;
    else if (ends("ln_2.bias") || ends("post_attention_layernorm.bias")) b.ffn_norm_b = v;
    else if (ends("c_fc.weight") || ends("gate_proj.weight") ||
             (ends("up_proj.weight") && c.ffn == FfnKind::kMlp)) b.up_w = join(p, up_rows, C);
    else if (ends("c_fc.bias") || ends("gate_proj.bias") ||
             (ends("up_proj.bias") && c.ffn == FfnKind::kMlp)) b.up_b = join(p, up_rows, 0);
    else if (ends("c_proj.weight") || ends("down_proj.weight")) b.down_w = v;
    else if (ends("c_proj.bias") || ends("down_proj.bias")) b.down_b = v;
  }
  if (c.tied_embeddings) m.lm_head = m.embed;
  const int64_t q = c.q_dim(), kv = c.kv_dim();
  for (BlockViews& b : m.blocks) {
    b.q_w = b.qkv_w.slice_rows(0, q);
    b.k_w = b.qkv_w.slice_rows(q, q + kv);
    b.v_w = b.qkv_w.slice_rows(q + kv, q + 2 * kv);
    if (b.qkv_b.present()) {
      b.q_b = b.qkv_b.slice_rows(0, q);
      b.k_b = b.qkv_b.slice_rows(q, q + kv);
      b.v_b = b.qkv_b.slice_rows(q + kv, q + 2 * kv);
    }
  }
  return m;
}

void init_params(const ParamLayout& layout, float* params, uint64_t seed) {
  std::memset(params, 0, static_cast<size_t>(layout.total_numel()) * sizeof(float));
  const int64_t V = layout.config().vocab_size, C = layout.config().d_model;
  // The random tensors, in layout order, share one stream of normal draws from Rng(seed): element e
  // of the stream takes the generator's draws [2e, 2e + 2).
  struct Span {
    float* w;
    int64_t n;
    double std;
    int64_t first;  // the stream index of w[0]
  };
  std::vector<Span> spans;
  int64_t total = 0;
  for (const ParamInfo& p : layout.params()) {
    float* w = params + p.offset;
    switch (p.role) {
      case ParamRole::kNorm:
        for (int64_t i = 0; i < p.numel; ++i) w[i] = 1.0f;
        break;
      case ParamRole::kBias: break;
      default: {
        // Embeddings: only the real vocabulary rows; padding rows stay zero.
        const int64_t n = (p.role == ParamRole::kEmbedding || p.role == ParamRole::kLmHead) ? V * C : p.numel;
        spans.push_back({w, n, p.init_std, total});
        total += n;
      }
    }
  }
  // Chunks of the stream, each from a generator advanced to its first draw (Rng::advance), over the
  // cores: the values of one sequential pass, whatever the thread count. A 1B-parameter model took
  // about 40 s on one core.
  constexpr int64_t kChunk = int64_t{1} << 20;
  const int64_t chunks = (total + kChunk - 1) / kChunk;
  auto fill_chunk = [&](int64_t c) {
    const int64_t begin = c * kChunk, end = std::min(total, begin + kChunk);
    Rng rng(seed);
    rng.advance(2 * static_cast<uint64_t>(begin));
    // The last span starting at or before `begin`.
    auto it = std::upper_bound(spans.begin(), spans.end(), begin,
                               [](int64_t e, const Span& s) { return e < s.first; }) - 1;
    for (int64_t e = begin; e < end; ++it) {
      const int64_t i1 = std::min(it->n, end - it->first);
      for (int64_t i = e - it->first; i < i1; ++i) it->w[i] = static_cast<float>(rng.normal() * it->std);
      e = it->first + i1;
    }
  };
  const int64_t threads = std::min<int64_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 1) {
    for (int64_t c = 0; c < chunks; ++c) fill_chunk(c);
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int64_t c = t; c < chunks; c += threads) fill_chunk(c);
    });
  for (std::thread& th : pool) th.join();
}

}  // namespace lmt::model
