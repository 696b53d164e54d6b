// ref: rotary position embedding, Hugging Face rotate-half layout, angles in f64 from the given
// frequencies; cos and sin carry the attention scaling (the inverse uses the same scaling).
#include <cmath>

#include "lmt/kernels/ref/access.h"
#include "lmt/kernels/ref/ref_backend.h"

namespace lmt::kernels {
using ref::ld;
using ref::st;

void RefBackend::rope_impl(const TensorView& out, const TensorView& inp, const TensorView& positions,
                           const RopeFreqs& freqs, bool inverse) {
  const int64_t N = inp.dim(0), NH = inp.dim(1), HD = inp.dim(2), rotary_dim = freqs.rotary_dim(),
                half = rotary_dim / 2;
  const double scale = freqs.attention_scaling;
  for (int64_t n = 0; n < N; ++n) {
    const double pos = static_cast<double>(ref::id(positions, n));
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t base = (n * NH + h) * HD;
      for (int64_t i = 0; i < half; ++i) {
        double angle = pos * freqs.inv_freq[i] * (inverse ? -1.0 : 1.0);
        double c = scale * std::cos(angle), s = scale * std::sin(angle);
        double x1 = ld(inp, base + i), x2 = ld(inp, base + i + half);
        st(out, base + i, x1 * c - x2 * s);
        st(out, base + i + half, x2 * c + x1 * s);
      }
      for (int64_t i = rotary_dim; i < HD; ++i) st(out, base + i, ld(inp, base + i));
    }
  }
}

}  // namespace lmt::kernels
