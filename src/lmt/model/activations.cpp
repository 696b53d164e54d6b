#include "lmt/model/activations.h"

#include <algorithm>

#include "lmt/base/check.h"
#include "lmt/base/limits.h"

namespace lmt::model {
namespace {

// layer < 0: the entry shared by every layer (recompute), with the FFN acts of both kinds the
// model has.
BlockActs plan_block(const ModelConfig& c, int64_t layer, int64_t B, int64_t T, DType cd, DType f, int ep,
                     int64_t n, Arena& a) {
  bool dense = false, moe = false;
  for (int64_t l = 0; l < c.n_layers; ++l)
    if (layer < 0 || l == layer) (c.moe.is_moe_layer(l) ? moe : dense) = true;
  BlockActs b;
  b.attn = AttentionBlock::plan(c, B, T, cd, f, a, n);
  b.res_mid = a.allocate({n, c.d_model}, f, "res_mid");
  if (dense) b.ffn = FfnBlock::plan(c, B * T, cd, f, a, n);
  if (moe) b.moe = MoeBlock::plan(c, B * T, cd, f, a, ep);
  return b;
}

}  // namespace

ActivationPlan plan_activations(const ModelConfig& c, int64_t B, int64_t T, const RunOptions& o, Arena& a) {
  const int64_t N = B * T, C = c.d_model, NH = c.n_heads, G = c.n_kv_heads, HD = c.head_dim;
  const int64_t H = c.ffn_hidden, U = c.ffn == FfnKind::kGlu ? 2 * H : H;
  const DType cd = o.compute;
  const DType f = activation_dtype(o.compute);
  ActivationPlan p;
  p.B = B;
  p.T = T;
  p.options = o;
  LMT_CHECK(o.sequence_shards >= 1 && N % o.sequence_shards == 0)
      << "sequence parallelism over " << o.sequence_shards << " ranks needs B·T = " << N << " divisible by it";
  const int64_t n = N / o.sequence_shards;  // rows of the residual stream on this rank
  for (int64_t l = 0; l <= c.n_layers; ++l) p.residual.push_back(a.allocate({n, C}, f, "residual"));
  const int64_t kept = o.recompute ? 1 : c.n_layers;
  for (int64_t l = 0; l < kept; ++l) p.blocks.push_back(plan_block(c, o.recompute ? -1 : l, B, T, cd, f, o.ep, n, a));

  Scratch& s = p.scratch;
  s.f32_nc = a.allocate({N, C}, f, "f32_nc");
  s.dres = a.allocate({n, C}, f, "dres");
  s.dh = a.allocate({N, C}, f, "dh");
  s.da = a.allocate({N, H}, f, "da");
  if (cd == f) s.du = a.allocate({N, U}, f, "du");  // bf16 runs write d u as bf16 into grad_c
  s.datt = a.allocate({B, T, NH, HD}, f, "datt");
  s.dq = a.allocate({B, T, NH, HD}, f, "dq");
  s.dk = a.allocate({B, T, G, HD}, f, "dk");
  s.dv = a.allocate({B, T, G, HD}, f, "dv");
  if (c.qk_norm) {
    s.dq_pre = a.allocate({N, NH * HD}, f, "dq_pre");
    s.dk_pre = a.allocate({N, G * HD}, f, "dk_pre");
  }
  int64_t grad_c = N * std::max({C, U, NH * HD});
  if (c.moe.enabled()) grad_c = std::max(grad_c, MoeBlock::grad_c_elems(c, N, o.ep));
  if (cd != f) s.grad_c = a.allocate({grad_c}, cd, "grad_c");
  s.final_mean = a.allocate({n}, f, "final_mean");
  s.final_rstd = a.allocate({n}, f, "final_rstd");
  if (o.sequence_shards > 1) {
    s.seq_nc = a.allocate({n, C}, f, "seq_nc");
    s.dres_full = a.allocate({N, C}, f, "dres_full");
  }
  s.final_h = a.allocate({N, C}, cd, "final_h");
  s.dfinal = a.allocate({N, C}, f, "dfinal");
  s.losses = a.allocate({N}, f, "losses");
  s.positions = a.allocate({N}, DType::kI32, "positions");
  if (c.moe.enabled()) s.moe = MoeBlock::plan_scratch(c, N, cd, f, a, o.ep);
  return p;
}

size_t activation_bytes(const ModelConfig& c, int64_t B, int64_t T, const RunOptions& o) {
  Arena measuring = Arena::Measuring();
  plan_activations(c, B, T, o, measuring);
  return measuring.peak();
}

Status activation_memory_check(const ModelConfig& c, int64_t B, int64_t T, const RunOptions& o, double other_bytes,
                               const std::string& what, const std::string& hint, const MemoryTarget& target) {
  // A lower bound: a block reads its [N,C] input while it holds its widest f32 projection output
  // ([N,H] in the FFN, or q, k and v together).
  const double N = static_cast<double>(B) * static_cast<double>(T);
  const double widest = std::max(static_cast<double>(c.ffn_hidden), static_cast<double>(c.q_dim() + 2 * c.kv_dim()));
  const double lower = 4.0 * N * (static_cast<double>(c.d_model) + widest);
  LMT_RETURN_IF_ERROR(check_fits_in_memory(lower + other_bytes, what, hint, target));
  return check_fits_in_memory(static_cast<double>(activation_bytes(c, B, T, o)) + other_bytes, what, hint, target);
}

}  // namespace lmt::model
