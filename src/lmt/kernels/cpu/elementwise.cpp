// cpu: embedding lookup and scatter-add, add, dtype conversion, sum of squares, scale, AdamW, and
// the memory ops of a step: fill, copy, positions, target count, loss sum.
//
// All of these are memory-bound, so the aim is one pass over memory with AVX-512 and every core
// busy; small spans stay on one thread, where a parallel region would cost more than the work.
// Two things need more care than a plain loop:
//  * f32 -> bf16 must be bit-identical to lmt::bf16 (round to nearest even, quiet NaN with sign
//    kept, overflow to Inf). The AVX512-BF16 instruction does that except for subnormal inputs,
//    which it flushes to zero, so vectors holding a subnormal take an integer path instead.
//  * Reductions (embedding backward, sum_squares) must be deterministic and race-free: embedding
//    backward gives each thread its own slice of columns of every row, and sum_squares adds
//    per-thread f64 partials in thread order.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lmt/base/bf16.h"
#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/kernels/cpu/simd.h"
#include "lmt/kernels/cpu/vector_loop.h"

namespace lmt::kernels {

namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;

// Runs fn(begin, end) over [0, n) in blocks (whole vectors but the last) spread over the threads.
template <typename Fn>
void parallel_blocks(int64_t n, const Fn& fn) {
  constexpr int64_t kBlock = 8192;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) fn(b * kBlock, std::min(n, (b + 1) * kBlock));
}

// [begin, end) of thread t of `threads` over n items, in multiples of 16 so slices of a float row
// never share a cache line.
struct Slice {
  int64_t begin, end;
};
Slice thread_slice(int64_t n, int t, int threads) {
  const int64_t per = ((n + threads - 1) / threads + 15) / 16 * 16;
  return {std::min(n, t * per), std::min(n, (t + 1) * per)};
}

#ifdef __AVX512F__
// lmt::bf16::round_from_float on 16 lanes with integer ops (exact, any input).
__m256i f32_to_bf16_exact(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __m512i quiet_nan = _mm512_or_si512(u, _mm512_set1_epi32(0x00400000));
  const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                   _mm512_set1_epi32(0x7f800000));
  const __m512i bits = _mm512_mask_blend_epi32(is_nan, rounded, quiet_nan);
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(bits, 16));
}

// Same result, with the AVX512-BF16 instruction where it agrees (all but subnormal inputs).
__m256i f32_to_bf16(__m512 x) {
#ifdef __AVX512BF16__
  // |x| bits in [1, 0x7fffff] <=> subnormal; (bits - 1) < 0x7fffff unsigned tests that in one go.
  const __m512i abs_bits = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff));
  const __mmask16 subnormal = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(abs_bits, _mm512_set1_epi32(1)),
                                                      _mm512_set1_epi32(0x7fffff));
  if (subnormal == 0) return (__m256i)_mm512_cvtneps_pbh(x);  // same bits, GCC vector cast
#endif
  return f32_to_bf16_exact(x);
}

__m512 bf16_to_f32(__m256i b) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}
#elif defined(LMT_SIMD_AVX2)
// f32_to_bf16_exact on 8 lanes (AVX2 integer ops; |bits| < 2^31, so the signed compare is exact).
__m128i f32_to_bf16(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  const __m256i quiet_nan = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
  const __m256i is_nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i bits = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet_nan, is_nan), 16);
  // Pack the 32-bit lanes' low halves: packus works per 128-bit lane, so gather lanes 0 and 2 after.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
  return _mm256_castsi256_si128(packed);
}
#endif

void f32_to_bf16_span(uint16_t* out, const float* in, int64_t n) {
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), f32_to_bf16(_mm512_loadu_ps(in + i)));
  }
#elif defined(LMT_SIMD_AVX2)
  for (; i + 8 <= n; i += 8) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), f32_to_bf16(_mm256_loadu_ps(in + i)));
#endif
  for (; i < n; ++i) out[i] = bf16::round_from_float(in[i]);
}

void bf16_to_f32_span(float* out, const uint16_t* in, int64_t n) {
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, bf16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  }
#elif defined(LMT_SIMD_AVX2)
  for (; i + 8 <= n; i += 8) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
  }
#endif
  for (; i < n; ++i) out[i] = bf16::to_float(in[i]);
}

// out = a + b (out may alias a or b).
void add_span(float* out, const float* a, const float* b, int64_t n) {
#ifdef __AVX512F__
  simd::for_each_vector(n, [&](int64_t i, __mmask16 m) {
    _mm512_mask_storeu_ps(out + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  });
#else
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
#endif
}

void scale_span(float* x, float s, int64_t n) {
#ifdef __AVX512F__
  const __m512 vs = _mm512_set1_ps(s);
  simd::for_each_vector(n, [&](int64_t i, __mmask16 m) {
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs));
  });
#else
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
#endif
}

// out = alpha·x + beta·y (out may alias x or y); out16, when given, gets out in bf16. The tail is a
// masked vector, not a scalar loop, so an element's result does not depend on where the span
// starts or ends (Muon batches matrices into one span and must match each alone bit for bit).
void axpby_span(float* out, float alpha, const float* x, float beta, const float* y, uint16_t* out16, int64_t n) {
#ifdef __AVX512F__
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  simd::for_each_vector(n, [&](int64_t i, __mmask16 m) {
    const __m512 r =
        _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), va), _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), vb));
    _mm512_mask_storeu_ps(out + i, m, r);
    if (out16 != nullptr) _mm256_mask_storeu_epi16(out16 + i, m, f32_to_bf16(r));
  });
#elif defined(LMT_SIMD_AVX2)
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  simd::for_each_vector8(n, [&](int64_t i, int lanes) {
    const __m256 r = _mm256_add_ps(_mm256_mul_ps(simd::load8(x + i, lanes), va), _mm256_mul_ps(simd::load8(y + i, lanes), vb));
    simd::store8(out + i, lanes, r);
    if (out16 == nullptr) return;
    if (lanes == 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out16 + i), f32_to_bf16(r));
    } else {
      alignas(16) uint16_t tail[8];
      _mm_store_si128(reinterpret_cast<__m128i*>(tail), f32_to_bf16(r));
      std::memcpy(out16 + i, tail, static_cast<size_t>(lanes) * sizeof(uint16_t));
    }
  });
#else
  for (int64_t i = 0; i < n; ++i) {
    out[i] = alpha * x[i] + beta * y[i];
    if (out16 != nullptr) out16[i] = bf16::round_from_float(out[i]);
  }
#endif
}

double sum_squares_span(const float* x, int64_t n) {
#ifdef __AVX512F__
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  simd::for_each_vector(n, [&](int64_t i, __mmask16 m) {
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m512d v_lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    const __m512d v_hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    lo = _mm512_fmadd_pd(v_lo, v_lo, lo);
    hi = _mm512_fmadd_pd(v_hi, v_hi, hi);
  });
  return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
#else
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
#endif
}

// f32 fills of at least this many elements (64 MiB, twice the largest last-level cache a core of
// these machines shares) stream their stores: the zeroed gradients, read next by the backward pass,
// would not stay in the cache anyway, and streaming skips reading each line before writing it
// (`lmtrain bench optim`: zeroing gpt2-124m's gradients 14 -> 6 ms on Zen 5).
constexpr int64_t kStreamFillMin = int64_t{1} << 24;

void stream_fill_span(float* p, float v, int64_t n) {
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i < n && reinterpret_cast<uintptr_t>(p + i) % 64 != 0; ++i) p[i] = v;
  const __m512 vv = _mm512_set1_ps(v);
  for (; i + 16 <= n; i += 16) _mm512_stream_ps(p + i, vv);
  _mm_sfence();  // visible to the other threads once this one leaves the parallel region
#endif
  for (; i < n; ++i) p[i] = v;
}

// AdamW constants in the form the inner loop wants.
struct AdamWStep {
  float grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2;
  float inv_bias_correction1, inv_bias_correction2, lr, eps, weight_decay;
  explicit AdamWStep(const AdamWParams& p)
      : grad_scale(p.grad_scale), beta1(p.beta1), one_minus_beta1(static_cast<float>(1.0 - p.beta1)),
        beta2(p.beta2), one_minus_beta2(static_cast<float>(1.0 - p.beta2)),
        inv_bias_correction1(static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step))))),
        inv_bias_correction2(static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step))))),
        lr(p.lr), eps(p.eps), weight_decay(p.weight_decay) {}
};

// One fused pass: param, m, v updated in place; param_bf16 (may be null) mirrors the new param.
void adamw_span(float* w, const float* grad, float* m, float* v, uint16_t* w_bf16, const AdamWStep& k,
                int64_t n) {
  int64_t i = 0;
#ifdef __AVX512F__
  const __m512 gs = _mm512_set1_ps(k.grad_scale), b1 = _mm512_set1_ps(k.beta1), c1 = _mm512_set1_ps(k.one_minus_beta1);
  const __m512 b2 = _mm512_set1_ps(k.beta2), c2 = _mm512_set1_ps(k.one_minus_beta2);
  const __m512 ibc1 = _mm512_set1_ps(k.inv_bias_correction1), ibc2 = _mm512_set1_ps(k.inv_bias_correction2);
  const __m512 lr = _mm512_set1_ps(k.lr), eps = _mm512_set1_ps(k.eps), wd = _mm512_set1_ps(k.weight_decay);
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_mul_ps(_mm512_loadu_ps(grad + i), gs);
    const __m512 mi = _mm512_fmadd_ps(b1, _mm512_loadu_ps(m + i), _mm512_mul_ps(c1, g));
    const __m512 vi = _mm512_fmadd_ps(b2, _mm512_loadu_ps(v + i), _mm512_mul_ps(c2, _mm512_mul_ps(g, g)));
    const __m512 denom = _mm512_add_ps(_mm512_sqrt_ps(_mm512_mul_ps(vi, ibc2)), eps);
    const __m512 wi = _mm512_loadu_ps(w + i);
    const __m512 update = _mm512_fmadd_ps(wd, wi, _mm512_div_ps(_mm512_mul_ps(mi, ibc1), denom));
    const __m512 w_new = _mm512_fnmadd_ps(lr, update, wi);
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    _mm512_storeu_ps(w + i, w_new);
    if (w_bf16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(w_bf16 + i), f32_to_bf16(w_new));
  }
#elif defined(LMT_SIMD_AVX2)  // the same operations on 8 lanes
  const __m256 gs = _mm256_set1_ps(k.grad_scale), b1 = _mm256_set1_ps(k.beta1), c1 = _mm256_set1_ps(k.one_minus_beta1);
  const __m256 b2 = _mm256_set1_ps(k.beta2), c2 = _mm256_set1_ps(k.one_minus_beta2);
  const __m256 ibc1 = _mm256_set1_ps(k.inv_bias_correction1), ibc2 = _mm256_set1_ps(k.inv_bias_correction2);
  const __m256 lr = _mm256_set1_ps(k.lr), eps = _mm256_set1_ps(k.eps), wd = _mm256_set1_ps(k.weight_decay);
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad + i), gs);
    const __m256 mi = _mm256_fmadd_ps(b1, _mm256_loadu_ps(m + i), _mm256_mul_ps(c1, g));
    const __m256 vi = _mm256_fmadd_ps(b2, _mm256_loadu_ps(v + i), _mm256_mul_ps(c2, _mm256_mul_ps(g, g)));
    const __m256 denom = _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, ibc2)), eps);
    const __m256 wi = _mm256_loadu_ps(w + i);
    const __m256 update = _mm256_fmadd_ps(wd, wi, _mm256_div_ps(_mm256_mul_ps(mi, ibc1), denom));
    const __m256 w_new = _mm256_fnmadd_ps(lr, update, wi);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    _mm256_storeu_ps(w + i, w_new);
    if (w_bf16) _mm_storeu_si128(reinterpret_cast<__m128i*>(w_bf16 + i), f32_to_bf16(w_new));
  }
#endif
  for (; i < n; ++i) {
    const float g = grad[i] * k.grad_scale;
    m[i] = k.beta1 * m[i] + k.one_minus_beta1 * g;
    v[i] = k.beta2 * v[i] + k.one_minus_beta2 * g * g;
    const float denom = std::sqrt(v[i] * k.inv_bias_correction2) + k.eps;
    w[i] -= k.lr * ((m[i] * k.inv_bias_correction1) / denom + k.weight_decay * w[i]);
    if (w_bf16) w_bf16[i] = bf16::round_from_float(w[i]);
  }
}

void check_ids(const char* op, const int32_t* ids, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    LMT_CHECK(ids[n] >= 0 && ids[n] < V) << op << ": id " << ids[n] << " at " << n << " outside [0, " << V << ")";
  }
}

}  // namespace

void cpu_f32_to_bf16(uint16_t* out, const float* in, int64_t n) { f32_to_bf16_span(out, in, n); }
void cpu_bf16_to_f32(float* out, const uint16_t* in, int64_t n) { bf16_to_f32_span(out, in, n); }

void CpuBackend::embedding_forward_impl(const TensorView& out, const TensorView& ids,
                                        const TensorView& table, bool accumulate) {
  cpu_require_f32("embedding_forward", table);
  const int64_t N = ids.dim(0), V = table.dim(0), C = table.dim(1);
  const int32_t* id = ids.as<int32_t>();
  check_ids("embedding_forward", id, N, V);
  const float* rows = table.as<float>();
  float* y = out.as<float>();
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = rows + static_cast<int64_t>(id[n]) * C;
    if (accumulate) {
      add_span(y + n * C, y + n * C, row, C);
    } else {
      std::memcpy(y + n * C, row, sizeof(float) * C);
    }
  }
}

void CpuBackend::embedding_backward_impl(const TensorView& dtable, const TensorView& dout,
                                         const TensorView& ids) {
  cpu_require_f32("embedding_backward", dout);
  const int64_t N = ids.dim(0), V = dtable.dim(0), C = dtable.dim(1);
  const int32_t* id = ids.as<int32_t>();
  check_ids("embedding_backward", id, N, V);
  float* dt = dtable.as<float>();
  const float* g = dout.as<float>();
  // Each thread owns a column slice of every row: repeated ids never race, and every element sums
  // its contributions in row order, as the ref does.
#pragma omp parallel if (N * C >= kParallelMin)
  {
    const Slice cols = thread_slice(C, omp_get_thread_num(), omp_get_num_threads());
    if (cols.end > cols.begin) {
      for (int64_t n = 0; n < N; ++n) {
        float* row = dt + static_cast<int64_t>(id[n]) * C + cols.begin;
        add_span(row, row, g + n * C + cols.begin, cols.end - cols.begin);
      }
    }
  }
}

void CpuBackend::add_impl(const TensorView& out, const TensorView& a, const TensorView& b) {
  cpu_require_f32("add", a);
  float* y = out.as<float>();
  const float *x1 = a.as<float>(), *x2 = b.as<float>();
  parallel_blocks(out.numel(), [&](int64_t i, int64_t e) { add_span(y + i, x1 + i, x2 + i, e - i); });
}

void CpuBackend::convert_impl(const TensorView& out, const TensorView& inp) {
  if (inp.dtype() == DType::kF64) cpu_require_f32("convert", inp);
  if (out.dtype() == DType::kF64) cpu_require_f32("convert", out);
  const int64_t n = inp.numel();
  if (inp.dtype() == out.dtype()) {
    const size_t elem = dtype_size(inp.dtype());
    char* dst = static_cast<char*>(out.data());
    const char* src = static_cast<const char*>(inp.data());
    parallel_blocks(n, [&](int64_t i, int64_t e) { std::memcpy(dst + i * elem, src + i * elem, (e - i) * elem); });
  } else if (out.dtype() == DType::kBF16) {
    uint16_t* dst = reinterpret_cast<uint16_t*>(out.as<bf16>());
    const float* src = inp.as<float>();
    parallel_blocks(n, [&](int64_t i, int64_t e) { f32_to_bf16_span(dst + i, src + i, e - i); });
  } else {
    float* dst = out.as<float>();
    const uint16_t* src = reinterpret_cast<const uint16_t*>(inp.as<bf16>());
    parallel_blocks(n, [&](int64_t i, int64_t e) { bf16_to_f32_span(dst + i, src + i, e - i); });
  }
}

double CpuBackend::sum_squares_impl(const TensorView& x) {
  cpu_require_f32("sum_squares", x);
  const int64_t n = x.numel();
  const float* p = x.as<float>();
  if (n < kParallelMin) return sum_squares_span(p, n);
  const int threads = omp_get_max_threads();
  double* partials = static_cast<double*>(workspace(sizeof(double) * threads));
  std::fill_n(partials, threads, 0.0);
#pragma omp parallel num_threads(threads)
  {
    const Slice s = thread_slice(n, omp_get_thread_num(), omp_get_num_threads());
    partials[omp_get_thread_num()] = sum_squares_span(p + s.begin, s.end - s.begin);
  }
  double total = 0.0;
  for (int t = 0; t < threads; ++t) total += partials[t];  // fixed order: deterministic
  return total;
}

void CpuBackend::scale_impl(const TensorView& x, float s) {
  cpu_require_f32("scale", x);
  float* p = x.as<float>();
  parallel_blocks(x.numel(), [&](int64_t i, int64_t e) { scale_span(p + i, s, e - i); });
}

void CpuBackend::axpby_impl(const TensorView& out, float alpha, const TensorView& x, float beta,
                            const TensorView& y, const TensorView& out_bf16) {
  cpu_require_f32("axpby", out);
  float* o = out.as<float>();
  const float *px = x.as<float>(), *py = y.as<float>();
  uint16_t* o16 = out_bf16.present() ? reinterpret_cast<uint16_t*>(out_bf16.as<bf16>()) : nullptr;
  parallel_blocks(out.numel(), [&](int64_t i, int64_t e) {
    axpby_span(o + i, alpha, px + i, beta, py + i, o16 ? o16 + i : nullptr, e - i);
  });
}

void CpuBackend::adamw_update_impl(const TensorView& param, const TensorView& grad,
                                   const TensorView& m, const TensorView& v,
                                   const TensorView& param_bf16, const AdamWParams& p) {
  cpu_require_f32("adamw_update", param);
  const AdamWStep k(p);
  float *w = param.as<float>(), *mp = m.as<float>(), *vp = v.as<float>();
  const float* g = grad.as<float>();
  uint16_t* w16 = param_bf16.present() ? reinterpret_cast<uint16_t*>(param_bf16.as<bf16>()) : nullptr;
  parallel_blocks(param.numel(), [&](int64_t i, int64_t e) {
    adamw_span(w + i, g + i, mp + i, vp + i, w16 ? w16 + i : nullptr, k, e - i);
  });
}

void CpuBackend::fill_impl(const TensorView& x, double value) {
  const int64_t n = x.numel();
  switch (x.dtype()) {
    case DType::kF32: {
      float* p = x.as<float>();
      const float v = static_cast<float>(value);
      if (n >= kStreamFillMin) {
        parallel_blocks(n, [&](int64_t i, int64_t e) { stream_fill_span(p + i, v, e - i); });
        return;
      }
      parallel_blocks(n, [&](int64_t i, int64_t e) { std::fill(p + i, p + e, v); });
      return;
    }
    case DType::kBF16: {
      bf16* p = x.as<bf16>();
      const bf16 v(static_cast<float>(value));
      parallel_blocks(n, [&](int64_t i, int64_t e) { std::fill(p + i, p + e, v); });
      return;
    }
    case DType::kI32: {
      int32_t* p = x.as<int32_t>();
      const int32_t v = static_cast<int32_t>(value);
      parallel_blocks(n, [&](int64_t i, int64_t e) { std::fill(p + i, p + e, v); });
      return;
    }
    default: {  // f64: master weights and gradients of gradient-check runs
      double* p = x.as<double>();
      parallel_blocks(n, [&](int64_t i, int64_t e) { std::fill(p + i, p + e, value); });
      return;
    }
  }
}

void CpuBackend::copy_impl(const TensorView& out, const TensorView& inp) {
  // Any dtype: bytes are bytes (the f64 restriction of the other ops is about arithmetic).
  const size_t elem = dtype_size(inp.dtype());
  char* dst = static_cast<char*>(out.data());
  const char* src = static_cast<const char*>(inp.data());
  parallel_blocks(inp.numel(), [&](int64_t i, int64_t e) { std::memcpy(dst + i * elem, src + i * elem, (e - i) * elem); });
}

void CpuBackend::positions_impl(const TensorView& out, const TensorView& given, int64_t T) {
  int32_t* pos = out.as<int32_t>();
  const int64_t N = out.numel();
  if (!given.present()) {
    for (int64_t n = 0; n < N; ++n) pos[n] = static_cast<int32_t>(n % T);
    return;
  }
  const int32_t* g = given.as<int32_t>();
  for (int64_t n = 0; n < N; ++n) {
    LMT_CHECK(g[n] >= 0 && g[n] < T) << "positions: position " << g[n] << " at " << n << " outside [0, T=" << T << ")";
    pos[n] = g[n];
  }
}

int64_t CpuBackend::count_valid_targets_impl(const TensorView& targets, int32_t ignore_index) {
  const int32_t* t = targets.as<int32_t>();
  int64_t count = 0;
  for (int64_t n = 0; n < targets.numel(); ++n) count += t[n] != ignore_index;
  return count;
}

double CpuBackend::sum_impl(const TensorView& x) {
  // In index order on one thread: the loss sum of a step is N = B·T values, and a fixed order
  // keeps it bit-identical across runs and thread counts.
  double s = 0;
  if (x.dtype() == DType::kF64) {
    const double* p = x.as<double>();
    for (int64_t i = 0; i < x.numel(); ++i) s += p[i];
  } else {
    const float* p = x.as<float>();
    for (int64_t i = 0; i < x.numel(); ++i) s += p[i];
  }
  return s;
}

}  // namespace lmt::kernels
