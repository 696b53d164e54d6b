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
//   forward    hook(l): block l is gathered into working slot l % 2 (or was prefetched there), the
//              model's views of block l are bound to it, and the next unit is launched into the
//              other slot (MPI_Iallgatherv) so it arrives while block l computes.
//   backward   hook(l, backward): the same, prefetching l - 1; block l's gradients are bound to a
//              one-block gradient slot (zeroed). When the model's grads-ready hook reports block l,
//              that slot is reduce-scattered (MPI_Reduce_scatter) and this rank's part added to its
//              gradient shard.
//   bf16       the working slots hold bf16 only: each rank converts its part of a unit and the
//              gather moves bf16 (= bf16 of the gathered f32, elementwise), which the GEMMs read;
//              the blocks' vectors (norms, biases), read in f32, are gathered once per update into
//              a compact f32 buffer (vec_) that the blocks' f32 views point into (matrices have no
//              f32 view). The rank keeps no mirror of its own (the optimizer writes none).
//   update     the optimizer updates the shard in place (shard_params()/shard_grads() are views
//              of total elements of which only [shard_begin, shard_end) may be touched);
//              invalidate() then marks every gathered copy stale.
//
// The ends, two ways (`vocab_rows` of create()):
//   streamed   (several ranks, by default) the vocabulary tensors (token embedding, LM head) are
//              never gathered whole: this class is the model's StreamedVocab (model/streamed_vocab.h).
//              The LM head runs over chunks of R rows (units L … L+K-1, gathered into the working
//              slots like blocks, R·C <= a block by default), each chunk's weight gradient written
//              into the gradient slot and reduce-scattered into the shard like a block's. The
//              embedding lookup exchanges rows: every rank learns the others' token ids, fills the
//              rows it owns (-0.0 elsewhere, the exact identity of a sum) and a reduce-scatter hands
//              each rank its tokens' f32 rows; backward all-gathers the rows' gradients and each
//              rank adds the ones it owns. The other ends (position embedding, final norm) sit in
//              a compact f32 buffer gathered once per update, their gradients in a compact buffer
//              reduce-scattered by finish().
//   whole      (one process by default, or vocab_rows = -1) hook(-1) gathers the ends
//              (MPI_Allgatherv) into an ends buffer that stays until the next update; f32 runs
//              accumulate their gradients beside them over the step's micro-batches (the LM head's
//              in forward, the embeddings' after block 0's backward) and finish() reduce-scatters
//              them. bf16 runs keep f32 and a bf16 twin, and there a training pass reads the f32
//              values only in the embedding lookup (the LM head reads bf16): when block 0 is bound
//              in a training forward, the f32 ends buffer becomes the ends' gradient accumulator
//              (zeroed; the final norm's values, read again in backward, stay, and its gradients
//              get a small buffer). Those gradients are reduce-scattered into the shard when the
//              values are needed again (the next micro-batch's forward, which gathers them anew)
//              or by finish(). One process equals ZeRO 0 bit for bit this way.
//
// Memory (bytes; f32, W ranks, P parameters): 4·P/W params + 4·P/W grads (+ the optimizer's 8·P/W
// for AdamW) + 2 slots × 4 (bf16 runs: 2) × the largest unit + 4 × the largest unit (gradient slot)
// + 4 × the blocks' vectors (bf16 runs); streamed: + 8 × the ends beside the vocabulary + 4·W
// bytes per token of a micro-batch (their ids); whole: + 8 × the ends in f32 runs, 4 + 2 (bf16) ×
// the ends + 4 × the final norm in bf16 runs. Once gradient accumulation needs it, a reduce-scatter
// scratch of this rank's largest part of a unit (or of the ends). Everything is allocated in create()
// (the scratch and the ids on first need), never per step. bytes() counts it all.
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
#include "lmt/model/streamed_vocab.h"
#include "lmt/model/transformer.h"
#include "lmt/tensor/tensor.h"

namespace lmt::train {

class Zero3 final : public model::StreamedVocab {
 public:
  // `cuts`: world + 1 shard boundaries (DataParallel's). Takes this rank's shard of m.params(),
  // plans the buffers, installs the hooks and releases the model's storage. m must be prepared
  // (its compute dtype decides the bf16 slots). vocab_rows: the ends streamed in chunks of that
  // many vocabulary rows (> 0), whole (-1), or 0: streamed with chunks of one block's size when
  // the communicator has several ranks, whole in one process. kUnimplemented when the layout's
  // blocks are not contiguous or the model lives on a device (nothing changed then).
  static StatusOr<std::unique_ptr<Zero3>> create(dist::Communicator& comm, model::Transformer& m,
                                                 std::vector<int64_t> cuts, int64_t vocab_rows = 0);
  ~Zero3() override;
  // Ok where ZeRO-3 can run on `backend`: its shards, gathers and copies work in host memory, so a
  // device backend is kUnimplemented (the trainer asks before it writes anything).
  static Status supports(const kernels::Backend& backend);
  bool streamed() const { return stream_; }

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

  // model::StreamedVocab (streamed ends; zero3_vocab.cpp).
  int64_t head_chunk_rows() const override { return chunk_rows_; }
  void embed(const TensorView& out, const TensorView& ids) override;
  TensorView head_rows(int64_t chunk, int64_t next) override;
  TensorView head_grad(int64_t chunk) override;
  void head_grad_ready(int64_t chunk) override;
  void embed_backward(const TensorView& dout, const TensorView& ids) override;

 private:
  struct Range {
    int64_t begin, end;
    std::vector<int64_t> counts;  // per rank: its part of [begin, end)
    int64_t own_at = 0;           // where this rank's part starts, relative to begin
  };
  // Flat ranges kept back to back in flat order (the blocks' vectors; the ends beside the
  // vocabulary): rank k's elements of them are one contiguous run of counts[k].
  struct Compact {
    struct Part {
      int64_t offset, numel, at;  // a tensor's flat range, and where it sits in the compact buffer
    };
    std::vector<Part> parts;      // by offset
    std::vector<int64_t> counts;  // per rank
    int64_t n = 0;
    void plan(std::vector<Part> p, const std::vector<int64_t>& cuts);
    // v: a view at `flat_base` + its flat offset, inside one part: the same view in `compact`.
    TensorView remap(const TensorView& v, const float* flat_base, float* compact) const;
  };
  Zero3(dist::Communicator& comm, model::Transformer& m, std::vector<int64_t> cuts);
  Range range(int64_t begin, int64_t end) const;
  void plan_streamed(const model::ParamLayout& layout, int64_t vocab_rows, int64_t max_block);
  void plan_whole_ends(const model::ParamLayout& layout, int64_t lo0, int64_t hi);
  void on_params_needed(int64_t layer, bool backward);
  void on_grads_ready(int64_t layer) { reduce_unit(layer); }
  void use_unit(int64_t unit);      // unit resident in slot unit % 2 (gathered or waited for)
  void prefetch(int64_t unit);      // launched into slot unit % 2 unless it is there already
  void reduce_unit(int64_t unit);   // the gradient slot's unit reduce-scattered into the shard
  void ensure_ends();
  void begin_ends_grads();
  void reduce_ends();
  void reduce_scatter_ends(const float* g);
  float* scratch(int64_t n);  // rs_, grown to n floats on first need
  void gather_compact(const Compact& c, Tensor& buf);        // every rank's parts into buf
  void reduce_compact(const Compact& c, const Tensor& grads);  // summed; own parts added to the shard
  void ensure_vectors();
  void exchange_ids(const TensorView& ids);  // every rank's token ids into ids_
  void launch(int slot, int64_t unit);   // copy own part, start the gather
  void wait(int slot);                   // finish the gather
  void keep(Status s);
  float* shard_at(float* shard, int64_t flat) const { return shard + (flat - cuts_[comm_.rank()]); }
  void* slot_data(int s) const { return bf16_ ? slot_c_[s].view().data() : slot_p_[s].view().data(); }

  dist::Communicator& comm_;
  model::Transformer& m_;
  std::vector<int64_t> cuts_;
  bool bf16_ = false;
  int64_t L_ = 0;                         // blocks
  std::vector<Range> units_;              // blocks [0, L), then (streamed) the LM head's chunks
  Range ends_lo_{0, 0, {}, 0}, ends_hi_{0, 0, {}, 0};
  Tensor pshard_, gshard_;                // this rank's f32 parameters and gradients
  Tensor slot_p_[2], slot_c_[2], gslot_;  // working units (f32 runs: f32; bf16 runs: bf16), gradient slot
  // Streamed ends.
  bool stream_ = false;
  int64_t chunk_rows_ = 0, C_ = 0, V_ = 0;
  int64_t embed_at_ = 0;                  // the token embedding's flat offset
  Compact small_;                         // the ends beside the vocabulary tensors
  Tensor small_p_, small_g_;              // ... their values (gathered once per update), gradients
  bool small_fresh_ = false;
  Tensor ids_;                            // i32 [W, N]: every rank's tokens of the current pass
  // Whole ends.
  Tensor ends_p_, ends_c_, ends_g_;       // the ends, gathered; their gradients (absent when aliased)
  Tensor norm_g_;                         // aliased: the final norm's gradients
  bool alias_ends_ = false;               // bf16: the ends' gradients reuse ends_p_ (see the top)
  std::vector<std::pair<int64_t, int64_t>> kept_;  // aliased: the final norm's (offset, numel) in ends_p_
  Tensor rs_;                             // reduce-scatter scratch (created on first need)
  int64_t rs_most_ = 1;                   // ... for any unit of this rank
  Compact vec_plan_;                      // bf16: every block's vectors (norms, biases)
  Tensor vec_;                            // ... their f32 values, compact (gathered once per update)
  bool vec_fresh_ = false;
  std::vector<model::BlockViews> vw_, vc_, vg_;  // per layer: views into its slot / the grad slot
  model::ModelViews ew_, ec_, eg_;        // the ends' views
  int64_t slot_layer_[2] = {-1, -1};      // the unit each slot holds (or is receiving)
  std::unique_ptr<dist::Request> slot_req_[2];
  enum class Ends { kStale, kParams, kGrads };  // whole ends: what ends_p_ holds
  Ends ends_ = Ends::kStale;
  bool ends_c_fresh_ = false;             // ends_c_ = bf16(the current parameters)
  bool ends_reduced_ = false;             // aliased: the ends reduced into gshard_ since zero_grads()
  std::vector<bool> reduced_;             // unit reduced into gshard_ since zero_grads()
  Status error_ = Status::Ok();
  double comm_seconds_ = 0;
};

}  // namespace lmt::train
