// Transformer: parameters, gradients and the forward/backward passes of any ModelConfig.
//
// Memory: every buffer (flat params, grads, mirror, the activation arena) comes from the backend's
// allocator(), so the model lives where its backend computes (host for cpu/ref, a GPU for cuda). The
// batch arrays given to forward()/logits() are host memory; they are copied to the device there.
//
// Storage: one flat master buffer (f32; f64 for gradient checks) laid out by ParamLayout, one
// gradient buffer of the same dtype, and in bf16 mode one bf16 mirror of the master weights that
// GEMMs read (refresh_compute_weights() after every update). Norm weights and biases are always
// read from the master buffer.
//
// A training step: prepare(B, T, options) once; then per micro-batch forward(..., train=true)
// followed by backward(). forward computes the LM head's gradients in the same pass as its loss
// (the logits are never recomputed), so backward() must follow a training forward.
// Gradients accumulate into grads(); zero_grads() between optimizer steps.
//
// The model never talks to other processes: a data-parallel wrapper reduces grads() (a flat
// buffer), optionally block by block via set_block_grads_ready().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "lmt/kernels/backend.h"
#include "lmt/model/activations.h"
#include "lmt/model/config.h"
#include "lmt/model/params.h"
#include "lmt/model/streamed_head.h"
#include "lmt/model/streamed_vocab.h"
#include "lmt/model/tensor_parallel.h"
#include "lmt/tensor/arena.h"
#include "lmt/tensor/tensor.h"

namespace lmt::model {

// What RunOptions::attention means on `backend` (kAuto: flash if it has one; logs a fallback).
kernels::AttentionBackend resolve_attention(AttentionChoice choice, const kernels::Backend& backend);

class Transformer {
 public:
  // `config` must be valid (validate() is checked). master: kF32, or kF64 for gradient checks.
  Transformer(const ModelConfig& config, kernels::Backend& backend, DType master = DType::kF32);

  const ModelConfig& config() const { return layout_.config(); }
  const ParamLayout& layout() const { return layout_; }
  kernels::Backend& backend() { return backend_; }

  // Flat buffers of layout().total_numel() elements, dtype master().
  DType master() const { return master_; }
  TensorView params() const { return params_.view(); }
  TensorView grads() const { return grads_.view(); }
  ModelViews param_views() const { return layout_.views(params_.view().data(), master_, params_.device()); }
  ModelViews grad_views() const { return layout_.views(grads_.view().data(), master_, grads_.device()); }

  // The bf16 mirror GEMMs read in bf16 mode (absent otherwise); an optimizer may refresh it in its
  // update pass instead of refresh_compute_weights().
  TensorView compute_mirror() const { return mirror_.view(); }

  // Where params, grads and the bf16 mirror live; by default the heap. A StorageAllocator returns a
  // zero-filled Tensor of `numel` elements of `dtype` for a role: e.g. memory the ranks of a node
  // share (train::DataParallel). set_storage() moves params, grads and (if prepared for bf16) the
  // mirror into buffers from `alloc`, contents copied, and prepare() takes a later mirror from it.
  // On error the model keeps its buffers. A failing allocation in prepare() is fatal (LMT_CHECK).
  enum class Storage { kParams, kGrads, kMirror };
  using StorageAllocator = std::function<StatusOr<Tensor>(Storage role, int64_t numel, DType dtype)>;
  Status set_storage(StorageAllocator alloc);

  void init(uint64_t seed);            // init_params, then refresh_compute_weights()
  void refresh_compute_weights();      // master -> bf16 mirror (no-op unless prepared for bf16)
  // Zeroes the gradients. With defer_block_matrices, on a model that holds its own gradients and runs
  // whole (not a pipeline stage), all but the weight matrices of the dense blocks
  // (AttentionBlock::written_grads, FfnBlock::written_grads) and, without tensor parallelism or a
  // streamed vocabulary, the LM head's rows [0, vocab_size) (the tied embedding's, if tied): those
  // keep stale values until the next training forward (the head) and backward() (the blocks),
  // which write them instead of adding to them (GradWrite::kOverwrite), one GEMM each. That saves
  // their fill and the GEMMs' read of their output (~2% of a gpt2-124m step on the CPU). For callers
  // that run a training forward and backward before reading any gradient (train::StepEngine).
  void zero_grads(bool defer_block_matrices = false);

  // Plans and allocates the activation arena for (B, T, options); its size is exactly
  // activation_bytes(config(), B, T, options). Calling again with other values re-plans.
  void prepare(int64_t B, int64_t T, const RunOptions& options);
  const Arena& arena() const { return *arena_; }
  const ActivationPlan& plan() const { return plan_; }

  // tokens, targets: [B·T] i32 (targets == -100 are ignored); doc_ids: [B·T] i32 or nullptr.
  // positions: [B·T] i32, each in [0, T), or nullptr for n % T (the position within the row). Given
  // positions (e.g. restarting at each document, data.reset_positions) feed RoPE and the learned
  // position table; they are copied, so the buffer need not outlive the call, and a later backward()
  // uses the same ones.
  // Returns the mean loss over non-ignored targets (0 if there are none). With train, also computes
  // the LM head gradients of loss_scale · mean loss (e.g. loss_scale = 1/grad_accum).
  double forward(const int32_t* tokens, const int32_t* targets, const int32_t* doc_ids, bool train,
                 float loss_scale = 1.0f, const int32_t* positions = nullptr);
  // grads += d(loss_scale · mean loss)/dθ for the last training forward.
  void backward();

  // Inference: logits[B·T, V] (f32, or f64 in an f64 run) of every position; doc_ids and positions
  // may be null (positions as in forward()).
  // Causal, so the logits of position t depend only on tokens [0, t] of its row.
  void logits(const int32_t* tokens, const int32_t* doc_ids, const TensorView& out,
              const int32_t* positions = nullptr);

  // ---- mixture of experts (model/moe_block.h) ----
  // Per layer (empty stats for dense layers): routing statistics summed over the training
  // forwards since the last reset_moe_stats() (a recompute pass is not counted twice).
  const std::vector<MoeStepStats>& moe_stats() const { return moe_stats_; }
  // The same, writable: a data-parallel caller replaces the loads by their sum over ranks before
  // update_router_bias(), so that every rank applies the same bias update.
  std::vector<MoeStepStats>& moe_stats() { return moe_stats_; }
  void reset_moe_stats();
  // Adds `other`'s statistics (a model of the same config, e.g. a pipeline replica) to this one's
  // and resets other's.
  void take_moe_stats(Transformer& other);
  // The selection bias of MoE layer l ([E] f32 in host memory; balance kBiasUpdate only, else
  // absent). Model state outside the parameters: not trained by the optimizer; checkpoints should
  // carry it. Whoever writes it through this view calls router_bias_written() after.
  TensorView router_bias(int64_t layer) const;
  // The same bias where the backend's ops read it: router_bias(layer) itself on a host backend, its
  // copy in the backend's memory on a device (refreshed by update_router_bias and router_bias_written).
  TensorView selection_bias(int64_t layer) const;
  void router_bias_written();
  // kBiasUpdate (DeepSeek-V3): after an optimizer step, bias_e += rate · sign(mean load - load_e)
  // from the loads of moe_stats() (this step's), for every MoE layer; then resets the stats.
  // A no-op for other balance modes (the stats are still reset).
  void update_router_bias();
  // Expert parallelism (model/moe_block.h): training forwards and their backward compute only this
  // rank's experts and exchange rows through ep.all_to_all_v; every rank of the group must run the
  // same passes in lockstep. Needs prepare() with RunOptions::ep == ep.size (checked); ep.size must
  // divide moe.num_experts. Inference passes are unaffected. size 1 (the default): none.
  void set_expert_parallel(ExpertParallel ep);
  const ExpertParallel& expert_parallel() const { return ep_; }

  // Tensor parallelism (model/tensor_parallel.h): this model is rank tp.rank's part of a larger
  // model (its config() is shard_config(full, tp.size)); every forward, logits and backward pass sums
  // the blocks' partial outputs and input gradients over the group, so every rank of the group must
  // run the same passes in lockstep on the same batch. size 1 (the default): none.
  void set_tensor_parallel(TensorParallel tp);
  const TensorParallel* tensor_parallel() const { return tp_.enabled() ? &tp_ : nullptr; }

  // Pipeline parallelism (train/pipeline_stage.h): this model is one stage, blocks that are some
  // consecutive layers of a larger model; it holds the ends (embeddings, final norm, LM head)
  // whichever stage it is. A stage that is not first reads its input residual stream from
  // stage_input() ([B·T, C], written by the caller before forward) instead of embedding the tokens;
  // one that is not last stops after its last block (forward returns 0 and the output is
  // stage_output()) and takes d output in stage_grad() (written by the caller before backward()).
  // After backward(), a stage that is not first leaves d input in stage_grad() and computes no
  // embedding gradients. Default: first and last (a whole model).
  struct PipelineRole {
    bool first = true, last = true;
  };
  void set_pipeline_role(PipelineRole role) { role_ = role; }
  const PipelineRole& pipeline_role() const { return role_; }
  TensorView stage_input() const { return plan_.residual[0]; }
  TensorView stage_output() const { return plan_.residual[config().n_layers]; }
  TensorView stage_grad() const { return plan_.scratch.dres; }
  // Uses `owner`'s params, grads and bf16 mirror (and MoE router bias) instead of its own (same
  // config and master; owner prepared first, and outliving this model): another set of activations
  // over the same weights, e.g. one per micro-batch in flight in a pipeline. Its backward()
  // accumulates into owner's gradients; its MoE statistics stay its own (take_moe_stats()).
  void share_storage(const Transformer& owner);

  // Per-token losses of the last forward ([B·T], 0 where ignored).
  TensorView token_losses() const { return plan_.scratch.losses; }

  // Called with the block index as soon as that block's parameter gradients are final in backward
  // (blocks finish from last to first; embeddings and the final norm finish after block 0).
  void set_block_grads_ready(std::function<void(int64_t layer)> hook) { block_grads_ready_ = std::move(hook); }

  // Parameter residency (seam 4; ZeRO-3, train::DataParallel): when set, called with layer -1 at the
  // start of every forward/logits pass (before the embeddings, final norm and LM head are read),
  // with (l, false) before block l's forward and with (l, true) before its backward (before its
  // recompute too). The hook must bind what is about to be used (bind_ends / bind_block) to
  // buffers that stay valid until the next call for the same unit; every pass calls it again.
  void set_params_needed(std::function<void(int64_t layer, bool backward)> hook) { params_needed_ = std::move(hook); }
  // True while a training forward (forward(..., train = true)) runs, hooks included: a residency
  // hook tells training passes, whose gradients follow, from evaluation passes.
  bool training_pass() const { return train_pass_; }
  // Points the master (w), gradient (g) and GEMM (wc: bf16 in bf16 mode, else == w) views of block
  // `layer`, or of the non-block tensors (embed, pos_embed, final norm, LM head; `blocks` ignored).
  void bind_block(int64_t layer, const BlockViews& w, const BlockViews& g, const BlockViews& wc);
  void bind_ends(const ModelViews& w, const ModelViews& g, const ModelViews& wc);
  // Frees the flat params, grads and bf16 mirror (ZeRO-3: their owner shards them): params(),
  // grads() and compute_mirror() are then absent, zero_grads() and refresh_compute_weights() do
  // nothing, prepare() allocates no mirror, and every forward/backward reads only bound views.
  // Needs set_params_needed() first.
  void release_storage();
  bool storage_released() const { return released_; }
  // The token embedding and the LM head come from `vocab` in pieces (model/streamed_vocab.h; ZeRO-3
  // over several ranks), not from bound views: forward's lookup and LM head loss and backward's
  // embedding gradient go through it. Null: the bound views (the default). Host backends; not with
  // tensor parallelism; logits() is then refused. `vocab` must outlive its use.
  void set_streamed_vocab(StreamedVocab* vocab);
  bool vocab_streamed() const { return vocab_stream_ != nullptr; }
  // Bytes of the flat params, grads and mirror this model holds (0 after release_storage()).
  int64_t storage_bytes() const;

 private:
  // Embeddings, every block and the final norm (into plan_.scratch.final_h).
  void forward_trunk(const int32_t* tokens, const int32_t* doc_ids, const int32_t* positions);
  // One block (block.cpp): AttentionBlock then FfnBlock over this model's views and plan. `in` is
  // plan_.residual[layer], written or pending (the previous block's output); the result is
  // plan_.residual[layer + 1], pending on scratch.f32_nc where it can be (model/block.h).
  Residual forward_block(int64_t layer, BlockActs& acts, const Residual& in);
  void backward_block(int64_t layer, BlockActs& acts);
  // The gradients of block `layer` that its backward writes with one GEMM each (zero_grads).
  std::vector<TensorView> written_block_grads(int64_t layer) const;
  // The final norm's backward (model/norm.h with this model's backend and config).
  void norm_backward(const TensorView& dinp, const TensorView& dw, const TensorView& db,
                     const TensorView& dout, const TensorView& inp, const TensorView& w,
                     const TensorView& mean, const TensorView& rstd, bool accumulate);

  ParamLayout layout_;
  kernels::Backend& backend_;
  DType master_;
  Tensor params_, grads_, mirror_;
  StorageAllocator storage_;  // empty: the heap
  ModelViews w_, gw_, wc_;  // master, gradient and GEMM (compute dtype) views
  std::unique_ptr<Arena> arena_;
  ActivationPlan plan_;
  TensorView tokens_, targets_, doc_ids_;
  // On a device backend: the batch's host arrays copied to the device (prepare() sizes them).
  Tensor dev_tokens_, dev_targets_, dev_doc_ids_, dev_positions_;
  // A host array of shape.numel() i32 as a view the backend can read (the array itself on the host;
  // a copy in the first elements of `staging` on a device backend). Null gives an absent view.
  TensorView device_ints(const int32_t* host, Shape shape, Tensor& staging);
  int64_t num_valid_ = 0;
  bool positions_given_ = false;  // plan_.scratch.positions holds given positions, not n % T
  bool have_train_forward_ = false;
  std::function<void(int64_t)> block_grads_ready_;
  std::function<void(int64_t, bool)> params_needed_;
  bool released_ = false;
  // Per layer: its written_block_grads were left unzeroed by zero_grads() and no backward has
  // written them since (the next one writes over them).
  std::vector<uint8_t> stale_block_grads_;
  bool stale_head_grad_ = false;  // the same for the LM head's rows [0, V) and the next training forward
  Tensor router_bias_;                   // [n_layers, E] f32 host (kBiasUpdate only)
  Tensor router_bias_device_;            // its copy in the backend's memory (device backends only)
  std::vector<MoeStepStats> moe_stats_;  // [n_layers]
  bool train_pass_ = false;              // the current forward trains (capacity applies, stats count)
  bool recomputing_ = false;             // backward is recomputing a block
  float loss_scale_ = 1.0f;              // of the last training forward (aux/z-loss gradients)
  ExpertParallel ep_;                    // size 1: none
  TensorParallel tp_;                    // size 1: none
  VocabSlice vocab_;                     // tensor parallelism: this rank's vocabulary rows
  std::vector<float> tp_lse_;            // tensor parallelism: [size, rows] log-sum-exps of a loss chunk
  // Tensor parallelism, the last forward's tokens of this rank's vocabulary rows (found on the host
  // from the batch), in batch order: their rows of this rank's table and their positions n of the
  // N = B·T rows (host; copied to dev_vp_* on a device backend); views of what the backend reads.
  std::vector<int32_t> vp_rows_, vp_at_;
  Tensor dev_vp_rows_, dev_vp_at_;
  TensorView vp_rows_view_, vp_at_view_;
  // Vocabulary-parallel embedding (transformer_vocab_parallel.cpp): residual[0] = this rank's rows
  // of the tokens (zeros for others'), summed over the group; and the gradient of this rank's rows.
  void vocab_parallel_embedding_forward(const int32_t* tokens);
  void vocab_parallel_embedding_backward();
  // CrossEntropyOptions::combine over the group: the whole vocabulary's lse and target logit
  // ([rows] f32 each, in the backend's memory), in place.
  void combine_vocab_parallel(const TensorView& lse, const TensorView& target_logit);
  // Sequence parallelism: this rank's rows of an [N, ...] view (all of it otherwise).
  TensorView sequence_rows(const TensorView& all) const;
  PipelineRole role_;                    // a whole model by default
  StreamedVocab* vocab_stream_ = nullptr;  // set_streamed_vocab()
  StreamedHeadScratch head_scratch_;       // ... its LM head's row statistics
};

}  // namespace lmt::model
