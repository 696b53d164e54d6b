// The MoE ops (backend.h): validation in the entry points, and the default implementations every
// backend inherits (host loops accumulating in f64; the grouped GEMM calls the backend's own linear
// kernels per expert).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "lmt/base/bf16.h"
#include "lmt/base/trace.h"
#include "lmt/kernels/backend.h"
#include "lmt/kernels/validate.h"

namespace lmt::kernels {

using namespace detail;

namespace {

TensorView expert_rows(const TensorView& t, int64_t begin, int64_t end) { return t.slice_rows(begin, end); }

TensorView expert_matrix(const TensorView& w, int64_t e) {
  const Shape s{w.dim(1), w.dim(2)};
  char* base = static_cast<char*>(w.data()) + static_cast<size_t>(e * s.numel()) * dtype_size(w.dtype());
  return TensorView(base, s, w.dtype(), w.device());
}

void check_offsets(const Ctx& x, const std::vector<int64_t>& offsets, int64_t E, int64_t rows) {
  x.require(static_cast<int64_t>(offsets.size()) == E + 1,
            "offsets must have E+1 = " + std::to_string(E + 1) + " entries, got " + std::to_string(offsets.size()));
  x.require(offsets[0] == 0, "offsets[0] must be 0");
  for (int64_t e = 0; e < E; ++e)
    x.require(offsets[e] <= offsets[e + 1], "offsets must not decrease (expert " + std::to_string(e) + ")");
  x.require(offsets[E] <= rows, "offsets[E] = " + std::to_string(offsets[E]) + " exceeds the " +
                                    std::to_string(rows) + " rows");
}

template <typename T>
void router_fwd(T* w, int32_t* ex, T* p, T* lse, const T* lg, const float* bias, bool renorm, int64_t N, int64_t E,
                int64_t K) {
  std::vector<double> score(static_cast<size_t>(E));
  std::vector<char> taken(static_cast<size_t>(E));
  for (int64_t n = 0; n < N; ++n) {
    const T* l = lg + n * E;
    double mx = -INFINITY;
    for (int64_t e = 0; e < E; ++e) mx = std::max(mx, static_cast<double>(l[e]));
    double z = 0;
    for (int64_t e = 0; e < E; ++e) z += std::exp(static_cast<double>(l[e]) - mx);
    lse[n] = static_cast<T>(mx + std::log(z));
    for (int64_t e = 0; e < E; ++e) {
      p[n * E + e] = static_cast<T>(std::exp(static_cast<double>(l[e]) - mx) / z);
      score[e] = static_cast<double>(p[n * E + e]) + (bias ? static_cast<double>(bias[e]) : 0.0);
      taken[e] = 0;
    }
    double sum = 0;
    for (int64_t k = 0; k < K; ++k) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e)  // strict >: the lower index wins a tie
        if (!taken[e] && (best < 0 || score[e] > score[best])) best = e;
      taken[best] = 1;
      ex[n * K + k] = static_cast<int32_t>(best);
      sum += static_cast<double>(p[n * E + best]);
    }
    for (int64_t k = 0; k < K; ++k) {
      const double v = static_cast<double>(p[n * E + ex[n * K + k]]);
      w[n * K + k] = static_cast<T>(renorm ? v / sum : v);
    }
  }
}

template <typename T>
void router_bwd(T* dl, const T* dw, const T* p, const T* lse, const int32_t* ex, bool renorm, const T* dprobs,
                double z_scale, int64_t N, int64_t E, int64_t K) {
  std::vector<double> dp(static_cast<size_t>(E));
  for (int64_t n = 0; n < N; ++n) {
    const T* pn = p + n * E;
    for (int64_t e = 0; e < E; ++e) dp[e] = dprobs ? static_cast<double>(dprobs[e]) : 0.0;
    if (renorm) {  // w_k = p_k / S: dp_k = (dw_k - Σ_j dw_j w_j) / S
      double S = 0, dot = 0;
      for (int64_t k = 0; k < K; ++k) S += static_cast<double>(pn[ex[n * K + k]]);
      for (int64_t k = 0; k < K; ++k) dot += static_cast<double>(dw[n * K + k]) * static_cast<double>(pn[ex[n * K + k]]) / S;
      for (int64_t k = 0; k < K; ++k) dp[ex[n * K + k]] += (static_cast<double>(dw[n * K + k]) - dot) / S;
    } else {
      for (int64_t k = 0; k < K; ++k) dp[ex[n * K + k]] += static_cast<double>(dw[n * K + k]);
    }
    double s = 0;
    for (int64_t e = 0; e < E; ++e) s += static_cast<double>(pn[e]) * dp[e];
    const double dlse = z_scale * static_cast<double>(lse[n]);
    for (int64_t e = 0; e < E; ++e) dl[n * E + e] = static_cast<T>(static_cast<double>(pn[e]) * (dp[e] - s + dlse));
  }
}

template <typename T>
void combine_fwd(T* out, const T* y, const T* w, const int32_t* slots, int64_t N, int64_t K, int64_t F) {
  std::vector<double> acc(static_cast<size_t>(F));
  for (int64_t n = 0; n < N; ++n) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const int32_t r = slots[n * K + k];
      if (r < 0) continue;
      const double wk = static_cast<double>(w[n * K + k]);
      for (int64_t f = 0; f < F; ++f) acc[f] += wk * static_cast<double>(y[r * F + f]);
    }
    for (int64_t f = 0; f < F; ++f) out[n * F + f] = static_cast<T>(acc[f]);
  }
}

template <typename T>
void combine_bwd(T* dy, T* dw, const T* dout, const T* y, const T* w, const int32_t* slots, int64_t N, int64_t K,
                 int64_t F) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const int32_t r = slots[n * K + k];
      if (r < 0) {
        dw[n * K + k] = 0;
        continue;
      }
      const double wk = static_cast<double>(w[n * K + k]);
      double dot = 0;
      for (int64_t f = 0; f < F; ++f) {
        dot += static_cast<double>(dout[n * F + f]) * static_cast<double>(y[r * F + f]);
        dy[r * F + f] = static_cast<T>(wk * static_cast<double>(dout[n * F + f]));
      }
      dw[n * K + k] = static_cast<T>(dot);
    }
}

template <typename T>
void scatter_add(T* dinp, const T* dout, const int32_t* rows, int64_t R, int64_t F) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t f = 0; f < F; ++f) dinp[rows[r] * F + f] += dout[r * F + f];
}

// Index tensors in host memory are checked value by value; on a device backend (kernels/cuda) they are
// not read here (that would cost a device-to-host copy per op).
void check_ids(const Ctx& x, const char* what, const TensorView& view, int64_t n, int64_t lo, int64_t hi) {
  if (!view.device().is_host()) return;
  const int32_t* ids = view.as<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    x.require(ids[i] >= lo && ids[i] < hi, std::string(what) + "[" + std::to_string(i) + "] = " +
                                               std::to_string(ids[i]) + " outside [" + std::to_string(lo) + ", " +
                                               std::to_string(hi) + ")");
}

}  // namespace

void Backend::moe_router_forward(const TensorView& weights, const TensorView& experts, const TensorView& probs,
                                 const TensorView& lse, const TensorView& logits, const TensorView& bias,
                                 bool renormalize) {
  LMT_TRACE_SCOPE("op:moe_routing");
  Ctx x("moe_router_forward", LMT_ARG(weights), LMT_ARG(experts), LMT_ARG(probs), LMT_ARG(lse), LMT_ARG(logits),
        LMT_ARG(bias));
  x.dtype("logits", logits, kAct);
  x.shape("logits", logits, {-1, -1});
  const int64_t N = logits.dim(0), E = logits.dim(1);
  x.shape("weights", weights, {N, -1});
  const int64_t K = weights.dim(1);
  x.require(K >= 1 && K <= E, "K (weights' columns) must be in [1, E]");
  x.shape("experts", experts, {N, K});
  x.dtype("experts", experts, {DType::kI32});
  x.shape("probs", probs, {N, E});
  x.shape("lse", lse, {N});
  x.same_dtype("weights", weights, "logits", logits);
  x.same_dtype("probs", probs, "logits", logits);
  x.same_dtype("lse", lse, "logits", logits);
  if (bias.present()) {
    x.shape("bias", bias, {E});
    x.dtype("bias", bias, {DType::kF32});
  }
  moe_router_forward_impl(weights, experts, probs, lse, logits, bias, renormalize);
}

void Backend::moe_router_forward_impl(const TensorView& weights, const TensorView& experts, const TensorView& probs,
                                      const TensorView& lse, const TensorView& logits, const TensorView& bias,
                                      bool renormalize) {
  const int64_t N = logits.dim(0), E = logits.dim(1), K = weights.dim(1);
  const float* b = bias.present() ? bias.as<float>() : nullptr;
  if (logits.dtype() == DType::kF64)
    router_fwd<double>(weights.as<double>(), experts.as<int32_t>(), probs.as<double>(), lse.as<double>(),
                       logits.as<double>(), b, renormalize, N, E, K);
  else
    router_fwd<float>(weights.as<float>(), experts.as<int32_t>(), probs.as<float>(), lse.as<float>(),
                      logits.as<float>(), b, renormalize, N, E, K);
}

void Backend::moe_router_backward(const TensorView& dlogits, const TensorView& dweights, const TensorView& probs,
                                  const TensorView& lse, const TensorView& experts, bool renormalize,
                                  const TensorView& dprobs, double z_scale) {
  LMT_TRACE_SCOPE("op:moe_routing");
  Ctx x("moe_router_backward", LMT_ARG(dlogits), LMT_ARG(dweights), LMT_ARG(probs), LMT_ARG(lse), LMT_ARG(experts),
        LMT_ARG(dprobs));
  x.dtype("probs", probs, kAct);
  x.shape("probs", probs, {-1, -1});
  const int64_t N = probs.dim(0), E = probs.dim(1);
  x.shape("dweights", dweights, {N, -1});
  const int64_t K = dweights.dim(1);
  x.require(K >= 1 && K <= E, "K (dweights' columns) must be in [1, E]");
  x.shape("experts", experts, {N, K});
  x.dtype("experts", experts, {DType::kI32});
  x.shape("dlogits", dlogits, {N, E});
  x.shape("lse", lse, {N});
  x.same_dtype("dlogits", dlogits, "probs", probs);
  x.same_dtype("dweights", dweights, "probs", probs);
  x.same_dtype("lse", lse, "probs", probs);
  if (dprobs.present()) {
    x.shape("dprobs", dprobs, {E});
    x.same_dtype("dprobs", dprobs, "probs", probs);
  }
  check_ids(x, "experts", experts, N * K, 0, E);
  moe_router_backward_impl(dlogits, dweights, probs, lse, experts, renormalize, dprobs, z_scale);
}

void Backend::moe_router_backward_impl(const TensorView& dlogits, const TensorView& dweights, const TensorView& probs,
                                       const TensorView& lse, const TensorView& experts, bool renormalize,
                                       const TensorView& dprobs, double z_scale) {
  const int64_t N = probs.dim(0), E = probs.dim(1), K = dweights.dim(1);
  if (probs.dtype() == DType::kF64)
    router_bwd<double>(dlogits.as<double>(), dweights.as<double>(), probs.as<double>(), lse.as<double>(),
                       experts.as<int32_t>(), renormalize, dprobs.present() ? dprobs.as<double>() : nullptr, z_scale,
                       N, E, K);
  else
    router_bwd<float>(dlogits.as<float>(), dweights.as<float>(), probs.as<float>(), lse.as<float>(),
                      experts.as<int32_t>(), renormalize, dprobs.present() ? dprobs.as<float>() : nullptr, z_scale,
                      N, E, K);
}

void Backend::moe_gather_rows(const TensorView& out, const TensorView& inp, const TensorView& rows) {
  LMT_TRACE_SCOPE("op:moe_routing");
  Ctx x("moe_gather_rows", LMT_ARG(out), LMT_ARG(inp), LMT_ARG(rows));
  x.dtype("inp", inp, kGemmIn);
  x.same_dtype("out", out, "inp", inp);
  x.shape("inp", inp, {-1, -1});
  x.shape("rows", rows, {-1});
  x.dtype("rows", rows, {DType::kI32});
  x.shape("out", out, {rows.dim(0), inp.dim(1)});
  check_ids(x, "rows", rows, rows.numel(), 0, inp.dim(0));
  moe_gather_rows_impl(out, inp, rows);
}

void Backend::moe_gather_rows_impl(const TensorView& out, const TensorView& inp, const TensorView& rows) {
  const size_t row_bytes = static_cast<size_t>(inp.dim(1)) * dtype_size(inp.dtype());
  const int32_t* r = rows.as<int32_t>();
  char* o = static_cast<char*>(out.data());
  const char* in = static_cast<const char*>(inp.data());
  for (int64_t i = 0; i < rows.dim(0); ++i) std::memcpy(o + i * row_bytes, in + r[i] * row_bytes, row_bytes);
}

void Backend::moe_scatter_add_rows(const TensorView& dinp, const TensorView& dout, const TensorView& rows) {
  LMT_TRACE_SCOPE("op:moe_routing");
  Ctx x("moe_scatter_add_rows", LMT_ARG(dinp), LMT_ARG(dout), LMT_ARG(rows));
  x.dtype("dinp", dinp, kAct);
  x.same_dtype("dinp", dinp, "dout", dout);
  x.shape("dinp", dinp, {-1, -1});
  x.shape("rows", rows, {-1});
  x.dtype("rows", rows, {DType::kI32});
  x.shape("dout", dout, {rows.dim(0), dinp.dim(1)});
  check_ids(x, "rows", rows, rows.numel(), 0, dinp.dim(0));
  moe_scatter_add_rows_impl(dinp, dout, rows);
}

void Backend::moe_scatter_add_rows_impl(const TensorView& dinp, const TensorView& dout, const TensorView& rows) {
  if (dinp.dtype() == DType::kF64)
    scatter_add<double>(dinp.as<double>(), dout.as<double>(), rows.as<int32_t>(), rows.dim(0), dinp.dim(1));
  else
    scatter_add<float>(dinp.as<float>(), dout.as<float>(), rows.as<int32_t>(), rows.dim(0), dinp.dim(1));
}

void Backend::moe_combine_forward(const TensorView& out, const TensorView& y, const TensorView& weights,
                                  const TensorView& slots) {
  LMT_TRACE_SCOPE("op:moe_routing");
  Ctx x("moe_combine_forward", LMT_ARG(out), LMT_ARG(y), LMT_ARG(weights), LMT_ARG(slots));
  x.dtype("out", out, kAct);
  x.same_dtype("out", out, "y", y);
  x.same_dtype("out", out, "weights", weights);
  x.shape("out", out, {-1, -1});
  x.shape("y", y, {-1, out.dim(1)});
  x.shape("weights", weights, {out.dim(0), -1});
  x.shape("slots", slots, {out.dim(0), weights.dim(1)});
  x.dtype("slots", slots, {DType::kI32});
  check_ids(x, "slots", slots, slots.numel(), -1, y.dim(0));
  moe_combine_forward_impl(out, y, weights, slots);
}

void Backend::moe_combine_forward_impl(const TensorView& out, const TensorView& y, const TensorView& weights,
                                       const TensorView& slots) {
  const int64_t N = out.dim(0), F = out.dim(1), K = weights.dim(1);
  if (out.dtype() == DType::kF64)
    combine_fwd<double>(out.as<double>(), y.as<double>(), weights.as<double>(), slots.as<int32_t>(), N, K, F);
  else
    combine_fwd<float>(out.as<float>(), y.as<float>(), weights.as<float>(), slots.as<int32_t>(), N, K, F);
}

void Backend::moe_combine_backward(const TensorView& dy, const TensorView& dweights, const TensorView& dout,
                                   const TensorView& y, const TensorView& weights, const TensorView& slots) {
  LMT_TRACE_SCOPE("op:moe_routing");
  Ctx x("moe_combine_backward", LMT_ARG(dy), LMT_ARG(dweights), LMT_ARG(dout), LMT_ARG(y), LMT_ARG(weights),
        LMT_ARG(slots));
  x.dtype("dout", dout, kAct);
  for (const TensorView* t : {&dy, &dweights, &y, &weights}) x.require(t->dtype() == dout.dtype(), "all float arguments must share dout's dtype");
  x.shape("dout", dout, {-1, -1});
  x.shape("y", y, {-1, dout.dim(1)});
  x.shape("dy", dy, {y.dim(0), dout.dim(1)});
  x.shape("weights", weights, {dout.dim(0), -1});
  x.shape("dweights", dweights, {dout.dim(0), weights.dim(1)});
  x.shape("slots", slots, {dout.dim(0), weights.dim(1)});
  x.dtype("slots", slots, {DType::kI32});
  check_ids(x, "slots", slots, slots.numel(), -1, y.dim(0));
  moe_combine_backward_impl(dy, dweights, dout, y, weights, slots);
}

void Backend::moe_combine_backward_impl(const TensorView& dy, const TensorView& dweights, const TensorView& dout,
                                        const TensorView& y, const TensorView& weights, const TensorView& slots) {
  const int64_t N = dout.dim(0), F = dout.dim(1), K = weights.dim(1);
  if (dout.dtype() == DType::kF64)
    combine_bwd<double>(dy.as<double>(), dweights.as<double>(), dout.as<double>(), y.as<double>(), weights.as<double>(),
                        slots.as<int32_t>(), N, K, F);
  else
    combine_bwd<float>(dy.as<float>(), dweights.as<float>(), dout.as<float>(), y.as<float>(), weights.as<float>(),
                       slots.as<int32_t>(), N, K, F);
}

void Backend::grouped_linear_forward(const TensorView& out, const TensorView& inp, const TensorView& weight,
                                     const std::vector<int64_t>& offsets) {
  LMT_TRACE_SCOPE("op:gemm");
  Ctx x("grouped_linear_forward", LMT_ARG(out), LMT_ARG(inp), LMT_ARG(weight));
  x.dtype("inp", inp, kGemmIn);
  x.same_dtype("inp", inp, "weight", weight);
  x.shape("weight", weight, {-1, -1, -1});
  x.shape("inp", inp, {-1, weight.dim(2)});
  x.shape("out", out, {inp.dim(0), weight.dim(1)});
  x.require(out.dtype() == acc_dtype_for(inp.dtype()), "out must be f32 (f64 for f64 inputs)");
  check_offsets(x, offsets, weight.dim(0), inp.dim(0));
  grouped_linear_forward_impl(out, inp, weight, offsets);
}

void Backend::grouped_linear_forward_impl(const TensorView& out, const TensorView& inp, const TensorView& weight,
                                          const std::vector<int64_t>& offsets) {
  for (int64_t e = 0; e < weight.dim(0); ++e) {
    if (offsets[e] == offsets[e + 1]) continue;  // an expert with no tokens
    linear_forward_impl(expert_rows(out, offsets[e], offsets[e + 1]), expert_rows(inp, offsets[e], offsets[e + 1]),
                        expert_matrix(weight, e), TensorView());
  }
}

void Backend::grouped_linear_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dout,
                                      const TensorView& inp, const TensorView& weight,
                                      const std::vector<int64_t>& offsets) {
  Ctx x("grouped_linear_backward", LMT_ARG(dinp), LMT_ARG(dweight), LMT_ARG(dout), LMT_ARG(inp), LMT_ARG(weight));
  x.dtype("dout", dout, kGemmIn);
  x.same_dtype("dout", dout, "inp", inp);
  x.same_dtype("dout", dout, "weight", weight);
  x.shape("weight", weight, {-1, -1, -1});
  x.shape("inp", inp, {-1, weight.dim(2)});
  x.shape("dout", dout, {inp.dim(0), weight.dim(1)});
  const DType acc = acc_dtype_for(dout.dtype());
  if (dinp.present()) {
    x.shape("dinp", dinp, {inp.dim(0), inp.dim(1)});
    x.require(dinp.dtype() == acc, "dinp must be f32 (f64 for f64 inputs)");
  }
  if (dweight.present()) {
    x.shape("dweight", dweight, {weight.dim(0), weight.dim(1), weight.dim(2)});
    x.require(dweight.dtype() == acc, "dweight must be f32 (f64 for f64 inputs)");
  }
  check_offsets(x, offsets, weight.dim(0), inp.dim(0));
  // Two calls, like linear_backward: the profile's gemm_dx and gemm_dw.
  if (dinp.present()) {
    LMT_TRACE_SCOPE("op:gemm_dx");
    grouped_linear_backward_impl(dinp, TensorView(), dout, inp, weight, offsets);
  }
  if (dweight.present()) {
    LMT_TRACE_SCOPE("op:gemm_dw");
    grouped_linear_backward_impl(TensorView(), dweight, dout, inp, weight, offsets);
  }
}

void Backend::grouped_linear_backward_impl(const TensorView& dinp, const TensorView& dweight, const TensorView& dout,
                                           const TensorView& inp, const TensorView& weight,
                                           const std::vector<int64_t>& offsets) {
  for (int64_t e = 0; e < weight.dim(0); ++e) {
    const int64_t b = offsets[e], end = offsets[e + 1];
    if (b == end) continue;  // no rows: no input gradient rows, and dweight[e] += 0
    linear_backward_impl(dinp.present() ? expert_rows(dinp, b, end) : TensorView(),
                         dweight.present() ? expert_matrix(dweight, e) : TensorView(), TensorView(),
                         expert_rows(dout, b, end), expert_rows(inp, b, end), expert_matrix(weight, e));
  }
}

}  // namespace lmt::kernels
