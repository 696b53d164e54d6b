// ref: pointwise activations and gated linear units.
#include <cmath>

#include "lmt/kernels/ref/access.h"
#include "lmt/kernels/ref/ref_backend.h"

namespace lmt::kernels {
using ref::ld;
using ref::st;

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCoeff = 0.044715;

double act_f(Activation a, double x) {
  switch (a) {
    case Activation::kGeluTanh:
      return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kGeluCoeff * x * x * x)));
    case Activation::kSilu: return x / (1.0 + std::exp(-x));
    case Activation::kRelu: return x > 0 ? x : 0.0;
  }
  return 0;
}
double act_df(Activation a, double x) {
  switch (a) {
    case Activation::kGeluTanh: {
      double u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
      double t = std::tanh(u);
      return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kGeluCoeff * x * x);
    }
    case Activation::kSilu: {
      double s = 1.0 / (1.0 + std::exp(-x));
      return s * (1.0 + x * (1.0 - s));
    }
    case Activation::kRelu: return x > 0 ? 1.0 : 0.0;
  }
  return 0;
}
}  // namespace

void RefBackend::activation_forward_impl(Activation act, const TensorView& out,
                                         const TensorView& inp) {
  for (int64_t i = 0; i < inp.numel(); ++i) st(out, i, act_f(act, ld(inp, i)));
}

void RefBackend::activation_backward_impl(Activation act, const TensorView& dinp,
                                          const TensorView& dout, const TensorView& inp) {
  for (int64_t i = 0; i < inp.numel(); ++i) st(dinp, i, ld(dout, i) * act_df(act, ld(inp, i)));
}

void RefBackend::glu_forward_impl(Activation act, const TensorView& out, const TensorView& inp) {
  const int64_t N = out.dim(0), H = out.dim(1);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      st(out, n * H + h, act_f(act, ld(inp, n * 2 * H + h)) * ld(inp, n * 2 * H + H + h));
}

void RefBackend::glu_backward_impl(Activation act, const TensorView& dinp, const TensorView& dout,
                                   const TensorView& inp) {
  const int64_t N = dout.dim(0), H = dout.dim(1);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      double g = ld(inp, n * 2 * H + h), u = ld(inp, n * 2 * H + H + h), d = ld(dout, n * H + h);
      st(dinp, n * 2 * H + h, d * u * act_df(act, g));
      st(dinp, n * 2 * H + H + h, d * act_f(act, g));
    }
}

}  // namespace lmt::kernels
