// LM head fused with softmax cross-entropy (+ z-loss), chunked over rows (kernels/backend.h):
//   logits[n, 0:V] = x[N,C] · weight[Vp,C]ᵀ (rows < V only); x and weight share f32 or bf16;
//   losses[N] f32 (written) = lse - logit[target] + z_loss·lse², 0 where target == ignore_index;
//   dx[N,C] f32 (overwrite, optional), dweight[Vp,C] f32 (+=, or = with dweight_write = kOverwrite;
//   padding rows get += 0 or = 0; optional): the gradients of grad_scale · Σ losses, from the same
//   logits pass.
//
// The products run over Vg vocabulary rows: Vld = V rounded up to 64 where the weight (and dweight)
// have that many rows, as the model's padded vocabulary does (vocab_pad_to, rows >= V kept zero), else
// V. GPT-2's V = 50257 as a GEMM extent or leading dimension leaves cuBLASLt misaligned rows and
// ragged tiles; 50304 does not. The padding rows must be finite (any values: their logits are never
// read, and their dlogits are written as zeros, so dx gains exact zeros and dweight's padding rows
// gain += 0).
//
// Per chunk of R rows [r0, r0 + R):
//   1. gemm: logits[R,Vg] f32 (scratch, row stride Vld) = x[rows] · weight[0:Vg]ᵀ;
//   2. ce_rows_kernel, one block per row: an online (max, Σexp) over columns [0, V), lse, the loss;
//      then, when gradients are wanted, dlogit = grad_scale·(softmax·(1 + 2·z·lse) - onehot)
//      (math/cross_entropy_math.h), zero for an ignored row and for columns [V, Vg): in place over
//      the f32 logits, or with bf16 operands into a bf16 buffer only (GEMM operands share a dtype);
//   3. gemm: dx[rows] = dlogits · weight[0:Vg]  (beta 0);
//   4. gemm: dweight[0:Vg] += dlogitsᵀ · x[rows]  (beta 1; beta 0 for the first chunk with
//      dweight_write = kOverwrite: no fill of dweight and no read of it, and the padding rows
//      [V, Vg) are written with their zero gradient).
// The logits are read twice by the row kernel (statistics, then gradient) and written once.
//
// R = max(opts.chunk_rows, 4096), at most N: GPU GEMMs need a large M to run near peak, and the
// dweight GEMM's K (= R) is the reduction over tokens, so a small chunk would also mean many small
// accumulating GEMMs. On an H100 (gpt2-124m, B16 T1024) the head took 38.4 ms a step with V-wide
// rows, 31.5 ms with the logits rows padded to Vld; on an H200, 8.9 ms with the products over Vg and
// the f32 dlogits no longer written in bf16 runs (docs/PERFORMANCE.md).
// Scratch (one ctx.scratch call per invocation): R·Vld·4 bytes of f32 logits, plus R·Vld·2 bytes of
// bf16 dlogits when x is bf16 and gradients are wanted (e.g. R = 4096, V = 128256: 2.1 GB + 1.05 GB).
// gemm() uses ctx.lt_workspace, not ctx.scratch, so the carve stays valid.
//
// A target outside [0, V) (and not ignore_index) cannot be reported from the device: its loss is
// NaN and its row contributes no gradient.
//
// Vocabulary-parallel (opts.combine; model/tensor_parallel.h): step 2 splits in two. ce_part_stats_kernel
// writes each row's log-sum-exp over this part's V columns and its target logit (0 where another
// part holds the target) into [R] scratch; opts.combine makes them the whole vocabulary's in place
// (device memory: the caller may copy them to the host and back; copies run on ctx.stream, so
// they follow the kernel and precede the next one); ce_part_rows_kernel then writes the losses and
// the dlogits of this part's columns from those. A part cannot tell a target past the whole
// vocabulary from another part's; only a negative one gets the NaN loss.
#include <cmath>
#include <cstdint>
#include <limits>

#include "lmt/kernels/cuda/common.cuh"
#include "lmt/kernels/cuda/math/cross_entropy_math.h"
#include "lmt/kernels/cuda/ops.h"

namespace lmt::kernels::cuda {
namespace {

namespace cm = lmt::kernels::cuda_math;

constexpr int kCeThreads = 512;
constexpr int64_t kMinChunkRows = 4096;

// Merges every thread's (m, s) into one pair, returned to all threads. `sh_m`, `sh_s`: 32 floats each.
__device__ __forceinline__ void block_online_merge(float& m, float& s, float* sh_m, float* sh_s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    cm::ce_online_merge(m, s, m2, s2);
  }
  __syncthreads();  // the previous row's readers of sh_m/sh_s are done
  if (lane == 0) {
    sh_m[warp] = m;
    sh_s[warp] = s;
  }
  __syncthreads();
  m = lane < warps ? sh_m[lane] : -INFINITY;
  s = lane < warps ? sh_s[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    cm::ce_online_merge(m, s, m2, s2);
  }
}

// A row's gradient buffer (dlogits_bf16's row lb when given, else the f32 row l): columns [from, cols)
// zeroed (those past V enter the padded products as zeros; a whole row for an ignored target).
__device__ __forceinline__ void zero_row(float* l, uint16_t* lb, int64_t from, int64_t cols) {
  for (int64_t v = from + threadIdx.x; v < cols; v += blockDim.x) {
    if (lb != nullptr) lb[v] = 0;
    else l[v] = 0.0f;
  }
}

// The row's dlogits from its whole-vocabulary lse, written where zero_row writes (only the buffer the
// products read: bf16 runs skip the f32 row, 4 bytes an element); column t (this part's index of the
// target, -1 or past V where the target is elsewhere) gets the -1. Each thread reads only the columns
// it writes.
__device__ __forceinline__ void write_row_grads(float* l, uint16_t* lb, int64_t V, int64_t cols, int64_t t, float lse,
                                                float z_loss, float grad_scale) {
  const float factor = cm::ce_grad_factor(lse, z_loss);
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    const float d = cm::ce_dlogit(l[v], lse, factor, v == t, grad_scale);
    if (lb != nullptr) lb[v] = cm::bf16_round(d);
    else l[v] = d;
  }
  zero_row(l, lb, V, cols);
}

// The block's (max, Σexp) of the row's columns [0, V), merged: its log-sum-exp.
__device__ __forceinline__ float row_lse(const float* l, int64_t V, float* sh_m, float* sh_s) {
  float m = -INFINITY, s = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) cm::ce_online_update(m, s, l[v]);
  block_online_merge(m, s, sh_m, sh_s);
  return cm::ce_lse(m, s);
}

// logits [R, cols] f32 (row stride ld >= cols >= V): columns [0, V) are read. With want_grad, the
// row's dlogits replace them, in dlogits_bf16 [R, cols] (row stride ld) when given, else in place
// in logits; columns [V, cols) of that buffer are zeroed (they enter the padded products as zeros).
__global__ void __launch_bounds__(kCeThreads)
    ce_rows_kernel(float* logits, uint16_t* dlogits_bf16, float* losses, const int32_t* targets, int64_t R, int64_t V,
                   int64_t cols, int64_t ld, int32_t ignore_index, float z_loss, float grad_scale, bool want_grad) {
  __shared__ float sh_m[32], sh_s[32];
  for (int64_t row = blockIdx.x; row < R; row += gridDim.x) {
    float* l = logits + row * ld;
    uint16_t* lb = dlogits_bf16 != nullptr ? dlogits_bf16 + row * ld : nullptr;
    const int32_t t = targets[row];
    // Uniform over the block: no thread skips a barrier another one waits at.
    if (t == ignore_index || t < 0 || t >= V) {
      if (threadIdx.x == 0) losses[row] = t == ignore_index ? 0.0f : NAN;
      if (want_grad) zero_row(l, lb, 0, cols);
      continue;
    }
    // Read before the merge's barriers, hence before any thread overwrites the row with gradients.
    const float logit_t = threadIdx.x == 0 ? l[t] : 0.0f;
    const float lse = row_lse(l, V, sh_m, sh_s);
    if (threadIdx.x == 0) losses[row] = cm::ce_loss(lse, logit_t, z_loss);
    if (want_grad) write_row_grads(l, lb, V, cols, t, lse, z_loss, grad_scale);
  }
}

// Vocabulary parallelism, pass 1: each row's log-sum-exp over this part's columns [0, V) and its
// target's logit where this part holds the target (global id - vocab_begin in [0, V)), else 0.
// Ignored rows get 0 and 0.
__global__ void __launch_bounds__(kCeThreads)
    ce_part_stats_kernel(const float* logits, float* lse, float* target_logit, const int32_t* targets, int64_t R,
                         int64_t V, int64_t ld, int32_t ignore_index, int64_t vocab_begin) {
  __shared__ float sh_m[32], sh_s[32];
  for (int64_t row = blockIdx.x; row < R; row += gridDim.x) {
    const float* l = logits + row * ld;
    const int32_t t = targets[row];
    if (t == ignore_index) {  // uniform over the block
      if (threadIdx.x == 0) lse[row] = target_logit[row] = 0.0f;
      continue;
    }
    const float part_lse = row_lse(l, V, sh_m, sh_s);
    if (threadIdx.x == 0) {
      const int64_t tl = static_cast<int64_t>(t) - vocab_begin;
      lse[row] = part_lse;
      target_logit[row] = tl >= 0 && tl < V ? l[tl] : 0.0f;
    }
  }
}

// Vocabulary parallelism, pass 2, with the whole vocabulary's lse and target logit per row (after
// the combine): the losses and, with want_grad, the part's dlogits as ce_rows_kernel writes them. A
// negative target (not ignore_index) is no token: NaN loss, no gradient.
__global__ void __launch_bounds__(kCeThreads)
    ce_part_rows_kernel(float* logits, uint16_t* dlogits_bf16, float* losses, const int32_t* targets,
                        const float* lse, const float* target_logit, int64_t R, int64_t V, int64_t cols, int64_t ld,
                        int32_t ignore_index, float z_loss, float grad_scale, bool want_grad, int64_t vocab_begin) {
  for (int64_t row = blockIdx.x; row < R; row += gridDim.x) {
    float* l = logits + row * ld;
    uint16_t* lb = dlogits_bf16 != nullptr ? dlogits_bf16 + row * ld : nullptr;
    const int32_t t = targets[row];
    if (t == ignore_index || t < 0) {
      if (threadIdx.x == 0) losses[row] = t == ignore_index ? 0.0f : NAN;
      if (want_grad) zero_row(l, lb, 0, cols);
      continue;
    }
    if (threadIdx.x == 0) losses[row] = cm::ce_loss(lse[row], target_logit[row], z_loss);
    if (want_grad) write_row_grads(l, lb, V, cols, static_cast<int64_t>(t) - vocab_begin, lse[row], z_loss, grad_scale);
  }
}

size_t align256(size_t bytes) { return (bytes + 255) & ~size_t{255}; }

}  // namespace

void lm_head_cross_entropy(Context& ctx, const TensorView& losses, const TensorView& x, const TensorView& weight,
                           const TensorView& targets, const CrossEntropyOptions& opts, const TensorView& dx,
                           const TensorView& dweight) {
  const int64_t N = x.dim(0), C = x.dim(1), V = opts.vocab_size;
  LMT_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16)
      << "cuda lm_head_cross_entropy: x and weight must be f32 or bf16, got " << x.to_string();
  LMT_CHECK(weight.dtype() == x.dtype()) << "cuda lm_head_cross_entropy: x " << x.to_string() << " vs weight "
                                         << weight.to_string();
  const bool bf16 = is_bf16(x);
  const void* xp = bf16 ? static_cast<const void*>(dptr<const uint16_t>(x)) : dptr<const float>(x);
  const void* wp = bf16 ? static_cast<const void*>(dptr<const uint16_t>(weight)) : dptr<const float>(weight);
  float* loss = dptr<float>(losses);
  const int32_t* tgt = dptr<const int32_t>(targets);
  float* dxp = dptr<float>(dx);
  float* dwp = dptr<float>(dweight);
  const bool want_grad = dxp != nullptr || dwp != nullptr;
  if (N == 0) return;

  int64_t R = opts.chunk_rows > kMinChunkRows ? opts.chunk_rows : kMinChunkRows;
  if (R > N) R = N;
  const int64_t Vld = (V + 63) / 64 * 64;  // the logits' row stride (aligned rows for cuBLASLt)
  // The products' vocabulary extent: Vld where the weight (and dweight) hold those padding rows (the
  // model's vocab_pad_to), else V. See the top of the file.
  const int64_t Vg = weight.dim(0) >= Vld && (dwp == nullptr || dweight.dim(0) >= Vld) ? Vld : V;
  const size_t logits_bytes = align256(static_cast<size_t>(R) * static_cast<size_t>(Vld) * sizeof(float));
  const size_t bf16_bytes =
      bf16 && want_grad ? align256(static_cast<size_t>(R) * static_cast<size_t>(Vld) * sizeof(uint16_t)) : 0;
  const bool parallel = static_cast<bool>(opts.combine);
  const size_t stats_bytes = parallel ? 2 * align256(static_cast<size_t>(R) * sizeof(float)) : 0;
  char* s = static_cast<char*>(ctx.scratch(logits_bytes + bf16_bytes + stats_bytes));
  float* logits = reinterpret_cast<float*>(s);
  uint16_t* dlogits_bf16 = bf16_bytes > 0 ? reinterpret_cast<uint16_t*>(s + logits_bytes) : nullptr;
  // Vocabulary-parallel: the rows' log-sum-exp and target logit, [R] each, handed to opts.combine.
  float* part_lse = parallel ? reinterpret_cast<float*>(s + logits_bytes + bf16_bytes) : nullptr;
  float* part_tl = parallel ? part_lse + stats_bytes / 2 / sizeof(float) : nullptr;
  const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
  const char* xb = static_cast<const char*>(xp);

  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t rows = N - r0 < R ? N - r0 : R;
    const void* x_rows = xb + static_cast<size_t>(r0) * static_cast<size_t>(C) * elem;

    GemmArgs lg;  // logits[rows,Vg] = x[rows,C] · weight[0:Vg,C]ᵀ
    lg.M = rows, lg.N = Vg, lg.K = C;
    lg.A = x_rows, lg.lda = C;
    lg.B = wp, lg.ldb = C, lg.trans_b = true;
    lg.C = logits, lg.ldc = Vld;
    lg.bf16 = bf16;
    gemm(ctx, lg);

    const unsigned blocks = static_cast<unsigned>(rows < 65535 * 16 ? rows : 65535 * 16);
    if (!parallel) {
      ce_rows_kernel<<<blocks, kCeThreads, 0, ctx.stream>>>(logits, dlogits_bf16, loss + r0, tgt + r0, rows, V, Vg,
                                                            Vld, opts.ignore_index, opts.z_loss, opts.grad_scale,
                                                            want_grad);
      LMT_CUDA_LAUNCHED();
    } else {  // this part's statistics, the whole vocabulary's from the combine, then the rows
      ce_part_stats_kernel<<<blocks, kCeThreads, 0, ctx.stream>>>(logits, part_lse, part_tl, tgt + r0, rows, V, Vld,
                                                                  opts.ignore_index, opts.vocab_begin);
      LMT_CUDA_LAUNCHED();
      const Device dev = losses.device();
      opts.combine(r0, TensorView(part_lse, Shape{rows}, DType::kF32, dev),
                   TensorView(part_tl, Shape{rows}, DType::kF32, dev));
      ce_part_rows_kernel<<<blocks, kCeThreads, 0, ctx.stream>>>(logits, dlogits_bf16, loss + r0, tgt + r0, part_lse,
                                                                 part_tl, rows, V, Vg, Vld, opts.ignore_index,
                                                                 opts.z_loss, opts.grad_scale, want_grad,
                                                                 opts.vocab_begin);
      LMT_CUDA_LAUNCHED();
    }
    if (!want_grad) continue;
    const void* dl = bf16 ? static_cast<const void*>(dlogits_bf16) : static_cast<const void*>(logits);

    if (dxp != nullptr) {  // dx[rows,C] = dlogits[rows,Vg] · weight[0:Vg,C]
      GemmArgs g;
      g.M = rows, g.N = C, g.K = Vg;
      g.A = dl, g.lda = Vld;
      g.B = wp, g.ldb = C;
      g.C = dxp + r0 * C, g.ldc = C;
      g.bf16 = bf16;
      g.beta = 0.0f;
      gemm(ctx, g);
    }
    if (dwp != nullptr) {  // dweight[0:Vg,C] (= for the first rows with kOverwrite, else +=) dlogits[rows,Vg]ᵀ · x[rows,C]
      GemmArgs g;
      g.M = Vg, g.N = C, g.K = rows;
      g.A = dl, g.lda = Vld, g.trans_a = true;
      g.B = x_rows, g.ldb = C;
      g.C = dwp, g.ldc = C;
      g.bf16 = bf16;
      g.beta = r0 == 0 && opts.dweight_write == GradWrite::kOverwrite ? 0.0f : 1.0f;
      gemm(ctx, g);
    }
  }
}

}  // namespace lmt::kernels::cuda
