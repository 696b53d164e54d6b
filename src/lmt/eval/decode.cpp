// Decoder: the KV cache, the chunking and the logits around the model's sub-blocks (see decode.h).
#include "lmt/eval/decode.h"

#include <algorithm>

#include "lmt/base/check.h"
#include "lmt/model/norm.h"

namespace lmt::eval {

using model::FfnKind;
using model::PositionKind;

namespace {
TensorView head(const Tensor& t, int64_t n) { return t.view().slice_rows(0, n); }
}  // namespace

Decoder::Decoder(model::Transformer& model, int64_t max_len, int64_t prefill_chunk, DType weights, int64_t n_rows)
    : model_(model), be_(model.backend()), weights_(model, weights), max_len_(max_len),
      chunk_(std::max<int64_t>({1, std::min(prefill_chunk, max_len * n_rows), n_rows})), V_(model.config().vocab_size),
      lengths_(static_cast<size_t>(std::max<int64_t>(n_rows, 1)), 0) {
  const model::ModelConfig& c = model.config();
  LMT_CHECK(max_len >= 1 && max_len <= c.max_seq_len)
      << "decoder max_len " << max_len << " must be in [1, max_seq_len=" << c.max_seq_len << "]";
  LMT_CHECK(n_rows >= 1) << "decoder rows " << n_rows << " must be >= 1";
  const int64_t L = c.n_layers, G = c.n_kv_heads, HD = c.head_dim, C = c.d_model, N = chunk_;
  const int64_t U = c.ffn == FfnKind::kGlu ? 2 * c.ffn_hidden : c.ffn_hidden;
  Allocator& mem = be_.allocator();  // the backend's memory: a GPU's for cuda
  auto f32 = [&mem](Shape shape) { return Tensor(std::move(shape), DType::kF32, mem); };
  k_cache_ = f32({L, n_rows, max_len, G, HD});
  v_cache_ = f32({L, n_rows, max_len, G, HD});
  x_ = f32({N, C});
  h_ = f32({N, C});
  q_ = f32({N, c.q_dim()});
  if (c.qk_norm) {
    q_pre_ = f32({N, c.q_dim()});
    k_pre_ = f32({N, c.kv_dim()});
    qk_rstd_ = f32({N * c.n_heads});
  }
  k_new_ = f32({N, c.kv_dim()});
  v_new_ = f32({N, c.kv_dim()});
  att_ = f32({N, c.q_dim()});
  proj_ = f32({N, C});
  u_ = f32({N, U});
  a_ = f32({N, c.ffn_hidden});
  mean_ = f32({N});
  rstd_ = f32({N});
  positions_ = Tensor({N}, DType::kI32, mem);
  ids_ = Tensor({N}, DType::kI32, mem);
  host_positions_.assign(static_cast<size_t>(N), 0);
  logits_ = Tensor({1, V_}, DType::kF32);
  if (!be_.device().is_host()) dev_logits_ = f32({N, V_});
  if (c.moe.enabled()) {
    Arena measuring = Arena::Measuring();
    model::MoeBlock::plan(c, N, DType::kF32, DType::kF32, measuring);
    moe_arena_ = std::make_unique<Arena>(measuring.peak(), mem);
    moe_acts_ = model::MoeBlock::plan(c, N, DType::kF32, DType::kF32, *moe_arena_);
  }
}

TensorView Decoder::cache(const Tensor& t, int64_t layer) const {
  const model::ModelConfig& c = config();
  const int64_t R = rows(), per_layer = R * max_len_ * c.n_kv_heads * c.head_dim;
  return TensorView(t.as<float>() + layer * per_layer, Shape{R, max_len_, c.n_kv_heads, c.head_dim}, DType::kF32,
                    t.device());
}

TensorView Decoder::cache(const Tensor& t, int64_t layer, int64_t row) const {
  const model::ModelConfig& c = config();
  const int64_t per_row = max_len_ * c.n_kv_heads * c.head_dim;
  return TensorView(cache(t, layer).as<float>() + row * per_row, Shape{1, max_len_, c.n_kv_heads, c.head_dim},
                    DType::kF32, t.device());
}

std::span<const float> Decoder::forward(std::span<const int32_t> tokens, float* all_logits, int64_t row) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  LMT_CHECK(row >= 0 && row < rows()) << "Decoder::forward on row " << row << " of " << rows();
  LMT_CHECK(n >= 1) << "Decoder::forward needs at least one token";
  LMT_CHECK(lengths_[row] + n <= max_len_)
      << "KV cache full: " << lengths_[row] << " + " << n << " tokens > max_len " << max_len_;
  for (int32_t t : tokens) LMT_CHECK(t >= 0 && t < V_) << "token id " << t << " outside [0, " << V_ << ")";
  for (int64_t begin = 0; begin < n; begin += chunk_) {
    const int64_t m = std::min(chunk_, n - begin);
    forward_chunk(tokens.data() + begin, m, all_logits ? all_logits + begin * V_ : nullptr, row);
  }
  return {logits_.as<float>(), static_cast<size_t>(V_)};
}

model::AttentionActs Decoder::attention_rows(int64_t n) const {
  const model::ModelConfig& c = config();
  model::AttentionActs a;
  a.norm_mean = head(mean_, n);
  a.norm_rstd = head(rstd_, n);
  a.h = head(h_, n);
  if (c.qk_norm) {
    a.q_pre = head(q_pre_, n);
    a.k_pre = head(k_pre_, n);
    a.q_rstd = head(qk_rstd_, n * c.n_heads);
    a.k_rstd = head(qk_rstd_, n * c.n_kv_heads);
  }
  a.q = head(q_, n);
  a.att = a.att_c = head(att_, n);
  return a;
}

model::FfnActs Decoder::ffn_rows(int64_t n) const {
  model::FfnActs a;
  a.norm_mean = head(mean_, n);
  a.norm_rstd = head(rstd_, n);
  a.h = head(h_, n);
  a.u = head(u_, n);
  a.a = head(a_, n);
  return a;
}

TensorView Decoder::logits_out(float* host, int64_t rows) {
  if (be_.device().is_host()) return TensorView(host, Shape{rows, V_}, DType::kF32);
  return dev_logits_.view().slice_rows(0, rows);
}

void Decoder::deliver(float* host, const TensorView& out) {
  if (!be_.device().is_host()) be_.copy(TensorView(host, out.shape(), DType::kF32), out);
}

void Decoder::embed(const int32_t* tokens, int64_t n) {
  be_.copy_async(head(ids_, n), TensorView(const_cast<int32_t*>(tokens), Shape{n}, DType::kI32));
  be_.copy_async(head(positions_, n), TensorView(host_positions_.data(), Shape{n}, DType::kI32));
  const TensorView x = head(x_, n);
  be_.embedding_forward(x, head(ids_, n), weights_.master().embed, false);
  if (config().positions == PositionKind::kLearned)
    be_.embedding_forward(x, head(positions_, n), weights_.master().pos_embed, true);
}

void Decoder::ffn_decode(int64_t l, const TensorView& x, const model::BlockViews& w, const model::BlockViews& g,
                         const model::FfnActs& ffn_acts, const TensorView& proj) {
  const model::ModelConfig& c = config();
  if (c.moe.is_moe_layer(l))  // MoE layers read the f32 master: bf16 decode weights cover dense layers only
    model::MoeBlock(be_, c).decode(x, model::MoeWeights::of(w, w), moe_acts_, model_.selection_bias(l), proj);
  else
    model::FfnBlock(be_, c).decode(x, model::FfnWeights::of(w, g), ffn_acts, proj);
}

void Decoder::run_trunk(const int32_t* tokens, int64_t n, int64_t row) {
  const model::ModelConfig& c = config();
  embed(tokens, n);
  const TensorView x = head(x_, n);
  const model::AttentionActs attention_acts = attention_rows(n);
  const model::FfnActs ffn_acts = ffn_rows(n);
  const TensorView proj = head(proj_, n);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const model::BlockViews &w = weights_.master().blocks[l], &g = weights_.gemm().blocks[l];
    model::AttentionBlock(be_, c, l)
        .decode(x, model::AttentionWeights::of(w, g), attention_acts, cache(k_cache_, l, row), cache(v_cache_, l, row),
                lengths_[row], head(positions_, n), proj);
    ffn_decode(l, x, w, g, ffn_acts, proj);
  }
}

void Decoder::step(std::span<const int32_t> tokens, float* logits) {
  const model::ModelConfig& c = config();
  const int64_t R = rows();
  LMT_CHECK(static_cast<int64_t>(tokens.size()) == R) << "Decoder::step: " << tokens.size() << " tokens for " << R << " rows";
  int32_t* pos = host_positions_.data();
  std::vector<int32_t> ids(tokens.begin(), tokens.end());
  std::vector<int64_t> lengths(lengths_);  // -1: the row sits out
  bool any = false;
  for (int64_t r = 0; r < R; ++r) {
    if (tokens[r] == -1) {
      ids[r] = 0;
      lengths[r] = -1;
      pos[r] = 0;
      continue;
    }
    LMT_CHECK(tokens[r] >= 0 && tokens[r] < V_) << "token id " << tokens[r] << " outside [0, " << V_ << ")";
    LMT_CHECK(lengths_[r] < max_len_) << "KV cache of row " << r << " full: " << lengths_[r] << " tokens";
    pos[r] = static_cast<int32_t>(lengths_[r]);
    any = true;
  }
  if (!any) return;
  embed(ids.data(), R);
  const TensorView x = head(x_, R), proj = head(proj_, R);
  model::AttentionActs attention_acts = attention_rows(R);
  if (R > 1) {
    attention_acts.k = head(k_new_, R);
    attention_acts.v = head(v_new_, R);
  }
  const model::FfnActs ffn_acts = ffn_rows(R);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const model::BlockViews &w = weights_.master().blocks[l], &g = weights_.gemm().blocks[l];
    model::AttentionBlock block(be_, c, l);
    const model::AttentionWeights aw = model::AttentionWeights::of(w, g);
    if (R == 1)
      block.decode(x, aw, attention_acts, cache(k_cache_, l, 0), cache(v_cache_, l, 0), lengths_[0], head(positions_, 1), proj);
    else
      block.decode_rows(x, aw, attention_acts, cache(k_cache_, l), cache(v_cache_, l), lengths, head(positions_, R), proj);
    ffn_decode(l, x, w, g, ffn_acts, proj);
  }
  for (int64_t r = 0; r < R; ++r) lengths_[r] += lengths[r] >= 0 ? 1 : 0;
  model::norm_forward(be_, c, head(h_, R), head(mean_, R), head(rstd_, R), x, weights_.master().final_norm_w,
                      weights_.master().final_norm_b);
  const TensorView out = logits_out(logits, R);
  be_.linear_forward(out, head(h_, R), weights_.gemm().lm_head.slice_rows(0, V_), TensorView());
  deliver(logits, out);
}

void Decoder::forward_segments(std::span<const int32_t> tokens, std::span<const int64_t> sizes,
                               std::span<const int64_t> from, float* logits) {
  LMT_CHECK(!sizes.empty() && sizes.size() == from.size()) << "forward_segments: " << sizes.size() << " sizes, " << from.size() << " starts";
  std::vector<Segment> segments;
  for (size_t s = 0; s < sizes.size(); ++s) segments.push_back({0, lengths_[0], sizes[s], from[s]});
  forward_segments(tokens, segments, logits, /*advance=*/false);
}

void Decoder::run_trunk(const int32_t* tokens, int64_t n, std::span<const model::DecodeSegment> segments) {
  const model::ModelConfig& c = config();
  embed(tokens, n);
  const TensorView x = head(x_, n), proj = head(proj_, n);
  model::AttentionActs attention_acts = attention_rows(n);
  attention_acts.k = head(k_new_, n);
  attention_acts.v = head(v_new_, n);
  const model::FfnActs ffn_acts = ffn_rows(n);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const model::BlockViews &w = weights_.master().blocks[l], &g = weights_.gemm().blocks[l];
    model::AttentionBlock(be_, c, l)
        .decode_segments(x, model::AttentionWeights::of(w, g), attention_acts, cache(k_cache_, l), cache(v_cache_, l),
                         segments, head(positions_, n), proj);
    ffn_decode(l, x, w, g, ffn_acts, proj);
  }
}

void Decoder::forward_segments(std::span<const int32_t> tokens, std::span<const Segment> segments, float* logits,
                               bool advance) {
  const model::ModelConfig& c = config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  LMT_CHECK(!segments.empty() && n >= 1 && n <= chunk_) << "forward_segments of " << n << " tokens (chunk " << chunk_ << ")";
  for (int32_t t : tokens) LMT_CHECK(t >= 0 && t < V_) << "token id " << t << " outside [0, " << V_ << ")";
  std::vector<model::DecodeSegment> plan;
  int32_t* pos = host_positions_.data();
  int64_t end = 0;
  for (const Segment& s : segments) {
    LMT_CHECK(s.row >= 0 && s.row < rows() && s.size >= 1 && s.start >= 0 && s.start <= lengths_[s.row] &&
              s.start + s.size <= max_len_ && s.from >= 0 && s.from <= s.size && end + s.size <= n)
        << "forward_segments: segment of " << s.size << " tokens at " << s.start << " of row " << s.row << " (length "
        << (s.row >= 0 && s.row < rows() ? lengths_[s.row] : -1) << ", max_len " << max_len_ << ") from " << s.from;
    for (int64_t i = 0; i < s.size; ++i) pos[end + i] = static_cast<int32_t>(s.start + i);
    end += s.size;
    plan.push_back({s.row, s.start, s.size});
  }
  LMT_CHECK(end == n) << "forward_segments: sizes add up to " << end << ", not " << n << " tokens";
  run_trunk(tokens.data(), n, plan);
  if (advance)
    for (const Segment& s : segments) lengths_[s.row] = s.start + s.size;
  // Final norm of the rows that need logits, packed into h_ rows [0, m), then one LM-head GEMM.
  const model::ModelViews& w = weights_.master();
  int64_t m = 0, begin = 0;
  for (const Segment& s : segments) {
    const int64_t k = s.size - s.from;
    if (k > 0)
      model::norm_forward(be_, c, h_.view().slice_rows(m, m + k), mean_.view().slice_rows(m, m + k),
                          rstd_.view().slice_rows(m, m + k), x_.view().slice_rows(begin + s.from, begin + s.size),
                          w.final_norm_w, w.final_norm_b);
    m += k;
    begin += s.size;
  }
  if (m > 0) {
    const TensorView out = logits_out(logits, m);
    be_.linear_forward(out, head(h_, m), weights_.gemm().lm_head.slice_rows(0, V_), TensorView());
    deliver(logits, out);
  }
}

void Decoder::forward_chunk(const int32_t* tokens, int64_t n, float* all_logits, int64_t row) {
  const model::ModelConfig& c = config();
  int32_t* pos = host_positions_.data();
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(lengths_[row] + i);
  run_trunk(tokens, n, row);
  lengths_[row] += n;

  // Final norm and LM head: every row if asked for, else only the last (all prediction needs).
  const TensorView lm_head = weights_.gemm().lm_head.slice_rows(0, V_);
  const int64_t first = all_logits ? 0 : n - 1;
  const TensorView hx = x_.view().slice_rows(first, n), hh = h_.view().slice_rows(first, n);
  model::norm_forward(be_, c, hh, head(mean_, n - first), head(rstd_, n - first), hx, weights_.master().final_norm_w,
                      weights_.master().final_norm_b);
  if (all_logits) {
    const TensorView out = logits_out(all_logits, n);
    be_.linear_forward(out, hh, lm_head, TensorView());
    deliver(all_logits, out);
    std::copy_n(all_logits + (n - 1) * V_, V_, logits_.as<float>());
  } else {
    const TensorView out = logits_out(logits_.as<float>(), 1);
    be_.linear_forward(out, hh, lm_head, TensorView());
    deliver(logits_.as<float>(), out);
  }
}

}  // namespace lmt::eval
