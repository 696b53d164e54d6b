#include "lmt/train/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lmt/base/check.h"
#include "lmt/base/log.h"
#include "lmt/base/trace.h"
#include "lmt/optim/gradients.h"

namespace lmt::train {

namespace {
// Elements [begin, begin + n) of a flat buffer, on the buffer's device (the copy op checks dtypes).
TensorView f32_span(const TensorView& flat, int64_t begin, int64_t n) {
  return flat.reshape({flat.numel()}).slice_rows(begin, begin + n);
}
}  // namespace

DataParallel::DataParallel(dist::Communicator& comm, const model::ParamLayout& layout, const optim::OptimizerConfig& oc,
                           int zero, int64_t bucket_bytes)
    : comm_(comm), zero_(zero), total_(layout.total_numel()), bucket_elems_(bucket_bytes / 4) {
  if ((zero_ > 0 && comm_.world() > 1) || zero_ == 3) {  // ZeRO 3 also on one process (its whole buffer)
    cuts_ = optim::balanced_cuts(oc, layout, comm_.world());
  } else {  // every rank updates the whole buffer: its "shard" is [0, total)
    cuts_.assign(comm_.world() + 1, total_);
    cuts_[comm_.rank()] = 0;
  }
  // Block extents; buckets need blocks laid out contiguously in order with nothing else between.
  int64_t L = 0;
  for (const auto& p : layout.params()) L = std::max(L, p.layer + 1);
  layer_lo_.assign(L, total_);
  layer_hi_.assign(L, 0);
  for (const auto& p : layout.params())
    if (p.layer >= 0) {
      layer_lo_[p.layer] = std::min(layer_lo_[p.layer], p.offset);
      layer_hi_[p.layer] = std::max(layer_hi_[p.layer], p.offset + p.numel);
    }
  bool ok = L > 0 && bucket_elems_ > 0 && zero_ < 2 && comm_.world() > 1;
  for (int64_t l = 0; ok && l + 1 < L; ++l) ok = layer_hi_[l] <= layer_lo_[l + 1];
  for (const auto& p : layout.params())
    if (ok && p.layer < 0 && p.offset < layer_hi_[L - 1] && p.offset + p.numel > layer_lo_[0]) ok = false;
  bucketing_ = ok;
}

DataParallel::~DataParallel() = default;

Status DataParallel::shard_parameters(model::Transformer& m, int64_t vocab_rows) {
  if (zero_ != 3 || z3_) return Status::Ok();
  LMT_ASSIGN_OR_RETURN(z3_, Zero3::create(comm_, m, cuts_, vocab_rows));
  return Status::Ok();
}

void DataParallel::zero_grads(model::Transformer& m, bool defer_block_matrices) {
  m.zero_grads(defer_block_matrices);
  if (z3_) z3_->zero_grads();
}

TensorView DataParallel::update_params(model::Transformer& m) const { return z3_ ? z3_->shard_params() : m.params(); }
TensorView DataParallel::update_grads(model::Transformer& m) const { return z3_ ? z3_->shard_grads() : m.grads(); }
TensorView DataParallel::update_mirror(model::Transformer& m) const { return z3_ ? TensorView() : m.compute_mirror(); }

Status DataParallel::gather_params(model::Transformer& m, float* full) {
  if (z3_) return z3_->gather_full(full);
  std::memcpy(full, m.params().as<float>(), static_cast<size_t>(total_) * 4);
  return Status::Ok();
}

void DataParallel::load_params(model::Transformer& m, const float* full) {
  if (z3_) return z3_->load_full(full);
  std::memcpy(m.params().as<float>(), full, static_cast<size_t>(total_) * 4);
  m.refresh_compute_weights();
}

DataParallel::StateMemory DataParallel::model_state_memory(const model::Transformer& m, optim::Optimizer& o) const {
  StateMemory s;
  s.mirror = m.compute_mirror().present() ? static_cast<int64_t>(m.compute_mirror().bytes()) : 0;
  s.params_grads = m.storage_bytes() - s.mirror;
  if (z3_) {
    s.params_grads += z3_->shard_bytes();
    s.gather_buffers = z3_->bytes() - z3_->shard_bytes();
  }
  for (const auto& [name, v] : o.state()) s.optimizer_state += static_cast<int64_t>(v.bytes());
  return s;
}

Status DataParallel::use_shared_memory(model::Transformer& m) {
  if (zero_ == 3) {
    if (comm_.is_root() && comm_.world() > 1) {  // braces: LMT_LOG is an if/else macro
      LMT_LOG(INFO) << "data parallel: ZeRO 3 gathers and reduce-scatters with MPI messages (no shared-memory path yet)";
    }
    return Status::Ok();
  }
  if (comm_.world() == 1 || shared_memory()) return Status::Ok();
  if (!m.backend().device().is_host()) {  // the model's buffers are the device's, reduced by its communicator
    if (comm_.is_root()) {
      LMT_LOG(INFO) << "data parallel: " << comm_.world() << " ranks over " << comm_.name() << " ("
                    << m.backend().name() << " memory; no shared-memory path)";
    }
    return Status::Ok();
  }
  using Storage = model::Transformer::Storage;
  std::shared_ptr<dist::SymmetricBuffer> bufs[3];
  Status st = m.set_storage([&](Storage role, int64_t numel, DType dtype) -> StatusOr<Tensor> {
    LMT_ASSIGN_OR_RETURN(std::unique_ptr<dist::SymmetricBuffer> b,
                         comm_.allocate_symmetric(numel * static_cast<int64_t>(dtype_size(dtype))));
    std::shared_ptr<dist::SymmetricBuffer> shared(std::move(b));
    bufs[static_cast<int>(role)] = shared;
    return Tensor::over(shared->data(), Shape{numel}, dtype, shared);
  });
  if (st.code() == StatusCode::kUnimplemented) {
    if (comm_.is_root()) {
      LMT_LOG(INFO) << "data parallel: " << st.message() << "; using message passing";
    }
    return Status::Ok();
  }
  LMT_RETURN_IF_ERROR(st);
  params_buf_ = bufs[static_cast<int>(Storage::kParams)];
  grads_buf_ = bufs[static_cast<int>(Storage::kGrads)];
  mirror_buf_ = bufs[static_cast<int>(Storage::kMirror)];  // null unless prepared for bf16
  if (comm_.is_root()) {
    int64_t bytes = params_buf_->bytes() + grads_buf_->bytes() + (mirror_buf_ ? mirror_buf_->bytes() : 0);
    LMT_LOG(INFO) << "data parallel: parameters and gradients in memory shared by the " << comm_.world()
                  << " ranks (" << (bytes >> 20) << " MiB per rank); reductions read the peers' buffers";
  }
  return Status::Ok();
}

void DataParallel::arm(model::Transformer& m) {
  if (comm_.world() == 1 || z3_) return;
  inflight_.clear();
  if (!bucketing_ || shared_memory()) return;
  const int64_t L = static_cast<int64_t>(layer_lo_.size());
  pending_lo_ = pending_hi_ = launched_lo_ = layer_hi_[L - 1];
  m.set_block_grads_ready([this, &m](int64_t layer) { on_block_ready(m, layer); });
}

Status DataParallel::launch(float* grads, int64_t begin, int64_t end) {
  if (end <= begin) return Status::Ok();
  inflight_.push_back(comm_.all_reduce_sum_async(grads + begin, end - begin));
  return Status::Ok();
}

void DataParallel::on_block_ready(model::Transformer& m, int64_t layer) {
  for (auto& r : inflight_) r->test();  // progress the buckets in flight (MPI moves them only inside calls)
  pending_lo_ = layer_lo_[layer];
  if (pending_hi_ - pending_lo_ >= bucket_elems_ || layer == 0) {
    LMT_TRACE_SCOPE("grad_bucket_launch");
    (void)launch(m.grads().as<float>(), pending_lo_, pending_hi_);  // errors surface in finish()'s wait
    launched_lo_ = pending_lo_;
    pending_hi_ = pending_lo_;
  }
}

Status DataParallel::finish(model::Transformer& m, bool full_grads) {
  grads_sharded_ = false;
  if (z3_) {
    grads_sharded_ = true;
    LMT_TRACE_SCOPE("grad_reduce");
    return z3_->finish();
  }
  if (comm_.world() == 1) return Status::Ok();
  LMT_TRACE_SCOPE("grad_reduce");
  float* g = m.grads().as<float>();
  Status st = Status::Ok();
  if (shared_memory()) {
    grads_sharded_ = zero_ == 2 || (zero_ == 1 && !full_grads);
    if (grads_sharded_) return grads_buf_->reduce_scatter_sum_f32(0, shard_counts());
    return grads_buf_->all_reduce_sum_f32(0, total_);
  }
  grads_sharded_ = zero_ == 2;
  if (zero_ == 2) {
    const std::vector<int64_t> counts = shard_counts();
    if (!rs_scratch_.view().present())  // where the gradients are (a device communicator reduces there)
      rs_scratch_ = Tensor({std::max<int64_t>(counts[rank()], 1)}, DType::kF32, m.backend().allocator());
    st = comm_.reduce_scatter_sum(g, rs_scratch_.as<float>(), counts);
    if (st.ok() && counts[rank()] > 0)
      m.backend().copy(f32_span(m.grads(), shard_begin(), counts[rank()]), f32_span(rs_scratch_, 0, counts[rank()]));
  } else if (bucketing_) {
    m.set_block_grads_ready(nullptr);
    // Everything outside the launched block range: embeddings, final norm, LM head.
    const int64_t hi = layer_hi_.back();
    Status a = launch(g, 0, launched_lo_);
    Status b = launch(g, hi, total_);
    (void)a;
    (void)b;
  } else {
    inflight_.push_back(comm_.all_reduce_sum_async(g, total_));
  }
  for (auto& r : inflight_) {
    Status s = r->wait();
    if (st.ok() && !s.ok()) st = s;
  }
  inflight_.clear();
  return st;
}

void DataParallel::add_model_parallel_group(dist::Communicator& group,
                                            std::vector<std::pair<int64_t, int64_t>> replicated) {
  LMT_CHECK(z3_ == nullptr) << "model parallelism with ZeRO 3";
  if (group.rank() != 0) {  // another rank of this group counts these ranges
    mp_skip_.insert(mp_skip_.end(), replicated.begin(), replicated.end());
    std::sort(mp_skip_.begin(), mp_skip_.end());
  }
  mp_groups_.push_back(&group);
}

double DataParallel::counted_sum_squares(model::Transformer& m, int64_t lo, int64_t hi) const {
  kernels::Backend& be = m.backend();
  const TensorView g = m.grads();
  double ss = 0;
  int64_t at = lo;  // [at, ...) not yet summed
  for (const auto& [b, e] : mp_skip_) {
    const int64_t sb = std::max(b, at), se = std::min(e, hi);
    if (sb >= se) continue;
    if (sb > at) ss += be.sum_squares(g.slice_rows(at, sb));
    at = se;
  }
  if (hi > at) ss += be.sum_squares(g.slice_rows(at, hi));
  return ss;
}

StatusOr<double> DataParallel::grad_norm(model::Transformer& m) {
  if (!mp_groups_.empty()) {  // this rank's range over the dp group, then every part over each group
    const bool sharded = grads_sharded_;
    double ss = counted_sum_squares(m, sharded ? shard_begin() : 0, sharded ? shard_end() : total_);
    if (sharded) LMT_RETURN_IF_ERROR(comm_.all_reduce_sum(&ss, 1));
    for (dist::Communicator* g : mp_groups_) LMT_RETURN_IF_ERROR(g->all_reduce_sum(&ss, 1));
    return std::sqrt(ss);
  }
  if (z3_) {
    double ss = z3_->grad_sum_squares(m.backend());
    if (comm_.world() > 1) LMT_RETURN_IF_ERROR(comm_.all_reduce_sum(&ss, 1));
    return std::sqrt(ss);
  }
  if (!grads_sharded_) return optim::global_grad_norm(m.backend(), m.grads());
  double ss = 0;
  if (shard_end() > shard_begin())
    ss = m.backend().sum_squares(m.grads().slice_rows(shard_begin(), shard_end()));
  LMT_RETURN_IF_ERROR(comm_.all_reduce_sum(&ss, 1));
  return std::sqrt(ss);
}

Status DataParallel::after_update(model::Transformer& m) {
  if (z3_) {  // each rank updated its own shard in place; the gathered copies are stale
    z3_->invalidate();
    return Status::Ok();
  }
  if (!sharded()) return Status::Ok();
  LMT_TRACE_SCOPE("param_gather");
  const std::vector<int64_t> counts = shard_counts();
  if (!shared_memory()) {
    LMT_RETURN_IF_ERROR(comm_.all_gather(m.params().as<float>(), counts));
    m.refresh_compute_weights();
    return Status::Ok();
  }
  auto in_bytes = [&](int64_t elem) {
    std::vector<int64_t> b(counts);
    for (auto& c : b) c *= elem;
    return b;
  };
  LMT_RETURN_IF_ERROR(params_buf_->all_gather_bytes(0, in_bytes(4)));
  // The optimizer wrote this shard's mirror in its update pass; gather the others' (half the bytes
  // of the f32 parameters, and no conversion pass over the whole model).
  if (mirror_buf_ && m.compute_mirror().data() == mirror_buf_->data())
    return mirror_buf_->all_gather_bytes(0, in_bytes(2));
  m.refresh_compute_weights();
  return Status::Ok();
}

std::vector<int64_t> DataParallel::shard_counts() const {
  std::vector<int64_t> counts(comm_.world());
  for (int r = 0; r < comm_.world(); ++r) counts[r] = cuts_[r + 1] - cuts_[r];
  return counts;
}

StatusOr<double> DataParallel::mean(double v) {
  dist::Communicator& c = data_ != nullptr ? *data_ : comm_;
  if (c.world() == 1) return v;
  LMT_RETURN_IF_ERROR(c.all_reduce_sum(&v, 1));
  return v / c.world();
}

std::vector<std::pair<std::string, Tensor>> DataParallel::full_state_buffers(optim::Optimizer& o) const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, v] : o.state()) out.emplace_back(name, Tensor({total_}, DType::kF32));
  return out;
}

StatusOr<std::vector<std::pair<std::string, Tensor>>> DataParallel::gather_state(optim::Optimizer& o) {
  auto full = full_state_buffers(o);
  auto st = o.state();
  const int64_t b = o.state_begin(), n = o.state_end() - o.state_begin();
  const std::vector<int64_t> counts = shard_counts();
  for (size_t i = 0; i < st.size(); ++i) {
    if (n > 0) o.backend().copy(f32_span(full[i].second, b, n), f32_span(st[i].second, 0, n));
    if (sharded()) LMT_RETURN_IF_ERROR(comm_.all_gather(full[i].second.as<float>(), counts));
  }
  return full;
}

void DataParallel::load_state_slice(optim::Optimizer& o, const std::vector<std::pair<std::string, Tensor>>& full) const {
  auto st = o.state();
  LMT_CHECK(st.size() == full.size());
  const int64_t b = o.state_begin(), n = o.state_end() - o.state_begin();
  for (size_t i = 0; i < st.size(); ++i)
    if (n > 0) o.backend().copy(f32_span(st[i].second, 0, n), f32_span(full[i].second, b, n));
}

}  // namespace lmt::train
