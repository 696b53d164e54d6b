// The MoE FFN sub-block: forward and backward (see moe_block.h for the contract).
#include "lmt/model/moe_block.h"

#include <algorithm>
#include <cmath>

#include "lmt/base/check.h"
#include "lmt/kernels/moe_routing.h"
#include "lmt/model/activations.h"
#include "lmt/model/block.h"
#include "lmt/model/norm.h"

namespace lmt::model {
namespace {

struct Dims {
  int64_t C, E, K, He, Ue, Hs, Us;
  bool glu;
};

Dims dims(const ModelConfig& c) {
  Dims d;
  d.C = c.d_model;
  d.E = c.moe.num_experts;
  d.K = c.moe.top_k;
  d.He = c.moe.expert_ffn;
  d.glu = c.ffn == FfnKind::kGlu;
  d.Ue = d.glu ? 2 * d.He : d.He;
  d.Hs = c.moe.shared_experts * d.He;
  d.Us = d.glu ? 2 * d.Hs : d.Hs;
  return d;
}

TensorView first(const TensorView& t, int64_t n) { return t.present() ? t.slice_rows(0, n) : t; }
TensorView as2d(const TensorView& flat, int64_t rows, int64_t cols) {
  return TensorView(flat.data(), Shape{rows, cols}, flat.dtype(), flat.device());
}

template <typename T>
double mean_prob_dot(const T* p, const std::vector<int64_t>& load, int64_t N, int64_t E) {
  std::vector<double> P(static_cast<size_t>(E), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < E; ++e) P[e] += static_cast<double>(p[n * E + e]);
  double s = 0;
  for (int64_t e = 0; e < E; ++e) s += static_cast<double>(load[e]) / static_cast<double>(N) * P[e] / static_cast<double>(N);
  return s;
}

template <typename T>
double mean_sq(const T* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s / static_cast<double>(n);
}

}  // namespace

double load_imbalance(const std::vector<int64_t>& load) {
  int64_t total = 0, mx = 0;
  for (int64_t l : load) total += l, mx = std::max(mx, l);
  if (total == 0) return 0;
  return static_cast<double>(mx) * static_cast<double>(load.size()) / static_cast<double>(total);
}

double MoeStats::imbalance() const { return load_imbalance(load); }
double MoeStepStats::imbalance() const { return load_imbalance(load); }

void MoeStepStats::add(const MoeStats& s) {
  if (load.size() != s.load.size()) load.assign(s.load.size(), 0);
  for (size_t e = 0; e < load.size(); ++e) load[e] += s.load[e];
  dropped += s.dropped;
  aux_loss += s.aux_loss;
  z_loss += s.z_loss;
  ++forwards;
}

MoeWeights MoeWeights::of(const BlockViews& master, const BlockViews& gemm) {
  MoeWeights w;
  w.norm_w = master.ffn_norm_w;
  w.norm_b = master.ffn_norm_b;
  w.router_w = gemm.router_w;
  w.experts_up = gemm.experts_up_w;
  w.experts_down = gemm.experts_down_w;
  w.shared_up = gemm.up_w;
  w.shared_down = gemm.down_w;
  return w;
}

MoeActs MoeBlock::plan(const ModelConfig& c, int64_t N, DType cd, DType f, Arena& arena) {
  const Dims d = dims(c);
  const int64_t R = N * d.K;
  MoeActs a;
  a.norm_mean = arena.allocate({N}, f, "moe_norm_mean");
  a.norm_rstd = arena.allocate({N}, f, "moe_norm_rstd");
  a.h = arena.allocate({N, d.C}, cd, "moe_h");
  a.logits = arena.allocate({N, d.E}, f, "moe_logits");
  a.probs = arena.allocate({N, d.E}, f, "moe_probs");
  a.lse = arena.allocate({N}, f, "moe_lse");
  a.weights = arena.allocate({N, d.K}, f, "moe_weights");
  a.experts = arena.allocate({N, d.K}, DType::kI32, "moe_experts");
  a.slots = arena.allocate({N, d.K}, DType::kI32, "moe_slots");
  a.row_token = arena.allocate({R}, DType::kI32, "moe_row_token");
  a.offsets = arena.allocate({d.E + 1}, DType::kI32, "moe_offsets");
  a.load = arena.allocate({d.E}, DType::kI32, "moe_load");
  a.xp = arena.allocate({R, d.C}, cd, "moe_xp");
  a.u = arena.allocate({R, d.Ue}, f, "moe_u");
  a.a = arena.allocate({R, d.He}, cd, "moe_a");
  a.y = arena.allocate({R, d.C}, f, "moe_y");
  if (d.Hs > 0) {
    a.shared_u = arena.allocate({N, d.Us}, f, "moe_shared_u");
    a.shared_a = arena.allocate({N, d.Hs}, cd, "moe_shared_a");
  }
  return a;
}

MoeScratch MoeBlock::plan_scratch(const ModelConfig& c, int64_t N, DType cd, DType f, Arena& arena) {
  const Dims d = dims(c);
  const int64_t R = N * d.K;
  MoeScratch m;
  if (cd != f) m.f32_wide = arena.allocate({std::max(R * d.He, N * d.Hs)}, f, "moe_f32_wide");
  m.dy = arena.allocate({R, d.C}, f, "moe_dy");
  m.da = arena.allocate({R, d.He}, f, "moe_da");
  m.du = arena.allocate({R, d.Ue}, f, "moe_du");
  m.dxp = arena.allocate({R, d.C}, f, "moe_dxp");
  m.dlogits = arena.allocate({N, d.E}, f, "moe_dlogits");
  m.dweights = arena.allocate({N, d.K}, f, "moe_dweights");
  m.dprobs = arena.allocate({d.E}, f, "moe_dprobs");
  if (d.Hs > 0) {
    m.dshared_a = arena.allocate({N, d.Hs}, f, "moe_dshared_a");
    m.dshared_u = arena.allocate({N, d.Us}, f, "moe_dshared_u");
  }
  m.dh2 = arena.allocate({N, d.C}, f, "moe_dh2");
  return m;
}

int64_t MoeBlock::grad_c_elems(const ModelConfig& c, int64_t N) {
  const Dims d = dims(c);
  const int64_t R = N * d.K;
  return std::max({R * d.C, R * d.Ue, N * d.E, N * d.Us, N * d.C});
}

MoeStats MoeBlock::forward(const TensorView& res_out, const TensorView& res_in, const MoeWeights& w,
                           const MoeActs& acts, DType compute, const TensorView& bias, int64_t capacity,
                           const TensorView& f32_nc, const TensorView& f32_wide) {
  const Dims d = dims(c_);
  const int64_t N = res_in.dim(0);
  const bool bf16 = compute == DType::kBF16;
  const TensorView h = first(acts.h, N), norm_out = bf16 ? f32_nc : h;
  norm_forward(be_, c_, norm_out, first(acts.norm_mean, N), first(acts.norm_rstd, N), res_in, w.norm_w, w.norm_b);
  if (bf16) be_.convert(h, norm_out);

  // Router and routing.
  const TensorView logits = first(acts.logits, N), probs = first(acts.probs, N), lse = first(acts.lse, N);
  const TensorView weights = first(acts.weights, N), experts = first(acts.experts, N), slots = first(acts.slots, N);
  be_.linear_forward(logits, h, w.router_w, TensorView());
  be_.moe_router_forward(weights, experts, probs, lse, logits, bias, c_.moe.renormalize);
  kernels::MoeRouting r;
  const Status st = kernels::moe_route(experts.as<int32_t>(), N, d.K, d.E, capacity, r);
  LMT_CHECK(st.ok()) << st.ToString();
  const int64_t R = r.rows();
  std::copy(r.slot_row.begin(), r.slot_row.end(), slots.as<int32_t>());
  std::copy(r.row_token.begin(), r.row_token.end(), acts.row_token.as<int32_t>());
  for (int64_t e = 0; e <= d.E; ++e) acts.offsets.as<int32_t>()[e] = static_cast<int32_t>(r.offsets[e]);
  for (int64_t e = 0; e < d.E; ++e) acts.load.as<int32_t>()[e] = static_cast<int32_t>(r.load[e]);

  // Experts over the routed rows.
  const TensorView xp = first(acts.xp, R), u = first(acts.u, R), act_c = first(acts.a, R), y = first(acts.y, R);
  be_.moe_gather_rows(xp, h, first(acts.row_token, R));
  be_.grouped_linear_forward(u, xp, w.experts_up, r.offsets);
  const TensorView act = bf16 ? as2d(f32_wide, R, d.He) : act_c;
  if (d.glu)
    be_.glu_forward(c_.activation, act, u);
  else
    be_.activation_forward(c_.activation, act, u);
  if (bf16) be_.convert(act_c, act);
  be_.grouped_linear_forward(y, act_c, w.experts_down, r.offsets);
  be_.moe_combine_forward(f32_nc, y, weights, slots);
  be_.add(res_out, res_in, f32_nc);

  // Shared experts: a dense FFN over every row.
  if (d.Hs > 0) {
    const TensorView su = first(acts.shared_u, N), sa_c = first(acts.shared_a, N);
    be_.linear_forward(su, h, w.shared_up, TensorView());
    const TensorView sa = bf16 ? as2d(f32_wide, N, d.Hs) : sa_c;
    if (d.glu)
      be_.glu_forward(c_.activation, sa, su);
    else
      be_.activation_forward(c_.activation, sa, su);
    if (bf16) be_.convert(sa_c, sa);
    be_.linear_forward(f32_nc, sa_c, w.shared_down, TensorView());
    be_.add(res_out, res_out, f32_nc);
  }

  MoeStats s;
  s.load = r.load;
  s.dropped = r.dropped;
  const bool f64 = probs.dtype() == DType::kF64;
  if (c_.moe.balance == MoeBalance::kAuxLoss) {
    const double dot = f64 ? mean_prob_dot(probs.as<double>(), r.load, N, d.E) : mean_prob_dot(probs.as<float>(), r.load, N, d.E);
    s.aux_loss = static_cast<double>(c_.moe.aux_loss_coef) * static_cast<double>(d.E) * dot;
  }
  if (c_.moe.router_z_loss > 0)
    s.z_loss = static_cast<double>(c_.moe.router_z_loss) * (f64 ? mean_sq(lse.as<double>(), N) : mean_sq(lse.as<float>(), N));
  return s;
}

void MoeBlock::backward(const TensorView& res_in, const MoeWeights& w, const MoeWeights& g, const MoeActs& acts,
                        Scratch& s, const MoeScratch& m, float loss_scale) {
  const Dims d = dims(c_);
  const int64_t N = res_in.dim(0);
  std::vector<int64_t> offsets(static_cast<size_t>(d.E + 1));
  for (int64_t e = 0; e <= d.E; ++e) offsets[e] = acts.offsets.as<int32_t>()[e];
  const int64_t R = offsets[d.E];
  const TensorView h = first(acts.h, N), dres = s.dres, dh = s.dh;
  const TensorView dh2 = first(m.dh2, N);

  // Combine, down, activation, up, un-permutation.
  const TensorView dy = first(m.dy, R), da = first(m.da, R), du = first(m.du, R), dxp = first(m.dxp, R);
  const TensorView dweights = first(m.dweights, N);
  be_.moe_combine_backward(dy, dweights, dres, first(acts.y, R), first(acts.weights, N), first(acts.slots, N));
  be_.grouped_linear_backward(da, g.experts_down, gemm_input(be_, s.grad_c, dy), first(acts.a, R), w.experts_down,
                              offsets);
  if (d.glu)
    be_.glu_backward(c_.activation, du, da, first(acts.u, R));
  else
    be_.activation_backward(c_.activation, du, da, first(acts.u, R));
  be_.grouped_linear_backward(dxp, g.experts_up, gemm_input(be_, s.grad_c, du), first(acts.xp, R), w.experts_up,
                              offsets);
  be_.fill(dh, 0.0);
  be_.moe_scatter_add_rows(dh, dxp, first(acts.row_token, R));

  // Router: the routing weights' gradient plus the aux and z-loss terms.
  TensorView dprobs;
  if (c_.moe.balance == MoeBalance::kAuxLoss && c_.moe.aux_loss_coef != 0.0f) {
    // d/dp[n,e] of coef·E·Σ_e (load_e/N)·(1/N)·Σ_n p[n,e] = coef·E·load_e/N², the same for every row.
    dprobs = m.dprobs;
    const double k = static_cast<double>(loss_scale) * static_cast<double>(c_.moe.aux_loss_coef) *
                     static_cast<double>(d.E) / (static_cast<double>(N) * static_cast<double>(N));
    for (int64_t e = 0; e < d.E; ++e) {
      const double v = k * static_cast<double>(acts.load.as<int32_t>()[e]);
      if (dprobs.dtype() == DType::kF64) dprobs.as<double>()[e] = v;
      else dprobs.as<float>()[e] = static_cast<float>(v);
    }
  }
  const double z_scale = 2.0 * static_cast<double>(c_.moe.router_z_loss) * static_cast<double>(loss_scale) /
                         static_cast<double>(N);
  const TensorView dlogits = first(m.dlogits, N);
  be_.moe_router_backward(dlogits, dweights, first(acts.probs, N), first(acts.lse, N), first(acts.experts, N),
                          c_.moe.renormalize, dprobs, z_scale);
  be_.linear_backward(dh2, g.router_w, TensorView(), gemm_input(be_, s.grad_c, dlogits), h, w.router_w);
  be_.add(dh, dh, dh2);

  // Shared experts.
  if (d.Hs > 0) {
    const TensorView dsa = first(m.dshared_a, N), dsu = first(m.dshared_u, N);
    be_.linear_backward(dsa, g.shared_down, TensorView(), gemm_input(be_, s.grad_c, dres), first(acts.shared_a, N),
                        w.shared_down);
    if (d.glu)
      be_.glu_backward(c_.activation, dsu, dsa, first(acts.shared_u, N));
    else
      be_.activation_backward(c_.activation, dsu, dsa, first(acts.shared_u, N));
    be_.linear_backward(dh2, g.shared_up, TensorView(), gemm_input(be_, s.grad_c, dsu), h, w.shared_up);
    be_.add(dh, dh, dh2);
  }
  norm_backward(be_, c_, dres, g.norm_w, g.norm_b, dh, res_in, w.norm_w, first(acts.norm_mean, N),
                first(acts.norm_rstd, N), /*accumulate=*/true);
}

}  // namespace lmt::model
