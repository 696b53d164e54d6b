// The activation plan: every tensor forward and backward touch, carved from one Arena up front.
//
// The plan is a pure function of (config, B, T, RunOptions); building it on a measuring arena
// (Arena::Measuring) yields the exact bytes a real arena needs, before anything is allocated.
// Nothing is allocated during a step.
//
// Without recompute each block keeps its own BlockActs (what backward needs). With recompute
// (activation checkpointing per block) only the residual stream between blocks is kept and one
// shared BlockActs is reused: forward uses it as scratch, backward recomputes a block into it.
//
// "f32" below means the activation dtype (f64 in an f64 run).
// In bf16 mode the GEMM inputs (normed activations, attention output, FFN activation) are kept in
// bf16 only; their f32 originals live in shared scratch for the moment they are needed.
#pragma once

#include <vector>

#include "lmt/base/limits.h"
#include "lmt/model/attention_block.h"
#include "lmt/model/config.h"
#include "lmt/model/ffn_block.h"
#include "lmt/model/moe_block.h"
#include "lmt/tensor/arena.h"

namespace lmt::model {

// kAuto takes flash where the backend has a flash kernel and falls back to naive otherwise, saying
// so in one log line.
enum class AttentionChoice : uint8_t { kAuto, kFlash, kNaive };

struct RunOptions {
  // GEMM input dtype: kBF16 (mixed precision), kF32, or kF64 (ref backend only: gradient checks).
  DType compute = DType::kBF16;
  AttentionChoice attention = AttentionChoice::kAuto;
  bool recompute = false;        // activation checkpointing per block
  float z_loss = 0.0f;
  int64_t lm_head_chunk = 256;   // rows of logits materialised at a time
  // Expert-parallel group size the MoE activations are planned for (model/moe_block.h; 1: none).
  // Transformer::set_expert_parallel() must then bind a group of this size.
  int ep = 1;
  // Sequence parallelism (model/tensor_parallel.h): the residual stream, its norms' statistics and
  // its gradient hold B·T / sequence_shards rows (this rank's); 1: all rows. B·T must divide by it,
  // and Transformer::set_tensor_parallel() must bind a sequence-parallel group of this size.
  int sequence_shards = 1;
};

// Float dtype of activations and gradients: f64 for an f64 run, else f32.
inline DType activation_dtype(DType compute) { return compute == DType::kF64 ? DType::kF64 : DType::kF32; }

// One block's saved activations (what backward needs): the attention sub-block's, the residual
// between the sub-blocks, and the FFN sub-block's. N = B·T rows.
struct BlockActs {
  AttentionActs attn;   // model/attention_block.h
  TensorView res_mid;   // [N,C] residual after attention
  FfnActs ffn;          // model/ffn_block.h (dense layers; absent views in an MoE layer's entry)
  MoeActs moe;          // model/moe_block.h (MoE layers; with recompute the shared entry has both
                        // kinds when the model has both)
};

// Shared scratch for forward and backward (one of each, whatever the depth).
struct Scratch {
  TensorView f32_nc;        // [N,C] f32: a norm output before conversion, or a projection output
  TensorView dres;          // [n,C] gradient of the residual stream (n = N / sequence_shards rows)
  TensorView dh;            // [N,C] gradient of a norm output
  TensorView da;            // [N,H]
  TensorView du;            // [N,U] (fp32/f64 runs only; bf16 runs write d u into grad_c)
  TensorView datt;          // [B,T,NH,HD]
  TensorView dq, dk, dv;    // gradients of q, k, v
  TensorView dq_pre, dk_pre;  // QK-norm input gradients (qk_norm only)
  TensorView grad_c;        // [N, max(C,U,NH·HD)] (and the MoE widths) bf16 copy of a gradient fed to a GEMM (bf16 mode)
  TensorView final_mean, final_rstd;  // [n]
  TensorView seq_nc;        // [n,C] f32 (sequence parallelism only): a norm output of this rank's rows, a reduce-scatter's result
  TensorView dres_full;     // [N,C] f32 (sequence parallelism only): every rank's dres gathered
  TensorView final_h;       // [N,C] final norm output, compute dtype
  TensorView dfinal;        // [N,C] f32 gradient of the final norm output (from the LM head)
  TensorView losses;        // [N] per-token loss
  TensorView positions;     // [N] i32 position of each token (t within its row)
  MoeScratch moe;           // MoE layers' backward scratch (model/moe_block.h; absent without MoE)
};

struct ActivationPlan {
  int64_t B = 0, T = 0;
  RunOptions options;
  kernels::AttentionBackend attention = kernels::AttentionBackend::kFlash;  // options.attention resolved
  std::vector<TensorView> residual;  // L+1 tensors [n,C]: input of block l, and the final output (n = N / sequence_shards)
  std::vector<BlockActs> blocks;     // L entries, or 1 shared entry with recompute
  Scratch scratch;

  BlockActs& block(int64_t layer) { return blocks.size() == 1 ? blocks[0] : blocks[layer]; }
};

// Carves the plan from `arena` (a real or a measuring one).
ActivationPlan plan_activations(const ModelConfig& c, int64_t B, int64_t T, const RunOptions& o, Arena& arena);

// Exact arena bytes plan_activations needs. B·T must be sane (activation_memory_check first).
size_t activation_bytes(const ModelConfig& c, int64_t B, int64_t T, const RunOptions& o);

// OK when the activation arena of (B, T) plus `other_bytes` (parameters, optimizer state, caches)
// fits in the target's memory (base/limits.h: this machine's, or a device's); otherwise an error
// naming `what` (the values that chose B and T, e.g. "train.micro_batch = 8, train.seq_len = 1024")
// with `hint`. Safe for any B, T >= 1 of a valid config: a cheap lower bound refuses absurd sizes
// before the exact plan (whose size arithmetic could otherwise overflow) is measured.
Status activation_memory_check(const ModelConfig& c, int64_t B, int64_t T, const RunOptions& o, double other_bytes,
                               const std::string& what, const std::string& hint, const MemoryTarget& target = {});

}  // namespace lmt::model
