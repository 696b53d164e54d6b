// DataParallel: gradient reduction and ZeRO-1/2 sharding over a Communicator: the data-parallel
// group of the dist::Topology (today the whole world). rank() and world() are the dp rank and size.
// The model never calls it; the StepEngine (step_engine.h) drives it once per step, the Trainer
// sets it up and uses it for checkpoints:
//
//   use_shared_memory(model)  once, collectively, after prepare(): when every rank runs on one node,
//                     moves the model's params, grads and bf16 mirror into symmetric memory
//                     (dist/symmetric_buffer.h). Reductions and gathers then read the peers' buffers
//                     directly, one pass over the data; nothing is left to overlap with backward,
//                     so arm() installs no hook. Otherwise (ranks on several nodes, or never
//                     called) the collectives below are the communicator's message passing.
//
// Then once per optimizer step:
//
//   arm(model)        before the last micro-batch's backward: installs the model's
//                     set_block_grads_ready() hook, which launches non-blocking all-reduces of
//                     buckets of finished blocks (about bucket_bytes each) while backward continues
//                     (ZeRO 0/1; ZeRO-2 reduce-scatters after backward, unbucketed).
//   finish(model, full_grads)  after backward: reduces what is left, waits for every bucket,
//                     removes the hook. Afterwards grads hold the sum over ranks (the StepEngine
//                     scales each rank's loss by 1/(accum · world), so the sum is the mean): all of them
//                     (ZeRO 0; ZeRO 1 over MPI messages; ZeRO 1 with full_grads), or only
//                     [shard_begin, shard_end), the rest stale (ZeRO 2; ZeRO 1 over shared memory,
//                     where a reduce-scatter is all the sharded update needs, half the work of an
//                     all-reduce). grads_sharded() tells which.
//   grad_norm()       the global norm, the same on every rank.
//   after_update()    ZeRO 1/2: all-gathers the parameter shards and the bf16 mirror's (shared
//                     memory), or the parameters then refreshes the mirror (message passing).
//
// ZeRO 3 (zero3.h): shard_parameters(model) once after prepare() shards the parameters and
// gradients too and releases the model's flat buffers; blocks are gathered just in time through the
// model's hooks. Then zero_grads(), update_params()/update_grads()/update_mirror() (what the
// optimizer updates), gather_params()/load_params() (checkpoints) replace the model's buffers.
// Over MPI messages only (use_shared_memory() leaves a ZeRO-3 plan alone). With one process it
// runs the same machinery over the whole buffer.
//
// Shards: balanced_cuts(optim config, layout, world); rank r updates [cuts[r], cuts[r+1]) and owns
// optimizer state only for it (ZeRO 1/2). ZeRO-2 on CPU saves no memory yet: backward writes
// the full flat grad buffer; only the reduction result is sharded (docs/DIST.md).
// Checkpoints stay world-size independent: gather_state() assembles full optimizer state buffers
// (collective: every rank calls it), load_state_slice() copies a full buffer's slice into a shard.
//
// Ownership: references the communicator (must outlive it); under ZeRO 3 also the model, whose
// hooks it removes when destroyed (destroy it before the model). Threading: the Trainer's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lmt/dist/communicator.h"
#include "lmt/model/transformer.h"
#include "lmt/optim/optimizer.h"
#include "lmt/tensor/tensor.h"
#include "lmt/train/zero3.h"

namespace lmt::train {

class DataParallel {
 public:
  ~DataParallel();
  DataParallel(dist::Communicator& comm, const model::ParamLayout& layout, const optim::OptimizerConfig& oc, int zero,
               int64_t bucket_bytes);

  int rank() const { return comm_.rank(); }
  int world() const { return comm_.world(); }
  int zero() const { return zero_; }
  bool sharded() const { return zero_ > 0 && world() > 1; }
  int64_t shard_begin() const { return cuts_[rank()]; }
  int64_t shard_end() const { return cuts_[rank() + 1]; }
  dist::Communicator& comm() { return comm_; }

  // Model parallelism (tensor: model/tensor_parallel.h; pipeline: model/pipeline_split.h): the
  // model is this rank's part of a larger one, split over `group`. grad_norm() then sums over that
  // group too, counting the `replicated` element ranges of the flat buffer (sorted; the same values
  // on every rank of the group) on the group's rank 0 only. One call per group (tensor, pipeline).
  // Not with ZeRO 3 (the Trainer refuses it). Borrows `group`.
  void add_model_parallel_group(dist::Communicator& group, std::vector<std::pair<int64_t, int64_t>> replicated);

  // The ranks that see different data, when more than this group (sharded experts,
  // expert_shard_plan.h: this group is then the edp group and `all` every data-parallel rank).
  // mean() averages over them and data_world() counts them (the StepEngine's loss scale). Borrows.
  void set_data_group(dist::Communicator& all) { data_ = &all; }
  int data_world() const { return data_ != nullptr ? data_->world() : world(); }

  // Collective. Ok and no change when the ranks span several nodes (logged) or world is 1.
  Status use_shared_memory(model::Transformer& m);
  bool shared_memory() const { return grads_buf_ != nullptr; }

  // ZeRO 3: collective; after m.prepare(). No-op for other stages. vocab_rows: Zero3::create's (the
  // token embedding and LM head streamed in chunks of that many rows; 0 automatic, -1 whole).
  Status shard_parameters(model::Transformer& m, int64_t vocab_rows = 0);
  bool zero3() const { return z3_ != nullptr; }
  bool zero3_streamed() const { return z3_ != nullptr && z3_->streamed(); }  // the vocabulary in chunks
  // ZeRO 3: seconds in gathers and reduce-scatters since the last call (0 otherwise).
  double take_zero3_comm_seconds() { return z3_ ? z3_->take_comm_seconds() : 0.0; }
  // Zeroes the gradients the plan accumulates into (the model's, and the ZeRO-3 shard);
  // defer_block_matrices as model::Transformer::zero_grads.
  void zero_grads(model::Transformer& m, bool defer_block_matrices = false);
  // What the optimizer updates: the model's flat buffers, or under ZeRO 3 views of total elements
  // of which only [shard_begin, shard_end) is memory (and no mirror: the gathers convert).
  TensorView update_params(model::Transformer& m) const;
  TensorView update_grads(model::Transformer& m) const;
  TensorView update_mirror(model::Transformer& m) const;
  // Collective: the full f32 parameters into full[total] on every rank (ZeRO 3: gathered).
  Status gather_params(model::Transformer& m, float* full);
  // Full parameters into the model (or this rank's ZeRO-3 shard of them), mirror refreshed.
  void load_params(model::Transformer& m, const float* full);
  // Bytes of model state this rank holds, counted from the allocated buffers: parameters and
  // gradients (the model's, or ZeRO-3's shards), bf16 mirror, optimizer state and ZeRO-3's gather
  // buffers (working slots, gradient slot, the ends).
  struct StateMemory {
    int64_t params_grads = 0, mirror = 0, optimizer_state = 0, gather_buffers = 0;
    int64_t total() const { return params_grads + mirror + optimizer_state + gather_buffers; }
  };
  StateMemory model_state_memory(const model::Transformer& m, optim::Optimizer& o) const;
  int64_t model_state_bytes(const model::Transformer& m, optim::Optimizer& o) const { return model_state_memory(m, o).total(); }

  void arm(model::Transformer& m);
  Status finish(model::Transformer& m, bool full_grads = false);
  bool grads_sharded() const { return grads_sharded_; }
  StatusOr<double> grad_norm(model::Transformer& m);
  Status after_update(model::Transformer& m);
  // Mean of `v` over the data-parallel ranks (set_data_group()'s, else this group's).
  StatusOr<double> mean(double v);

  // Full-size copies of the optimizer's (possibly sharded) state, named as state() names them.
  StatusOr<std::vector<std::pair<std::string, Tensor>>> gather_state(optim::Optimizer& o);
  // Full-size zeroed buffers matching state() names (to load a checkpoint into).
  std::vector<std::pair<std::string, Tensor>> full_state_buffers(optim::Optimizer& o) const;
  // Copies this rank's slice of `full` into the optimizer's state.
  void load_state_slice(optim::Optimizer& o, const std::vector<std::pair<std::string, Tensor>>& full) const;

 private:
  void on_block_ready(model::Transformer& m, int64_t layer);
  std::vector<int64_t> shard_counts() const;  // cuts_[r + 1] - cuts_[r] per rank
  Status launch(float* grads, int64_t begin, int64_t end);

  dist::Communicator& comm_;
  dist::Communicator* data_ = nullptr;  // set_data_group()
  int zero_;
  int64_t total_, bucket_elems_;
  std::vector<int64_t> cuts_;                        // world + 1 legal cut points
  std::vector<int64_t> layer_lo_, layer_hi_;         // extent of each block's tensors in the flat buffer
  bool bucketing_ = false;                           // blocks are contiguous and buckets enabled
  int64_t pending_lo_ = 0, pending_hi_ = 0;          // finished, not yet launched: [lo, hi)
  int64_t launched_lo_ = 0;                          // [launched_lo_, blocks_hi) is in flight
  std::vector<std::unique_ptr<dist::Request>> inflight_;
  Tensor rs_scratch_;                                // ZeRO-2 reduce-scatter result (shard size)
  bool grads_sharded_ = false;                       // the last finish() reduced only this shard
  // Symmetric buffers holding the model's storage (use_shared_memory()); the model's Tensors share them.
  std::shared_ptr<dist::SymmetricBuffer> params_buf_, grads_buf_, mirror_buf_;
  std::unique_ptr<Zero3> z3_;  // ZeRO 3 (shard_parameters())
  // Model-parallel groups grad_norm() also sums over, and the ranges (sorted) this rank leaves to
  // another rank of one of them (their rank 0 counts the replicated ranges).
  std::vector<dist::Communicator*> mp_groups_;
  std::vector<std::pair<int64_t, int64_t>> mp_skip_;
  // Sum of squares of grads [lo, hi), without mp_skip_.
  double counted_sum_squares(model::Transformer& m, int64_t lo, int64_t hi) const;
};

}  // namespace lmt::train
