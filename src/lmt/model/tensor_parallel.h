// Tensor parallelism (Megatron-LM style) at the model level: what one rank of a tensor-parallel
// group of size P holds and computes, and how its parameters map to the full model's.
//
// Split (rank r of P; the heads and the FFN hidden units are split into P contiguous parts):
//   column-parallel  q, k, v projections (and their biases): query heads [r·NH/P, (r+1)·NH/P) and
//                    KV heads [r·G/P, (r+1)·G/P), so GQA groups stay whole on one rank;
//                    gate|up (GLU) or up (MLP) and its bias: hidden units [r·H/P, (r+1)·H/P) of
//                    gate and of up;
//   row-parallel     o ([C, NH·HD] columns of rank r's heads) and down ([C, H] columns of its units);
//   vocabulary       the token embedding and the LM head (tied or not): rows [r·Vp/P, (r+1)·Vp/P) of
//                    the padded vocabulary Vp. The embedding sums each token's row (from the one rank
//                    that holds it, zeros elsewhere) over the group; the cross-entropy combines the
//                    ranks' log-sum-exp and target logits per row (CrossEntropyOptions::combine), so no
//                    rank holds more than B·T × Vp/P logits, and d h of the head is summed over the group;
//   replicated       the position embedding, every norm (QK-norm per head included), the biases of o
//                    and down.
// A rank's part is therefore a smaller model: shard_config() has NH/P heads, G/P KV heads, H/P
// hidden units and a vocabulary of Vp/P rows, and its ParamLayout is the rank's flat buffer. The blocks then
// add the two reductions of Megatron's f/g operators (attention_block.h, ffn_block.h):
//   forward   after o and after down: the partial outputs [N,C] are summed over the group (the
//             replicated bias is added by rank 0 only, before the sum), then added to the residual;
//   backward  after the q|k|v and the up projections' input gradients: d h [N,C] is summed over
//             the group before the norm's backward.
// The residual stream and the norms are computed redundantly and stay bit-identical on every rank of
// the group, so the replicated tensors' gradients need no reduction over it.
//
// MoE layers (moe_block.h): each routed expert and the shared experts are split like the dense FFN
// (hidden units [r·He/P, (r+1)·He/P) of every expert: moe.expert_ffn / P); the router is
// replicated, so the routing is computed redundantly and is identical on every rank. The MoE block
// sums the expert outputs over the group like down's, and the routing weights' gradient too.
// Not split here (refused by shard_config, naming the feature): qk_norm_full (its norm spans every
// head of a row).
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/model/config.h"
#include "lmt/model/params.h"
#include "lmt/tensor/tensor_view.h"

namespace lmt::model {

// A rank's place in its tensor-parallel group and the group's collectives. size 1 (the default):
// none.
struct TensorParallel {
  int rank = 0, size = 1;
  // Sums `x` (f32 or f64, contiguous; in the model's backend memory or on the host) over the group
  // in place; every rank of the group calls it in the same order with the same shape.
  std::function<Status(const TensorView& x)> all_reduce;
  // all[size, n] f32 (the backend's memory or host): row `rank` holds this rank's values; afterwards
  // every row holds that rank's. Same calling rules.
  std::function<Status(const TensorView& all)> all_gather;
  int64_t vocab_size = 0;  // the whole model's vocabulary (a part holds padded_vocab() / size rows of it)
  // Sequence parallelism (parallel.sp): the residual stream between the sub-blocks holds only this
  // rank's n = N/size rows, rows [rank·n, (rank+1)·n) of the N = B·T rows. The norms run on those
  // rows; a sub-block all-gathers its norm output before the column-parallel GEMMs and
  // reduce-scatters the row-parallel output instead of summing it (backward: the reverse). The
  // model plans its activations for it (RunOptions::sequence_shards = size).
  bool sequence_parallel = false;
  // part[n, ...] = rows [rank·n, (rank+1)·n) of the sum over the group of full[N, ...] (f32, the
  // backend's memory).
  std::function<Status(const TensorView& full, const TensorView& part)> reduce_scatter;
  bool enabled() const { return size > 1; }
};

// Ok when the blocks of `full` can be split tp ways at all: Unimplemented for qk_norm_full when
// tp > 1 (divisibility is shard_config's and the recipe's check).
Status tensor_parallel_supported(const ModelConfig& full, int tp);

// Rank `rank`'s vocabulary rows: global ids [begin, begin + rows) of which the first `real` are
// real tokens (the rest padding of the whole vocabulary).
struct VocabSlice {
  int64_t begin = 0, rows = 0, real = 0;
};
VocabSlice vocab_slice(const ModelConfig& full, int tp, int rank);

// The model of one rank of a tensor-parallel group of `tp`: `full` with n_heads, n_kv_heads and
// ffn_hidden divided by tp and vocab_size = padded_vocab() / tp (vocab_pad_to 1: a part has no
// padding of its own; named "<name>/tp<tp>"; a gpt2-family config takes the llama family's
// parameter names, since gpt2's n_heads·head_dim = d_model does not hold for a part). tp = 1 returns
// `full`. InvalidArgument when tp does not divide them (or the last rank's rows would all be
// padding); Unimplemented for qk_norm_full. MoE models also get moe.expert_ffn / tp (ffn_hidden is
// divided only when some layer is dense).
StatusOr<ModelConfig> shard_config(const ModelConfig& full, int tp);

// [begin, end) element ranges of `part` (a layout of a shard_config(), whole depth or a pipeline
// stage of it) that hold tensors tensor parallelism replicates, sorted.
std::vector<std::pair<int64_t, int64_t>> tensor_parallel_replicated_ranges(const ParamLayout& part);

// Copies between the full model's flat f32 buffers (ParamLayout(full)) and one rank's (the shard
// config's layout), for parameters and any per-parameter state (optimizer moments, gradients).
class TensorParallelMap {
 public:
  // `full` must be valid and shardable by tp (shard_config() ok; checked).
  TensorParallelMap(const ModelConfig& full, int tp);

  int size() const { return tp_; }
  const ParamLayout& full_layout() const { return full_; }
  const ParamLayout& shard_layout() const { return shard_; }

  // shard[shard_layout().total_numel()] = rank's part of full[full_layout().total_numel()]
  // (alignment gaps are zeroed).
  void take_shard(int rank, const float* full, float* shard) const;
  // Writes rank's part of `full` from `shard`: its slices of the split tensors and, when
  // `replicated` is true, the replicated tensors too. After put_shard for every rank (replicated
  // from one of them), `full` holds the whole model.
  void put_shard(int rank, const float* shard, float* full, bool replicated) const;
  // The whole model from every rank's shard laid end to end (shards[r · shard numel ...]), as an
  // all-gather over the group leaves them; replicated tensors from rank 0's.
  void assemble(const float* shards, float* full) const;

  // [begin, end) element ranges of the shard buffer that hold replicated tensors (the same values on
  // every rank of the group), sorted. A global gradient norm counts them once over the group.
  const std::vector<std::pair<int64_t, int64_t>>& replicated_ranges() const { return replicated_; }

 private:
  // to_full: shard -> full, else full -> shard.
  void copy(int rank, float* full, float* shard, bool to_full, bool replicated) const;

  int tp_;
  ParamLayout full_, shard_;
  std::vector<std::pair<int64_t, int64_t>> replicated_;
};

}  // namespace lmt::model
