// Decoder: the KV cache, the chunking and the logits around the model's sub-blocks (see decode.h).
#include "lmt/eval/decode.h"

#include <algorithm>

#include "lmt/base/check.h"
#include "lmt/model/norm.h"

namespace lmt::eval {

using model::FfnKind;
using model::PositionKind;

namespace {
TensorView rows(const Tensor& t, int64_t n) { return t.view().slice_rows(0, n); }
}  // namespace

Decoder::Decoder(model::Transformer& model, int64_t max_len, int64_t prefill_chunk)
    : model_(model), be_(model.backend()), w_(model.param_views()), max_len_(max_len),
      chunk_(std::max<int64_t>(1, std::min(prefill_chunk, max_len))), V_(model.config().vocab_size) {
  const model::ModelConfig& c = model.config();
  LMT_CHECK(model.master() == DType::kF32) << "the decoder computes from an f32 master";
  LMT_CHECK(max_len >= 1 && max_len <= c.max_seq_len)
      << "decoder max_len " << max_len << " must be in [1, max_seq_len=" << c.max_seq_len << "]";
  const int64_t L = c.n_layers, G = c.n_kv_heads, HD = c.head_dim, C = c.d_model, N = chunk_;
  const int64_t U = c.ffn == FfnKind::kGlu ? 2 * c.ffn_hidden : c.ffn_hidden;
  k_cache_ = Tensor({L, max_len, G, HD}, DType::kF32);
  v_cache_ = Tensor({L, max_len, G, HD}, DType::kF32);
  x_ = Tensor({N, C}, DType::kF32);
  h_ = Tensor({N, C}, DType::kF32);
  q_ = Tensor({N, c.q_dim()}, DType::kF32);
  if (c.qk_norm) {
    q_pre_ = Tensor({N, c.q_dim()}, DType::kF32);
    k_pre_ = Tensor({N, c.kv_dim()}, DType::kF32);
    qk_rstd_ = Tensor({N * c.n_heads}, DType::kF32);
  }
  att_ = Tensor({N, c.q_dim()}, DType::kF32);
  proj_ = Tensor({N, C}, DType::kF32);
  u_ = Tensor({N, U}, DType::kF32);
  a_ = Tensor({N, c.ffn_hidden}, DType::kF32);
  mean_ = Tensor({N}, DType::kF32);
  rstd_ = Tensor({N}, DType::kF32);
  positions_ = Tensor({N}, DType::kI32);
  ids_ = Tensor({N}, DType::kI32);
  logits_ = Tensor({1, V_}, DType::kF32);
  if (c.moe.enabled()) {
    Arena measuring = Arena::Measuring();
    model::MoeBlock::plan(c, N, DType::kF32, DType::kF32, measuring);
    moe_arena_ = std::make_unique<Arena>(measuring.peak());
    moe_acts_ = model::MoeBlock::plan(c, N, DType::kF32, DType::kF32, *moe_arena_);
  }
}

std::span<const float> Decoder::forward(std::span<const int32_t> tokens, float* all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  LMT_CHECK(n >= 1) << "Decoder::forward needs at least one token";
  LMT_CHECK(length_ + n <= max_len_) << "KV cache full: " << length_ << " + " << n << " tokens > max_len " << max_len_;
  for (int32_t t : tokens) LMT_CHECK(t >= 0 && t < V_) << "token id " << t << " outside [0, " << V_ << ")";
  for (int64_t begin = 0; begin < n; begin += chunk_) {
    const int64_t m = std::min(chunk_, n - begin);
    forward_chunk(tokens.data() + begin, m, all_logits ? all_logits + begin * V_ : nullptr);
  }
  return {logits_.as<float>(), static_cast<size_t>(V_)};
}

model::AttentionActs Decoder::attention_rows(int64_t n) const {
  const model::ModelConfig& c = config();
  model::AttentionActs a;
  a.norm_mean = rows(mean_, n);
  a.norm_rstd = rows(rstd_, n);
  a.h = rows(h_, n);
  if (c.qk_norm) {
    a.q_pre = rows(q_pre_, n);
    a.k_pre = rows(k_pre_, n);
    a.q_rstd = rows(qk_rstd_, n * c.n_heads);
    a.k_rstd = rows(qk_rstd_, n * c.n_kv_heads);
  }
  a.q = rows(q_, n);
  a.att = a.att_c = rows(att_, n);
  return a;
}

model::FfnActs Decoder::ffn_rows(int64_t n) const {
  model::FfnActs a;
  a.norm_mean = rows(mean_, n);
  a.norm_rstd = rows(rstd_, n);
  a.h = rows(h_, n);
  a.u = rows(u_, n);
  a.a = rows(a_, n);
  return a;
}

void Decoder::run_trunk(const int32_t* tokens, int64_t n, std::span<const int64_t> segment_ends) {
  const model::ModelConfig& c = config();
  be_.copy(rows(ids_, n), TensorView(const_cast<int32_t*>(tokens), Shape{n}, DType::kI32));
  const TensorView x = rows(x_, n);
  be_.embedding_forward(x, rows(ids_, n), w_.embed, false);
  if (c.positions == PositionKind::kLearned) be_.embedding_forward(x, rows(positions_, n), w_.pos_embed, true);
  const model::AttentionActs attention_acts = attention_rows(n);
  const model::FfnActs ffn_acts = ffn_rows(n);
  const TensorView proj = rows(proj_, n);
  const int64_t layer_cache = max_len_ * c.n_kv_heads * c.head_dim;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const Shape cache_shape{1, max_len_, c.n_kv_heads, c.head_dim};
    const TensorView k_cache(k_cache_.as<float>() + l * layer_cache, cache_shape, DType::kF32);
    const TensorView v_cache(v_cache_.as<float>() + l * layer_cache, cache_shape, DType::kF32);
    const model::BlockViews& w = w_.blocks[l];
    model::AttentionBlock(be_, c, l)
        .decode(x, model::AttentionWeights::of(w, w), attention_acts, k_cache, v_cache, length_, rows(positions_, n),
                proj, segment_ends);
    if (c.moe.is_moe_layer(l))
      model::MoeBlock(be_, c).decode(x, model::MoeWeights::of(w, w), moe_acts_, model_.router_bias(l), proj);
    else
      model::FfnBlock(be_, c).decode(x, model::FfnWeights::of(w, w), ffn_acts, proj);
  }
}

void Decoder::forward_segments(std::span<const int32_t> tokens, std::span<const int64_t> sizes,
                               std::span<const int64_t> from, float* logits) {
  const model::ModelConfig& c = config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  LMT_CHECK(!sizes.empty() && sizes.size() == from.size()) << "forward_segments: " << sizes.size() << " sizes, " << from.size() << " starts";
  LMT_CHECK(n >= 1 && n <= chunk_ && length_ + n <= max_len_)
      << "forward_segments of " << n << " tokens after " << length_ << " (chunk " << chunk_ << ", max_len " << max_len_ << ")";
  for (int32_t t : tokens) LMT_CHECK(t >= 0 && t < V_) << "token id " << t << " outside [0, " << V_ << ")";
  std::vector<int64_t> ends;
  int32_t* pos = positions_.as<int32_t>();
  int64_t end = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    LMT_CHECK(sizes[s] >= 1 && from[s] >= 0 && from[s] <= sizes[s]) << "forward_segments: segment " << s << " of " << sizes[s] << " from " << from[s];
    for (int64_t i = 0; i < sizes[s]; ++i) pos[end + i] = static_cast<int32_t>(length_ + i);
    end += sizes[s];
    ends.push_back(end);
  }
  LMT_CHECK(end == n) << "forward_segments: sizes add up to " << end << ", not " << n << " tokens";
  run_trunk(tokens.data(), n, ends);
  // Final norm of the rows that need logits, packed into h_ rows [0, m), then one LM-head GEMM.
  int64_t m = 0, begin = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    const int64_t k = sizes[s] - from[s];
    if (k > 0)
      model::norm_forward(be_, c, h_.view().slice_rows(m, m + k), mean_.view().slice_rows(m, m + k),
                          rstd_.view().slice_rows(m, m + k), x_.view().slice_rows(begin + from[s], begin + sizes[s]),
                          w_.final_norm_w, w_.final_norm_b);
    m += k;
    begin += sizes[s];
  }
  if (m > 0)
    be_.linear_forward(TensorView(logits, Shape{m, V_}, DType::kF32), rows(h_, m), w_.lm_head.slice_rows(0, V_), TensorView());
}

void Decoder::forward_chunk(const int32_t* tokens, int64_t n, float* all_logits) {
  const model::ModelConfig& c = config();
  int32_t* pos = positions_.as<int32_t>();
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(length_ + i);
  run_trunk(tokens, n, {});
  length_ += n;

  // Final norm and LM head: every row if asked for, else only the last (all prediction needs).
  const TensorView lm_head = w_.lm_head.slice_rows(0, V_);
  const int64_t first = all_logits ? 0 : n - 1;
  const TensorView hx = x_.view().slice_rows(first, n), hh = h_.view().slice_rows(first, n);
  model::norm_forward(be_, c, hh, rows(mean_, n - first), rows(rstd_, n - first), hx, w_.final_norm_w,
                      w_.final_norm_b);
  if (all_logits) {
    be_.linear_forward(TensorView(all_logits, Shape{n, V_}, DType::kF32), hh, lm_head, TensorView());
    be_.copy(logits_, TensorView(all_logits + (n - 1) * V_, Shape{1, V_}, DType::kF32));
  } else {
    be_.linear_forward(logits_, hh, lm_head, TensorView());
  }
}

}  // namespace lmt::eval
