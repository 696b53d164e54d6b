// ref: causal grouped-query attention with optional document masking. Both AttentionBackend values
// compute the same function; the ref recomputes probabilities in f64 and ignores saved out/lse.
#include <cmath>
#include <limits>
#include <vector>

#include "lmt/kernels/ref/access.h"
#include "lmt/kernels/ref/ref_backend.h"

namespace lmt::kernels {
using ref::acc;
using ref::ld;
using ref::st;

namespace {
struct Dims {
  int64_t B, T, NH, G, HD;
  int64_t qi(int64_t b, int64_t t, int64_t h, int64_t d) const { return ((b * T + t) * NH + h) * HD + d; }
  int64_t ki(int64_t b, int64_t t, int64_t g, int64_t d) const { return ((b * T + t) * G + g) * HD + d; }
};
bool visible(const TensorView& doc_ids, int64_t T, int64_t b, int64_t i, int64_t j) {
  if (j > i) return false;
  return !doc_ids.present() || ref::id(doc_ids, b * T + j) == ref::id(doc_ids, b * T + i);
}
// Probabilities p[j] of query (b,h,i) over keys j (0 where masked); returns the log-sum-exp.
double probs(const Dims& d, const TensorView& q, const TensorView& k, const TensorView& doc_ids,
             double scale, int64_t b, int64_t h, int64_t i, std::vector<double>& p) {
  const int64_t g = h / (d.NH / d.G);
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < d.T; ++j) {
    if (!visible(doc_ids, d.T, b, i, j)) { p[j] = -std::numeric_limits<double>::infinity(); continue; }
    double s = 0;
    for (int64_t e = 0; e < d.HD; ++e) s += ld(q, d.qi(b, i, h, e)) * ld(k, d.ki(b, j, g, e));
    p[j] = s * scale;
    mx = std::max(mx, p[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < d.T; ++j) sum += std::isinf(p[j]) ? 0.0 : std::exp(p[j] - mx);
  double lse = mx + std::log(sum);
  for (int64_t j = 0; j < d.T; ++j) p[j] = std::isinf(p[j]) ? 0.0 : std::exp(p[j] - lse);
  return lse;
}
}  // namespace

void RefBackend::attention_forward_impl(AttentionBackend, const TensorView& out,
                                        const TensorView& lse, const TensorView& q,
                                        const TensorView& k, const TensorView& v,
                                        const TensorView& doc_ids, float scale, DType) {
  Dims d{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3)};
  std::vector<double> p(d.T);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.NH; ++h) {
      const int64_t g = h / (d.NH / d.G);
      for (int64_t i = 0; i < d.T; ++i) {
        st(lse, (b * d.NH + h) * d.T + i, probs(d, q, k, doc_ids, scale, b, h, i, p));
        for (int64_t e = 0; e < d.HD; ++e) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j) o += p[j] * ld(v, d.ki(b, j, g, e));
          st(out, d.qi(b, i, h, e), o);
        }
      }
    }
}

void RefBackend::attention_backward_impl(AttentionBackend, const TensorView& dq,
                                         const TensorView& dk, const TensorView& dv,
                                         const TensorView& dout, const TensorView& q,
                                         const TensorView& k, const TensorView& v,
                                         const TensorView&, const TensorView&,
                                         const TensorView& doc_ids, float scale, DType) {
  Dims d{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3)};
  for (int64_t i = 0; i < dq.numel(); ++i) st(dq, i, 0.0);
  for (int64_t i = 0; i < dk.numel(); ++i) st(dk, i, 0.0);
  for (int64_t i = 0; i < dv.numel(); ++i) st(dv, i, 0.0);
  std::vector<double> p(d.T), dp(d.T);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.NH; ++h) {
      const int64_t g = h / (d.NH / d.G);
      for (int64_t i = 0; i < d.T; ++i) {
        probs(d, q, k, doc_ids, scale, b, h, i, p);
        double D = 0;  // Σ_j p_j dP_j
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t e = 0; e < d.HD; ++e) s += ld(dout, d.qi(b, i, h, e)) * ld(v, d.ki(b, j, g, e));
          dp[j] = s;
          D += p[j] * s;
        }
        for (int64_t j = 0; j <= i; ++j) {
          if (p[j] == 0.0) continue;
          double ds = p[j] * (dp[j] - D) * scale;
          for (int64_t e = 0; e < d.HD; ++e) {
            acc(dq, d.qi(b, i, h, e), ds * ld(k, d.ki(b, j, g, e)));
            acc(dk, d.ki(b, j, g, e), ds * ld(q, d.qi(b, i, h, e)));
            acc(dv, d.ki(b, j, g, e), p[j] * ld(dout, d.qi(b, i, h, e)));
          }
        }
      }
    }
}

void RefBackend::attention_decode_impl(const TensorView& out, const TensorView& q,
                                       const TensorView& k_cache, const TensorView& v_cache,
                                       int64_t length, float scale) {
  const int64_t B = q.dim(0), NH = q.dim(1), HD = q.dim(2), S = k_cache.dim(1), G = k_cache.dim(2);
  auto kv = [&](int64_t b, int64_t j, int64_t g, int64_t e) { return ((b * S + j) * G + g) * HD + e; };
  std::vector<double> p(length);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t g = h / (NH / G);
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < length; ++j) {
        double s = 0;
        for (int64_t e = 0; e < HD; ++e) s += ld(q, (b * NH + h) * HD + e) * ld(k_cache, kv(b, j, g, e));
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < length; ++j) sum += p[j] = std::exp(p[j] - mx);
      for (int64_t e = 0; e < HD; ++e) {
        double o = 0;
        for (int64_t j = 0; j < length; ++j) o += p[j] * ld(v_cache, kv(b, j, g, e));
        st(out, (b * NH + h) * HD + e, o / sum);
      }
    }
}

// Query i of n at position start + i: the attention_decode loops over its own causal key range.
void RefBackend::attention_prefill_impl(const TensorView& out, const TensorView& q,
                                        const TensorView& k_cache, const TensorView& v_cache,
                                        int64_t start, float scale) {
  const int64_t n = q.dim(0), NH = q.dim(1), HD = q.dim(2), G = k_cache.dim(2);
  auto kv = [&](int64_t j, int64_t g, int64_t e) { return (j * G + g) * HD + e; };
  std::vector<double> p(start + n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t g = h / (NH / G), length = start + i + 1;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < length; ++j) {
        double s = 0;
        for (int64_t e = 0; e < HD; ++e) s += ld(q, (i * NH + h) * HD + e) * ld(k_cache, kv(j, g, e));
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < length; ++j) sum += p[j] = std::exp(p[j] - mx);
      for (int64_t e = 0; e < HD; ++e) {
        double o = 0;
        for (int64_t j = 0; j < length; ++j) o += p[j] * ld(v_cache, kv(j, g, e));
        st(out, (i * NH + h) * HD + e, o / sum);
      }
    }
}

}  // namespace lmt::kernels
