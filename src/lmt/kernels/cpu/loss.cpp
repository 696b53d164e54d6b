// cpu: LM head fused with softmax cross-entropy, chunk_rows rows at a time.
//
// For each chunk: logits[rows,V] = x_chunk · W[:V]ᵀ (oneDNN), then per row (OpenMP) the max, the
// log-sum-exp, the loss, and — when gradients are requested — dlogits overwrite the logits in
// place: (softmax·(1 + 2·z·lse) − onehot)·grad_scale. Then dx_chunk = dlogits · W[:V] and dW[:V] +=
// dlogitsᵀ · x_chunk (linear_backward's GEMMs; = for the first rows with dweight_write =
// kOverwrite, which saves reading dW: 154 MB for GPT-2's head). The logits are computed once for
// forward and backward together, and only chunk_rows × V floats exist at a time. bf16 GEMMs take a
// bf16 copy of dlogits; with a weight gradient that copy holds up to kWeightGradRows rows (several
// chunks), and dW takes them in one GEMM: each dW GEMM reads and writes all of dW[V, C] (154 MB for
// GPT-2's head), so one per 1,024 rows instead of one per 256-row chunk saved ~50 ms of a 1.1 s
// gpt2-124m step (Zen 5). dx waits for the group too: one GEMM over its rows packs W[:V] once, not
// once per chunk (the LM head of that step 303 -> 291 ms).
// Vocabulary-parallel (opts.combine): per chunk, the rows' local statistics first, then combine()
// makes them the whole vocabulary's, then the losses and dlogits from those.
#include <algorithm>
#include <cmath>

#include "lmt/base/bf16.h"
#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/kernels/cpu/simd.h"
#include "lmt/tensor/arena.h"

namespace lmt::kernels {

namespace {

// Rows of bf16 dlogits the weight gradient takes per GEMM (bf16 with dweight): workspace 2·V bytes
// each (103 MB for GPT-2's vocabulary).
constexpr int64_t kWeightGradRows = 1024;

// Row r's dlogits (f32, in l) also as bf16 into d16 + r·V while the row is in cache (d16: null
// for f32 GEMMs).
void store_bf16(uint16_t* d16, int64_t r, const float* l, int64_t V) {
  if (d16 != nullptr) cpu_f32_to_bf16(d16 + r * V, l, V);
}

// Per row: loss, and dlogits in place of logits (and as bf16 into d16) when grads are wanted.
void softmax_xent_rows(float* logits, float* losses, const int32_t* targets, int64_t rows,
                       int64_t V, const CrossEntropyOptions& o, bool want_grad, uint16_t* d16) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* l = logits + r * V;
    const int32_t t = targets[r];
    if (t == o.ignore_index) {
      losses[r] = 0.0f;
      if (want_grad) {
        std::fill_n(l, V, 0.0f);
        store_bf16(d16, r, l, V);
      }
      continue;
    }
    LMT_CHECK(t >= 0 && t < V) << "lm_head_cross_entropy: target " << t << " outside [0, " << V << ")";
    const float target_logit = l[t];
    const float mx = simd::max_of(l, V);
    if (!want_grad) {
      // Sum without keeping the exponentials: write them to the row (it is scratch anyway).
      const float sum = simd::exp_shifted_sum(l, l, V, mx);
      const double lse = mx + std::log(static_cast<double>(sum));
      losses[r] = static_cast<float>(lse - target_logit + o.z_loss * lse * lse);
      continue;
    }
    const float sum = simd::exp_shifted_sum(l, l, V, mx);  // l = exp(logit - max)
    const double lse = mx + std::log(static_cast<double>(sum));
    losses[r] = static_cast<float>(lse - target_logit + o.z_loss * lse * lse);
    const float k = static_cast<float>((1.0 + 2.0 * o.z_loss * lse) / sum) * o.grad_scale;
#pragma omp simd
    for (int64_t v = 0; v < V; ++v) l[v] *= k;
    l[t] -= o.grad_scale;
    store_bf16(d16, r, l, V);
  }
}

// Vocabulary-parallel rows, pass 1: this rank's max, Σ exp and log-sum-exp per row (the row left
// holding exp(logit − max)) and its target logit (0 where the target is another rank's).
void local_softmax_stats(float* logits, const int32_t* targets, int64_t rows, int64_t V, const CrossEntropyOptions& o,
                         float* mx, float* sum, float* lse, float* target_logit) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* l = logits + r * V;
    const int64_t t = static_cast<int64_t>(targets[r]) - o.vocab_begin;
    target_logit[r] = targets[r] != o.ignore_index && t >= 0 && t < V ? l[t] : 0.0f;
    mx[r] = simd::max_of(l, V);
    sum[r] = simd::exp_shifted_sum(l, l, V, mx[r]);
    lse[r] = static_cast<float>(mx[r] + std::log(static_cast<double>(sum[r])));
  }
}

// Pass 2, with the whole vocabulary's lse and target logit: the loss, and dlogits in place.
void vocab_parallel_xent_rows(float* logits, float* losses, const int32_t* targets, int64_t rows, int64_t V,
                              const CrossEntropyOptions& o, bool want_grad, const float* mx, const float* lse,
                              const float* target_logit, uint16_t* d16) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* l = logits + r * V;
    if (targets[r] == o.ignore_index) {
      losses[r] = 0.0f;
      if (want_grad) {
        std::fill_n(l, V, 0.0f);
        store_bf16(d16, r, l, V);
      }
      continue;
    }
    LMT_CHECK(targets[r] >= 0) << "lm_head_cross_entropy: target " << targets[r] << " is negative";
    const double g = lse[r];
    losses[r] = static_cast<float>(g - target_logit[r] + o.z_loss * g * g);
    if (!want_grad) continue;
    // l holds exp(logit − max): the whole vocabulary's softmax is l · exp(max − lse).
    const float k = static_cast<float>(std::exp(static_cast<double>(mx[r]) - g) * (1.0 + 2.0 * o.z_loss * g)) * o.grad_scale;
#pragma omp simd
    for (int64_t v = 0; v < V; ++v) l[v] *= k;
    const int64_t t = static_cast<int64_t>(targets[r]) - o.vocab_begin;
    if (t >= 0 && t < V) l[t] -= o.grad_scale;
    store_bf16(d16, r, l, V);
  }
}

}  // namespace

void CpuBackend::lm_head_cross_entropy_impl(const TensorView& losses, const TensorView& x,
                                            const TensorView& weight, const TensorView& targets,
                                            const CrossEntropyOptions& opts, const TensorView& dx,
                                            const TensorView& dweight) {
  LMT_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16)
      << "kernel 'lm_head_cross_entropy': the cpu backend takes f32 or bf16 inputs, got " << x.to_string();
  const int64_t N = x.dim(0), V = opts.vocab_size;
  const bool want_grad = dx.present() || dweight.present();
  const bool is_bf16 = x.dtype() == DType::kBF16;
  const int64_t chunk = std::min<int64_t>(opts.chunk_rows, std::max<int64_t>(N, 1));

  const bool parallel = static_cast<bool>(opts.combine);

  // dW's GEMM runs once per group of this many rows (whole chunks; see the top).
  const int64_t group = is_bf16 && dweight.present()
                            ? std::max<int64_t>(chunk, std::min<int64_t>(N, kWeightGradRows) / chunk * chunk)
                            : chunk;
  // Workspace: f32 logits [chunk, V], then (bf16 only) a bf16 copy of dlogits [group, V], then
  // (vocabulary-parallel only) four f32 [chunk] row statistics.
  const size_t logits_bytes = Arena::round_up(static_cast<size_t>(chunk * V) * sizeof(float));
  const size_t dlog16_bytes = Arena::round_up(is_bf16 && want_grad ? static_cast<size_t>(group * V) * sizeof(bf16) : 0);
  const size_t stats_bytes = parallel ? 4 * static_cast<size_t>(chunk) * sizeof(float) : 0;
  char* ws = static_cast<char*>(workspace(logits_bytes + dlog16_bytes + stats_bytes));
  float* logits = reinterpret_cast<float*>(ws);
  bf16* dlogits16 = reinterpret_cast<bf16*>(ws + logits_bytes);
  float* stats = reinterpret_cast<float*>(ws + logits_bytes + dlog16_bytes);
  float *mx = stats, *sum = stats + chunk, *lse = stats + 2 * chunk, *tl = stats + 3 * chunk;

  const TensorView w_vocab = weight.slice_rows(0, V);
  const WidenPin pin(*this, w_vocab.data());  // every chunk reads all of W[:V] (where bf16 is widened)
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t rows = std::min(chunk, N - r0);
    const TensorView x_chunk = x.slice_rows(r0, r0 + rows);
    const TensorView logits_view(logits, Shape{rows, V}, DType::kF32);
    matmul_impl(logits_view, x_chunk, w_vocab, false, true, false);
    const int32_t* t = targets.as<int32_t>() + r0;
    const int64_t g0 = r0 / group * group;  // this chunk's group of rows, whose dlogits gather in dlogits16
    // bf16: the rows write their dlogits' bf16 copy themselves (while each row is in cache).
    uint16_t* d16 = is_bf16 && want_grad ? reinterpret_cast<uint16_t*>(dlogits16 + (r0 - g0) * V) : nullptr;
    if (parallel) {
      local_softmax_stats(logits, t, rows, V, opts, mx, sum, lse, tl);
      opts.combine(r0, TensorView(lse, Shape{rows}, DType::kF32), TensorView(tl, Shape{rows}, DType::kF32));
      vocab_parallel_xent_rows(logits, losses.as<float>() + r0, t, rows, V, opts, want_grad, mx, lse, tl, d16);
    } else {
      softmax_xent_rows(logits, losses.as<float>() + r0, t, rows, V, opts, want_grad, d16);
    }
    if (!want_grad) continue;
    // The LM head is a linear layer: dx = dlogits · W[:V], dW[:V] += dlogitsᵀ · x (cpu/matmul.cpp, which
    // runs the weight gradient in blocks of the vocabulary: the whole [V, rows]ᵀ product is slow).
    // dW of the first rows is written over dW with opts.dweight_write = kOverwrite, later ones add.
    if (!is_bf16) {
      if (dx.present())
        linear_backward_impl(dx.slice_rows(r0, r0 + rows), TensorView(), TensorView(), logits_view, x_chunk, w_vocab);
      if (dweight.present())
        weight_grad(dweight.slice_rows(0, V), logits_view, x_chunk,
                    r0 > 0 || opts.dweight_write == GradWrite::kAccumulate);
      continue;
    }
    const int64_t g1 = std::min(N, g0 + group);
    if (r0 + rows < g1) continue;  // the group's GEMMs wait for its last chunk
    // dx and dW of the whole group: one dx GEMM per group rather than per chunk also packs W[:V] once.
    const TensorView dlogits_group(dlogits16, Shape{g1 - g0, V}, DType::kBF16);
    if (dx.present())
      linear_backward_impl(dx.slice_rows(g0, g1), TensorView(), TensorView(), dlogits_group, x.slice_rows(g0, g1),
                           w_vocab);
    if (dweight.present())
      weight_grad(dweight.slice_rows(0, V), dlogits_group, x.slice_rows(g0, g1),
                  g0 > 0 || opts.dweight_write == GradWrite::kAccumulate);
  }
}

}  // namespace lmt::kernels
