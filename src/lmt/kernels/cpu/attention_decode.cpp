// cpu: attention of one new query per row over a KV cache (incremental decoding), and of n new
// queries of one sequence over its cache, each causally (attention_prefill).
//
// Decoding is memory-bound: each (row, query head) item reads `length` cached keys and values once.
// Items are spread over threads (OpenMP, static); an item computes its scores into per-thread
// workspace, takes max and exp-sum with the AVX-512 helpers of simd.h, then accumulates the
// probability-weighted values into an f32 row. The dot and axpy loops over HD are `omp simd` so
// they vectorise for any HD without tail code.
//
// Not done (would matter with many cores and few heads): splitting one item's keys across threads
// (flash-decoding). With B·NH >= threads, as here, item-level parallelism already fills the cores.
#include <omp.h>

#include <algorithm>

#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/kernels/cpu/simd.h"

namespace lmt::kernels {
namespace {

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

// out[HD] = softmax(scale · q·Kᵀ) · V over keys [0, length) at stride `kv_stride` floats.
void decode_one(float* out, const float* q, const float* k, const float* v, int64_t kv_stride,
                int64_t length, int64_t HD, float scale, float* scores, float* acc) {
  for (int64_t j = 0; j < length; ++j) {
    const float* kj = k + j * kv_stride;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t e = 0; e < HD; ++e) s += q[e] * kj[e];
    scores[j] = s * scale;
  }
  const float mx = simd::max_of(scores, length);
  const float sum = simd::exp_shifted_sum(scores, scores, length, mx);
  std::fill(acc, acc + HD, 0.0f);
  for (int64_t j = 0; j < length; ++j) {
    const float p = scores[j];
    const float* vj = v + j * kv_stride;
#pragma omp simd
    for (int64_t e = 0; e < HD; ++e) acc[e] += p * vj[e];
  }
  const float inv = 1.0f / sum;  // sum >= 1: the max term contributes exp(0)
#pragma omp simd
  for (int64_t e = 0; e < HD; ++e) out[e] = acc[e] * inv;
}

}  // namespace

void CpuBackend::attention_decode_impl(const TensorView& out, const TensorView& q,
                                       const TensorView& k_cache, const TensorView& v_cache,
                                       int64_t length, float scale) {
  for (const TensorView* t : {&out, &q, &k_cache, &v_cache}) cpu_require_f32("attention_decode", *t);
  const int64_t B = q.dim(0), NH = q.dim(1), HD = q.dim(2), S = k_cache.dim(1), G = k_cache.dim(2);
  const int64_t group = NH / G, items = B * NH;
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), items));
  const int64_t per_thread = round16(length) + round16(HD);
  float* scratch = static_cast<float*>(workspace(threads * per_thread * sizeof(float)));
  const float* qp = q.as<float>();
  const float* kp = k_cache.as<float>();
  const float* vp = v_cache.as<float>();
  float* op = out.as<float>();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t b = item / NH, h = item % NH, g = h / group;
    float* scores = scratch + omp_get_thread_num() * per_thread;
    const int64_t kv_off = (b * S * G + g) * HD;
    decode_one(op + item * HD, qp + item * HD, kp + kv_off, vp + kv_off, G * HD, length, HD, scale, scores,
               scores + round16(length));
  }
}

// The n·NH (query, head) items of one call in one parallel region: item (i, h) is decode_one over
// keys [0, start + i]. Later queries see more keys, so items are dealt out dynamically.
void CpuBackend::attention_prefill_impl(const TensorView& out, const TensorView& q,
                                        const TensorView& k_cache, const TensorView& v_cache,
                                        int64_t start, float scale) {
  for (const TensorView* t : {&out, &q, &k_cache, &v_cache}) cpu_require_f32("attention_prefill", *t);
  const int64_t n = q.dim(0), NH = q.dim(1), HD = q.dim(2), G = k_cache.dim(2);
  const int64_t group = NH / G, items = n * NH;
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), items));
  const int64_t per_thread = round16(start + n) + round16(HD);
  float* scratch = static_cast<float*>(workspace(threads * per_thread * sizeof(float)));
  const float* qp = q.as<float>();
  const float* kp = k_cache.as<float>();
  const float* vp = v_cache.as<float>();
  float* op = out.as<float>();
#pragma omp parallel for schedule(dynamic, 4) num_threads(threads)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t i = item / NH, h = item % NH, g = h / group;
    float* scores = scratch + omp_get_thread_num() * per_thread;
    decode_one(op + item * HD, qp + item * HD, kp + g * HD, vp + g * HD, G * HD, start + i + 1, HD, scale, scores,
               scores + round16(start + n));
  }
}

}  // namespace lmt::kernels
