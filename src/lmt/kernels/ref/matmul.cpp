// ref: matmul and linear (f64 accumulation).
#include "lmt/kernels/ref/access.h"
#include "lmt/kernels/ref/ref_backend.h"

namespace lmt::kernels {
using ref::acc;
using ref::ld;
using ref::st;

void RefBackend::matmul_impl(const TensorView& c, const TensorView& a, const TensorView& b,
                             bool trans_a, bool trans_b, bool accumulate) {
  const int64_t M = c.dim(0), N = c.dim(1), K = trans_a ? a.dim(0) : a.dim(1);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = accumulate ? ld(c, m * N + n) : 0.0;
      for (int64_t k = 0; k < K; ++k) {
        double av = trans_a ? ld(a, k * M + m) : ld(a, m * K + k);
        double bv = trans_b ? ld(b, n * K + k) : ld(b, k * N + n);
        s += av * bv;
      }
      st(c, m * N + n, s);
    }
}

void RefBackend::linear_forward_impl(const TensorView& out, const TensorView& inp,
                                     const TensorView& weight, const TensorView& bias) {
  const int64_t N = inp.dim(0), C = inp.dim(1), OC = weight.dim(0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      double s = bias.present() ? ld(bias, o) : 0.0;
      for (int64_t c = 0; c < C; ++c) s += ld(inp, n * C + c) * ld(weight, o * C + c);
      st(out, n * OC + o, s);
    }
}

void RefBackend::linear_backward_impl(const TensorView& dinp, const TensorView& dweight,
                                      const TensorView& dbias, const TensorView& dout,
                                      const TensorView& inp, const TensorView& weight) {
  const int64_t N = inp.dim(0), C = inp.dim(1), OC = weight.dim(0);
  if (dinp.present())
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (int64_t o = 0; o < OC; ++o) s += ld(dout, n * OC + o) * ld(weight, o * C + c);
        st(dinp, n * C + c, s);
      }
  if (dweight.present())
    for (int64_t o = 0; o < OC; ++o)
      for (int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (int64_t n = 0; n < N; ++n) s += ld(dout, n * OC + o) * ld(inp, n * C + c);
        acc(dweight, o * C + c, s);
      }
  if (dbias.present())
    for (int64_t o = 0; o < OC; ++o) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) s += ld(dout, n * OC + o);
      acc(dbias, o, s);
    }
}

}  // namespace lmt::kernels
