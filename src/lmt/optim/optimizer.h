// Optimizer: AdamW, or Muon for the hidden matrices with AdamW for the rest, over the flat
// parameter buffer of a ParamLayout (docs/OPTIM.md has the formulas and references).
//
// Everything is a flat span: params, grads, the optional bf16 mirror and every optimizer state are
// buffers of layout.total_numel() f32 elements (bf16 for the mirror) in which element i belongs to
// parameter element i. That is what lets data parallelism shard the update (ZeRO-1/2): a rank
// updates only its slice [shard_begin, shard_end), and may own state for only a slice
// (create() with a state range), while checkpoints and resharding treat state like parameters.
//
// Groups (decided once, in create(), from ParamInfo::role):
//   AdamW   kMatrix                          weight_decay
//           kEmbedding, kPosition, kLmHead   weight_decay if decay_embeddings, else 0
//           kNorm, kBias                     0
//   Muon    kMatrix (name = "muon")          muon_lr, muon_momentum, muon_weight_decay; every other
//                                            tensor stays with AdamW (lr) as above
// Muon matrices of one shape (all layers' q|k|v, all FFN up, ...) inside a step's shard are
// updated as batches (MuonUpdater: batched Newton–Schulz GEMMs, at ns_precision(muon_ns_dtype, backend)).
// Elements outside every tensor (alignment gaps) are updated with the tensor before them under
// AdamW (they stay zero: zero grads give a zero update) and are left alone after a Muon matrix.
// Vocabulary padding rows have zero grads and zero values, so they stay exactly zero.
//
// Cut points: a shard [shard_begin, shard_end) must begin and end at a legal cut point: a multiple
// of kCutAlignment elements that does not fall strictly inside a Muon matrix (Muon orthogonalises
// whole matrices). shard_boundaries() lists the tensor starts that qualify; balanced_cuts() picks
// near-equal shards. With legal cuts a sharded step is bit-for-bit one whole step.
//
// Ownership: the Optimizer owns its state and scratch (allocated once in create(), never per step);
// it references `backend`, which must outlive it. Threading: one thread calls it at a time; the
// backend parallelises each kernel.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/kernels/backend.h"
#include "lmt/model/params.h"
#include "lmt/optim/muon.h"
#include "lmt/tensor/tensor.h"

namespace lmt::optim {

struct OptimizerConfig {
  std::string name = "adamw";  // "adamw" or "muon"
  float lr = 6e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  bool decay_embeddings = false;  // weight decay on embeddings / positions / LM head too
  float muon_lr = 0.02f, muon_momentum = 0.95f;
  bool muon_nesterov = true;
  int muon_ns_steps = 5;
  float muon_weight_decay = 0.0f;
  std::string muon_ns_dtype = "bf16";  // Newton–Schulz GEMM operands: "bf16" (f32 accumulation) or "fp32" (muon.h)
  std::string muon_ns_method = "gram";  // "gram" (Gram form where it pays) or "standard" (optim/muon.h)
};

// Every key's range; the message names the key and value ("optim.beta2 = 1.5 must be in [0, 1)").
Status validate(const OptimizerConfig& c);

// [begin, end) of the flat buffer.
struct FlatRange {
  int64_t begin, end;
};

// Shards start and end at multiples of this many elements (64 bytes of f32, ParamLayout's
// alignment), so vector kernels see the same lanes however a span is cut.
inline constexpr int64_t kCutAlignment = 16;

// True when `i` may begin or end a shard for optimizer config `c` over `layout` (see above; 0 and
// total_numel() always may).
bool is_legal_cut(const OptimizerConfig& c, const model::ParamLayout& layout, int64_t i);
// parts + 1 non-decreasing legal cut points from 0 to layout.total_numel() that split the buffer
// into `parts` slices of about equal size (for ZeRO); a slice may be empty on tiny layouts.
std::vector<int64_t> balanced_cuts(const OptimizerConfig& c, const model::ParamLayout& layout, int parts);

class Optimizer {
 public:
  // Validates `c` (error Status naming the key) and plans the spans from `layout` (not kept).
  static StatusOr<std::unique_ptr<Optimizer>> create(const OptimizerConfig& c, const model::ParamLayout& layout,
                                                     kernels::Backend& backend);
  // Same, owning state only for parameter elements [state_begin, state_end) (legal cuts): the
  // ZeRO-1/2 form, where each rank holds the state of its shard. state() then has
  // state_end - state_begin elements per tensor, element j belonging to parameter state_begin + j.
  static StatusOr<std::unique_ptr<Optimizer>> create(const OptimizerConfig& c, const model::ParamLayout& layout,
                                                     kernels::Backend& backend, int64_t state_begin, int64_t state_end);

  // One update. params, grads: f32[layout.total_numel()]; param_bf16: bf16[total] mirror refreshed
  // in the same pass for the updated elements, or an absent view. lr_mult: the schedule's
  // multiplier (1 = peak lr); grad_scale: multiplies gradients as they are read (the clipping
  // factor); step: 1-based (AdamW bias correction), so a resumed run passes its true step.
  // Only elements in [shard_begin, shard_end) are read (grads) and written (params, mirror, state);
  // shard_end = -1 means state_end() (and then shard_begin = 0 means state_begin()), so the
  // defaults cover the whole state range. Both ends must be legal cuts inside the state range
  // (LMT_CHECK: a caller bug). Gradients are not modified.
  void step(const TensorView& params, const TensorView& grads, const TensorView& param_bf16, float lr_mult,
            float grad_scale, int64_t step, int64_t shard_begin = 0, int64_t shard_end = -1);

  // Optimizer state as named flat f32 tensors of state_end() - state_begin() elements (the whole
  // buffer unless created for a state range): "adam.m", "adam.v", and with Muon
  // "muon.momentum". Element j belongs to parameter element state_begin() + j; entries of elements
  // another group owns stay zero (so Muon holds three such buffers; see docs/OPTIM.md). The views
  // are writable: a checkpoint restores state by copying into them.
  std::vector<std::pair<std::string, TensorView>> state();
  const OptimizerConfig& config() const { return config_; }
  kernels::Backend& backend() const { return backend_; }  // the one its kernels run on
  // Muon's Newton–Schulz precision on this backend (ns_precision(), muon.h); nullopt without Muon matrices.
  std::optional<NsPrecision> muon_precision() const {
    return muon_ ? std::optional<NsPrecision>(muon_->precision()) : std::nullopt;
  }
  int64_t state_begin() const { return state_begin_; }
  int64_t state_end() const { return state_end_; }

  // The tensor starts that are legal cut points, plus total_numel(): sorted, from 0. (Members of
  // a fused q|k|v or gate|up group after the first may start unaligned; those are left out.)
  std::vector<int64_t> shard_boundaries() const;
  bool is_legal_cut(int64_t i) const;

  ~Optimizer();

 private:
  struct AdamWSpan {  // consecutive elements sharing a weight decay
    int64_t begin, end;
    float weight_decay;
  };
  struct MuonMatrix {  // one kMatrix tensor: [rows, cols] at `offset`
    int64_t offset, rows, cols;
  };

  Optimizer(const OptimizerConfig& c, const model::ParamLayout& layout, kernels::Backend& backend, int64_t state_begin,
            int64_t state_end);
  void step_adamw(const TensorView& params, const TensorView& grads, const TensorView& param_bf16, float lr_mult,
                  float grad_scale, int64_t step, int64_t begin, int64_t end);
  void step_muon(const TensorView& params, const TensorView& grads, const TensorView& param_bf16, float lr_mult,
                 float grad_scale, int64_t begin, int64_t end);
  // f32 view of state elements for parameter elements [begin, end).
  TensorView state_span(const Tensor& t, int64_t begin, int64_t end) const;
  // Muon's batch cap for this backend's device (muon.h): cache-sized on the host, larger on a GPU.
  int64_t muon_batch_elements() const {
    return backend_.device().is_host() ? kMuonBatchElementsHost : kMuonBatchElements;
  }

  OptimizerConfig config_;
  kernels::Backend& backend_;
  int64_t total_;  // layout.total_numel()
  int64_t state_begin_, state_end_;
  std::vector<int64_t> aligned_starts_;    // tensor offsets that are multiples of kCutAlignment
  std::vector<AdamWSpan> adamw_spans_;     // clipped to the state range, ascending
  std::vector<MuonMatrix> muon_matrices_;  // all of the layout's, ascending
  std::vector<FlatRange> muon_extents_;    // the same, as [offset, offset + numel)
  Tensor adam_m_, adam_v_, muon_momentum_;
  std::unique_ptr<MuonUpdater> muon_;  // null without Muon matrices
  std::vector<MuonUpdater::Matrix> muon_batch_;  // step_muon's batch under construction (reused)
};

}  // namespace lmt::optim
