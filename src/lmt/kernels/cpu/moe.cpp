// cpu: the MoE routing ops (router, row permutation, combine) in parallel. Every token row is
// independent in the router and the gather, so each thread runs the shared host implementation
// (kernels/moe.cpp, f64 accumulation) on its own block of rows: the same numbers as the ref backend
// on all cores. The combine, the widest of them (every routed row's F values, twice per pass), is
// its own f32 SIMD loop over token rows. The scatter-add may name a token row several times (once
// per expert it went to), so it is split by columns instead.
#include <omp.h>

#include <algorithm>

#include "lmt/kernels/cpu/cpu_backend.h"

namespace lmt::kernels {

namespace {

constexpr int64_t kMinRowsPerThread = 16;  // below this a fork/join costs more than the rows

// f(begin, end) on a contiguous block of [0, n) per thread.
template <typename F>
void for_row_blocks(int64_t n, const F& f) {
#pragma omp parallel if (n >= 2 * kMinRowsPerThread)
  {
    const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t begin = n * t / T, end = n * (t + 1) / T;
    if (begin < end) f(begin, end);
  }
}

TensorView rows(const TensorView& t, int64_t begin, int64_t end) { return t.slice_rows(begin, end); }

}  // namespace

void CpuBackend::moe_router_forward_impl(const TensorView& weights, const TensorView& experts,
                                         const TensorView& probs, const TensorView& lse, const TensorView& logits,
                                         const TensorView& bias, bool renormalize) {
  for_row_blocks(logits.dim(0), [&](int64_t b, int64_t e) {
    Backend::moe_router_forward_impl(rows(weights, b, e), rows(experts, b, e), rows(probs, b, e), rows(lse, b, e),
                                     rows(logits, b, e), bias, renormalize);
  });
}

void CpuBackend::moe_router_backward_impl(const TensorView& dlogits, const TensorView& dweights,
                                          const TensorView& probs, const TensorView& lse, const TensorView& experts,
                                          bool renormalize, const TensorView& dprobs, double z_scale) {
  for_row_blocks(probs.dim(0), [&](int64_t b, int64_t e) {
    Backend::moe_router_backward_impl(rows(dlogits, b, e), rows(dweights, b, e), rows(probs, b, e), rows(lse, b, e),
                                      rows(experts, b, e), renormalize, dprobs, z_scale);
  });
}

void CpuBackend::moe_gather_rows_impl(const TensorView& out, const TensorView& inp, const TensorView& row_ids) {
  for_row_blocks(row_ids.dim(0), [&](int64_t b, int64_t e) {
    Backend::moe_gather_rows_impl(rows(out, b, e), inp, rows(row_ids, b, e));
  });
}

void CpuBackend::moe_scatter_add_rows_impl(const TensorView& dinp, const TensorView& dout,
                                           const TensorView& row_ids) {
  if (dinp.dtype() != DType::kF32) return Backend::moe_scatter_add_rows_impl(dinp, dout, row_ids);
  const int64_t R = row_ids.dim(0), F = dinp.dim(1);
  constexpr int64_t kColumns = 64;  // a block of each row per task: rows named twice stay race-free
  float* d = dinp.as<float>();
  const float* g = dout.as<float>();
  const int32_t* r = row_ids.as<int32_t>();
#pragma omp parallel for schedule(static) if (R * F >= 2 * kMinRowsPerThread * kColumns)
  for (int64_t f0 = 0; f0 < F; f0 += kColumns) {
    const int64_t f1 = std::min(F, f0 + kColumns);
    for (int64_t i = 0; i < R; ++i) {
      float* dst = d + r[i] * F;
      const float* src = g + i * F;
#pragma omp simd
      for (int64_t f = f0; f < f1; ++f) dst[f] += src[f];
    }
  }
}

void CpuBackend::moe_combine_forward_impl(const TensorView& out, const TensorView& y, const TensorView& weights,
                                          const TensorView& slots) {
  if (out.dtype() != DType::kF32) return Backend::moe_combine_forward_impl(out, y, weights, slots);
  const int64_t N = out.dim(0), F = out.dim(1), K = weights.dim(1);
  float* o = out.as<float>();
  const float* yv = y.as<float>();
  const float* w = weights.as<float>();
  const int32_t* sl = slots.as<int32_t>();
#pragma omp parallel for schedule(static) if (N >= 2 * kMinRowsPerThread)
  for (int64_t n = 0; n < N; ++n) {  // K terms per element: f32 accumulation
    float* on = o + n * F;
    std::fill_n(on, F, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const int32_t r = sl[n * K + k];
      if (r < 0) continue;
      const float wk = w[n * K + k];
      const float* yr = yv + r * F;
#pragma omp simd
      for (int64_t f = 0; f < F; ++f) on[f] += wk * yr[f];
    }
  }
}

// Each routed row of y is named by one slot at most, so the rows of dy are written once.
void CpuBackend::moe_combine_backward_impl(const TensorView& dy, const TensorView& dweights, const TensorView& dout,
                                           const TensorView& y, const TensorView& weights, const TensorView& slots) {
  if (dout.dtype() != DType::kF32) return Backend::moe_combine_backward_impl(dy, dweights, dout, y, weights, slots);
  const int64_t N = dout.dim(0), F = dout.dim(1), K = weights.dim(1);
  float* dyv = dy.as<float>();
  float* dw = dweights.as<float>();
  const float* g = dout.as<float>();
  const float* yv = y.as<float>();
  const float* w = weights.as<float>();
  const int32_t* sl = slots.as<int32_t>();
#pragma omp parallel for schedule(static) if (N >= 2 * kMinRowsPerThread)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const int32_t r = sl[n * K + k];
      if (r < 0) {
        dw[n * K + k] = 0;
        continue;
      }
      const float wk = w[n * K + k];
      const float* gn = g + n * F;
      const float* yr = yv + r * F;
      float* dyr = dyv + r * F;
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t f = 0; f < F; ++f) {
        dot += gn[f] * yr[f];
        dyr[f] = wk * gn[f];
      }
      dw[n * K + k] = dot;
    }
}

}  // namespace lmt::kernels
