// Transformer: storage, the step-level forward/backward, and the embedding and LM head ends.
// One block's forward and backward live in block.cpp (attention_block.cpp, ffn_block.cpp).
#include "lmt/model/transformer.h"

#include <algorithm>
#include <cmath>

#include "lmt/base/log.h"
#include "lmt/base/trace.h"
#include "lmt/model/block.h"
#include "lmt/model/norm.h"

namespace lmt::model {

using kernels::CrossEntropyOptions;

Transformer::Transformer(const ModelConfig& config, kernels::Backend& backend, DType master)
    : layout_(config), backend_(backend), master_(master) {
  Status s = config.validate();
  LMT_CHECK(s.ok()) << s.ToString();
  LMT_CHECK(master == DType::kF32 || master == DType::kF64) << "master dtype must be f32 or f64";
  params_ = Tensor({layout_.total_numel()}, master, backend_.allocator());
  grads_ = Tensor({layout_.total_numel()}, master, backend_.allocator());
  w_ = param_views();
  gw_ = grad_views();
  wc_ = w_;
  if (config.moe.enabled()) {
    LMT_CHECK(!config.mlp_bias) << "MoE layers have no FFN biases (mlp_bias must be false)";
    moe_stats_.resize(static_cast<size_t>(config.n_layers));
    if (config.moe.balance == MoeBalance::kBiasUpdate) {
      router_bias_ = Tensor({config.n_layers, config.moe.num_experts}, DType::kF32);  // zero
      if (!backend_.device().is_host())
        router_bias_device_ = Tensor({config.n_layers, config.moe.num_experts}, DType::kF32, backend_.allocator());
    }
  }
}

void Transformer::set_expert_parallel(ExpertParallel ep) {
  if (ep.enabled()) {
    LMT_CHECK(config().moe.enabled() && config().moe.num_experts % ep.size == 0)
        << "expert parallelism over " << ep.size << " ranks needs moe.num_experts divisible by it";
    LMT_CHECK(plan_.options.ep == ep.size) << "prepare() with RunOptions::ep = " << ep.size << " first";
    LMT_CHECK(ep.rank >= 0 && ep.rank < ep.size && ep.all_to_all_v) << "bad expert-parallel group";
    const MoeConfig& m = config().moe;
    LMT_CHECK(!m.experts_sharded() || (m.held_experts() * ep.size == m.num_experts && m.first_expert == ep.rank * m.held_experts()))
        << "model '" << config().name << "' holds experts [" << m.first_expert << ", " << m.first_expert + m.held_experts()
        << "), not expert-parallel rank " << ep.rank << " of " << ep.size << "'s";
  }
  ep_ = std::move(ep);
}

void Transformer::set_tensor_parallel(TensorParallel tp) {
  if (tp.enabled()) {
    LMT_CHECK(tp.rank >= 0 && tp.rank < tp.size && tp.all_reduce && tp.all_gather) << "bad tensor-parallel group";
    vocab_.rows = config().padded_vocab();
    vocab_.begin = tp.rank * vocab_.rows;
    vocab_.real = std::clamp<int64_t>(tp.vocab_size - vocab_.begin, 0, vocab_.rows);
    LMT_CHECK(vocab_.real > 0 && config().vocab_pad_to == 1)
        << "tensor parallelism: model '" << config().name << "' is not a part of a " << tp.vocab_size << "-token vocabulary";
    LMT_CHECK(!config().qk_norm_full)
        << "tensor parallelism of model '" << config().name << "': qk_norm_full is not split";
  }
  tp_ = std::move(tp);
}

void Transformer::share_storage(const Transformer& owner) {
  LMT_CHECK(layout_.total_numel() == owner.layout_.total_numel() && master_ == owner.master_ && !owner.released_ &&
            !released_)
      << "share_storage: models of different layouts or masters, or released storage";
  auto alias = [](const Tensor& t) {
    return t.view().present() ? Tensor::over(t.view().data(), t.shape(), t.dtype(), nullptr, t.device()) : Tensor();
  };
  params_ = alias(owner.params_);
  grads_ = alias(owner.grads_);
  mirror_ = alias(owner.mirror_);
  router_bias_ = alias(owner.router_bias_);  // one selection bias, updated by the owner
  router_bias_device_ = alias(owner.router_bias_device_);
  w_ = param_views();
  gw_ = grad_views();
  wc_ = mirror_.view().present() ? layout_.views(mirror_.view().data(), DType::kBF16, mirror_.device()) : w_;
}

void Transformer::reset_moe_stats() {
  for (MoeStepStats& s : moe_stats_) s = MoeStepStats();
}

void Transformer::take_moe_stats(Transformer& other) {
  LMT_CHECK(other.moe_stats_.size() == moe_stats_.size()) << "take_moe_stats: models of different depths";
  for (size_t l = 0; l < moe_stats_.size(); ++l) moe_stats_[l].add(other.moe_stats_[l]);
  other.reset_moe_stats();
}

TensorView Transformer::router_bias(int64_t layer) const {
  if (!router_bias_.view().present()) return TensorView();
  return router_bias_.view().slice_rows(layer, layer + 1).reshape(Shape{config().moe.num_experts});
}

TensorView Transformer::selection_bias(int64_t layer) const {
  if (!router_bias_device_.view().present()) return router_bias(layer);
  return router_bias_device_.view().slice_rows(layer, layer + 1).reshape(Shape{config().moe.num_experts});
}

void Transformer::router_bias_written() {
  if (router_bias_device_.view().present()) backend_.copy(router_bias_device_.view(), router_bias_.view());
}

void Transformer::update_router_bias() {
  if (router_bias_.view().present()) {
    const int64_t E = config().moe.num_experts;
    const float rate = config().moe.bias_update_rate;
    for (int64_t l = 0; l < config().n_layers; ++l) {
      const MoeStepStats& s = moe_stats_[l];
      if (!config().moe.is_moe_layer(l) || s.load.empty()) continue;
      double total = 0;
      for (int64_t x : s.load) total += static_cast<double>(x);
      const double mean = total / static_cast<double>(E);
      float* b = router_bias(l).as<float>();
      for (int64_t e = 0; e < E; ++e) {
        const double err = mean - static_cast<double>(s.load[e]);
        b[e] += err > 0 ? rate : (err < 0 ? -rate : 0.0f);
      }
    }
    router_bias_written();
  }
  reset_moe_stats();
}

kernels::AttentionBackend resolve_attention(AttentionChoice choice, const kernels::Backend& backend) {
  switch (choice) {
    case AttentionChoice::kFlash: return kernels::AttentionBackend::kFlash;
    case AttentionChoice::kNaive: return kernels::AttentionBackend::kNaive;
    case AttentionChoice::kAuto: break;
  }
  if (backend.has_flash_attention()) return kernels::AttentionBackend::kFlash;
  LMT_LOG(INFO) << "attention auto: the '" << backend.name()
                << "' backend has no flash kernel; using naive attention (materialises T x T scores)";
  return kernels::AttentionBackend::kNaive;
}

Status Transformer::set_storage(StorageAllocator alloc) {
  const int64_t n = layout_.total_numel();
  auto moved = [&](Storage role, const Tensor& old) -> StatusOr<Tensor> {
    LMT_ASSIGN_OR_RETURN(Tensor t, alloc(role, n, old.dtype()));
    if (t.numel() != n || t.dtype() != old.dtype())
      return Internal("storage allocator returned " + std::to_string(t.numel()) + " elements of " +
                      std::string(dtype_name(t.dtype())) + " for " + std::to_string(n) + " of " + std::string(dtype_name(old.dtype())));
    backend_.copy(t, old);
    return t;
  };
  LMT_ASSIGN_OR_RETURN(Tensor params, moved(Storage::kParams, params_));
  LMT_ASSIGN_OR_RETURN(Tensor grads, moved(Storage::kGrads, grads_));
  Tensor mirror;
  if (mirror_.view().present()) {
    LMT_ASSIGN_OR_RETURN(mirror, moved(Storage::kMirror, mirror_));
  }
  const bool bf16_views = wc_.embed.data() != w_.embed.data();
  params_ = std::move(params);
  grads_ = std::move(grads);
  mirror_ = std::move(mirror);
  storage_ = std::move(alloc);
  w_ = param_views();
  gw_ = grad_views();
  wc_ = bf16_views ? layout_.views(mirror_.view().data(), DType::kBF16, mirror_.device()) : w_;
  return Status::Ok();
}

void Transformer::bind_block(int64_t layer, const BlockViews& w, const BlockViews& g, const BlockViews& wc) {
  w_.blocks[layer] = w;
  gw_.blocks[layer] = g;
  wc_.blocks[layer] = wc;
}

void Transformer::bind_ends(const ModelViews& w, const ModelViews& g, const ModelViews& wc) {
  auto ends = [](ModelViews& dst, const ModelViews& src) {
    dst.embed = src.embed;
    dst.pos_embed = src.pos_embed;
    dst.final_norm_w = src.final_norm_w;
    dst.final_norm_b = src.final_norm_b;
    dst.lm_head = src.lm_head;
  };
  ends(w_, w);
  ends(gw_, g);
  ends(wc_, wc);
}

void Transformer::set_streamed_vocab(StreamedVocab* vocab) {
  LMT_CHECK(vocab == nullptr || (backend_.device().is_host() && !tp_.enabled()))
      << "a streamed vocabulary needs a host backend and no tensor parallelism";
  vocab_stream_ = vocab;
}

void Transformer::release_storage() {
  LMT_CHECK(params_needed_ != nullptr) << "release_storage() without a set_params_needed() hook";
  params_ = Tensor();
  grads_ = Tensor();
  mirror_ = Tensor();
  released_ = true;
}

int64_t Transformer::storage_bytes() const {
  int64_t b = 0;
  for (const Tensor* t : {&params_, &grads_, &mirror_})
    if (t->view().present()) b += static_cast<int64_t>(t->view().bytes());
  return b;
}

void Transformer::init(uint64_t seed) {
  if (master_ == DType::kF32 && backend_.device().is_host()) {
    init_params(layout_, params_.as<float>(), seed);
  } else {  // made in f32 on the host, then copied to the device or widened to the f64 master
    Tensor f32({layout_.total_numel()}, DType::kF32);
    init_params(layout_, f32.as<float>(), seed);
    if (master_ == DType::kF32) backend_.copy(params_, f32);
    else backend_.convert(params_, f32);
  }
  refresh_compute_weights();
}

void Transformer::refresh_compute_weights() {
  if (mirror_.view().present()) backend_.convert(mirror_, params_);
}

// Written as zeros, not scaled by 0: a NaN gradient times 0 is still NaN, and one bad step
// would poison every later one (the deferred matrices are written over, so NaN goes there too).
void Transformer::zero_grads(bool defer_block_matrices) {
  const int64_t L = config().n_layers;
  stale_block_grads_.assign(static_cast<size_t>(L), 0);
  stale_head_grad_ = false;
  if (released_) return;
  if (!defer_block_matrices || !role_.first || !role_.last) {
    backend_.fill(grads_, 0.0);
    return;
  }
  // Element ranges [begin, end) of the deferred gradients in the flat buffer; zeros around them.
  const TensorView all = grads_.view();
  const char* base = static_cast<const char*>(all.data());
  const int64_t total = all.numel(), elem = static_cast<int64_t>(dtype_size(all.dtype()));
  std::vector<std::pair<int64_t, int64_t>> deferred;
  for (int64_t l = 0; l < L; ++l) {
    for (const TensorView& g : written_block_grads(l)) {
      const int64_t begin = (static_cast<const char*>(g.data()) - base) / elem;
      LMT_CHECK(begin >= 0 && begin + g.numel() <= total) << "zero_grads: layer " << l << "'s gradient "
                                                          << g.to_string() << " is outside the gradient buffer";
      deferred.emplace_back(begin, begin + g.numel());
    }
    stale_block_grads_[static_cast<size_t>(l)] = 1;
  }
  if (!tp_.enabled() && vocab_stream_ == nullptr) {  // the LM head's rows written by one kernel
    const TensorView head = gw_.lm_head.slice_rows(0, config().vocab_size);
    const int64_t begin = (static_cast<const char*>(head.data()) - base) / elem;
    deferred.emplace_back(begin, begin + head.numel());
    stale_head_grad_ = true;
  }
  std::sort(deferred.begin(), deferred.end());
  int64_t at = 0;
  for (const auto& [begin, end] : deferred) {
    if (begin > at) backend_.fill(all.slice_rows(at, begin), 0.0);
    at = std::max(at, end);
  }
  if (at < total) backend_.fill(all.slice_rows(at, total), 0.0);
}

void Transformer::prepare(int64_t B, int64_t T, const RunOptions& options) {
  LMT_CHECK(B > 0 && T > 0 && T <= config().max_seq_len)
      << "prepare(B=" << B << ", T=" << T << "): T must be in [1, max_seq_len=" << config().max_seq_len << "]";
  LMT_CHECK((options.compute == DType::kF64) == (master_ == DType::kF64))
      << "compute dtype f64 goes with an f64 master, and only with it";
  if (released_) {
    // Views are bound by the params_needed_ hook before every use.
  } else if (options.compute == DType::kBF16) {
    if (!mirror_.view().present()) {
      if (storage_) {
        StatusOr<Tensor> t = storage_(Storage::kMirror, layout_.total_numel(), DType::kBF16);
        LMT_CHECK(t.ok()) << "allocating the bf16 mirror: " << t.status().ToString();
        mirror_ = std::move(*t);
      } else {
        mirror_ = Tensor({layout_.total_numel()}, DType::kBF16, backend_.allocator());
      }
    }
    wc_ = layout_.views(mirror_.view().data(), DType::kBF16, mirror_.device());
    refresh_compute_weights();
  } else {
    wc_ = w_;
  }
  arena_ = std::make_unique<Arena>(activation_bytes(config(), B, T, options), backend_.allocator());
  if (!backend_.device().is_host()) {
    const int64_t N = B * T;
    for (Tensor* t : {&dev_tokens_, &dev_targets_, &dev_doc_ids_, &dev_positions_})
      *t = Tensor({N}, DType::kI32, backend_.allocator());
  }
  plan_ = plan_activations(config(), B, T, options, *arena_);
  plan_.attention = resolve_attention(options.attention, backend_);
  backend_.positions(plan_.scratch.positions, TensorView(), T);
  positions_given_ = false;
  have_train_forward_ = false;
}

TensorView Transformer::device_ints(const int32_t* host, Shape shape, Tensor& staging) {
  if (host == nullptr) return TensorView();
  const TensorView h(const_cast<int32_t*>(host), shape, DType::kI32);
  if (backend_.device().is_host()) return h;
  const TensorView d = staging.view().slice_rows(0, shape.numel()).reshape(shape);
  backend_.copy_async(d, h);  // queued: the host goes on to queue the pass
  return d;
}

void Transformer::norm_backward(const TensorView& dinp, const TensorView& dw, const TensorView& db,
                                const TensorView& dout, const TensorView& inp, const TensorView& w,
                                const TensorView& mean, const TensorView& rstd, bool accumulate) {
  model::norm_backward(backend_, config(), dinp, dw, db, dout, inp, w, mean, rstd, accumulate);
}

void Transformer::forward_trunk(const int32_t* tokens, const int32_t* doc_ids, const int32_t* positions) {
  LMT_CHECK(arena_ != nullptr) << "forward before prepare()";
  const int64_t B = plan_.B, T = plan_.T, N = B * T;
  Scratch& s = plan_.scratch;
  if (params_needed_) params_needed_(-1, false);
  tokens_ = device_ints(tokens, Shape{N}, dev_tokens_);
  doc_ids_ = device_ints(doc_ids, Shape{B, T}, dev_doc_ids_);
  // Positions n % T stay in the arena from prepare(); given ones replace them for this pass, and the
  // next pass without them restores n % T.
  if (positions != nullptr) {
    backend_.positions(s.positions, device_ints(positions, Shape{N}, dev_positions_), T);
    positions_given_ = true;
  } else if (positions_given_) {
    backend_.positions(s.positions, TensorView(), T);
    positions_given_ = false;
  }
  LMT_CHECK(plan_.options.sequence_shards == (sequence_parallel(tensor_parallel()) ? tp_.size : 1))
      << "prepare() with RunOptions::sequence_shards = " << plan_.options.sequence_shards
      << " for a tensor-parallel group of " << tp_.size << (tp_.sequence_parallel ? " with" : " without")
      << " sequence parallelism";
  if (role_.first) {  // else residual[0] holds the previous stage's output (stage_input())
    if (vocab_stream_) vocab_stream_->embed(plan_.residual[0], tokens_);
    else if (tp_.enabled()) vocab_parallel_embedding_forward(tokens);
    else backend_.embedding_forward(plan_.residual[0], tokens_, w_.embed, false);
    if (config().positions == PositionKind::kLearned)
      backend_.embedding_forward(plan_.residual[0], sequence_rows(s.positions), w_.pos_embed, true);
  }
  Residual stream = plan_.residual[0];
  for (int64_t l = 0; l < config().n_layers; ++l) {
    if (params_needed_) params_needed_(l, false);
    stream = forward_block(l, plan_.block(l), stream);
  }
  if (!role_.last) {  // the output is residual[n_layers] (stage_output())
    materialize(backend_, stream);
    return;
  }
  // Under sequence parallelism this rank's rows, then everyone's: the head needs all of them.
  norm_all_rows(backend_, config(), tensor_parallel(), s.final_h, s.final_mean, s.final_rstd, stream, w_.final_norm_w,
                w_.final_norm_b, s.seq_nc, s.f32_nc, "the final norm's output");
}

TensorView Transformer::sequence_rows(const TensorView& all) const {
  if (!sequence_parallel(tensor_parallel())) return all;
  const int64_t n = all.dim(0) / tp_.size;
  return all.slice_rows(tp_.rank * n, (tp_.rank + 1) * n);
}

void Transformer::logits(const int32_t* tokens, const int32_t* doc_ids, const TensorView& out,
                         const int32_t* positions) {
  LMT_CHECK(role_.first && role_.last && !tp_.enabled()) << "logits() of a pipeline stage or a tensor-parallel part";
  LMT_CHECK(vocab_stream_ == nullptr) << "logits() of a model whose LM head is streamed in chunks (ZeRO-3 over several ranks)";
  forward_trunk(tokens, doc_ids, positions);
  have_train_forward_ = false;
  backend_.linear_forward(out, plan_.scratch.final_h, wc_.lm_head.slice_rows(0, config().vocab_size), TensorView());
}

double Transformer::forward(const int32_t* tokens, const int32_t* targets, const int32_t* doc_ids,
                            bool train, float loss_scale, const int32_t* positions) {
  LMT_TRACE_SCOPE("forward");
  train_pass_ = train;
  loss_scale_ = loss_scale;
  forward_trunk(tokens, doc_ids, positions);
  train_pass_ = false;
  if (!role_.last) {  // a pipeline stage before the last: no head, no loss
    have_train_forward_ = train;
    return 0.0;
  }
  const int64_t N = plan_.B * plan_.T;
  const RunOptions& o = plan_.options;
  Scratch& s = plan_.scratch;
  targets_ = device_ints(targets, Shape{N}, dev_targets_);

  CrossEntropyOptions xo;
  num_valid_ = backend_.count_valid_targets(targets_, xo.ignore_index);
  xo.vocab_size = config().vocab_size;
  xo.z_loss = o.z_loss;
  xo.chunk_rows = o.lm_head_chunk;
  xo.grad_scale = num_valid_ > 0 ? loss_scale / static_cast<float>(num_valid_) : 0.0f;
  if (train && stale_head_grad_) {  // zero_grads left the head's gradient to this first write
    xo.dweight_write = kernels::GradWrite::kOverwrite;
    stale_head_grad_ = false;
  }
  if (tp_.enabled()) {  // this rank's vocabulary rows; softmax over the group's
    xo.vocab_size = vocab_.real;
    xo.vocab_begin = vocab_.begin;
    xo.combine = [this](int64_t, const TensorView& lse, const TensorView& tl) { combine_vocab_parallel(lse, tl); };
  }
  have_train_forward_ = train;
  LMT_TRACE_SCOPE("lm_head_loss");
  if (vocab_stream_)
    streamed_lm_head_loss(backend_, *vocab_stream_, config().vocab_size, s.losses, s.final_h, targets_, xo,
                          train ? s.dfinal : TensorView(), head_scratch_);
  else
    backend_.lm_head_cross_entropy(s.losses, s.final_h, wc_.lm_head, targets_, xo,
                                   train ? s.dfinal : TensorView(), train ? gw_.lm_head : TensorView());
  // d h of the LM head is this rank's vocabulary's part: summed here, or reduce-scattered to this
  // rank's rows at the start of backward() under sequence parallelism.
  if (train && !sequence_parallel(tensor_parallel())) tensor_parallel_sum(tensor_parallel(), s.dfinal, "d h of the LM head");
  if (num_valid_ == 0) return 0.0;
  return backend_.sum(s.losses) / static_cast<double>(num_valid_);
}

void Transformer::backward() {
  LMT_CHECK(have_train_forward_) << "backward() needs a preceding forward(..., train=true)";
  LMT_TRACE_SCOPE("backward");
  have_train_forward_ = false;
  Scratch& s = plan_.scratch;
  const int64_t L = config().n_layers;
  if (role_.last) {  // else s.dres holds d output from the next stage (stage_grad())
    TensorView dfinal = s.dfinal;
    if (sequence_parallel(tensor_parallel())) {
      sequence_reduce_scatter(tensor_parallel(), s.dfinal, s.seq_nc, "d h of the LM head");
      dfinal = s.seq_nc;
    }
    norm_backward(s.dres, gw_.final_norm_w, gw_.final_norm_b, dfinal, plan_.residual[L], w_.final_norm_w,
                  s.final_mean, s.final_rstd, /*accumulate=*/false);
  }
  for (int64_t l = L - 1; l >= 0; --l) {
    BlockActs& acts = plan_.block(l);
    if (params_needed_) params_needed_(l, true);
    if (plan_.options.recompute) {  // rebuild what the checkpoint dropped (same routing: same inputs)
      recomputing_ = true;
      train_pass_ = true;
      forward_block(l, acts, plan_.residual[l]);  // its output, residual[l + 1], is kept: left pending
      train_pass_ = recomputing_ = false;
    }
    backward_block(l, acts);
    if (block_grads_ready_) block_grads_ready_(l);
  }
  if (!role_.first) return;  // s.dres is d input, for the previous stage (stage_grad())
  if (vocab_stream_) vocab_stream_->embed_backward(s.dres, tokens_);
  else if (tp_.enabled()) vocab_parallel_embedding_backward();
  else backend_.embedding_backward(gw_.embed, s.dres, tokens_);
  if (config().positions == PositionKind::kLearned)
    backend_.embedding_backward(gw_.pos_embed, s.dres, sequence_rows(s.positions));
}

}  // namespace lmt::model
