// cpu: layernorm and rmsnorm (rmsnorm also serves QK-norm: many short rows of C = head dim), and
// their forms fused with the residual add before them (the sum row is written, then normalised while
// it is in cache; the same row functions as the unfused ops, so the same bits).
//
// Rows are independent, so forward and the dinp part of backward are one OpenMP loop over rows
// with AVX-512 inner loops (masked tails, so any C works). Statistics are f32 with a two-pass
// mean/variance, which for C in the thousands stays within ~1e-6 of the f64 reference.
//
// The parameter gradients (dweight, dbias) are sums over rows. Each thread sums its static block of
// rows into its own partial vector in the workspace; the partials are then added into the
// gradients in thread order. No atomics, and the result is bit-identical run to run for a fixed
// thread count. Backward recomputes the mean from inp (as the ref does) and takes rstd as given.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/kernels/cpu/simd.h"
#include "lmt/kernels/cpu/vector_loop.h"

namespace lmt::kernels {

namespace {

// Per-thread partial sums are padded to whole cache lines so threads never share one.
int64_t padded_len(int64_t C) { return (C + 15) / 16 * 16; }

// Splits rows [0, N) into one contiguous block per thread (fixed for a fixed thread count).
struct RowBlock {
  int64_t begin, end;
};
RowBlock row_block(int64_t N, int thread, int threads) {
  const int64_t per = N / threads, extra = N % threads;
  const int64_t begin = thread * per + std::min<int64_t>(thread, extra);
  return {begin, begin + per + (thread < extra ? 1 : 0)};
}

float row_sum(const float* x, int64_t C) {
#ifdef __AVX512F__
  __m512 acc = _mm512_setzero_ps();
  simd::for_each_vector(C, [&](int64_t c, __mmask16 m) { acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, x + c)); });
  return simd::hsum(acc);
#else
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < C; ++c) s += x[c];
  return s;
#endif
}

// Σ (x - shift)²; shift = mean gives the variance numerator, shift = 0 the sum of squares.
float row_sum_sq_dev(const float* x, int64_t C, float shift) {
#ifdef __AVX512F__
  const __m512 s = _mm512_set1_ps(shift);
  __m512 acc = _mm512_setzero_ps();
  simd::for_each_vector(C, [&](int64_t c, __mmask16 m) {
    const __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + c), s);
    acc = _mm512_fmadd_ps(d, d, acc);
  });
  return simd::hsum(acc);
#else
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t c = 0; c < C; ++c) acc += (x[c] - shift) * (x[c] - shift);
  return acc;
#endif
}

// out = (x - shift) * r * weight (+ bias if given).
void normalize_row(float* out, const float* x, int64_t C, float shift, float r, const float* weight,
                   const float* bias) {
#ifdef __AVX512F__
  const __m512 vs = _mm512_set1_ps(shift), vr = _mm512_set1_ps(r);
  simd::for_each_vector(C, [&](int64_t c, __mmask16 m) {
    const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + c), vs), vr);
    const __m512 w = _mm512_maskz_loadu_ps(m, weight + c);
    const __m512 y = bias ? _mm512_fmadd_ps(xhat, w, _mm512_maskz_loadu_ps(m, bias + c)) : _mm512_mul_ps(xhat, w);
    _mm512_mask_storeu_ps(out + c, m, y);
  });
#else
  for (int64_t c = 0; c < C; ++c) out[c] = (x[c] - shift) * r * weight[c] + (bias ? bias[c] : 0.0f);
#endif
}

// One row of backward for both norms (rmsnorm is shift = 0, no dbias, no mean-of-dxhat term):
//   xhat = (x - shift)·r, dxhat = dout·weight,
//   dinp = r·(dxhat - mean(dxhat) - xhat·mean(dxhat·xhat))   (= or +=)
//   dweight_partial += dout·xhat, dbias_partial += dout.
struct NormRowBackward {
  int64_t C;
  const float* weight;
  bool centered;  // layernorm: subtract mean(dxhat); rmsnorm: not
  bool accumulate;

  void operator()(float* dinp, float* dweight_part, float* dbias_part, const float* dout,
                  const float* x, float shift, float r) const {
    // Locals, not members: stores through float* would otherwise force reloads every vector.
    const int64_t C = this->C;
    const float* weight = this->weight;
    const bool accumulate = this->accumulate;
    const float inv_c = 1.0f / static_cast<float>(C);
    float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
#ifdef __AVX512F__
    const __m512 vs = _mm512_set1_ps(shift), vr = _mm512_set1_ps(r);
    __m512 acc_d = _mm512_setzero_ps(), acc_dx = _mm512_setzero_ps();
    simd::for_each_vector(C, [&](int64_t c, __mmask16 m) {
      const __m512 g = _mm512_maskz_loadu_ps(m, dout + c);
      const __m512 xhat = _mm512_maskz_mul_ps(m, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + c), vs), vr);
      const __m512 dxhat = _mm512_mul_ps(g, _mm512_maskz_loadu_ps(m, weight + c));
      acc_d = _mm512_add_ps(acc_d, dxhat);
      acc_dx = _mm512_fmadd_ps(dxhat, xhat, acc_dx);
      _mm512_mask_storeu_ps(dweight_part + c, m, _mm512_fmadd_ps(g, xhat, _mm512_maskz_loadu_ps(m, dweight_part + c)));
      if (dbias_part) _mm512_mask_storeu_ps(dbias_part + c, m, _mm512_add_ps(g, _mm512_maskz_loadu_ps(m, dbias_part + c)));
    });
    sum_dxhat = simd::hsum(acc_d);
    sum_dxhat_xhat = simd::hsum(acc_dx);
#else
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (x[c] - shift) * r, dxhat = dout[c] * weight[c];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
      dweight_part[c] += dout[c] * xhat;
      if (dbias_part) dbias_part[c] += dout[c];
    }
#endif
    const float mean_dxhat = centered ? sum_dxhat * inv_c : 0.0f;
    const float mean_dxhat_xhat = sum_dxhat_xhat * inv_c;
#ifdef __AVX512F__
    const __m512 vmd = _mm512_set1_ps(mean_dxhat), vmdx = _mm512_set1_ps(mean_dxhat_xhat);
    simd::for_each_vector(C, [&](int64_t c, __mmask16 m) {
      const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + c), vs), vr);
      const __m512 dxhat = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dout + c), _mm512_maskz_loadu_ps(m, weight + c));
      __m512 g = _mm512_mul_ps(vr, _mm512_fnmadd_ps(xhat, vmdx, _mm512_sub_ps(dxhat, vmd)));
      if (accumulate) g = _mm512_add_ps(g, _mm512_maskz_loadu_ps(m, dinp + c));
      _mm512_mask_storeu_ps(dinp + c, m, g);
    });
#else
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (x[c] - shift) * r, dxhat = dout[c] * weight[c];
      const float g = r * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
      dinp[c] = accumulate ? dinp[c] + g : g;
    }
#endif
  }
};

// dst[c] += Σ_t partials[t][c], t in thread order (deterministic).
void add_partials(float* dst, const float* partials, int threads, int64_t stride, int64_t C) {
#pragma omp parallel for schedule(static) if (C * threads > 65536)
  for (int64_t c = 0; c < C; ++c) {
    float s = 0.0f;
    for (int t = 0; t < threads; ++t) s += partials[t * stride + c];
    dst[c] += s;
  }
}

// Runs a row-parallel backward with per-thread dweight (and optional dbias) partials.
template <typename RowFn>
void backward_with_partials(CpuBackend& be, int64_t N, int64_t C, float* dweight, float* dbias,
                            const RowFn& row_fn) {
  const int threads = (N * C > 16384) ? omp_get_max_threads() : 1;
  const int64_t stride = padded_len(C);
  const int64_t vectors = dbias ? 2 : 1;
  float* partials = static_cast<float*>(be.workspace(sizeof(float) * stride * vectors * threads));
  std::memset(partials, 0, sizeof(float) * stride * vectors * threads);
  float* bias_partials = dbias ? partials + stride * threads : nullptr;
#pragma omp parallel num_threads(threads)
  {
    // The thread count may come out smaller than asked; rows are split over what we got, and the
    // unused partials stay zero.
    const int t = omp_get_thread_num();
    const RowBlock rows = row_block(N, t, omp_get_num_threads());
    float* dw_part = partials + t * stride;
    float* db_part = bias_partials ? bias_partials + t * stride : nullptr;
    for (int64_t n = rows.begin; n < rows.end; ++n) row_fn(n, dw_part, db_part);
  }
  add_partials(dweight, partials, threads, stride, C);
  if (dbias) add_partials(dbias, bias_partials, threads, stride, C);
}

void require_all_f32(const char* op, std::initializer_list<const TensorView*> views) {
  for (const TensorView* v : views) cpu_require_f32(op, *v);
}

// A forward over rows: x [N,C] f32 (written as add_a + add_b first when those are given: the fused
// residual add), out [N,C] f32 or bf16, mean (layernorm only) and rstd [N].
struct NormRows {
  float* x = nullptr;
  const float* add_a = nullptr;
  const float* add_b = nullptr;
  float* out = nullptr;
  uint16_t* out16 = nullptr;  // bf16 out: each row staged in f32 segments, then rounded like convert()
  float* mean = nullptr;
  float* rstd = nullptr;
  const float* weight = nullptr;
  const float* bias = nullptr;
  int64_t N = 0, C = 0;
  bool centered = false;  // layernorm; else rmsnorm
  float eps = 0.0f;

  static NormRows of(const TensorView& out, const TensorView& mean, const TensorView& rstd, const TensorView& x,
                     const TensorView& weight, const TensorView& bias, bool centered, float eps) {
    NormRows r;
    r.x = static_cast<float*>(x.data());
    if (out.dtype() == DType::kBF16) r.out16 = static_cast<uint16_t*>(out.data());
    else r.out = out.as<float>();
    r.mean = mean.present() ? mean.as<float>() : nullptr;
    r.rstd = rstd.as<float>();
    r.weight = weight.as<float>();
    r.bias = bias.present() ? bias.as<float>() : nullptr;
    r.N = x.dim(0);
    r.C = x.dim(1);
    r.centered = centered;
    r.eps = eps;
    return r;
  }
};

constexpr int64_t kStagedColumns = 2048;  // a multiple of 16: every segment but the last is whole vectors

void norm_forward_rows(const NormRows& p) {
  const int64_t N = p.N, C = p.C;
  const float inv_c = 1.0f / static_cast<float>(C);
  const double inv_c64 = 1.0 / static_cast<double>(C);
#pragma omp parallel for schedule(static) if (N * C > 16384)
  for (int64_t n = 0; n < N; ++n) {
    float* xr = p.x + n * C;
    if (p.add_a != nullptr) {  // exactly add(): one f32 rounding per element
      const float *a = p.add_a + n * C, *b = p.add_b + n * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) xr[c] = a[c] + b[c];
    }
    float shift = 0.0f, r;
    if (p.centered) {
      shift = row_sum(xr, C) * inv_c;
      const float var = row_sum_sq_dev(xr, C, shift) * inv_c;
      r = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var) + p.eps));
      p.mean[n] = shift;
    } else {
      const double ms = static_cast<double>(row_sum_sq_dev(xr, C, 0.0f)) * inv_c64;
      r = static_cast<float>(1.0 / std::sqrt(ms + p.eps));
    }
    p.rstd[n] = r;
    if (p.out16 == nullptr) {
      normalize_row(p.out + n * C, xr, C, shift, r, p.weight, p.bias);
      continue;
    }
    float staged[kStagedColumns];
    for (int64_t c = 0; c < C; c += kStagedColumns) {
      const int64_t len = std::min(kStagedColumns, C - c);
      normalize_row(staged, xr + c, len, shift, r, p.weight + c, p.bias != nullptr ? p.bias + c : nullptr);
      cpu_f32_to_bf16(p.out16 + n * C + c, staged, len);
    }
  }
}

}  // namespace

void CpuBackend::layernorm_forward_impl(const TensorView& out, const TensorView& mean,
                                        const TensorView& rstd, const TensorView& inp,
                                        const TensorView& weight, const TensorView& bias,
                                        float eps) {
  require_all_f32("layernorm_forward", {&mean, &rstd, &inp, &weight, &bias});
  norm_forward_rows(NormRows::of(out, mean, rstd, inp, weight, bias, /*centered=*/true, eps));
}

void CpuBackend::add_layernorm_forward_impl(const TensorView& sum, const TensorView& out, const TensorView& mean,
                                            const TensorView& rstd, const TensorView& a, const TensorView& b,
                                            const TensorView& weight, const TensorView& bias, float eps) {
  require_all_f32("add_layernorm_forward", {&sum, &mean, &rstd, &a, &b, &weight, &bias});
  NormRows rows = NormRows::of(out, mean, rstd, sum, weight, bias, /*centered=*/true, eps);
  rows.add_a = a.as<float>();
  rows.add_b = b.as<float>();
  norm_forward_rows(rows);
}

void CpuBackend::layernorm_backward_impl(const TensorView& dinp, const TensorView& dweight,
                                         const TensorView& dbias, const TensorView& dout,
                                         const TensorView& inp, const TensorView& weight,
                                         const TensorView& mean, const TensorView& rstd,
                                         bool accumulate) {
  require_all_f32("layernorm_backward", {&dinp, &dweight, &dbias, &dout, &inp, &weight, &mean, &rstd});
  const int64_t N = inp.dim(0), C = inp.dim(1);
  const float *x = inp.as<float>(), *g = dout.as<float>(), *rs = rstd.as<float>();
  float* dx = dinp.as<float>();
  const float inv_c = 1.0f / static_cast<float>(C);
  const NormRowBackward row{C, weight.as<float>(), /*centered=*/true, accumulate};
  backward_with_partials(*this, N, C, dweight.as<float>(), dbias.present() ? dbias.as<float>() : nullptr,
                         [&](int64_t n, float* dw_part, float* db_part) {
                           const float* xr = x + n * C;
                           const float m = row_sum(xr, C) * inv_c;
                           row(dx + n * C, dw_part, db_part, g + n * C, xr, m, rs[n]);
                         });
}

void CpuBackend::rmsnorm_forward_impl(const TensorView& out, const TensorView& rstd,
                                      const TensorView& inp, const TensorView& weight, float eps) {
  require_all_f32("rmsnorm_forward", {&rstd, &inp, &weight});
  norm_forward_rows(NormRows::of(out, TensorView(), rstd, inp, weight, TensorView(), /*centered=*/false, eps));
}

void CpuBackend::add_rmsnorm_forward_impl(const TensorView& sum, const TensorView& out, const TensorView& rstd,
                                          const TensorView& a, const TensorView& b, const TensorView& weight,
                                          float eps) {
  require_all_f32("add_rmsnorm_forward", {&sum, &rstd, &a, &b, &weight});
  NormRows rows = NormRows::of(out, TensorView(), rstd, sum, weight, TensorView(), /*centered=*/false, eps);
  rows.add_a = a.as<float>();
  rows.add_b = b.as<float>();
  norm_forward_rows(rows);
}

void CpuBackend::rmsnorm_backward_impl(const TensorView& dinp, const TensorView& dweight,
                                       const TensorView& dout, const TensorView& inp,
                                       const TensorView& weight, const TensorView& rstd,
                                       bool accumulate) {
  require_all_f32("rmsnorm_backward", {&dinp, &dweight, &dout, &inp, &weight, &rstd});
  const int64_t N = inp.dim(0), C = inp.dim(1);
  const float *x = inp.as<float>(), *g = dout.as<float>(), *rs = rstd.as<float>();
  float* dx = dinp.as<float>();
  const NormRowBackward row{C, weight.as<float>(), /*centered=*/false, accumulate};
  backward_with_partials(*this, N, C, dweight.as<float>(), nullptr,
                         [&](int64_t n, float* dw_part, float*) {
                           row(dx + n * C, dw_part, nullptr, g + n * C, x + n * C, 0.0f, rs[n]);
                         });
}

}  // namespace lmt::kernels
