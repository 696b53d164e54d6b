#include "lmt/train/zero3.h"

#include <algorithm>
#include <cstring>

#include "lmt/base/check.h"
#include "lmt/base/timer.h"
#include "lmt/base/trace.h"

namespace lmt::train {

namespace {
// A base pointer such that base + offset·elem is `buf` for flat element `first`: the layout's views
// of the tensors inside [first, first + n) then land in `buf` (the others are never read).
void* rebased(const Tensor& buf, int64_t first, DType dtype) {
  return static_cast<char*>(buf.view().data()) - first * static_cast<int64_t>(dtype_size(dtype));
}
TensorView span(const Tensor& t, int64_t n) { return t.view().reshape({t.numel()}).slice_rows(0, n); }
}  // namespace

Zero3::Zero3(dist::Communicator& comm, model::Transformer& m, std::vector<int64_t> cuts)
    : comm_(comm), m_(m), cuts_(std::move(cuts)) {}

Zero3::Range Zero3::range(int64_t begin, int64_t end) const {
  Range r{begin, end, std::vector<int64_t>(comm_.world(), 0), 0};
  for (int k = 0; k < comm_.world(); ++k) {
    const int64_t a = std::max(begin, cuts_[k]), b = std::min(end, cuts_[k + 1]);
    r.counts[k] = std::max<int64_t>(0, b - a);
    if (k == comm_.rank()) r.own_at = std::clamp(cuts_[k], begin, end) - begin;
  }
  return r;
}

StatusOr<std::unique_ptr<Zero3>> Zero3::create(dist::Communicator& comm, model::Transformer& m,
                                               std::vector<int64_t> cuts) {
  const model::ParamLayout& layout = m.layout();
  const int64_t L = m.config().n_layers, total = layout.total_numel();
  if (m.master() != DType::kF32) return Unimplemented("train.zero = 3 needs an f32 master", "use ZeRO 0-2 for f64 runs");
  if (m.storage_released()) return FailedPrecondition("the model's storage is already sharded", "call create() once");
  std::vector<int64_t> lo(L + 1, total), hi(L, 0);
  for (const auto& p : layout.params())
    if (p.layer >= 0) {
      lo[p.layer] = std::min(lo[p.layer], p.offset);
      hi[p.layer] = std::max(hi[p.layer], p.offset + p.numel);
    }
  bool ok = L > 0;
  for (int64_t l = 0; ok && l + 1 < L; ++l) ok = hi[l] <= lo[l + 1];
  for (const auto& p : layout.params())
    if (ok && p.layer < 0 && p.offset < hi[L - 1] && p.offset + p.numel > lo[0]) ok = false;
  if (!ok)
    return Unimplemented("train.zero = 3 needs the blocks' tensors laid out contiguously, block after block",
                         "use train.zero = 2 for this model");
  lo[L] = hi[L - 1];

  std::unique_ptr<Zero3> z(new Zero3(comm, m, std::move(cuts)));
  z->bf16_ = m.plan().options.compute == DType::kBF16;
  int64_t max_block = 1;
  for (int64_t l = 0; l < L; ++l) {
    z->blocks_.push_back(z->range(lo[l], lo[l + 1]));
    max_block = std::max(max_block, lo[l + 1] - lo[l]);
  }
  z->ends_lo_ = z->range(0, lo[0]);
  z->ends_hi_ = z->range(lo[L], total);
  const int64_t ends_n = lo[0] + (total - lo[L]);
  const int r = comm.rank();
  const int64_t shard_n = z->cuts_[r + 1] - z->cuts_[r];
  z->pshard_ = Tensor({std::max<int64_t>(shard_n, 1)}, DType::kF32);
  z->gshard_ = Tensor({std::max<int64_t>(shard_n, 1)}, DType::kF32);
  if (shard_n > 0)
    std::memcpy(z->pshard_.as<float>(), m.params().as<float>() + z->cuts_[r], static_cast<size_t>(shard_n) * 4);
  for (int s = 0; s < 2; ++s) {
    if (z->bf16_) z->slot_c_[s] = Tensor({max_block}, DType::kBF16);  // gathered as bf16 (the vectors: vec_)
    else z->slot_p_[s] = Tensor({max_block}, DType::kF32);
  }
  if (z->bf16_) {  // every block's vectors (norms, biases), compact, in f32
    for (const auto& p : layout.params())
      if (p.layer >= 0 && p.shape.rank() == 1) z->vec_params_.push_back({p.offset, p.numel, 0});
    std::sort(z->vec_params_.begin(), z->vec_params_.end(),
              [](const VecParam& a, const VecParam& b) { return a.offset < b.offset; });
    int64_t compact = 0;  // packed in flat-buffer order
    for (VecParam& v : z->vec_params_) v.compact = compact, compact += v.numel;
    z->vec_ = Tensor({std::max<int64_t>(compact, 1)}, DType::kF32);
    z->vec_counts_.assign(comm.world(), 0);
    for (const VecParam& v : z->vec_params_)
      for (int k = 0; k < comm.world(); ++k)
        z->vec_counts_[k] += std::max<int64_t>(0, std::min(v.offset + v.numel, z->cuts_[k + 1]) - std::max(v.offset, z->cuts_[k]));
  }
  z->gslot_ = Tensor({max_block}, DType::kF32);
  z->ends_p_ = Tensor({std::max<int64_t>(ends_n, 1)}, DType::kF32);
  z->alias_ends_ = z->bf16_;  // f32 runs read the f32 LM head, so it must stay
  if (!z->alias_ends_) z->ends_g_ = Tensor({std::max<int64_t>(ends_n, 1)}, DType::kF32);
  if (z->bf16_) z->ends_c_ = Tensor({std::max<int64_t>(ends_n, 1)}, DType::kBF16);

  // Views, planned once: block l lives in slot l % 2; the ends' two ranges sit back to back.
  for (int64_t l = 0; l < L; ++l) {
    z->vg_.push_back(layout.views(rebased(z->gslot_, lo[l], DType::kF32), DType::kF32).blocks[l]);
    if (!z->bf16_) {
      z->vw_.push_back(layout.views(rebased(z->slot_p_[l % 2], lo[l], DType::kF32), DType::kF32).blocks[l]);
      z->vc_.push_back(z->vw_.back());
      continue;
    }
    z->vc_.push_back(layout.views(rebased(z->slot_c_[l % 2], lo[l], DType::kBF16), DType::kBF16).blocks[l]);
    // f32 views: the vectors' compact copies; the matrices have none (bf16 passes read them as bf16).
    float* vec = z->vec_.as<float>();
    model::BlockViews w = layout.views(vec, DType::kF32).blocks[l];  // views at vec + flat offset
    model::for_each_view(w, [&](TensorView& v) {
      if (!v.present()) return;
      if (v.shape().rank() != 1) {
        v = TensorView();
        return;
      }
      const int64_t flat = static_cast<const float*>(v.data()) - vec;
      auto it = std::upper_bound(z->vec_params_.begin(), z->vec_params_.end(), flat,
                                 [](int64_t f, const VecParam& p) { return f < p.offset; });
      LMT_CHECK(it != z->vec_params_.begin()) << "ZeRO-3: a block vector outside the layout's vectors";
      --it;
      LMT_CHECK(flat + v.numel() <= it->offset + it->numel) << "ZeRO-3: a block vector across two tensors";
      v = TensorView(vec + it->compact + (flat - it->offset), v.shape(), DType::kF32);
    });
    z->vw_.push_back(w);
  }
  auto ends_views = [&](const Tensor& buf, DType dt) {
    model::ModelViews a = layout.views(rebased(buf, 0, dt), dt);
    model::ModelViews b = layout.views(rebased(buf, lo[L] - lo[0], dt), dt);
    const char* first = static_cast<const char*>(buf.view().data());
    const char* split = first + lo[0] * static_cast<int64_t>(dtype_size(dt));
    auto pick = [&](const TensorView& x, const TensorView& y) {
      if (!x.present()) return x;
      const char* p = static_cast<const char*>(x.data());
      return (p >= first && p < split) ? x : y;
    };
    model::ModelViews v;
    v.embed = pick(a.embed, b.embed);
    v.pos_embed = pick(a.pos_embed, b.pos_embed);
    v.final_norm_w = pick(a.final_norm_w, b.final_norm_w);
    v.final_norm_b = pick(a.final_norm_b, b.final_norm_b);
    v.lm_head = pick(a.lm_head, b.lm_head);
    return v;
  };
  z->ew_ = ends_views(z->ends_p_, DType::kF32);
  if (z->alias_ends_) {
    // The embeddings' and the LM head's gradients take the place of their f32 values, which a bf16
    // training pass reads only in the embedding lookup; the final norm's values are read again in
    // backward, so its gradients get a buffer of their own.
    z->eg_ = z->ew_;
    const TensorView& nw = z->ew_.final_norm_w;
    const TensorView& nb = z->ew_.final_norm_b;
    const int64_t n_w = nw.present() ? nw.numel() : 0, n_b = nb.present() ? nb.numel() : 0;
    z->norm_g_ = Tensor({std::max<int64_t>(n_w + n_b, 1)}, DType::kF32);
    const float* base = z->ends_p_.as<float>();
    if (n_w > 0) {
      z->eg_.final_norm_w = TensorView(z->norm_g_.as<float>(), nw.shape(), DType::kF32);
      z->kept_.push_back({nw.as<float>() - base, n_w});
    }
    if (n_b > 0) {
      z->eg_.final_norm_b = TensorView(z->norm_g_.as<float>() + n_w, nb.shape(), DType::kF32);
      z->kept_.push_back({nb.as<float>() - base, n_b});
    }
  } else {
    z->eg_ = ends_views(z->ends_g_, DType::kF32);
  }
  z->ec_ = z->bf16_ ? ends_views(z->ends_c_, DType::kBF16) : z->ew_;
  z->reduced_.assign(L, false);

  Zero3* self = z.get();
  m.set_params_needed([self](int64_t layer, bool backward) { self->on_params_needed(layer, backward); });
  m.set_block_grads_ready([self](int64_t layer) { self->on_grads_ready(layer); });
  m.release_storage();
  return z;
}

Zero3::~Zero3() {
  for (auto& r : slot_req_)
    if (r) (void)r->wait();
  m_.set_params_needed(nullptr);
  m_.set_block_grads_ready(nullptr);
}

void Zero3::keep(Status s) {
  if (error_.ok() && !s.ok()) error_ = std::move(s);
}

void Zero3::launch(int slot, int64_t layer) {
  const Range& r = blocks_[layer];
  const int64_t own = r.counts[comm_.rank()];
  const float* mine = shard_at(pshard_.as<float>(), r.begin + r.own_at);
  if (bf16_) {  // bf16(master) of this rank's part, gathered as bf16: what converting after would give
    uint16_t* dst = static_cast<uint16_t*>(slot_c_[slot].view().data());
    if (own > 0)
      m_.backend().convert(TensorView(dst + r.own_at, Shape{own}, DType::kBF16),
                           TensorView(const_cast<float*>(mine), Shape{own}, DType::kF32));
    slot_req_[slot] = comm_.all_gather_async(dst, r.counts);
  } else {
    float* dst = slot_p_[slot].as<float>();
    if (own > 0) std::memcpy(dst + r.own_at, mine, static_cast<size_t>(own) * 4);
    slot_req_[slot] = comm_.all_gather_async(dst, r.counts);
  }
  slot_layer_[slot] = layer;
  slot_ready_[slot] = false;
}

void Zero3::wait(int slot) {
  if (slot_req_[slot]) {
    LMT_TRACE_SCOPE("zero3_gather_wait");
    Timer t;
    keep(slot_req_[slot]->wait());
    slot_req_[slot].reset();
    comm_seconds_ += t.seconds();
  }
  if (!slot_ready_[slot] && slot_layer_[slot] >= 0) slot_ready_[slot] = true;
}

void Zero3::ensure_ends() {
  if (ends_ == Ends::kParams) return;
  if (ends_ == Ends::kGrads) reduce_ends();  // the last micro-batch's gradients, before the values return
  LMT_TRACE_SCOPE("zero3_gather_ends");
  Timer t;
  float* dst = ends_p_.as<float>();
  const int64_t n_lo = ends_lo_.end - ends_lo_.begin;
  for (const Range* r : {&ends_lo_, &ends_hi_}) {
    float* at = r == &ends_lo_ ? dst : dst + n_lo;
    const int64_t own = r->counts[comm_.rank()];
    if (own > 0) std::memcpy(at + r->own_at, shard_at(pshard_.as<float>(), r->begin + r->own_at), static_cast<size_t>(own) * 4);
    if (r->end > r->begin) keep(comm_.all_gather(at, r->counts));
  }
  comm_seconds_ += t.seconds();
  const int64_t n = n_lo + (ends_hi_.end - ends_hi_.begin);
  if (bf16_ && n > 0 && !ends_c_fresh_) m_.backend().convert(span(ends_c_, n), span(ends_p_, n));
  ends_c_fresh_ = true;
  m_.bind_ends(ew_, eg_, ec_);
  ends_ = Ends::kParams;
}

// Alias mode, a training forward past the embedding lookup: the f32 ends become the gradient
// accumulator (zeroed), except the final norm's values.
void Zero3::begin_ends_grads() {
  float* p = ends_p_.as<float>();
  float* aside = norm_g_.as<float>();  // the final norm's values wait in its gradient buffer
  for (const auto& [at, n] : kept_) {
    std::memcpy(aside, p + at, static_cast<size_t>(n) * 4);
    aside += n;
  }
  m_.backend().fill(ends_p_, 0.0);
  aside = norm_g_.as<float>();
  for (const auto& [at, n] : kept_) {
    std::memcpy(p + at, aside, static_cast<size_t>(n) * 4);
    aside += n;
  }
  m_.backend().fill(norm_g_, 0.0);
  ends_ = Ends::kGrads;
}

// Alias mode: the ends' gradients (the final norm's moved into their places) reduce-scattered into
// the gradient shard, added to what earlier micro-batches of the step left there.
void Zero3::reduce_ends() {
  LMT_TRACE_SCOPE("zero3_reduce_ends");
  Timer t;
  float* g = ends_p_.as<float>();
  size_t i = 0;
  for (const auto& [at, n] : kept_) {
    std::memcpy(g + at, norm_g_.as<float>() + i, static_cast<size_t>(n) * 4);
    i += static_cast<size_t>(n);
  }
  reduce_scatter_ends(g);
  ends_ = Ends::kStale;
  comm_seconds_ += t.seconds();
}

// g: the ends' gradients, [ends_lo_ | ends_hi_] back to back; this rank's part goes into the
// shard, or is added there after the step's first reduction.
void Zero3::reduce_scatter_ends(const float* g) {
  const int64_t n_lo = ends_lo_.end - ends_lo_.begin;
  for (const Range* r : {&ends_lo_, &ends_hi_}) {
    if (r->end <= r->begin) continue;
    const float* send = g + (r == &ends_lo_ ? 0 : n_lo);
    float* dst = shard_at(gshard_.as<float>(), r->begin + r->own_at);
    if (!ends_reduced_) {
      keep(comm_.reduce_scatter_sum(send, dst, r->counts));
      continue;
    }
    const int64_t own = r->counts[comm_.rank()];
    float* add = scratch(own);
    keep(comm_.reduce_scatter_sum(send, add, r->counts));
    for (int64_t k = 0; k < own; ++k) dst[k] += add[k];
  }
  ends_reduced_ = true;
}

float* Zero3::scratch(int64_t n) {
  if (!rs_.view().present() || rs_.numel() < n) rs_ = Tensor({std::max<int64_t>(n, 1)}, DType::kF32);
  return rs_.as<float>();
}

// bf16: every block's vectors, gathered in f32 once per update (they are small).
void Zero3::ensure_vectors() {
  if (!bf16_ || vec_fresh_) return;
  LMT_TRACE_SCOPE("zero3_gather_vectors");
  Timer t;
  const int r = comm_.rank();
  float* vec = vec_.as<float>();
  for (const VecParam& v : vec_params_) {
    const int64_t a = std::max(v.offset, cuts_[r]), b = std::min(v.offset + v.numel, cuts_[r + 1]);
    if (a < b) std::memcpy(vec + v.compact + (a - v.offset), shard_at(pshard_.as<float>(), a), static_cast<size_t>(b - a) * 4);
  }
  keep(comm_.all_gather(vec, vec_counts_));
  comm_seconds_ += t.seconds();
  vec_fresh_ = true;
}

void Zero3::on_params_needed(int64_t layer, bool backward) {
  if (layer < 0) {
    ensure_ends();
    m_.bind_ends(ew_, eg_, ec_);  // a pass may follow another model's binding: bind every time
    return;
  }
  ensure_vectors();
  if (alias_ends_ && !backward && layer == 0 && ends_ == Ends::kParams && m_.training_pass()) begin_ends_grads();
  const int s = static_cast<int>(layer % 2);
  if (slot_layer_[s] != layer) {
    wait(s);  // whatever was in flight into this slot
    launch(s, layer);
  }
  wait(s);
  const int64_t next = backward ? layer - 1 : layer + 1;
  if (next >= 0 && next < static_cast<int64_t>(blocks_.size())) {
    const int t = static_cast<int>(next % 2);
    if (slot_layer_[t] != next) {
      wait(t);
      launch(t, next);
    }
  }
  if (backward) {
    const Range& r = blocks_[layer];
    m_.backend().fill(span(gslot_, r.end - r.begin), 0.0);
  }
  m_.bind_block(layer, vw_[layer], vg_[layer], vc_[layer]);
}

void Zero3::on_grads_ready(int64_t layer) {
  LMT_TRACE_SCOPE("zero3_reduce_scatter");
  Timer t;
  struct Add {  // comm_seconds_ += t on every return
    double& to;
    Timer& t;
    ~Add() { to += t.seconds(); }
  } add_time{comm_seconds_, t};
  for (auto& r : slot_req_)
    if (r) r->test();  // progress the prefetch
  const Range& r = blocks_[layer];
  const int64_t own = r.counts[comm_.rank()];
  float* dst = shard_at(gshard_.as<float>(), r.begin + r.own_at);
  if (!reduced_[layer]) {  // first micro-batch of the step: straight into the (zero) shard
    keep(comm_.reduce_scatter_sum(gslot_.as<float>(), dst, r.counts));
    reduced_[layer] = true;
    return;
  }
  int64_t most = 1;  // the scratch is sized for every block at once
  for (const Range& b : blocks_) most = std::max(most, b.counts[comm_.rank()]);
  float* add = scratch(most);
  keep(comm_.reduce_scatter_sum(gslot_.as<float>(), add, r.counts));
  for (int64_t i = 0; i < own; ++i) dst[i] += add[i];
}

void Zero3::zero_grads() {
  m_.backend().fill(gshard_, 0.0);
  if (!alias_ends_) m_.backend().fill(ends_g_, 0.0);
  if (ends_ == Ends::kGrads) ends_ = Ends::kStale;  // dropped; the values are gathered again
  reduced_.assign(reduced_.size(), false);
  ends_reduced_ = false;
}

Status Zero3::finish() {
  LMT_TRACE_SCOPE("zero3_reduce_ends");
  for (int s = 0; s < 2; ++s) wait(s);
  if (alias_ends_) {
    if (ends_ == Ends::kGrads) reduce_ends();
  } else {  // f32: accumulated over the step's micro-batches, reduced once
    Timer t;
    reduce_scatter_ends(ends_g_.as<float>());
    comm_seconds_ += t.seconds();
  }
  Status s = error_;
  error_ = Status::Ok();
  return s;
}

double Zero3::grad_sum_squares(kernels::Backend& b) const {
  const int64_t n = cuts_[comm_.rank() + 1] - cuts_[comm_.rank()];
  return n > 0 ? b.sum_squares(span(gshard_, n)) : 0.0;
}

TensorView Zero3::shard_params() const {
  return TensorView(rebased(pshard_, cuts_[comm_.rank()], DType::kF32), Shape{cuts_.back()}, DType::kF32);
}

TensorView Zero3::shard_grads() const {
  return TensorView(rebased(gshard_, cuts_[comm_.rank()], DType::kF32), Shape{cuts_.back()}, DType::kF32);
}

void Zero3::invalidate() {
  for (int s = 0; s < 2; ++s) {
    wait(s);
    slot_layer_[s] = -1;
    slot_ready_[s] = false;
  }
  ends_ = Ends::kStale;
  ends_c_fresh_ = false;
  vec_fresh_ = false;
}

Status Zero3::gather_full(float* full) {
  const int r = comm_.rank();
  const int64_t n = cuts_[r + 1] - cuts_[r];
  if (n > 0) std::memcpy(full + cuts_[r], pshard_.as<float>(), static_cast<size_t>(n) * 4);
  std::vector<int64_t> counts(comm_.world());
  for (int k = 0; k < comm_.world(); ++k) counts[k] = cuts_[k + 1] - cuts_[k];
  keep(comm_.all_gather(full, counts));
  Status s = error_;
  error_ = Status::Ok();
  return s;
}

void Zero3::load_full(const float* full) {
  const int r = comm_.rank();
  const int64_t n = cuts_[r + 1] - cuts_[r];
  if (n > 0) std::memcpy(pshard_.as<float>(), full + cuts_[r], static_cast<size_t>(n) * 4);
  invalidate();
}

int64_t Zero3::bytes() const {
  int64_t b = 0;
  for (const Tensor* t : {&pshard_, &gshard_, &slot_p_[0], &slot_p_[1], &slot_c_[0], &slot_c_[1], &gslot_, &ends_p_,
                          &ends_c_, &ends_g_, &norm_g_, &vec_, &rs_})
    if (t->view().present()) b += static_cast<int64_t>(t->view().bytes());
  return b;
}

}  // namespace lmt::train
