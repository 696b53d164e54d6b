// ref: rotary position embedding, Hugging Face rotate-half layout, angles in f64.
#include <cmath>

#include "lmt/kernels/ref/access.h"
#include "lmt/kernels/ref/ref_backend.h"

namespace lmt::kernels {
using ref::ld;
using ref::st;

void RefBackend::rope_impl(const TensorView& out, const TensorView& inp, const TensorView& positions,
                           float theta, int64_t rotary_dim, bool inverse) {
  const int64_t N = inp.dim(0), NH = inp.dim(1), HD = inp.dim(2), half = rotary_dim / 2;
  for (int64_t n = 0; n < N; ++n) {
    const double pos = static_cast<double>(ref::id(positions, n));
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t base = (n * NH + h) * HD;
      for (int64_t i = 0; i < half; ++i) {
        double freq = std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / static_cast<double>(rotary_dim));
        double angle = pos * freq * (inverse ? -1.0 : 1.0);
        double c = std::cos(angle), s = std::sin(angle);
        double x1 = ld(inp, base + i), x2 = ld(inp, base + i + half);
        st(out, base + i, x1 * c - x2 * s);
        st(out, base + i + half, x2 * c + x1 * s);
      }
      for (int64_t i = rotary_dim; i < HD; ++i) st(out, base + i, ld(inp, base + i));
    }
  }
}

}  // namespace lmt::kernels
