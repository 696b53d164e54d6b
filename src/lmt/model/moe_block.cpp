// The MoE FFN sub-block: forward and backward (see moe_block.h for the contract).
#include "lmt/model/moe_block.h"

#include <algorithm>
#include <cmath>

#include "lmt/base/check.h"
#include "lmt/kernels/moe_routing.h"
#include "lmt/model/activations.h"
#include "lmt/model/block.h"
#include "lmt/model/host_access.h"
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

std::vector<int32_t> narrow(const std::vector<int64_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); }

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


// ---- expert parallelism -------------------------------------------------------------------------
// Layout of one exchange, from this rank's view (P ranks, El = E/P experts each; this rank owns
// experts [rank·El, (rank+1)·El)). Local rows are grouped by expert, so the rows for rank p's experts
// are one contiguous block: send_rows[p]. The rows received from rank p arrive grouped by this
// rank's experts: cnt[p·El + j] rows for local expert j ("source-major"); the experts run over them
// regrouped by expert, then by source ("expert-major", offsets[E+1] over all E experts, the other
// ranks' experts empty).
struct EpLayout {
  int P = 1, rank = 0;
  int64_t El = 0;
  std::vector<int64_t> cnt;                  // [P·El]
  std::vector<int64_t> send_rows, recv_rows;  // [P]
  std::vector<int64_t> offsets;              // [E+1] expert-major
  int64_t received = 0;                      // Σ recv_rows
};

EpLayout ep_layout(const ExpertParallel& ep, int64_t E, const std::vector<int64_t>& local_offsets,
                   std::vector<int64_t> cnt) {
  EpLayout L;
  L.P = ep.size;
  L.rank = ep.rank;
  L.El = E / ep.size;
  L.cnt = std::move(cnt);
  L.send_rows.assign(static_cast<size_t>(L.P), 0);
  L.recv_rows.assign(static_cast<size_t>(L.P), 0);
  for (int p = 0; p < L.P; ++p) {
    L.send_rows[p] = local_offsets[(p + 1) * L.El] - local_offsets[p * L.El];
    for (int64_t j = 0; j < L.El; ++j) L.recv_rows[p] += L.cnt[p * L.El + j];
    L.received += L.recv_rows[p];
  }
  L.offsets.assign(static_cast<size_t>(E + 1), 0);
  int64_t at = 0;
  for (int64_t e = 0; e < E; ++e) {
    L.offsets[e] = at;
    const int64_t j = e - L.rank * L.El;
    if (j >= 0 && j < L.El)
      for (int p = 0; p < L.P; ++p) at += L.cnt[p * L.El + j];
  }
  L.offsets[E] = at;
  return L;
}

std::vector<int64_t> times(const std::vector<int64_t>& rows, int64_t row_bytes) {
  std::vector<int64_t> b(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) b[i] = rows[i] * row_bytes;
  return b;
}

void exchange(const ExpertParallel& ep, const void* send, const std::vector<int64_t>& send_bytes, void* recv,
              const std::vector<int64_t>& recv_bytes, const char* what) {
  const Status st = ep.all_to_all_v(send, send_bytes, recv, recv_bytes);
  LMT_CHECK(st.ok()) << "expert parallelism (ep rank " << ep.rank << "/" << ep.size << "), " << what << ": "
                     << st.ToString();
}

// Copies rows between source-major and expert-major order (to_expert_major: `from` is source-major),
// by the backend's copies (the rows live where it computes). to and from: [rows, F] of one dtype.
void regroup(kernels::Backend& be, const EpLayout& L, const TensorView& to, const TensorView& from,
             bool to_expert_major) {
  int64_t source_at = 0;  // first source-major row of rank p's block
  for (int p = 0; p < L.P; ++p) {
    int64_t in_block = 0;
    for (int64_t j = 0; j < L.El; ++j) {
      const int64_t n = L.cnt[p * L.El + j];
      int64_t expert_at = L.offsets[L.rank * L.El + j];
      for (int q = 0; q < p; ++q) expert_at += L.cnt[q * L.El + j];
      const int64_t s_row = source_at + in_block;
      const int64_t a = to_expert_major ? s_row : expert_at, b = to_expert_major ? expert_at : s_row;
      if (n > 0) be.copy(to.slice_rows(b, b + n), from.slice_rows(a, a + n));
      in_block += n;
    }
    source_at += L.recv_rows[p];
  }
}

TensorView bytes_as(const TensorView& buf, int64_t rows, int64_t cols, DType dt) {
  LMT_CHECK(static_cast<size_t>(rows * cols) * dtype_size(dt) <= buf.bytes()) << "expert-parallel buffer too small";
  return TensorView(buf.data(), Shape{rows, cols}, dt, buf.device());
}

// The grouped GEMMs' row offsets for the expert weights at hand: offsets[E+1] over all E experts,
// or, when the model holds only its ep rank's El = E/P experts (moe.local_experts), those experts'
// El+1 offsets (under expert parallelism the other experts have no rows here, so they start at 0).
std::vector<int64_t> held_offsets(const ModelConfig& c, const std::vector<int64_t>& offsets, const ExpertParallel* ep) {
  const int64_t E = c.moe.num_experts, El = c.moe.held_experts(), first = c.moe.first_expert;
  if (El == E) return offsets;
  LMT_CHECK(ep != nullptr && ep->size * El == E && first == ep->rank * El)
      << "MoeBlock: model '" << c.name << "' holds experts [" << first << ", " << first + El << ") of " << E
      << ": every pass needs its expert-parallel group (rank " << (ep ? ep->rank : 0) << " of " << (ep ? ep->size : 1) << ")";
  LMT_CHECK(offsets[first] == 0 && offsets[first + El] == offsets[E]) << "MoeBlock: rows outside this rank's experts";
  return std::vector<int64_t>(offsets.begin() + first, offsets.begin() + first + El + 1);
}

}  // namespace

int64_t moe_expert_rows(const ModelConfig& c, int64_t N, int ep) {
  const int64_t K = c.moe.top_k;
  if (ep <= 1) return N * K;
  return static_cast<int64_t>(ep) * N * std::min<int64_t>(K, c.moe.num_experts / ep);
}

double load_imbalance(const std::vector<int64_t>& load) {
  int64_t total = 0, mx = 0;
  for (int64_t l : load) total += l, mx = std::max(mx, l);
  if (total == 0) return 0;
  return static_cast<double>(mx) * static_cast<double>(load.size()) / static_cast<double>(total);
}

double MoeStats::imbalance() const { return load_imbalance(load); }
double MoeStepStats::imbalance() const { return load_imbalance(load); }

namespace {
// Adds one forward's (MoeStats) or one step's (MoeStepStats) sums into `to`.
template <typename Stats>
void add_sums(MoeStepStats& to, const Stats& s) {
  if (to.load.size() != s.load.size()) to.load.assign(s.load.size(), 0);
  for (size_t e = 0; e < to.load.size(); ++e) to.load[e] += s.load[e];
  if (to.computed.size() != s.computed.size()) to.computed.assign(s.computed.size(), 0);
  for (size_t e = 0; e < to.computed.size(); ++e) to.computed[e] += s.computed[e];
  to.dropped += s.dropped;
  to.aux_loss += s.aux_loss;
  to.z_loss += s.z_loss;
}
}  // namespace

void MoeStepStats::add(const MoeStats& s) {
  add_sums(*this, s);
  ++forwards;
}

void MoeStepStats::add(const MoeStepStats& s) {
  if (s.forwards == 0) return;
  add_sums(*this, s);
  forwards += s.forwards;
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

MoeActs MoeBlock::plan(const ModelConfig& c, int64_t N, DType cd, DType f, Arena& arena, int ep) {
  const Dims d = dims(c);
  const int64_t R = N * d.K, Rx = moe_expert_rows(c, N, ep);
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
  a.xp = arena.allocate({Rx, d.C}, cd, "moe_xp");
  a.u = arena.allocate({Rx, d.Ue}, f, "moe_u");
  a.a = arena.allocate({Rx, d.He}, cd, "moe_a");
  a.y = arena.allocate({R, d.C}, f, "moe_y");
  if (ep > 1) a.ep_counts = arena.allocate({static_cast<int64_t>(ep), d.E / ep}, DType::kI32, "moe_ep_counts");
  if (d.Hs > 0) {
    a.shared_u = arena.allocate({N, d.Us}, f, "moe_shared_u");
    a.shared_a = arena.allocate({N, d.Hs}, cd, "moe_shared_a");
  }
  return a;
}

MoeScratch MoeBlock::plan_scratch(const ModelConfig& c, int64_t N, DType cd, DType f, Arena& arena, int ep) {
  const Dims d = dims(c);
  const int64_t R = N * d.K, Rx = moe_expert_rows(c, N, ep);
  MoeScratch m;
  if (cd != f) m.f32_wide = arena.allocate({std::max(Rx * d.He, N * d.Hs)}, f, "moe_f32_wide");
  m.dy = arena.allocate({R, d.C}, f, "moe_dy");
  m.da = arena.allocate({Rx, d.He}, f, "moe_da");
  m.du = arena.allocate({Rx, d.Ue}, f, "moe_du");
  m.dxp = arena.allocate({Rx, d.C}, f, "moe_dxp");
  if (ep > 1) {
    m.ep_a = arena.allocate({Rx * d.C}, f, "moe_ep_a");
    m.ep_b = arena.allocate({Rx * d.C}, f, "moe_ep_b");
  }
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

int64_t MoeBlock::grad_c_elems(const ModelConfig& c, int64_t N, int ep) {
  const Dims d = dims(c);
  const int64_t R = moe_expert_rows(c, N, ep);
  return std::max({R * d.C, R * d.Ue, N * d.E, N * d.Us, N * d.C});
}

MoeStats MoeBlock::forward(const TensorView& res_out, const TensorView& res_in, const MoeWeights& w,
                           const MoeActs& acts, DType compute, const TensorView& bias, int64_t capacity,
                           const TensorView& f32_nc, const TensorView& f32_wide, const MoeScratch* m,
                           const TensorView& seq_nc) {
  const Dims d = dims(c_);
  const int64_t n_in = res_in.dim(0);  // under sequence parallelism this rank's rows; N: all of them
  const int64_t N = sequence_parallel(tp_) ? n_in * tp_->size : n_in;
  const bool bf16 = compute == DType::kBF16;
  const TensorView h = first(acts.h, N);
  norm_all_rows(be_, c_, tp_, h, first(acts.norm_mean, n_in), first(acts.norm_rstd, n_in), res_in, w.norm_w, w.norm_b,
                seq_nc, first(f32_nc, N), "the MoE norm's output");

  // Router and routing.
  const TensorView logits = first(acts.logits, N), probs = first(acts.probs, N), lse = first(acts.lse, N);
  const TensorView weights = first(acts.weights, N), experts = first(acts.experts, N), slots = first(acts.slots, N);
  be_.linear_forward(logits, h, w.router_w, TensorView());
  be_.moe_router_forward(weights, experts, probs, lse, logits, bias, c_.moe.renormalize);
  kernels::MoeRouting r;
  const Status st = kernels::moe_route(HostRead<int32_t>(be_, experts).data(), N, d.K, d.E, capacity, r);
  LMT_CHECK(st.ok()) << st.ToString();
  const int64_t R = r.rows();
  write_from_host(be_, slots, r.slot_row.data());
  write_from_host(be_, first(acts.row_token, R), r.row_token.data());
  write_from_host(be_, acts.offsets, narrow(r.offsets).data());
  write_from_host(be_, acts.load, narrow(r.load).data());

  // Experts over the routed rows: here (Rx = R rows, grouped by expert as routed), or under expert
  // parallelism on the owning ranks (Rx = the rows of all ranks for this rank's experts).
  const DType fd = acts.y.dtype();
  const int64_t cs = static_cast<int64_t>(dtype_size(h.dtype())), fs = static_cast<int64_t>(dtype_size(fd));
  const TensorView y = first(acts.y, R);
  std::vector<int64_t> offsets = r.offsets;
  EpLayout L;
  if (ep_) {
    LMT_CHECK(m && m->ep_a.present() && acts.ep_counts.present() && acts.ep_counts.dim(0) == ep_->size)
        << "MoeBlock: expert parallelism needs acts and scratch planned for ep = " << ep_->size;
    const int64_t El = d.E / ep_->size;
    std::vector<int64_t> mine(static_cast<size_t>(d.E)), cnt(static_cast<size_t>(d.E));
    for (int64_t e = 0; e < d.E; ++e) mine[e] = r.offsets[e + 1] - r.offsets[e];  // kept rows per expert
    const std::vector<int64_t> eb(static_cast<size_t>(ep_->size), El * 8);
    exchange(*ep_, mine.data(), eb, cnt.data(), eb, "row counts");
    write_from_host(be_, acts.ep_counts, narrow(cnt).data());
    L = ep_layout(*ep_, d.E, r.offsets, std::move(cnt));
    LMT_CHECK(L.received <= acts.xp.dim(0)) << "expert parallelism: " << L.received << " rows over the planned "
                                            << acts.xp.dim(0);
    const TensorView local = bytes_as(m->ep_a, R, d.C, h.dtype());
    be_.moe_gather_rows(local, h, first(acts.row_token, R));
    exchange(*ep_, local.data(), times(L.send_rows, d.C * cs), m->ep_b.data(), times(L.recv_rows, d.C * cs), "rows");
    regroup(be_, L, first(acts.xp, L.received), bytes_as(m->ep_b, L.received, d.C, h.dtype()),
            /*to_expert_major=*/true);
    offsets = L.offsets;
  }
  const int64_t Rx = offsets[d.E];
  const std::vector<int64_t> held = held_offsets(c_, offsets, ep_);  // rows of the experts in w
  const TensorView xp = first(acts.xp, Rx), u = first(acts.u, Rx), act_c = first(acts.a, Rx);
  if (!ep_) be_.moe_gather_rows(xp, h, first(acts.row_token, R));
  be_.grouped_linear_forward(u, xp, w.experts_up, held);
  const TensorView act = bf16 ? as2d(f32_wide, Rx, d.He) : act_c;
  if (d.glu)
    be_.glu_forward(c_.activation, act, u);
  else
    be_.activation_forward(c_.activation, act, u);
  if (bf16) be_.convert(act_c, act);
  if (ep_) {
    const TensorView ye = bytes_as(m->ep_a, Rx, d.C, fd);
    be_.grouped_linear_forward(ye, act_c, w.experts_down, held);
    regroup(be_, L, bytes_as(m->ep_b, Rx, d.C, fd), ye, /*to_expert_major=*/false);
    exchange(*ep_, m->ep_b.data(), times(L.recv_rows, d.C * fs), y.data(), times(L.send_rows, d.C * fs), "outputs");
  } else {
    be_.grouped_linear_forward(y, act_c, w.experts_down, held);
  }
  const TensorView out = first(f32_nc, N);
  be_.moe_combine_forward(out, y, weights, slots);
  if (!tp_) be_.add(res_out, res_in, out);

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
    if (!tp_) {
      be_.linear_forward(out, sa_c, w.shared_down, TensorView());
      be_.add(res_out, res_out, out);
    } else {  // this rank's part of the shared experts' output, into its part of the MoE output
      LMT_CHECK(m != nullptr) << "MoeBlock: tensor parallelism needs the MoE scratch";
      const TensorView sd = first(m->dh2, N);
      be_.linear_forward(sd, sa_c, w.shared_down, TensorView());
      be_.add(out, out, sd);
    }
  }
  // Tensor parallelism: every rank computed its hidden units of every expert; the sum over the
  // group is the output (sequence parallelism: this rank's rows of it).
  if (tp_) materialize(be_, row_parallel_output(be_, tp_, res_out, res_in, out, seq_nc, "the MoE output"));

  MoeStats s;
  s.load = r.load;
  s.computed.resize(static_cast<size_t>(d.E));
  for (int64_t e = 0; e < d.E; ++e) s.computed[e] = offsets[e + 1] - offsets[e];
  s.dropped = r.dropped;
  const bool f64 = probs.dtype() == DType::kF64;
  if (c_.moe.balance == MoeBalance::kAuxLoss) {
    const double dot = f64 ? mean_prob_dot(HostRead<double>(be_, probs).data(), r.load, N, d.E)
                           : mean_prob_dot(HostRead<float>(be_, probs).data(), r.load, N, d.E);
    s.aux_loss = static_cast<double>(c_.moe.aux_loss_coef) * static_cast<double>(d.E) * dot;
  }
  if (c_.moe.router_z_loss > 0)
    s.z_loss = static_cast<double>(c_.moe.router_z_loss) *
               (f64 ? mean_sq(HostRead<double>(be_, lse).data(), N) : mean_sq(HostRead<float>(be_, lse).data(), N));
  return s;
}

void MoeBlock::backward(const TensorView& res_in, const MoeWeights& w, const MoeWeights& g, const MoeActs& acts,
                        Scratch& s, const MoeScratch& m, float loss_scale) {
  const Dims d = dims(c_);
  const bool sp = sequence_parallel(tp_);
  const int64_t n_in = res_in.dim(0), N = sp ? n_in * tp_->size : n_in;
  const HostRead<int32_t> routed(be_, acts.offsets);
  std::vector<int64_t> offsets(routed.data(), routed.data() + d.E + 1);
  const int64_t R = offsets[d.E];
  if (sp) sequence_gather(be_, tp_, s.dres, s.dres_full, "d res of the MoE sub-block");
  const TensorView h = first(acts.h, N), dres = sp ? s.dres_full : s.dres, dh = first(s.dh, N);
  const TensorView dh2 = first(m.dh2, N);

  // Combine, then (under expert parallelism: on the owning ranks, after sending d y there) down,
  // activation, up; then the un-permutation of d x (sent back first under EP).
  const TensorView dy = first(m.dy, R);
  const TensorView dweights = first(m.dweights, N);
  be_.moe_combine_backward(dy, dweights, dres, first(acts.y, R), first(acts.weights, N), first(acts.slots, N));
  // Tensor parallelism: y is this rank's part of each expert output, so is d weights = d out · y.
  tensor_parallel_sum(tp_, dweights, "the routing weights' gradient");
  const DType fd = dy.dtype();
  const int64_t fs = static_cast<int64_t>(dtype_size(fd));
  TensorView dy_x = dy;  // d y of the rows computed here, expert-major
  EpLayout L;
  if (ep_) {
    const HostRead<int32_t> counts(be_, acts.ep_counts);
    std::vector<int64_t> cnt(counts.data(), counts.data() + d.E);
    const std::vector<int64_t> local_offsets = offsets;
    L = ep_layout(*ep_, d.E, local_offsets, std::move(cnt));
    exchange(*ep_, dy.data(), times(L.send_rows, d.C * fs), m.ep_a.data(), times(L.recv_rows, d.C * fs), "d outputs");
    dy_x = bytes_as(m.ep_b, L.received, d.C, fd);
    regroup(be_, L, dy_x, bytes_as(m.ep_a, L.received, d.C, fd), /*to_expert_major=*/true);
    offsets = L.offsets;
  }
  const int64_t Rx = offsets[d.E];
  const std::vector<int64_t> held = held_offsets(c_, offsets, ep_);
  const TensorView da = first(m.da, Rx), du = first(m.du, Rx), dxp = first(m.dxp, Rx);
  be_.grouped_linear_backward(da, g.experts_down, gemm_input(be_, s.grad_c, dy_x), first(acts.a, Rx),
                              w.experts_down, held);
  if (d.glu)
    be_.glu_backward(c_.activation, du, da, first(acts.u, Rx));
  else
    be_.activation_backward(c_.activation, du, da, first(acts.u, Rx));
  be_.grouped_linear_backward(dxp, g.experts_up, gemm_input(be_, s.grad_c, du), first(acts.xp, Rx), w.experts_up,
                              held);
  TensorView dx_local = dxp;  // d x of this rank's routed rows, in routed order
  if (ep_) {
    regroup(be_, L, bytes_as(m.ep_a, Rx, d.C, fd), dxp, /*to_expert_major=*/false);
    dx_local = bytes_as(m.ep_b, R, d.C, fd);
    exchange(*ep_, m.ep_a.data(), times(L.recv_rows, d.C * fs), dx_local.data(), times(L.send_rows, d.C * fs),
             "d inputs");
  }
  be_.fill(dh, 0.0);
  be_.moe_scatter_add_rows(dh, dx_local, first(acts.row_token, R));

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
  // d h of the experts (and shared experts) is this rank's part under tensor parallelism: summed
  // over the group (sequence parallelism: reduce-scattered to this rank's rows). The router's,
  // computed redundantly from the full d weights, is added after.
  const TensorView dh_sum = column_parallel_input_grad(tp_, dh, s.seq_nc, "d h of the experts");

  // Router: the routing weights' gradient plus the aux and z-loss terms.
  TensorView dprobs;
  if (c_.moe.balance == MoeBalance::kAuxLoss && c_.moe.aux_loss_coef != 0.0f) {
    // d/dp[n,e] of coef·E·Σ_e (load_e/N)·(1/N)·Σ_n p[n,e] = coef·E·load_e/N², the same for every row.
    dprobs = m.dprobs;
    const double k = static_cast<double>(loss_scale) * static_cast<double>(c_.moe.aux_loss_coef) *
                     static_cast<double>(d.E) / (static_cast<double>(N) * static_cast<double>(N));
    const HostRead<int32_t> load(be_, acts.load);
    std::vector<double> v(static_cast<size_t>(d.E));
    for (int64_t e = 0; e < d.E; ++e) v[e] = k * static_cast<double>(load[e]);
    if (dprobs.dtype() == DType::kF64) {
      write_from_host(be_, dprobs, v.data());
    } else {
      const std::vector<float> vf(v.begin(), v.end());
      write_from_host(be_, dprobs, vf.data());
    }
  }
  const double z_scale = 2.0 * static_cast<double>(c_.moe.router_z_loss) * static_cast<double>(loss_scale) /
                         static_cast<double>(N);
  const TensorView dlogits = first(m.dlogits, N);
  be_.moe_router_backward(dlogits, dweights, first(acts.probs, N), first(acts.lse, N), first(acts.experts, N),
                          c_.moe.renormalize, dprobs, z_scale);
  be_.linear_backward(dh2, g.router_w, TensorView(), gemm_input(be_, s.grad_c, dlogits), h, w.router_w);
  be_.add(dh_sum, dh_sum, sp ? dh2.slice_rows(tp_->rank * n_in, (tp_->rank + 1) * n_in) : dh2);

  norm_backward(be_, c_, s.dres, g.norm_w, g.norm_b, dh_sum, res_in, w.norm_w, first(acts.norm_mean, n_in),
                first(acts.norm_rstd, n_in), /*accumulate=*/true);
}

}  // namespace lmt::model
