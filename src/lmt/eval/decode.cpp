// Decoder: the block math of model/block.cpp over a KV cache (see decode.h for the contract).
#include "lmt/eval/decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lmt/base/check.h"

namespace lmt::eval {

using model::FfnKind;
using model::NormKind;
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

void Decoder::norm(const TensorView& out, const TensorView& inp, const TensorView& w, const TensorView& b,
                   int64_t n) {
  const model::ModelConfig& c = config();
  if (c.norm == NormKind::kRmsNorm)
    be_.rmsnorm_forward(out, rows(rstd_, n), inp, w, c.norm_eps);
  else
    be_.layernorm_forward(out, rows(mean_, n), rows(rstd_, n), inp, w, b, c.norm_eps);
}

void Decoder::forward_chunk(const int32_t* tokens, int64_t n, float* all_logits) {
  const model::ModelConfig& c = config();
  std::memcpy(ids_.as<int32_t>(), tokens, n * sizeof(int32_t));
  int32_t* pos = positions_.as<int32_t>();
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(length_ + i);
  const TensorView x = rows(x_, n);
  be_.embedding_forward(x, rows(ids_, n), w_.embed, false);
  if (c.positions == PositionKind::kLearned) be_.embedding_forward(x, rows(positions_, n), w_.pos_embed, true);
  for (int64_t l = 0; l < c.n_layers; ++l) forward_block(l, n);
  length_ += n;

  // Final norm and LM head: every row if asked for, else only the last (all prediction needs).
  const TensorView lm_head = w_.lm_head.slice_rows(0, V_);
  const int64_t first = all_logits ? 0 : n - 1;
  const TensorView hx = x_.view().slice_rows(first, n), hh = h_.view().slice_rows(first, n);
  norm(hh, hx, w_.final_norm_w, w_.final_norm_b, n - first);
  if (all_logits) {
    be_.linear_forward(TensorView(all_logits, Shape{n, V_}, DType::kF32), hh, lm_head, TensorView());
    std::memcpy(logits_.as<float>(), all_logits + (n - 1) * V_, V_ * sizeof(float));
  } else {
    be_.linear_forward(logits_, hh, lm_head, TensorView());
  }
}

void Decoder::forward_block(int64_t l, int64_t n) {
  const model::ModelConfig& c = config();
  const int64_t NH = c.n_heads, G = c.n_kv_heads, HD = c.head_dim;
  const model::BlockViews& w = w_.blocks[l];
  const TensorView x = rows(x_, n), h = rows(h_, n), proj = rows(proj_, n);

  // Attention: k and v are written straight into the cache at rows [length_, length_ + n).
  norm(h, x, w.attn_norm_w, w.attn_norm_b, n);
  float* k_layer = k_cache_.as<float>() + l * max_len_ * G * HD;
  float* v_layer = v_cache_.as<float>() + l * max_len_ * G * HD;
  const TensorView q = rows(q_, n);
  const TensorView k(k_layer + length_ * G * HD, Shape{n, G * HD}, DType::kF32);
  const TensorView v(v_layer + length_ * G * HD, Shape{n, G * HD}, DType::kF32);
  be_.linear_forward(c.qk_norm ? rows(q_pre_, n) : q, h, w.q_w, w.q_b);
  be_.linear_forward(c.qk_norm ? rows(k_pre_, n) : k, h, w.k_w, w.k_b);
  be_.linear_forward(v, h, w.v_w, w.v_b);
  if (c.qk_norm) {
    be_.rmsnorm_forward(q.reshape({n * NH, HD}), rows(qk_rstd_, n * NH), rows(q_pre_, n).reshape({n * NH, HD}),
                        w.q_norm_w, c.norm_eps);
    be_.rmsnorm_forward(k.reshape({n * G, HD}), rows(qk_rstd_, n * G), rows(k_pre_, n).reshape({n * G, HD}),
                        w.k_norm_w, c.norm_eps);
  }
  if (c.layer_uses_rope(l)) {
    const TensorView q3 = q.reshape({n, NH, HD}), k3 = k.reshape({n, G, HD});
    be_.rope_forward(q3, q3, rows(positions_, n), c.rope_theta, c.rotary_dim());
    be_.rope_forward(k3, k3, rows(positions_, n), c.rope_theta, c.rotary_dim());
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  const TensorView kc(k_layer, Shape{1, max_len_, G, HD}, DType::kF32);
  const TensorView vc(v_layer, Shape{1, max_len_, G, HD}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) {  // token i sees positions [0, length_ + i]
    const TensorView qi(q_.as<float>() + i * NH * HD, Shape{1, NH, HD}, DType::kF32);
    const TensorView oi(att_.as<float>() + i * NH * HD, Shape{1, NH, HD}, DType::kF32);
    be_.attention_decode(oi, qi, kc, vc, length_ + i + 1, scale);
  }
  be_.linear_forward(proj, rows(att_, n), w.o_w, w.o_b);
  be_.add(x, x, proj);

  // Feed-forward.
  norm(h, x, w.ffn_norm_w, w.ffn_norm_b, n);
  const TensorView u = rows(u_, n), a = rows(a_, n);
  be_.linear_forward(u, h, w.up_w, w.up_b);
  if (c.ffn == FfnKind::kGlu)
    be_.glu_forward(c.activation, a, u);
  else
    be_.activation_forward(c.activation, a, u);
  be_.linear_forward(proj, a, w.down_w, w.down_b);
  be_.add(x, x, proj);
}

}  // namespace lmt::eval
