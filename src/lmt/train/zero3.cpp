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

void Zero3::Compact::plan(std::vector<Part> p, const std::vector<int64_t>& cuts) {
  std::sort(p.begin(), p.end(), [](const Part& a, const Part& b) { return a.offset < b.offset; });
  n = 0;
  for (Part& x : p) x.at = n, n += x.numel;  // packed in flat-buffer order
  parts = std::move(p);
  const int W = static_cast<int>(cuts.size()) - 1;
  counts.assign(W, 0);
  for (const Part& x : parts)
    for (int k = 0; k < W; ++k)
      counts[k] += std::max<int64_t>(0, std::min(x.offset + x.numel, cuts[k + 1]) - std::max(x.offset, cuts[k]));
}

TensorView Zero3::Compact::remap(const TensorView& v, const float* flat_base, float* compact) const {
  const int64_t flat = static_cast<const float*>(v.data()) - flat_base;
  auto it = std::upper_bound(parts.begin(), parts.end(), flat, [](int64_t f, const Part& p) { return f < p.offset; });
  LMT_CHECK(it != parts.begin()) << "ZeRO-3: a view outside the compact tensors";
  --it;
  LMT_CHECK(flat + v.numel() <= it->offset + it->numel) << "ZeRO-3: a view across two compact tensors";
  return TensorView(compact + it->at + (flat - it->offset), v.shape(), DType::kF32);
}

Status Zero3::supports(const kernels::Backend& backend) {
  if (backend.device().is_host()) return Status::Ok();
  const std::string name(backend.name());
  return Unimplemented("train.zero = 3 on the '" + name +
                           "' backend: ZeRO-3 gathers and shards the parameters in host memory",
                       "use train.zero = 0, 1 or 2 with --backend " + name +
                           ", or train.zero = 3 with --backend cpu (docs/CUDA.md, Known limits)");
}

StatusOr<std::unique_ptr<Zero3>> Zero3::create(dist::Communicator& comm, model::Transformer& m,
                                               std::vector<int64_t> cuts, int64_t vocab_rows) {
  LMT_RETURN_IF_ERROR(supports(m.backend()));
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
  z->L_ = L;
  int64_t max_block = 1;
  for (int64_t l = 0; l < L; ++l) {
    z->units_.push_back(z->range(lo[l], lo[l + 1]));
    max_block = std::max(max_block, lo[l + 1] - lo[l]);
  }
  z->stream_ = vocab_rows > 0 || (vocab_rows == 0 && comm.world() > 1);
  int64_t unit_cap = max_block, grad_cap = max_block;
  if (z->stream_) {
    z->plan_streamed(layout, vocab_rows, max_block);
    unit_cap = std::max(unit_cap, z->chunk_rows_ * z->C_);
    grad_cap = std::max(unit_cap, comm.world() * z->C_);  // also the embedding rows' exchange buffer
  }
  const int r = comm.rank();
  for (const Range& u : z->units_) z->rs_most_ = std::max(z->rs_most_, u.counts[r]);
  const int64_t shard_n = z->cuts_[r + 1] - z->cuts_[r];
  z->pshard_ = Tensor({std::max<int64_t>(shard_n, 1)}, DType::kF32);
  z->gshard_ = Tensor({std::max<int64_t>(shard_n, 1)}, DType::kF32);
  if (shard_n > 0)
    std::memcpy(z->pshard_.as<float>(), m.params().as<float>() + z->cuts_[r], static_cast<size_t>(shard_n) * 4);
  for (int s = 0; s < 2; ++s) {
    if (z->bf16_) z->slot_c_[s] = Tensor({unit_cap}, DType::kBF16);  // gathered as bf16 (the vectors: vec_)
    else z->slot_p_[s] = Tensor({unit_cap}, DType::kF32);
  }
  if (z->bf16_) {  // every block's vectors (norms, biases), compact, in f32
    std::vector<Compact::Part> parts;
    for (const auto& p : layout.params())
      if (p.layer >= 0 && p.shape.rank() == 1) parts.push_back({p.offset, p.numel, 0});
    z->vec_plan_.plan(std::move(parts), z->cuts_);
    z->vec_ = Tensor({std::max<int64_t>(z->vec_plan_.n, 1)}, DType::kF32);
  }
  z->gslot_ = Tensor({grad_cap}, DType::kF32);

  // Views, planned once: block l lives in slot l % 2.
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
      v = v.shape().rank() == 1 ? z->vec_plan_.remap(v, vec, vec) : TensorView();
    });
    z->vw_.push_back(w);
  }
  if (!z->stream_) z->plan_whole_ends(layout, lo[0], lo[L]);
  z->reduced_.assign(z->units_.size(), false);

  Zero3* self = z.get();
  m.set_params_needed([self](int64_t layer, bool backward) { self->on_params_needed(layer, backward); });
  m.set_block_grads_ready([self](int64_t layer) { self->on_grads_ready(layer); });
  if (z->stream_) m.set_streamed_vocab(self);
  m.release_storage();
  return z;
}

// The ends gathered whole: [0, lo0) and [hi, total) back to back in one buffer.
void Zero3::plan_whole_ends(const model::ParamLayout& layout, int64_t lo0, int64_t hi) {
  const int64_t total = layout.total_numel();
  ends_lo_ = range(0, lo0);
  ends_hi_ = range(hi, total);
  const int64_t ends_n = lo0 + (total - hi);
  ends_p_ = Tensor({std::max<int64_t>(ends_n, 1)}, DType::kF32);
  alias_ends_ = bf16_;  // f32 runs read the f32 LM head, so it must stay
  if (!alias_ends_) ends_g_ = Tensor({std::max<int64_t>(ends_n, 1)}, DType::kF32);
  if (bf16_) ends_c_ = Tensor({std::max<int64_t>(ends_n, 1)}, DType::kBF16);
  auto ends_views = [&](const Tensor& buf, DType dt) {
    model::ModelViews a = layout.views(rebased(buf, 0, dt), dt);
    model::ModelViews b = layout.views(rebased(buf, hi - lo0, dt), dt);
    const char* first = static_cast<const char*>(buf.view().data());
    const char* split = first + lo0 * static_cast<int64_t>(dtype_size(dt));
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
  ew_ = ends_views(ends_p_, DType::kF32);
  if (alias_ends_) {
    // The embeddings' and the LM head's gradients take the place of their f32 values, which a bf16
    // training pass reads only in the embedding lookup; the final norm's values are read again in
    // backward, so its gradients get a buffer of their own.
    eg_ = ew_;
    const TensorView& nw = ew_.final_norm_w;
    const TensorView& nb = ew_.final_norm_b;
    const int64_t n_w = nw.present() ? nw.numel() : 0, n_b = nb.present() ? nb.numel() : 0;
    norm_g_ = Tensor({std::max<int64_t>(n_w + n_b, 1)}, DType::kF32);
    const float* base = ends_p_.as<float>();
    if (n_w > 0) {
      eg_.final_norm_w = TensorView(norm_g_.as<float>(), nw.shape(), DType::kF32);
      kept_.push_back({nw.as<float>() - base, n_w});
    }
    if (n_b > 0) {
      eg_.final_norm_b = TensorView(norm_g_.as<float>() + n_w, nb.shape(), DType::kF32);
      kept_.push_back({nb.as<float>() - base, n_b});
    }
  } else {
    eg_ = ends_views(ends_g_, DType::kF32);
  }
  ec_ = bf16_ ? ends_views(ends_c_, DType::kBF16) : ew_;
}

Zero3::~Zero3() {
  for (auto& r : slot_req_)
    if (r) (void)r->wait();
  m_.set_params_needed(nullptr);
  m_.set_block_grads_ready(nullptr);
  if (stream_) m_.set_streamed_vocab(nullptr);
}

void Zero3::keep(Status s) {
  if (error_.ok() && !s.ok()) error_ = std::move(s);
}

void Zero3::launch(int slot, int64_t unit) {
  const Range& r = units_[unit];
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
  slot_layer_[slot] = unit;
}

void Zero3::wait(int slot) {
  if (!slot_req_[slot]) return;
  LMT_TRACE_SCOPE("zero3_gather_wait");
  Timer t;
  keep(slot_req_[slot]->wait());
  slot_req_[slot].reset();
  comm_seconds_ += t.seconds();
}

void Zero3::use_unit(int64_t unit) {
  const int s = static_cast<int>(unit % 2);
  if (slot_layer_[s] != unit) {
    wait(s);  // whatever was in flight into this slot
    launch(s, unit);
  }
  wait(s);
}

void Zero3::prefetch(int64_t unit) {
  if (unit < 0 || unit >= static_cast<int64_t>(units_.size())) return;
  const int s = static_cast<int>(unit % 2);
  if (slot_layer_[s] == unit) return;
  wait(s);
  launch(s, unit);
}

void Zero3::ensure_ends() {
  if (stream_) {  // the ends beside the vocabulary, once per update
    if (!small_fresh_) gather_compact(small_, small_p_);
    small_fresh_ = true;
    return;
  }
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

void Zero3::gather_compact(const Compact& c, Tensor& buf) {
  if (c.n == 0) return;
  Timer t;
  const int r = comm_.rank();
  float* dst = buf.as<float>();
  for (const Compact::Part& p : c.parts) {
    const int64_t a = std::max(p.offset, cuts_[r]), b = std::min(p.offset + p.numel, cuts_[r + 1]);
    if (a < b) std::memcpy(dst + p.at + (a - p.offset), shard_at(pshard_.as<float>(), a), static_cast<size_t>(b - a) * 4);
  }
  keep(comm_.all_gather(dst, c.counts));
  comm_seconds_ += t.seconds();
}

// Rank r's elements of the compact parts are one contiguous run: reduce-scattered into the
// scratch, then added to their places in the shard.
void Zero3::reduce_compact(const Compact& c, const Tensor& grads) {
  if (c.n == 0) return;
  Timer t;
  const int r = comm_.rank();
  float* sum = scratch(c.counts[r]);
  keep(comm_.reduce_scatter_sum(grads.as<float>(), sum, c.counts));
  int64_t first = 0;  // this rank's run starts after the lower ranks'
  for (int k = 0; k < r; ++k) first += c.counts[k];
  float* g = gshard_.as<float>();
  for (const Compact::Part& p : c.parts) {
    const int64_t a = std::max(p.offset, cuts_[r]), b = std::min(p.offset + p.numel, cuts_[r + 1]);
    const float* from = sum + (p.at + (a - p.offset) - first);
    for (int64_t i = 0; i < b - a; ++i) shard_at(g, a)[i] += from[i];
  }
  comm_seconds_ += t.seconds();
}

// bf16: every block's vectors, gathered in f32 once per update (they are small).
void Zero3::ensure_vectors() {
  if (!bf16_ || vec_fresh_) return;
  LMT_TRACE_SCOPE("zero3_gather_vectors");
  gather_compact(vec_plan_, vec_);
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
  use_unit(layer);
  prefetch(backward ? layer - 1 : layer + 1);  // forward past the last block: the LM head's first chunk
  if (backward) {
    const Range& r = units_[layer];
    m_.backend().fill(span(gslot_, r.end - r.begin), 0.0);
  }
  m_.bind_block(layer, vw_[layer], vg_[layer], vc_[layer]);
}

void Zero3::reduce_unit(int64_t unit) {
  LMT_TRACE_SCOPE("zero3_reduce_scatter");
  Timer t;
  for (auto& r : slot_req_)
    if (r) r->test();  // progress the prefetch
  const Range& r = units_[unit];
  const int64_t own = r.counts[comm_.rank()];
  float* dst = shard_at(gshard_.as<float>(), r.begin + r.own_at);
  if (!reduced_[unit]) {  // first micro-batch of the step: straight into the (zero) shard
    keep(comm_.reduce_scatter_sum(gslot_.as<float>(), dst, r.counts));
    reduced_[unit] = true;
  } else {
    float* add = scratch(rs_most_);  // the scratch is sized for every unit at once
    keep(comm_.reduce_scatter_sum(gslot_.as<float>(), add, r.counts));
    for (int64_t i = 0; i < own; ++i) dst[i] += add[i];
  }
  comm_seconds_ += t.seconds();
}

void Zero3::zero_grads() {
  m_.backend().fill(gshard_, 0.0);
  if (stream_ && small_.n > 0) m_.backend().fill(small_g_, 0.0);
  if (!stream_ && !alias_ends_) m_.backend().fill(ends_g_, 0.0);
  if (ends_ == Ends::kGrads) ends_ = Ends::kStale;  // dropped; the values are gathered again
  reduced_.assign(reduced_.size(), false);
  ends_reduced_ = false;
}

Status Zero3::finish() {
  LMT_TRACE_SCOPE("zero3_reduce_ends");
  for (int s = 0; s < 2; ++s) wait(s);
  if (stream_) {  // accumulated over the step's micro-batches, reduced once
    LMT_TRACE_SCOPE("zero3_reduce_small_ends");
    reduce_compact(small_, small_g_);
  } else if (alias_ends_) {
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
  }
  ends_ = Ends::kStale;
  small_fresh_ = false;
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
                          &ends_c_, &ends_g_, &norm_g_, &vec_, &rs_, &small_p_, &small_g_, &ids_})
    if (t->view().present()) b += static_cast<int64_t>(t->view().bytes());
  return b;
}

}  // namespace lmt::train
