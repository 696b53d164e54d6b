// Tensor parallelism: the shard config and the full <-> shard parameter map (tensor_parallel.h).
#include "lmt/model/tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "lmt/base/check.h"

namespace lmt::model {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// The tensors a shard holds only a part of, by their (llama-family) name's ending.
bool is_split(const std::string& name) {
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return true;  // vocabulary rows
  for (const char* end : {".q_proj.weight", ".k_proj.weight", ".v_proj.weight", ".q_proj.bias", ".k_proj.bias",
                          ".v_proj.bias", ".o_proj.weight", ".gate_proj.weight", ".up_proj.weight", ".gate_proj.bias",
                          ".up_proj.bias", ".down_proj.weight"}) {
    const size_t n = std::strlen(end);
    if (name.size() >= n && name.compare(name.size() - n, n, end) == 0) return true;
  }
  return false;
}

ModelConfig checked_shard(const ModelConfig& full, int tp) {
  StatusOr<ModelConfig> s = shard_config(full, tp);
  LMT_CHECK(s.ok()) << s.status().ToString();
  return *s;
}

// Rows [row0, row0 + s.dim(0)) of f <-> all of s (same row width).
void copy_rows(const TensorView& f, const TensorView& s, int64_t row0, bool to_full) {
  if (!s.present()) return;
  const int64_t width = s.numel() / s.dim(0);
  float* fp = f.as<float>() + row0 * width;
  float* sp = s.as<float>();
  if (to_full) std::memcpy(fp, sp, static_cast<size_t>(s.numel()) * sizeof(float));
  else std::memcpy(sp, fp, static_cast<size_t>(s.numel()) * sizeof(float));
}

// Columns [col0, col0 + s.dim(1)) of f [R, Cf] <-> s [R, Cs].
void copy_cols(const TensorView& f, const TensorView& s, int64_t col0, bool to_full) {
  if (!s.present()) return;
  const int64_t R = s.dim(0), cs = s.dim(1), cf = f.dim(1);
  for (int64_t r = 0; r < R; ++r) {
    float* fp = f.as<float>() + r * cf + col0;
    float* sp = s.as<float>() + r * cs;
    if (to_full) std::memcpy(fp, sp, static_cast<size_t>(cs) * sizeof(float));
    else std::memcpy(sp, fp, static_cast<size_t>(cs) * sizeof(float));
  }
}

// Expert e's matrix of an [E, R, K] experts tensor, as [R, K].
TensorView expert(const TensorView& v, int64_t e) { return v.slice_rows(e, e + 1).reshape(Shape{v.dim(1), v.dim(2)}); }

// A column-parallel up projection's rows (or bias) [U, ...]: GLU gate rows then up rows, each
// [rank·h, (rank+1)·h) of the full H; MLP rows [rank·h, (rank+1)·h).
void copy_up_rows(const TensorView& f, const TensorView& s, int64_t rank, int64_t h, int64_t H, bool glu, bool to_full) {
  if (!s.present()) return;
  if (!glu) {
    copy_rows(f, s, rank * h, to_full);
    return;
  }
  copy_rows(f, s.slice_rows(0, h), rank * h, to_full);
  copy_rows(f, s.slice_rows(h, 2 * h), H + rank * h, to_full);
}

void copy_whole(const TensorView& f, const TensorView& s, bool to_full) {
  if (!s.present()) return;
  LMT_CHECK(f.numel() == s.numel()) << "replicated tensor of " << f.numel() << " vs " << s.numel() << " elements";
  if (to_full) std::memcpy(f.data(), s.data(), s.bytes());
  else std::memcpy(s.data(), f.data(), s.bytes());
}

}  // namespace

Status tensor_parallel_supported(const ModelConfig& full, int tp) {
  if (tp <= 1) return Status::Ok();
  const std::string at = "parallel.tp = " + str(tp) + " for model '" + full.name + "': ";
  if (full.qk_norm_full)
    return Unimplemented(at + "qk_norm_full normalises whole q/k rows across heads, which tensor parallelism splits",
                         "use parallel.tp = 1 for this model");
  return Status::Ok();
}

VocabSlice vocab_slice(const ModelConfig& full, int tp, int rank) {
  VocabSlice v;
  v.rows = full.padded_vocab() / tp;
  v.begin = rank * v.rows;
  v.real = std::clamp<int64_t>(full.vocab_size - v.begin, 0, v.rows);
  return v;
}

StatusOr<ModelConfig> shard_config(const ModelConfig& full, int tp) {
  if (tp == 1) return full;
  const std::string at = "parallel.tp = " + str(tp) + " for model '" + full.name + "': ";
  const std::string hint = "choose parallel.tp dividing model.n_heads, model.n_kv_heads and model.ffn_hidden";
  if (tp < 1) return InvalidArgument(at + "the tensor-parallel degree must be >= 1", hint);
  if (full.n_heads % tp != 0) return InvalidArgument(at + "does not divide n_heads = " + str(full.n_heads), hint);
  if (full.n_kv_heads % tp != 0)
    return InvalidArgument(at + "does not divide n_kv_heads = " + str(full.n_kv_heads) +
                               " (the KV heads are split, not replicated)", hint);
  // An MoE model whose every layer is MoE has no dense FFN: ffn_hidden is then unused.
  const bool dense_ffn = full.moe_layer_count() < full.n_layers;
  if (dense_ffn && full.ffn_hidden % tp != 0)
    return InvalidArgument(at + "does not divide ffn_hidden = " + str(full.ffn_hidden), hint);
  if (full.moe.enabled() && full.moe.expert_ffn % tp != 0)
    return InvalidArgument(at + "does not divide moe.expert_ffn = " + str(full.moe.expert_ffn) +
                               " (each expert's hidden units are split like the dense FFN's)",
                           "choose parallel.tp dividing model.moe.expert_ffn");
  LMT_RETURN_IF_ERROR(tensor_parallel_supported(full, tp));
  if (full.padded_vocab() % tp != 0 || vocab_slice(full, tp, tp - 1).real <= 0)
    return InvalidArgument(at + "does not split the padded vocabulary " + str(full.padded_vocab()) +
                               " into parts that each hold real tokens (vocab_size " + str(full.vocab_size) + ")",
                           hint + ", with the padded vocabulary a multiple of it");
  ModelConfig s = full;
  s.name = full.name + "/tp" + str(tp);
  s.vocab_size = full.padded_vocab() / tp;
  s.vocab_pad_to = 1;
  s.family = NamingFamily::kLlama;  // gpt2's names need n_heads·head_dim = d_model
  s.n_heads = full.n_heads / tp;
  s.n_kv_heads = full.n_kv_heads / tp;
  if (dense_ffn) s.ffn_hidden = full.ffn_hidden / tp;
  if (full.moe.enabled()) s.moe.expert_ffn = full.moe.expert_ffn / tp;
  LMT_RETURN_IF_ERROR(s.validate());
  return s;
}

std::vector<std::pair<int64_t, int64_t>> tensor_parallel_replicated_ranges(const ParamLayout& part) {
  std::vector<std::pair<int64_t, int64_t>> r;
  for (const ParamInfo& p : part.params())
    if (!is_split(p.name)) r.emplace_back(p.offset, p.offset + p.numel);
  std::sort(r.begin(), r.end());
  return r;
}

TensorParallelMap::TensorParallelMap(const ModelConfig& full, int tp)
    : tp_(tp), full_(full), shard_(checked_shard(full, tp)) {
  replicated_ = tensor_parallel_replicated_ranges(shard_);
  int64_t all = 0, replicated = 0, whole = 0;
  for (const ParamInfo& p : shard_.params()) all += p.numel;
  for (const auto& [b, e] : replicated_) replicated += e - b;
  for (const ParamInfo& p : full_.params()) whole += p.numel;
  LMT_CHECK(replicated + (all - replicated) * tp == whole)
      << "tensor-parallel map of '" << full.name << "': " << replicated << " replicated + " << tp << " x "
      << all - replicated << " split elements != " << whole;
}

void TensorParallelMap::copy(int rank, float* full, float* shard, bool to_full, bool replicated) const {
  LMT_CHECK(rank >= 0 && rank < tp_) << "tensor-parallel rank " << rank << " of " << tp_;
  const ModelViews f = full_.views(full, DType::kF32), s = shard_.views(shard, DType::kF32);
  const ModelConfig& sc = shard_.config();
  const int64_t q = sc.q_dim(), kv = sc.kv_dim(), h = sc.ffn_hidden, H = full_.config().ffn_hidden;
  const bool glu = sc.ffn == FfnKind::kGlu;
  for (size_t l = 0; l < s.blocks.size(); ++l) {
    const BlockViews &fb = f.blocks[l], &sb = s.blocks[l];
    copy_rows(fb.q_w, sb.q_w, rank * q, to_full);
    copy_rows(fb.k_w, sb.k_w, rank * kv, to_full);
    copy_rows(fb.v_w, sb.v_w, rank * kv, to_full);
    copy_rows(fb.q_b, sb.q_b, rank * q, to_full);
    copy_rows(fb.k_b, sb.k_b, rank * kv, to_full);
    copy_rows(fb.v_b, sb.v_b, rank * kv, to_full);
    copy_cols(fb.o_w, sb.o_w, rank * q, to_full);
    // Dense FFN, or an MoE layer's shared experts (hidden shared_experts · expert_ffn, split the
    // same way) and each routed expert ([E, Ue, C] gate|up rows, [E, C, He] down columns).
    const bool moe = sc.moe.is_moe_layer(static_cast<int64_t>(l));
    const int64_t hl = moe ? sc.moe.shared_experts * sc.moe.expert_ffn : h;
    const int64_t Hl = moe ? full_.config().moe.shared_experts * full_.config().moe.expert_ffn : H;
    copy_up_rows(fb.up_w, sb.up_w, rank, hl, Hl, glu, to_full);
    copy_up_rows(fb.up_b, sb.up_b, rank, hl, Hl, glu, to_full);
    copy_cols(fb.down_w, sb.down_w, rank * hl, to_full);
    if (moe) {
      const int64_t he = sc.moe.expert_ffn, He = full_.config().moe.expert_ffn;
      for (int64_t e = 0; e < sb.experts_up_w.dim(0); ++e) {
        copy_up_rows(expert(fb.experts_up_w, e), expert(sb.experts_up_w, e), rank, he, He, glu, to_full);
        copy_cols(expert(fb.experts_down_w, e), expert(sb.experts_down_w, e), rank * he, to_full);
      }
    }
    if (!replicated) continue;
    for (const auto& [fv, sv] : {std::pair{fb.attn_norm_w, sb.attn_norm_w}, std::pair{fb.attn_norm_b, sb.attn_norm_b},
                                 std::pair{fb.q_norm_w, sb.q_norm_w}, std::pair{fb.k_norm_w, sb.k_norm_w},
                                 std::pair{fb.o_b, sb.o_b}, std::pair{fb.ffn_norm_w, sb.ffn_norm_w},
                                 std::pair{fb.ffn_norm_b, sb.ffn_norm_b}, std::pair{fb.down_b, sb.down_b},
                                 std::pair{fb.router_w, sb.router_w}})
      copy_whole(fv, sv, to_full);
  }
  const int64_t vrows = sc.padded_vocab();  // this rank's vocabulary rows
  copy_rows(f.embed, s.embed, rank * vrows, to_full);
  if (s.lm_head.data() != s.embed.data()) copy_rows(f.lm_head, s.lm_head, rank * vrows, to_full);
  if (!replicated) return;
  for (const auto& [fv, sv] : {std::pair{f.pos_embed, s.pos_embed}, std::pair{f.final_norm_w, s.final_norm_w},
                               std::pair{f.final_norm_b, s.final_norm_b}})
    copy_whole(fv, sv, to_full);
}

void TensorParallelMap::take_shard(int rank, const float* full, float* shard) const {
  std::memset(shard, 0, static_cast<size_t>(shard_.total_numel()) * sizeof(float));
  copy(rank, const_cast<float*>(full), shard, /*to_full=*/false, /*replicated=*/true);
}

void TensorParallelMap::put_shard(int rank, const float* shard, float* full, bool replicated) const {
  copy(rank, full, const_cast<float*>(shard), /*to_full=*/true, replicated);
}

void TensorParallelMap::assemble(const float* shards, float* full) const {
  std::memset(full, 0, static_cast<size_t>(full_.total_numel()) * sizeof(float));
  for (int r = 0; r < tp_; ++r) put_shard(r, shards + r * shard_.total_numel(), full, /*replicated=*/r == 0);
}

}  // namespace lmt::model
