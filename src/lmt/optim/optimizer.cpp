#include "lmt/optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>

#include "lmt/base/check.h"
#include "lmt/base/log.h"

namespace lmt::optim {
namespace {

using model::ParamInfo;
using model::ParamLayout;
using model::ParamRole;

// Shortest decimal that reads back as the same float ("0.95", not "0.949999988").
std::string show(float v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

Status check_range(const char* key, float v, float lo, bool lo_open, float hi, bool hi_open, const char* hint) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (ok) return Status::Ok();
  const std::string bound =
      std::isinf(hi) ? std::string(lo_open ? "> " : ">= ") + show(lo)
                     : std::string("in ") + (lo_open ? "(" : "[") + show(lo) + ", " + show(hi) + (hi_open ? ")" : "]");
  return InvalidArgument(std::string("optim.") + key + " = " + show(v) + " must be " + bound, hint);
}

constexpr float kInf = INFINITY;

bool is_muon(const OptimizerConfig& c, const ParamInfo& p) { return c.name == "muon" && p.role == ParamRole::kMatrix; }

float adamw_weight_decay(const OptimizerConfig& c, ParamRole role) {
  switch (role) {
    case ParamRole::kMatrix:
      return c.weight_decay;
    case ParamRole::kEmbedding:
    case ParamRole::kPosition:
    case ParamRole::kLmHead:
      return c.decay_embeddings ? c.weight_decay : 0.0f;
    case ParamRole::kNorm:
    case ParamRole::kBias:
      return 0.0f;
  }
  return 0.0f;
}

int64_t align_up(int64_t x) { return (x + kCutAlignment - 1) / kCutAlignment * kCutAlignment; }

std::vector<FlatRange> muon_extents(const OptimizerConfig& c, const ParamLayout& layout) {
  std::vector<FlatRange> ex;
  for (const ParamInfo& p : layout.params())
    if (is_muon(c, p)) ex.push_back({p.offset, p.offset + p.numel});
  return ex;
}

// The Muon matrix that holds i strictly inside it, or nullptr.
const FlatRange* containing(const std::vector<FlatRange>& muon, int64_t i) {
  for (const FlatRange& m : muon)
    if (i > m.begin && i < m.end) return &m;
  return nullptr;
}

bool legal_cut(const std::vector<FlatRange>& muon, int64_t total, int64_t i) {
  if (i == 0 || i == total) return true;
  if (i < 0 || i > total || i % kCutAlignment != 0) return false;
  return containing(muon, i) == nullptr;
}

// The element just past tensor k's slot: the next tensor's start (its alignment gap included).
int64_t slot_end(const ParamLayout& layout, size_t k) {
  const auto& ps = layout.params();
  return k + 1 < ps.size() ? ps[k + 1].offset : layout.total_numel();
}

}  // namespace

Status validate(const OptimizerConfig& c) {
  if (c.name != "adamw" && c.name != "muon")
    return InvalidArgument("optim.name = '" + c.name + "' is not an optimizer", "valid names: adamw, muon");
  LMT_RETURN_IF_ERROR(check_range("lr", c.lr, 0, true, kInf, false, "the peak learning rate, e.g. 6e-4"));
  LMT_RETURN_IF_ERROR(check_range("beta1", c.beta1, 0, false, 1, true, "typical: 0.9"));
  LMT_RETURN_IF_ERROR(check_range("beta2", c.beta2, 0, false, 1, true,
                                  "typical: 0.95 for LLM pre-training, 0.999 (PyTorch's default)"));
  LMT_RETURN_IF_ERROR(check_range("eps", c.eps, 0, true, kInf, false, "typical: 1e-8"));
  LMT_RETURN_IF_ERROR(
      check_range("weight_decay", c.weight_decay, 0, false, kInf, false, "typical: 0.1; 0 disables weight decay"));
  LMT_RETURN_IF_ERROR(check_range("muon_lr", c.muon_lr, 0, true, kInf, false, "typical: 0.02"));
  LMT_RETURN_IF_ERROR(check_range("muon_momentum", c.muon_momentum, 0, false, 1, true, "typical: 0.95"));
  LMT_RETURN_IF_ERROR(check_range("muon_weight_decay", c.muon_weight_decay, 0, false, kInf, false,
                                  "0 (the reference's default) disables it"));
  if (c.muon_ns_dtype != "bf16" && c.muon_ns_dtype != "fp32")
    return InvalidArgument("optim.muon_ns_dtype = '" + c.muon_ns_dtype + "' is not a Newton-Schulz precision",
                           "use \"bf16\" (bf16 GEMM operands, f32 accumulation; the default) or \"fp32\"");
  if (!parse_ns_method(c.muon_ns_method))
    return InvalidArgument("optim.muon_ns_method = '" + c.muon_ns_method + "' is not a Newton-Schulz method",
                           "use \"gram\" (the same polynomial on the Gram matrix, fewer FLOPs; the default) or "
                           "\"standard\" (the reference's iteration on X)");
  if (c.muon_ns_steps < 1 || c.muon_ns_steps > 100)
    return InvalidArgument("optim.muon_ns_steps = " + std::to_string(c.muon_ns_steps) + " must be in [1, 100]",
                           "the reference uses 5 Newton-Schulz steps");
  if (static_cast<double>(c.lr) * c.weight_decay >= 1.0 || static_cast<double>(c.muon_lr) * c.muon_weight_decay >= 1.0)
    return InvalidArgument("optim.lr · optim.weight_decay (" + show(c.lr) + " · " + show(c.weight_decay) +
                               ") and optim.muon_lr · optim.muon_weight_decay (" + show(c.muon_lr) + " · " +
                               show(c.muon_weight_decay) + ") must be below 1",
                           "decoupled decay multiplies weights by 1 - lr·wd each step; lower the decay");
  return Status::Ok();
}

bool is_legal_cut(const OptimizerConfig& c, const ParamLayout& layout, int64_t i) {
  return legal_cut(muon_extents(c, layout), layout.total_numel(), i);
}

std::vector<int64_t> balanced_cuts(const OptimizerConfig& c, const ParamLayout& layout, int parts) {
  LMT_CHECK(parts >= 1) << "balanced_cuts: parts = " << parts;
  const int64_t total = layout.total_numel();
  const std::vector<FlatRange> muon = muon_extents(c, layout);
  // Nearest legal cut at or below / at or above x. Each loop moves strictly past the matrix that
  // holds x, so it ends (0 and total are never inside a matrix).
  auto below = [&](int64_t x) {
    x = x / kCutAlignment * kCutAlignment;
    while (const FlatRange* m = containing(muon, x)) x = m->begin / kCutAlignment * kCutAlignment;
    return x;
  };
  auto above = [&](int64_t x) {
    x = std::min(total, align_up(x));
    while (const FlatRange* m = containing(muon, x)) x = std::min(total, align_up(m->end));
    return x;
  };
  std::vector<int64_t> cuts{0};
  for (int k = 1; k < parts; ++k) {
    const int64_t target = static_cast<int64_t>(static_cast<__int128>(total) * k / parts);
    const int64_t lo = below(target), hi = above(target);
    cuts.push_back(std::clamp(target - lo <= hi - target ? lo : hi, cuts.back(), total));
  }
  cuts.push_back(total);
  return cuts;
}

StatusOr<std::unique_ptr<Optimizer>> Optimizer::create(const OptimizerConfig& c, const ParamLayout& layout,
                                                       kernels::Backend& backend) {
  return create(c, layout, backend, 0, layout.total_numel());
}

StatusOr<std::unique_ptr<Optimizer>> Optimizer::create(const OptimizerConfig& c, const ParamLayout& layout,
                                                       kernels::Backend& backend, int64_t state_begin,
                                                       int64_t state_end) {
  LMT_RETURN_IF_ERROR(validate(c));
  if (state_begin > state_end || !optim::is_legal_cut(c, layout, state_begin) ||
      !optim::is_legal_cut(c, layout, state_end))
    return InvalidArgument("optimizer state range [" + std::to_string(state_begin) + ", " + std::to_string(state_end) +
                               ") does not start and end at legal cut points of a " +
                               std::to_string(layout.total_numel()) + "-element parameter buffer",
                           "use balanced_cuts() or shard_boundaries(): multiples of 16 outside Muon matrices");
  return std::unique_ptr<Optimizer>(new Optimizer(c, layout, backend, state_begin, state_end));
}

Optimizer::Optimizer(const OptimizerConfig& c, const ParamLayout& layout, kernels::Backend& backend,
                     int64_t state_begin, int64_t state_end)
    : config_(c),
      backend_(backend),
      total_(layout.total_numel()),
      state_begin_(state_begin),
      state_end_(state_end),
      muon_extents_(muon_extents(c, layout)) {
  const int64_t n = state_end - state_begin;
  std::map<std::pair<int64_t, int64_t>, int64_t> muon_shapes;  // [R, C] -> matrices in the state range
  const auto& ps = layout.params();
  for (size_t k = 0; k < ps.size(); ++k) {
    const ParamInfo& p = ps[k];
    if (p.offset % kCutAlignment == 0) aligned_starts_.push_back(p.offset);
    if (is_muon(c, p)) {
      LMT_CHECK(p.shape.rank() == 2) << "Muon matrix " << p.name << " has shape " << p.shape.to_string();
      muon_matrices_.push_back({p.offset, p.shape[0], p.shape[1]});
      if (p.offset < state_begin || p.offset >= state_end) continue;  // another rank's matrix
      ++muon_shapes[{p.shape[0], p.shape[1]}];
      continue;
    }
    // The slot runs to the next tensor, over any alignment gap. Only members of one fused group
    // (same role, so same decay) follow each other unaligned (ParamLayout's `joined`), and they
    // merge here, so every span starts aligned: a cut then never moves an element between the
    // kernel's vector body and its scalar tail, which keeps sharded steps bit-identical.
    const AdamWSpan span{std::max(p.offset, state_begin), std::min(slot_end(layout, k), state_end),
                         adamw_weight_decay(c, p.role)};
    if (span.begin >= span.end) continue;  // another rank's tensor
    if (!adamw_spans_.empty() && adamw_spans_.back().end == span.begin &&
        adamw_spans_.back().weight_decay == span.weight_decay) {
      adamw_spans_.back().end = span.end;
    } else {
      adamw_spans_.push_back(span);
    }
  }
  // Optimizer state lives where the backend computes (host for cpu/ref, the GPU for cuda).
  adam_m_ = Tensor(Shape{n}, DType::kF32, backend_.allocator());
  adam_v_ = Tensor(Shape{n}, DType::kF32, backend_.allocator());
  if (c.name == "muon") muon_momentum_ = Tensor(Shape{n}, DType::kF32, backend_.allocator());
  // Scratch for the largest batch step_muon can form (a shard batches a subset of these).
  MuonCapacity cap;
  for (const auto& [shape, count] : muon_shapes) {
    const auto [R, C] = shape;
    const int64_t nb = muon_batch_size(count, R * C, muon_batch_elements()), side = std::min(R, C);
    cap.numel = std::max(cap.numel, nb * R * C);
    cap.gram = std::max(cap.gram, nb * side * side);
  }
  if (!muon_shapes.empty()) {
    const NsPrecision precision = ns_precision(c.muon_ns_dtype, backend_);
    if (precision == NsPrecision::kF32NoRestart) {
      LMT_LOG(INFO) << "Muon: Newton-Schulz in f32 without Gram restarts (optim.muon_ns_dtype = \"bf16\" on a "
                    << backend_.name() << " backend without native bf16 GEMMs: faster here, and more exact)";
    }
    muon_ = std::make_unique<MuonUpdater>(cap, precision, *parse_ns_method(c.muon_ns_method), backend_.allocator());
  }
}

Optimizer::~Optimizer() = default;

TensorView Optimizer::state_span(const Tensor& t, int64_t begin, int64_t end) const {
  float* base = t.as<float>() + (begin - state_begin_);
  return TensorView(base, Shape{end - begin}, DType::kF32, t.device());
}

void Optimizer::step(const TensorView& params, const TensorView& grads, const TensorView& param_bf16, float lr_mult,
                     float grad_scale, int64_t step, int64_t shard_begin, int64_t shard_end) {
  LMT_CHECK(params.dtype() == DType::kF32 && params.numel() == total_)
      << "Optimizer::step: params " << params.to_string() << ", expected f32[" << total_ << "]";
  LMT_CHECK(grads.dtype() == DType::kF32 && grads.numel() == total_)
      << "Optimizer::step: grads " << grads.to_string() << ", expected f32[" << total_ << "]";
  LMT_CHECK(!param_bf16.present() || (param_bf16.dtype() == DType::kBF16 && param_bf16.numel() == total_))
      << "Optimizer::step: param_bf16 " << param_bf16.to_string() << ", expected bf16[" << total_ << "] or absent";
  LMT_CHECK(step >= 1) << "Optimizer::step: step " << step << " (1-based)";
  if (shard_end < 0) {  // the defaults: everything this optimizer holds state for
    if (shard_begin == 0) shard_begin = state_begin_;
    shard_end = state_end_;
  }
  LMT_CHECK(state_begin_ <= shard_begin && shard_begin <= shard_end && shard_end <= state_end_)
      << "Optimizer::step: shard [" << shard_begin << ", " << shard_end << ") outside the state range [" << state_begin_
      << ", " << state_end_ << ")";
  LMT_CHECK(is_legal_cut(shard_begin) && is_legal_cut(shard_end))
      << "Optimizer::step: shard [" << shard_begin << ", " << shard_end
      << ") does not begin and end at legal cut points (multiples of " << kCutAlignment << " outside Muon matrices)";
  step_adamw(params, grads, param_bf16, lr_mult, grad_scale, step, shard_begin, shard_end);
  step_muon(params, grads, param_bf16, lr_mult, grad_scale, shard_begin, shard_end);
}

void Optimizer::step_adamw(const TensorView& params, const TensorView& grads, const TensorView& param_bf16,
                           float lr_mult, float grad_scale, int64_t step, int64_t begin, int64_t end) {
  kernels::AdamWParams a;
  a.lr = config_.lr * lr_mult;
  a.beta1 = config_.beta1;
  a.beta2 = config_.beta2;
  a.eps = config_.eps;
  a.step = step;
  a.grad_scale = grad_scale;
  auto flat = [](const TensorView& t, int64_t b, int64_t e) {
    const char* base = static_cast<const char*>(t.data()) + static_cast<size_t>(b) * dtype_size(t.dtype());
    return TensorView(const_cast<char*>(base), Shape{e - b}, t.dtype(), t.device());
  };
  for (const AdamWSpan& s : adamw_spans_) {
    const int64_t b = std::max(s.begin, begin), e = std::min(s.end, end);
    if (b >= e) continue;
    a.weight_decay = s.weight_decay;
    backend_.adamw_update(flat(params, b, e), flat(grads, b, e), state_span(adam_m_, b, e), state_span(adam_v_, b, e),
                          param_bf16.present() ? flat(param_bf16, b, e) : TensorView(), a);
  }
}

void Optimizer::step_muon(const TensorView& params, const TensorView& grads, const TensorView& param_bf16,
                          float lr_mult, float grad_scale, int64_t begin, int64_t end) {
  MuonStepParams p;
  p.lr = config_.muon_lr * lr_mult;
  p.momentum = config_.muon_momentum;
  p.nesterov = config_.muon_nesterov;
  p.ns_steps = config_.muon_ns_steps;
  p.weight_decay = config_.muon_weight_decay;
  p.grad_scale = grad_scale;
  auto matrix = [](const TensorView& t, const MuonMatrix& m) {
    char* base = static_cast<char*>(t.data()) + static_cast<size_t>(m.offset) * dtype_size(t.dtype());
    return TensorView(base, Shape{m.rows, m.cols}, t.dtype(), t.device());
  };
  // Legal cuts put a matrix wholly inside or outside [begin, end) (inside the state range).
  auto mine = [&](const MuonMatrix& m) { return m.offset >= begin && m.offset < end; };
  std::vector<bool> done(muon_matrices_.size(), false);
  for (size_t k = 0; k < muon_matrices_.size(); ++k) {
    if (done[k] || !mine(muon_matrices_[k])) continue;
    const MuonMatrix& first = muon_matrices_[k];
    int64_t count = 0;  // this shard's matrices of first's shape
    for (size_t j = k; j < muon_matrices_.size(); ++j)
      count += !done[j] && mine(muon_matrices_[j]) && muon_matrices_[j].rows == first.rows &&
               muon_matrices_[j].cols == first.cols;
    const size_t batch = static_cast<size_t>(muon_batch_size(count, first.rows * first.cols, muon_batch_elements()));
    muon_batch_.clear();
    for (size_t j = k; j < muon_matrices_.size(); ++j) {
      const MuonMatrix& m = muon_matrices_[j];
      if (done[j] || !mine(m) || m.rows != first.rows || m.cols != first.cols) continue;
      done[j] = true;
      const TensorView momentum =
          state_span(muon_momentum_, m.offset, m.offset + m.rows * m.cols).reshape(Shape{m.rows, m.cols});
      muon_batch_.push_back({matrix(params, m), matrix(grads, m), momentum,
                             param_bf16.present() ? matrix(param_bf16, m) : TensorView()});
      if (muon_batch_.size() == batch) {
        muon_->update(backend_, muon_batch_, p);
        muon_batch_.clear();
      }
    }
    if (!muon_batch_.empty()) muon_->update(backend_, muon_batch_, p);
  }
}

std::vector<std::pair<std::string, TensorView>> Optimizer::state() {
  std::vector<std::pair<std::string, TensorView>> s{{"adam.m", adam_m_.view()}, {"adam.v", adam_v_.view()}};
  if (config_.name == "muon") s.emplace_back("muon.momentum", muon_momentum_.view());
  return s;
}

std::vector<int64_t> Optimizer::shard_boundaries() const {
  std::vector<int64_t> cuts;
  for (int64_t s : aligned_starts_)
    if (is_legal_cut(s)) cuts.push_back(s);  // (not inside another Muon matrix either)
  if (cuts.empty() || cuts.front() != 0) cuts.insert(cuts.begin(), 0);
  cuts.push_back(total_);
  return cuts;
}

bool Optimizer::is_legal_cut(int64_t i) const { return legal_cut(muon_extents_, total_, i); }

}  // namespace lmt::optim
