// What the sub-blocks of a transformer block share (model/attention_block.h, model/ffn_block.h).
//
// A pre-norm block is the attention sub-block, then the FFN sub-block, each adding its output to the
// residual stream:
//   res_mid = res_in  + AttentionBlock(res_in)
//   res_out = res_mid + FfnBlock(res_mid)
// A sub-block's forward returns its output as a Residual (norm.h) whose add is left pending where
// it can be: the next norm (the next sub-block's, or the final norm) writes the sum as it reads it,
// so the stream is read once rather than twice. Whoever ends the chain calls materialize().
// Transformer::forward_block/backward_block (block.cpp) compose them for training; eval::Decoder
// composes their decode passes over a KV cache. Neither writes block math of its own, so a new
// variant (another attention, an MoE FFN) is written once, in its sub-block.
#pragma once

#include "lmt/kernels/backend.h"
#include "lmt/model/norm.h"
#include "lmt/model/tensor_parallel.h"
#include "lmt/tensor/tensor_view.h"

namespace lmt::model {

// What every sub-block pass over one training batch reads besides its weights and activations.
// Views only: cheap to copy, built per block call (no allocation).
struct BlockPass {
  // GEMM input dtype (RunOptions::compute): kBF16 makes every GEMM read bf16 copies (weights from
  // the mirror, activations and gradients converted once); kF32 / kF64 read them as they are.
  DType compute = DType::kF32;
  kernels::AttentionBackend attention = kernels::AttentionBackend::kFlash;  // resolved (no kAuto)
  TensorView positions;  // [N] i32: each row's position (RoPE)
  TensorView doc_ids;    // [B,T] i32, optional: attention stays within a document
  TensorView seq_nc;     // [N/size, C] f32 under sequence parallelism (Scratch::seq_nc), else absent
  // backward: how the sub-block's weight-matrix gradients (its written_grads()) are written:
  // kOverwrite in the first backward after Transformer::zero_grads left them unzeroed.
  kernels::GradWrite weight_grads = kernels::GradWrite::kAccumulate;
};

// The GEMM input for gradient `g` (f32): in bf16 mode `buffer` (bf16, at least g.numel() elements,
// Scratch::grad_c) holds g converted and is returned in g's shape; with an absent buffer g itself.
// The returned view is valid until the next call with the same buffer.
TensorView gemm_input(kernels::Backend& be, const TensorView& buffer, const TensorView& g);

// Tensor parallelism (tensor_parallel.h), for the sub-blocks. `tp` null or of size 1: none.
// The bias a row-parallel GEMM (o, down) adds on this rank: rank 0 adds it, the others add none, so
// the sum over the group adds it once.
TensorView row_parallel_bias(const TensorParallel* tp, const TensorView& bias);
// x summed over the group in place (a failed exchange is fatal, naming `what` and the rank).
void tensor_parallel_sum(const TensorParallel* tp, const TensorView& x, const char* what);
// Sequence parallelism (TensorParallel::sequence_parallel): true when `tp` runs it.
inline bool sequence_parallel(const TensorParallel* tp) { return tp != nullptr && tp->enabled() && tp->sequence_parallel; }
// full[N, C] (f32) = every rank's part[n, C] stacked in rank order (this rank's copied in first, by
// the backend: both live where it computes).
void sequence_gather(kernels::Backend& be, const TensorParallel* tp, const TensorView& part, const TensorView& full,
                     const char* what);
// part[n, C] = this rank's rows of the sum over the group of full[N, C] (f32).
void sequence_reduce_scatter(const TensorParallel* tp, const TensorView& full, const TensorView& part, const char* what);

// The three tensor/sequence-parallel steps every sub-block shares (none without tp):
// out[N, C] = norm(res) of all N rows, f32 or bf16 (bf16 runs: the GEMMs' input). A pending res is
// written in the same pass. Under sequence parallelism res holds this rank's rows (written first if
// pending), normalised into seq_nc [n, C] f32 and all-gathered into out, or for a bf16 out into
// f32_full [N, C] and converted.
void norm_all_rows(kernels::Backend& be, const ModelConfig& c, const TensorParallel* tp, const TensorView& out,
                   const TensorView& mean, const TensorView& rstd, const Residual& res, const TensorView& w,
                   const TensorView& b, const TensorView& seq_nc, const TensorView& f32_full, const char* what);
// res_out = res_in + the sum over the group of the row-parallel output `partial` [N, C] (f32,
// clobbered), summed in place and left pending (the next norm adds it: Residual), or under
// sequence parallelism reduce-scattered into seq_nc [n, C] for this rank's rows and added here.
Residual row_parallel_output(kernels::Backend& be, const TensorParallel* tp, const TensorView& res_out,
                             const TensorView& res_in, const TensorView& partial, const TensorView& seq_nc,
                             const char* what);
// The norm's d out from the column-parallel GEMMs' partial d h [N, C]: summed in place (and
// returned), or this rank's rows of the sum in seq_nc under sequence parallelism.
TensorView column_parallel_input_grad(const TensorParallel* tp, const TensorView& dh, const TensorView& seq_nc,
                                      const char* what);

}  // namespace lmt::model
