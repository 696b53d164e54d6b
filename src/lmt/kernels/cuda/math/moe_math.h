// The mixture-of-experts math of kernels/cuda/moe.cu: the router's softmax, top-K and renormalised
// weights per row and their backward, and the combine's weighted sums, as the kernels run them (one
// thread per router row, one per combined element, a warp per d weights dot product).
//
// They accumulate in f64 like the host loops of kernels/moe.cpp, in the same order, so on the host
// the router and the combine give exactly those loops' bits (cuda_math_test checks it against the
// ref backend); on a GPU only the device's exp and log may round differently. The d weights dot
// product is summed in 32 lane partials and a butterfly instead of in order (within f64 rounding).
#pragma once

#include <cmath>
#include <cstdint>

#include "lmt/kernels/cuda/math/hd.h"

namespace lmt::kernels::cuda_math {

// Whether expert e is among chosen[0, k).
LMT_HD bool moe_chosen(const int32_t* chosen, int64_t k, int64_t e) {
  for (int64_t j = 0; j < k; ++j)
    if (chosen[j] == e) return true;
  return false;
}

// One router row (E logits): probs[E] = softmax, lse = its log-sum-exp, experts[K] the K largest
// probs + bias (bias optional) in descending order, ties to the lower index, weights[K] their
// unbiased probs (divided by their sum when renormalize).
template <typename T>
LMT_HD void moe_router_row_forward(const T* logits, const float* bias, int64_t E, int64_t K, bool renormalize, T* probs,
                                   T* lse, int32_t* experts, T* weights) {
  double mx = -INFINITY;
  for (int64_t e = 0; e < E; ++e) {
    const double v = static_cast<double>(logits[e]);
    mx = mx < v ? v : mx;
  }
  double z = 0;
  for (int64_t e = 0; e < E; ++e) z += exp(static_cast<double>(logits[e]) - mx);
  *lse = static_cast<T>(mx + log(z));
  for (int64_t e = 0; e < E; ++e) probs[e] = static_cast<T>(exp(static_cast<double>(logits[e]) - mx) / z);
  double sum = 0;
  for (int64_t k = 0; k < K; ++k) {
    int64_t best = -1;
    double best_score = 0;
    for (int64_t e = 0; e < E; ++e) {
      if (moe_chosen(experts, k, e)) continue;
      const double score = static_cast<double>(probs[e]) + (bias ? static_cast<double>(bias[e]) : 0.0);
      if (best < 0 || score > best_score) best = e, best_score = score;  // strict >: the lower index wins a tie
    }
    experts[k] = static_cast<int32_t>(best);
    sum += static_cast<double>(probs[best]);
  }
  for (int64_t k = 0; k < K; ++k) {
    const double v = static_cast<double>(probs[experts[k]]);
    weights[k] = static_cast<T>(renormalize ? v / sum : v);
  }
}

// d probs[e] of one router row: dprobs[e] (the aux loss's term; optional) plus, where e was chosen as
// the k-th expert, d weights[k] (renormalised: (dw_k - Σ_j dw_j w_j) / S, S the chosen probs' sum).
template <typename T>
LMT_HD double moe_router_dprob(const T* p, const int32_t* experts, const T* dw, const T* dprobs, bool renormalize,
                               double S, double dot, int64_t K, int64_t e) {
  double d = dprobs ? static_cast<double>(dprobs[e]) : 0.0;
  for (int64_t k = 0; k < K; ++k)
    if (experts[k] == e) d += renormalize ? (static_cast<double>(dw[k]) - dot) / S : static_cast<double>(dw[k]);
  return d;
}

// One router row's backward: dlogits[E] = p ⊙ (d p - Σ p ⊙ d p + z_scale · lse) (overwrite).
template <typename T>
LMT_HD void moe_router_row_backward(const T* p, T lse, const int32_t* experts, const T* dw, const T* dprobs,
                                    double z_scale, bool renormalize, int64_t E, int64_t K, T* dlogits) {
  double S = 0, dot = 0;
  if (renormalize) {
    for (int64_t k = 0; k < K; ++k) S += static_cast<double>(p[experts[k]]);
    for (int64_t k = 0; k < K; ++k) dot += static_cast<double>(dw[k]) * static_cast<double>(p[experts[k]]) / S;
  }
  double s = 0;
  for (int64_t e = 0; e < E; ++e)
    s += static_cast<double>(p[e]) * moe_router_dprob(p, experts, dw, dprobs, renormalize, S, dot, K, e);
  const double dlse = z_scale * static_cast<double>(lse);
  for (int64_t e = 0; e < E; ++e) {
    const double dp = moe_router_dprob(p, experts, dw, dprobs, renormalize, S, dot, K, e);
    dlogits[e] = static_cast<T>(static_cast<double>(p[e]) * (dp - s + dlse));
  }
}

// Element f of the combine's output row: Σ_k weights[k] · y[slots[k], f] over the kept slots
// (slots[k] in [0, R); -1, a dropped slot, or any other value contributes nothing).
template <typename T>
LMT_HD T moe_combine_element(const T* y, const T* weights, const int32_t* slots, int64_t K, int64_t R, int64_t F,
                             int64_t f) {
  double acc = 0;
  for (int64_t k = 0; k < K; ++k) {
    const int32_t r = slots[k];
    if (r < 0 || r >= R) continue;
    acc += static_cast<double>(weights[k]) * static_cast<double>(y[static_cast<int64_t>(r) * F + f]);
  }
  return static_cast<T>(acc);
}

// Lane `lane` of `lanes`' part of Σ_f dout[f] · y[f] (columns lane, lane + lanes, ...).
template <typename T>
LMT_HD double moe_dot_partial(const T* dout, const T* y, int64_t F, int lane, int lanes) {
  double acc = 0;
  for (int64_t f = lane; f < F; f += lanes) acc += static_cast<double>(dout[f]) * static_cast<double>(y[f]);
  return acc;
}

}  // namespace lmt::kernels::cuda_math
