// cpu: rotary position embedding, Hugging Face rotate-half layout, forward and inverse.
//
// The angles depend only on (position, pair index), so their (scaled) cos/sin are computed once in
// f64 from the given frequencies (as the ref does) and cached on the backend as an f32 table; a call then costs one pass over x with
// two FMAs per element. Rows (tokens) are spread over threads; each row reads one table row shared
// by all its heads. The rotation of pair i reads x[i] and x[i + half] before writing either, so
// out may alias inp.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/kernels/cpu/vector_loop.h"

namespace lmt::kernels {

namespace {

// The table grows in steps of this many positions, so slowly growing positions rebuild it rarely.
constexpr int64_t kPositionGranule = 1024;

// One head: pairs (i, i + half) for i < half rotated by (cos, sin), or by (cos, -sin) if inverse.
void rotate_head(float* out, const float* in, const float* cos_row, const float* sin_row, int64_t half,
                 bool inverse) {
#ifdef __AVX512F__
  simd::for_each_vector(half, [&](int64_t i, __mmask16 m) {
    const __m512 x1 = _mm512_maskz_loadu_ps(m, in + i), x2 = _mm512_maskz_loadu_ps(m, in + half + i);
    const __m512 c = _mm512_maskz_loadu_ps(m, cos_row + i), s = _mm512_maskz_loadu_ps(m, sin_row + i);
    // forward: (x1·c - x2·s, x2·c + x1·s); inverse flips the sign of s.
    const __m512 y1 = inverse ? _mm512_fmadd_ps(x2, s, _mm512_mul_ps(x1, c))
                              : _mm512_fnmadd_ps(x2, s, _mm512_mul_ps(x1, c));
    const __m512 y2 = inverse ? _mm512_fnmadd_ps(x1, s, _mm512_mul_ps(x2, c))
                              : _mm512_fmadd_ps(x1, s, _mm512_mul_ps(x2, c));
    _mm512_mask_storeu_ps(out + i, m, y1);
    _mm512_mask_storeu_ps(out + half + i, m, y2);
  });
#else
  const float sign = inverse ? -1.0f : 1.0f;
  for (int64_t i = 0; i < half; ++i) {
    const float x1 = in[i], x2 = in[half + i], c = cos_row[i], s = sign * sin_row[i];
    out[i] = x1 * c - x2 * s;
    out[half + i] = x2 * c + x1 * s;
  }
#endif
}

// Largest position in positions[N]; stops on a negative one (the table starts at 0).
int64_t max_position(const int32_t* positions, int64_t N) {
  int32_t lo = 0, hi = 0;
  for (int64_t n = 0; n < N; ++n) {
    lo = std::min(lo, positions[n]);
    hi = std::max(hi, positions[n]);
  }
  LMT_CHECK(lo >= 0) << "kernel 'rope': the cpu backend needs positions >= 0, got " << lo;
  return hi;
}

}  // namespace

const float* CpuBackend::rope_table(const RopeFreqs& freqs, int64_t max_position) {
  if (max_position < rope_positions_ && freqs == rope_freqs_) return rope_table_.data();
  const int64_t rotary_dim = freqs.rotary_dim(), half = rotary_dim / 2;
  const int64_t positions = (max_position / kPositionGranule + 1) * kPositionGranule;
  rope_table_.resize(static_cast<size_t>(positions * rotary_dim));
  const std::vector<double>& freq = freqs.inv_freq;
  const double scale = freqs.attention_scaling;
  float* table = rope_table_.data();
#pragma omp parallel for schedule(static) if (positions * half > 65536)
  for (int64_t pos = 0; pos < positions; ++pos) {
    float* row = table + pos * rotary_dim;
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos) * freq[i];
      row[i] = static_cast<float>(scale * std::cos(angle));
      row[half + i] = static_cast<float>(scale * std::sin(angle));
    }
  }
  rope_freqs_ = freqs;
  rope_positions_ = positions;
  return table;
}

void CpuBackend::rope_impl(const TensorView& out, const TensorView& inp, const TensorView& positions,
                           const RopeFreqs& freqs, bool inverse) {
  cpu_require_f32(inverse ? "rope_backward" : "rope_forward", inp);
  const int64_t N = inp.dim(0), NH = inp.dim(1), HD = inp.dim(2), rotary_dim = freqs.rotary_dim(),
                half = rotary_dim / 2;
  const int32_t* pos = positions.as<int32_t>();
  const float* table = rope_table(freqs, max_position(pos, N));
  const float* x = inp.as<float>();
  float* y = out.as<float>();
  const bool in_place = x == y;
  const int64_t pass_through = HD - rotary_dim;
#pragma omp parallel for schedule(static) if (N * NH * HD > 16384)
  for (int64_t n = 0; n < N; ++n) {
    const float* cos_row = table + pos[n] * rotary_dim;  // followed by the sin row
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t base = (n * NH + h) * HD;
      rotate_head(y + base, x + base, cos_row, cos_row + half, half, inverse);
      if (!in_place && pass_through > 0) {
        std::memcpy(y + base + rotary_dim, x + base + rotary_dim, sizeof(float) * pass_through);
      }
    }
  }
}

}  // namespace lmt::kernels
