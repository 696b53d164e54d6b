// ref: layernorm and rmsnorm. Forward computes the statistics in f64. Backward recomputes the mean
// from inp and takes rstd from forward (it carries eps, which backward is not given); a fast
// backend's saved statistics are checked by comparing forward outputs.
#include <cmath>
#include <vector>

#include "lmt/kernels/ref/access.h"
#include "lmt/kernels/ref/ref_backend.h"

namespace lmt::kernels {
using ref::acc;
using ref::ld;
using ref::st;

namespace {
struct RowStats {
  double mean, rstd;
};
RowStats layernorm_stats(const TensorView& inp, int64_t n, int64_t C, double eps) {
  double m = 0;
  for (int64_t c = 0; c < C; ++c) m += ld(inp, n * C + c);
  m /= static_cast<double>(C);
  double var = 0;
  for (int64_t c = 0; c < C; ++c) {
    double d = ld(inp, n * C + c) - m;
    var += d * d;
  }
  var /= static_cast<double>(C);
  return {m, 1.0 / std::sqrt(var + eps)};
}
double rms_rstd(const TensorView& inp, int64_t n, int64_t C, double eps) {
  double ss = 0;
  for (int64_t c = 0; c < C; ++c) ss += ld(inp, n * C + c) * ld(inp, n * C + c);
  return 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
}
}  // namespace

void RefBackend::layernorm_forward_impl(const TensorView& out, const TensorView& mean,
                                        const TensorView& rstd, const TensorView& inp,
                                        const TensorView& weight, const TensorView& bias,
                                        float eps) {
  const int64_t N = inp.dim(0), C = inp.dim(1);
  for (int64_t n = 0; n < N; ++n) {
    RowStats s = layernorm_stats(inp, n, C, eps);
    for (int64_t c = 0; c < C; ++c) {
      double y = (ld(inp, n * C + c) - s.mean) * s.rstd * ld(weight, c);
      if (bias.present()) y += ld(bias, c);
      st(out, n * C + c, y);
    }
    st(mean, n, s.mean);
    st(rstd, n, s.rstd);
  }
}

void RefBackend::layernorm_backward_impl(const TensorView& dinp, const TensorView& dweight,
                                         const TensorView& dbias, const TensorView& dout,
                                         const TensorView& inp, const TensorView& weight,
                                         const TensorView& mean, const TensorView& rstd,
                                         bool accumulate) {
  const int64_t N = inp.dim(0), C = inp.dim(1);
  std::vector<double> xhat(C), dxhat(C);
  for (int64_t n = 0; n < N; ++n) {
    double m = 0;
    for (int64_t c = 0; c < C; ++c) m += ld(inp, n * C + c);
    m /= static_cast<double>(C);
    const double r = ld(rstd, n);
    double mean_dxhat = 0, mean_dxhat_xhat = 0;
    for (int64_t c = 0; c < C; ++c) {
      xhat[c] = (ld(inp, n * C + c) - m) * r;
      dxhat[c] = ld(dout, n * C + c) * ld(weight, c);
      mean_dxhat += dxhat[c];
      mean_dxhat_xhat += dxhat[c] * xhat[c];
      acc(dweight, c, ld(dout, n * C + c) * xhat[c]);
      if (dbias.present()) acc(dbias, c, ld(dout, n * C + c));
    }
    mean_dxhat /= static_cast<double>(C);
    mean_dxhat_xhat /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) {
      double g = r * (dxhat[c] - mean_dxhat - xhat[c] * mean_dxhat_xhat);
      if (accumulate) acc(dinp, n * C + c, g); else st(dinp, n * C + c, g);
    }
  }
}

void RefBackend::rmsnorm_forward_impl(const TensorView& out, const TensorView& rstd,
                                      const TensorView& inp, const TensorView& weight, float eps) {
  const int64_t N = inp.dim(0), C = inp.dim(1);
  for (int64_t n = 0; n < N; ++n) {
    double r = rms_rstd(inp, n, C, eps);
    for (int64_t c = 0; c < C; ++c) st(out, n * C + c, ld(inp, n * C + c) * r * ld(weight, c));
    st(rstd, n, r);
  }
}

void RefBackend::rmsnorm_backward_impl(const TensorView& dinp, const TensorView& dweight,
                                       const TensorView& dout, const TensorView& inp,
                                       const TensorView& weight, const TensorView& rstd,
                                       bool accumulate) {
  const int64_t N = inp.dim(0), C = inp.dim(1);
  for (int64_t n = 0; n < N; ++n) {
    const double r = ld(rstd, n);
    double mean_dxhat_xhat = 0;
    for (int64_t c = 0; c < C; ++c) {
      double xhat = ld(inp, n * C + c) * r;
      double dxhat = ld(dout, n * C + c) * ld(weight, c);
      mean_dxhat_xhat += dxhat * xhat;
      acc(dweight, c, ld(dout, n * C + c) * xhat);
    }
    mean_dxhat_xhat /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) {
      double xhat = ld(inp, n * C + c) * r;
      double dxhat = ld(dout, n * C + c) * ld(weight, c);
      double g = r * (dxhat - xhat * mean_dxhat_xhat);
      if (accumulate) acc(dinp, n * C + c, g); else st(dinp, n * C + c, g);
    }
  }
}

}  // namespace lmt::kernels
