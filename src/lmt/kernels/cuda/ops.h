// The CUDA kernels behind CudaBackend, one group per .cu file. Each function receives arguments the
// Backend entry points have already validated (shapes, dtypes and contracts: kernels/backend.h, whose
// letters B, T, C, OC, N, V, H, NH, G, HD, M, K, n are used here) on tensors in CUDA memory, and
// queues its work on ctx.stream (context.h). Dtypes: f32, and bf16 where backend.h allows it; f64
// (the ref oracle's gradient-check dtype) is refused.
#pragma once

#include <cstdint>
#include <vector>

#include "lmt/kernels/backend.h"
#include "lmt/kernels/cuda/context.h"

namespace lmt::kernels::cuda {

// ---- gemm.cu (cuBLASLt; heuristic algorithm cached per shape) ----------------------------------
// C[M,N] f32 = alpha · op(A)·op(B) + beta · C (+ bias[N] f32 broadcast over rows, optional), all
// row-major with leading dimensions lda/ldb/ldc (elements); A and B share f32 or bf16 (f32 inputs are
// multiplied in full f32, never TF32). A batch of `batch` products uses element strides sa, sb, sc.
struct GemmArgs {
  int64_t M = 0, N = 0, K = 0;
  const void* A = nullptr;
  int64_t lda = 0;
  bool trans_a = false;  // A stored [K,M] (op = transpose) instead of [M,K]
  const void* B = nullptr;
  int64_t ldb = 0;
  bool trans_b = false;  // B stored [N,K] instead of [K,N]
  float* C = nullptr;
  int64_t ldc = 0;
  bool bf16 = false;  // A and B are bf16 (else f32)
  float alpha = 1.0f, beta = 0.0f;
  const float* bias = nullptr;  // [N]
  int64_t batch = 1, sa = 0, sb = 0, sc = 0;
};
void gemm(Context& ctx, const GemmArgs& g);

// matmul and matmul_batched: rank-2 views, or rank-3 stacks of independent products (one strided
// batched GEMM).
void matmul(Context& ctx, const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a,
            bool trans_b, bool accumulate);
void linear_forward(Context& ctx, const TensorView& out, const TensorView& inp, const TensorView& weight,
                    const TensorView& bias);
void linear_backward(Context& ctx, const TensorView& dinp, const TensorView& dweight,
                     const TensorView& dbias, const TensorView& dout, const TensorView& inp,
                     const TensorView& weight);
// dweight[OC,C] (+)= dout[N,OC]ᵀ · inp[N,C]: added (accumulate) or written over dweight, which the
// GEMM then does not read (beta = 0).
void linear_weight_grad(Context& ctx, const TensorView& dweight, const TensorView& dout, const TensorView& inp,
                        bool accumulate);
// dbias[OC] += Σ_n dout[n, :] (dout f32 or bf16 [N,OC]); deterministic.
void column_sum_accumulate(Context& ctx, const TensorView& dbias, const TensorView& dout);

// ---- embedding.cu ------------------------------------------------------------------------------
void embedding_forward(Context& ctx, const TensorView& out, const TensorView& ids, const TensorView& table,
                       bool accumulate);
// Deterministic: the same ids and dout give the same bits every run (no float atomics).
void embedding_backward(Context& ctx, const TensorView& dtable, const TensorView& dout, const TensorView& ids);

// ---- moe.cu (f32 routing and combine; gather any dtype; scatter-add is embedding_backward) -----
void moe_router_forward(Context& ctx, const TensorView& weights, const TensorView& experts, const TensorView& probs,
                        const TensorView& lse, const TensorView& logits, const TensorView& bias, bool renormalize);
void moe_router_backward(Context& ctx, const TensorView& dlogits, const TensorView& dweights, const TensorView& probs,
                         const TensorView& lse, const TensorView& experts, bool renormalize, const TensorView& dprobs,
                         double z_scale);
void moe_gather_rows(Context& ctx, const TensorView& out, const TensorView& inp, const TensorView& rows);
void moe_combine_forward(Context& ctx, const TensorView& out, const TensorView& y, const TensorView& weights,
                         const TensorView& slots);
void moe_combine_backward(Context& ctx, const TensorView& dy, const TensorView& dweights, const TensorView& dout,
                          const TensorView& y, const TensorView& weights, const TensorView& slots);

// ---- norm.cu -----------------------------------------------------------------------------------
void layernorm_forward(Context& ctx, const TensorView& out, const TensorView& mean, const TensorView& rstd,
                       const TensorView& inp, const TensorView& weight, const TensorView& bias, float eps);
void layernorm_backward(Context& ctx, const TensorView& dinp, const TensorView& dweight,
                        const TensorView& dbias, const TensorView& dout, const TensorView& inp,
                        const TensorView& weight, const TensorView& mean, const TensorView& rstd,
                        bool accumulate);
void rmsnorm_forward(Context& ctx, const TensorView& out, const TensorView& rstd, const TensorView& inp,
                     const TensorView& weight, float eps);
void rmsnorm_backward(Context& ctx, const TensorView& dinp, const TensorView& dweight, const TensorView& dout,
                      const TensorView& inp, const TensorView& weight, const TensorView& rstd,
                      bool accumulate);
// sum = a + b, then the norm of sum into out: one kernel (backend.h).
void add_layernorm_forward(Context& ctx, const TensorView& sum, const TensorView& out, const TensorView& mean,
                           const TensorView& rstd, const TensorView& a, const TensorView& b, const TensorView& weight,
                           const TensorView& bias, float eps);
void add_rmsnorm_forward(Context& ctx, const TensorView& sum, const TensorView& out, const TensorView& rstd,
                         const TensorView& a, const TensorView& b, const TensorView& weight, float eps);

// ---- activation.cu -----------------------------------------------------------------------------
void activation_forward(Context& ctx, Activation act, const TensorView& out, const TensorView& inp);
void activation_backward(Context& ctx, Activation act, const TensorView& dinp, const TensorView& dout,
                         const TensorView& inp);
void glu_forward(Context& ctx, Activation act, const TensorView& out, const TensorView& inp);
void glu_backward(Context& ctx, Activation act, const TensorView& dinp, const TensorView& dout,
                  const TensorView& inp);

// ---- rope.cu -----------------------------------------------------------------------------------
void rope(Context& ctx, const TensorView& out, const TensorView& inp, const TensorView& positions,
          const RopeFreqs& freqs, bool inverse);

// ---- attention.cu (flash attention: tiles, online softmax, no T×T buffer) -----------------------
// compute kBF16 with HD <= 128 runs the bf16 tensor-core kernels (attention_fa2.cu), else f32 SIMT.
void attention_forward(Context& ctx, const TensorView& out, const TensorView& lse, const TensorView& q,
                       const TensorView& k, const TensorView& v, const TensorView& doc_ids, float scale,
                       DType compute);
void attention_backward(Context& ctx, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                        const TensorView& dout, const TensorView& q, const TensorView& k,
                        const TensorView& v, const TensorView& out, const TensorView& lse,
                        const TensorView& doc_ids, float scale, DType compute);
// ---- attention_decode.cu -----------------------------------------------------------------------
void attention_decode(Context& ctx, const TensorView& out, const TensorView& q, const TensorView& k_cache,
                      const TensorView& v_cache, int64_t length, float scale);
void attention_prefill(Context& ctx, const TensorView& out, const TensorView& q, const TensorView& k_cache,
                       const TensorView& v_cache, int64_t start, float scale);

// ---- loss.cu (LM head fused with cross-entropy, chunked; GEMMs through gemm()) ----------------------
void lm_head_cross_entropy(Context& ctx, const TensorView& losses, const TensorView& x,
                           const TensorView& weight, const TensorView& targets,
                           const CrossEntropyOptions& opts, const TensorView& dx, const TensorView& dweight);

// ---- elementwise.cu ----------------------------------------------------------------------------
void add(Context& ctx, const TensorView& out, const TensorView& a, const TensorView& b);
void convert(Context& ctx, const TensorView& out, const TensorView& inp);
double sum_squares(Context& ctx, const TensorView& x);  // synchronises
void scale(Context& ctx, const TensorView& x, float s);
void axpby(Context& ctx, const TensorView& out, float alpha, const TensorView& x, float beta,
           const TensorView& y, const TensorView& out_bf16);
void adamw_update(Context& ctx, const TensorView& param, const TensorView& grad, const TensorView& m,
                  const TensorView& v, const TensorView& param_bf16, const AdamWParams& p);

// ---- memory.cu ---------------------------------------------------------------------------------
void fill(Context& ctx, const TensorView& x, double value);
// Any direction: host->device, device->host, device->device (cudaMemcpyDefault); a copy that reads
// or writes host memory has finished when this returns.
void copy(Context& ctx, const TensorView& out, const TensorView& inp);
// Queued on the stream, the host not waiting (Backend::copy_async): a host source of up to
// Context::kUploadSlotMaxBytes is first copied into an upload slot (so the caller may change it at
// once); a larger one is copied as copy() does. A host destination is written when the stream gets
// there (at once and synchronously if it is not page-locked: CUDA's rule for pageable memory).
void copy_async(Context& ctx, const TensorView& out, const TensorView& inp);
// Backend::snapshot_async: on ctx.copy_stream (created here the first time), after the ops queued
// so far on ctx.stream; join_snapshots: ctx.stream waits for every snapshot issued before it.
void snapshot_async(Context& ctx, const TensorView& out, const TensorView& inp);
void join_snapshots(Context& ctx);
void positions(Context& ctx, const TensorView& out, const TensorView& given, int64_t T);
int64_t count_valid_targets(Context& ctx, const TensorView& targets, int32_t ignore_index);  // synchronises
double sum(Context& ctx, const TensorView& x);  // f64 accumulation in index order; synchronises

}  // namespace lmt::kernels::cuda
