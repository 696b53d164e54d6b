// Zero3: fully sharded parameters (ZeRO-3 / FSDP) for train::DataParallel, over MPI messages.
//
// Each rank of the dp communicator keeps only its shard [cuts[r], cuts[r+1]) of the flat f32
// master parameters and of the gradients (the optimizer, created over the same shard, keeps its
// state); the model's own flat buffers are released (Transformer::release_storage()). Everything
// the model reads is gathered just in time through its set_params_needed() hook:
//
//   units      block l = [lo(l), lo(l+1)) of the flat buffer (the last block ends where the block
//              tensors end); "the ends" = [0, lo(0)) ∪ [hi, total): token/position embeddings,
//              final norm, LM head. Together they cover the buffer, alignment gaps included.
//   forward    hook(-1): the ends are gathered (MPI_Allgatherv) into an ends buffer and stay there
//              until the next update (f32: their gradients accumulate beside them over the step's
//              micro-batches: the LM head's in forward, the embeddings' after block 0's backward;
//              bf16: see below).
//              hook(l): block l is gathered into working slot l % 2 (or was prefetched there), the
//              model's views of block l are bound to it, and block l + 1 is launched into the other
//              slot (MPI_Iallgatherv) so it arrives while block l computes.
//   backward   hook(l, backward): the same, prefetching l - 1; block l's gradients are bound to a
//              one-block gradient slot (zeroed). When the model's grads-ready hook reports block l,
//              that slot is reduce-scattered (MPI_Reduce_scatter) and this rank's part added to its
//              gradient shard. finish() reduce-scatters the ends' gradients after the last backward.
//   bf16       the working slots hold bf16 only: each rank converts its part of the block and the
//              gather moves bf16 (= bf16 of the gathered f32, elementwise), which the GEMMs read;
//              the blocks' vectors (norms, biases), read in f32, are gathered once per update into
//              a compact f32 buffer (vec_) that the blocks' f32 views point into (matrices have no
//              f32 view). The rank keeps no mirror of its own (the optimizer writes none). The ends
//              keep f32 and a bf16 twin, and there a training pass reads their f32 values only in the embedding
//              lookup (the LM head reads bf16): when block 0 is bound in a training forward, the
//              f32 ends buffer becomes the ends' gradient accumulator (zeroed; the final norm's
//              values, read again in backward, stay, and its gradients get a small buffer). Those
//              gradients are reduce-scattered into the shard when the values are needed again (the
//              next micro-batch's forward, which gathers them anew) or by finish(). f32 runs keep
//              a separate ends gradient buffer, accumulated over the micro-batches and reduced once.
//   update     the optimizer updates the shard in place (shard_params()/shard_grads() are views
//              of total elements of which only [shard_begin, shard_end) may be touched);
//              invalidate() then marks every gathered copy stale.
//
// Memory (bytes; f32, W ranks, P parameters): 4·P/W params + 4·P/W grads (+ the optimizer's 8·P/W
// for AdamW) + 2 slots × 4 (bf16 runs: 2) × the largest block + 4 × the largest block (gradient slot)
// + 4 × the blocks' vectors (bf16 runs)
// + 8 × the ends in f32 runs, 4 + 2 (bf16) × the ends + 4 × the final norm in bf16 runs, and, once
// gradient accumulation needs it, a reduce-scatter scratch of this rank's largest part of a block
// (or of the ends, in bf16). Everything is allocated in create() (the scratch on the
// first accumulating micro-batch), never per step. bytes() counts it all.
//
// Errors inside the hooks (which cannot return a Status) are kept and returned by the next finish()
// or gather_full(). Collective: every method except bytes() and the views is called by every rank
// in the same order (the model's passes do that by construction).
// Ownership: references the communicator and the model (both must outlive it); the destructor
// removes the hooks. Threading: the training thread.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/dist/communicator.h"
#include "lmt/model/transformer.h"
#include "lmt/tensor/tensor.h"

namespace lmt::train {

class Zero3 {
 public:
  // `cuts`: world + 1 shard boundaries (DataParallel's). Takes this rank's shard of m.params(),
  // plans the buffers, installs the hooks and releases the model's storage. m must be prepared
  // (its compute dtype decides the bf16 slots). kUnimplemented when the layout's blocks are not
  // contiguous (nothing changed then).
  static StatusOr<std::unique_ptr<Zero3>> create(dist::Communicator& comm, model::Transformer& m,
                                                 std::vector<int64_t> cuts);
  ~Zero3();

  void zero_grads();         // the gradient shard and the ends' gradients
  Status finish();           // after the last backward: ends' reduce-scatter; returns kept errors
  double grad_sum_squares(kernels::Backend& b) const;  // of this rank's gradient shard
  TensorView shard_params() const;  // f32[total] view; only [shard_begin, shard_end) is memory
  TensorView shard_grads() const;
  void invalidate();         // the shard changed (update, load): gathered copies are stale
  // Collective: full[total] = the whole parameter buffer, on every rank.
  Status gather_full(float* full);
  // This rank's slice of full[total] into its shard.
  void load_full(const float* full);
  int64_t bytes() const;     // every buffer above
  // Seconds this rank spent in gathers (waiting on them) and reduce-scatters since the last call
  // (inside forward and backward, so already part of their times).
  double take_comm_seconds() {
    const double s = comm_seconds_;
    comm_seconds_ = 0;
    return s;
  }
  int64_t shard_bytes() const { return static_cast<int64_t>(pshard_.bytes() + gshard_.bytes()); }  // params + grads shards

 private:
  struct Range {
    int64_t begin, end;
    std::vector<int64_t> counts;  // per rank: its part of [begin, end)
    int64_t own_at = 0;           // where this rank's part starts, relative to begin
  };
  Zero3(dist::Communicator& comm, model::Transformer& m, std::vector<int64_t> cuts);
  Range range(int64_t begin, int64_t end) const;
  void on_params_needed(int64_t layer, bool backward);
  void on_grads_ready(int64_t layer);
  void ensure_ends();
  void begin_ends_grads();
  void reduce_ends();
  void reduce_scatter_ends(const float* g);
  float* scratch(int64_t n);  // rs_, grown to n floats on first need
  void ensure_vectors();
  void launch(int slot, int64_t layer);  // copy own part, start the gather
  void wait(int slot);                   // finish the gather, convert to bf16
  void keep(Status s);
  float* shard_at(float* shard, int64_t flat) const { return shard + (flat - cuts_[comm_.rank()]); }

  dist::Communicator& comm_;
  model::Transformer& m_;
  std::vector<int64_t> cuts_;
  bool bf16_ = false;
  std::vector<Range> blocks_;             // per layer
  Range ends_lo_{0, 0, {}, 0}, ends_hi_{0, 0, {}, 0};
  Tensor pshard_, gshard_;                // this rank's f32 parameters and gradients
  Tensor slot_p_[2], slot_c_[2], gslot_;  // working blocks (f32 runs: f32; bf16 runs: bf16), gradient slot
  Tensor ends_p_, ends_c_, ends_g_;       // the ends, gathered; their gradients (absent when aliased)
  Tensor norm_g_;                         // aliased: the final norm's gradients
  bool alias_ends_ = false;               // bf16: the ends' gradients reuse ends_p_ (see the top)
  std::vector<std::pair<int64_t, int64_t>> kept_;  // aliased: the final norm's (offset, numel) in ends_p_
  Tensor rs_;                             // reduce-scatter scratch (created on first accumulation)
  struct VecParam {
    int64_t offset, numel, compact;  // a block vector's flat range, and where it sits in vec_
  };
  std::vector<VecParam> vec_params_;      // bf16: every block's vectors (norms, biases), by offset
  Tensor vec_;                            // ... their f32 values, compact (gathered once per update)
  std::vector<int64_t> vec_counts_;       // ... per rank: its elements of them
  bool vec_fresh_ = false;
  std::vector<model::BlockViews> vw_, vc_, vg_;  // per layer: views into its slot / the grad slot
  model::ModelViews ew_, ec_, eg_;        // the ends' views
  int64_t slot_layer_[2] = {-1, -1};
  bool slot_ready_[2] = {false, false};
  std::unique_ptr<dist::Request> slot_req_[2];
  enum class Ends { kStale, kParams, kGrads };  // what ends_p_ holds
  Ends ends_ = Ends::kStale;
  bool ends_c_fresh_ = false;             // ends_c_ = bf16(the current parameters)
  bool ends_reduced_ = false;             // aliased: the ends reduced into gshard_ since zero_grads()
  std::vector<bool> reduced_;             // block reduced into gshard_ since zero_grads()
  Status error_ = Status::Ok();
  double comm_seconds_ = 0;
};

}  // namespace lmt::train
