// The attention sub-block: training forward and backward, and the decode forward over a KV cache
// (see attention_block.h for the contract).
#include "lmt/model/attention_block.h"

#include <cmath>

#include "lmt/base/check.h"
#include "lmt/model/activations.h"
#include "lmt/model/norm.h"
#include "lmt/model/rope.h"

namespace lmt::model {

AttentionWeights AttentionWeights::of(const BlockViews& master, const BlockViews& gemm) {
  AttentionWeights w;
  w.norm_w = master.attn_norm_w;
  w.norm_b = master.attn_norm_b;
  w.q_w = gemm.q_w;
  w.k_w = gemm.k_w;
  w.v_w = gemm.v_w;
  w.q_b = master.q_b;
  w.k_b = master.k_b;
  w.v_b = master.v_b;
  w.q_norm_w = master.q_norm_w;
  w.k_norm_w = master.k_norm_w;
  w.o_w = gemm.o_w;
  w.o_b = master.o_b;
  return w;
}

AttentionActs AttentionBlock::plan(const ModelConfig& c, int64_t B, int64_t T, DType cd, DType f, Arena& arena,
                                   int64_t norm_rows) {
  const int64_t N = B * T, C = c.d_model, NH = c.n_heads, G = c.n_kv_heads, HD = c.head_dim;
  AttentionActs a;
  const int64_t n = norm_rows < 0 ? N : norm_rows;
  a.norm_mean = arena.allocate({n}, f, "norm1_mean");
  a.norm_rstd = arena.allocate({n}, f, "norm1_rstd");
  a.h = arena.allocate({N, C}, cd, "h1");
  if (c.qk_norm) {
    a.q_pre = arena.allocate({N, NH * HD}, f, "q_pre");
    a.k_pre = arena.allocate({N, G * HD}, f, "k_pre");
    a.q_rstd = arena.allocate({N * NH}, f, "q_rstd");
    a.k_rstd = arena.allocate({N * G}, f, "k_rstd");
  }
  a.q = arena.allocate({B, T, NH, HD}, f, "q");
  a.k = arena.allocate({B, T, G, HD}, f, "k");
  a.v = arena.allocate({B, T, G, HD}, f, "v");
  a.att = arena.allocate({B, T, NH, HD}, f, "att");
  a.lse = arena.allocate({B, NH, T}, f, "lse");
  a.att_c = cd == f ? a.att : arena.allocate({B, T, NH, HD}, cd, "att_c");
  return a;
}

kernels::RopeFreqs AttentionBlock::rope_freqs(const TensorView& positions) const {
  // Only dynamic scaling depends on the call's length (max position + 1); skip the scan otherwise.
  const int64_t seq_len = c_.rope_scaling.type == RopeScalingType::kDynamic ? rope_seq_len(positions) : 0;
  return rope_frequencies(c_, seq_len);
}

// QK-norm rows: per head, N·NH rows of HD (and N·G for k); qk_norm_full, N rows of NH·HD (G·HD).
AttentionBlock::QkNormRows AttentionBlock::qk_norm_rows(int64_t N) const {
  const int64_t NH = c_.n_heads, G = c_.n_kv_heads, HD = c_.head_dim;
  if (c_.qk_norm_full) return {Shape{N, NH * HD}, Shape{N, G * HD}};
  return {Shape{N * NH, HD}, Shape{N * G, HD}};
}

namespace {
// bf16 GEMMs let the attention kernels use bf16 matrix units too (kernels/backend.h); f32 and f64
// passes compute attention in the tensors' dtype.
DType attention_compute(const BlockPass& pass) {
  return pass.compute == DType::kBF16 ? DType::kBF16 : DType::kF32;
}
}  // namespace

float AttentionBlock::scale() const { return 1.0f / std::sqrt(static_cast<float>(c_.head_dim)); }

void AttentionBlock::project_qkv(int64_t N, const Residual& res_in, const AttentionWeights& w,
                                 const AttentionActs& a, const TensorView& positions, const TensorView& f32_nc,
                                 const TensorView& seq_nc) {
  const int64_t NH = c_.n_heads, G = c_.n_kv_heads, HD = c_.head_dim;
  norm_all_rows(be_, c_, tp_, a.h, a.norm_mean, a.norm_rstd, res_in, w.norm_w, w.norm_b, seq_nc, f32_nc,
                "the attention norm's output");
  const TensorView q = a.q.reshape({N, NH * HD}), k = a.k.reshape({N, G * HD});
  be_.linear_forward(c_.qk_norm ? a.q_pre : q, a.h, w.q_w, w.q_b);
  be_.linear_forward(c_.qk_norm ? a.k_pre : k, a.h, w.k_w, w.k_b);
  be_.linear_forward(a.v.reshape({N, G * HD}), a.h, w.v_w, w.v_b);
  if (c_.qk_norm) {
    const QkNormRows r = qk_norm_rows(N);
    be_.rmsnorm_forward(a.q.reshape(r.q), a.q_rstd.slice_rows(0, r.q[0]), a.q_pre.reshape(r.q), w.q_norm_w, c_.norm_eps);
    be_.rmsnorm_forward(a.k.reshape(r.k), a.k_rstd.slice_rows(0, r.k[0]), a.k_pre.reshape(r.k), w.k_norm_w, c_.norm_eps);
  }
  if (c_.layer_uses_rope(layer_)) {
    const TensorView q3 = a.q.reshape({N, NH, HD}), k3 = a.k.reshape({N, G, HD});
    const kernels::RopeFreqs freqs = rope_freqs(positions);
    be_.rope_forward(q3, q3, positions, freqs);
    be_.rope_forward(k3, k3, positions, freqs);
  }
}

Residual AttentionBlock::project_out(int64_t N, const TensorView& res_out, const TensorView& res_in,
                                     const AttentionWeights& w, const AttentionActs& a, bool bf16,
                                     const TensorView& f32_nc, const TensorView& seq_nc) {
  if (bf16) be_.convert(a.att_c, a.att);
  be_.linear_forward(f32_nc, a.att_c.reshape({N, c_.q_dim()}), w.o_w, row_parallel_bias(tp_, w.o_b));
  return row_parallel_output(be_, tp_, res_out, res_in, f32_nc, seq_nc, "the attention output");
}

Residual AttentionBlock::forward(const TensorView& res_out, const Residual& res_in, const AttentionWeights& w,
                                 const AttentionActs& a, const BlockPass& pass, const TensorView& f32_nc) {
  const int64_t N = a.h.dim(0);  // all rows (res_in has this rank's N/size under sequence parallelism)
  project_qkv(N, res_in, w, a, pass.positions, f32_nc, pass.seq_nc);
  be_.attention_forward(pass.attention, a.att, a.lse, a.q, a.k, a.v, pass.doc_ids, scale(), attention_compute(pass));
  return project_out(N, res_out, res_in.value, w, a, pass.compute == DType::kBF16, f32_nc, pass.seq_nc);
}

void AttentionBlock::backward(const TensorView& res_in, const AttentionWeights& w, const AttentionWeights& g,
                              const AttentionActs& a, const BlockPass& pass, Scratch& s) {
  const int64_t N = a.h.dim(0), NH = c_.n_heads, G = c_.n_kv_heads, HD = c_.head_dim;
  const bool sp = sequence_parallel(tp_);
  if (sp) sequence_gather(be_, tp_, s.dres, s.dres_full, "d res of the attention sub-block");
  const TensorView dout = sp ? s.dres_full : s.dres;  // all N rows
  be_.linear_backward(s.datt.reshape({N, NH * HD}), g.o_w, g.o_b, gemm_input(be_, s.grad_c, dout),
                      a.att_c.reshape({N, NH * HD}), w.o_w, pass.weight_grads);
  be_.attention_backward(pass.attention, s.dq, s.dk, s.dv, s.datt, a.q, a.k, a.v, a.att, a.lse, pass.doc_ids,
                         scale(), attention_compute(pass));
  if (c_.layer_uses_rope(layer_)) {
    const TensorView dq3 = s.dq.reshape({N, NH, HD}), dk3 = s.dk.reshape({N, G, HD});
    const kernels::RopeFreqs freqs = rope_freqs(pass.positions);
    be_.rope_backward(dq3, dq3, pass.positions, freqs);
    be_.rope_backward(dk3, dk3, pass.positions, freqs);
  }
  TensorView dq = s.dq.reshape({N, NH * HD}), dk = s.dk.reshape({N, G * HD});
  if (c_.qk_norm) {
    const QkNormRows r = qk_norm_rows(N);
    be_.rmsnorm_backward(s.dq_pre.reshape(r.q), g.q_norm_w, s.dq.reshape(r.q), a.q_pre.reshape(r.q), w.q_norm_w,
                         a.q_rstd.slice_rows(0, r.q[0]), false);
    be_.rmsnorm_backward(s.dk_pre.reshape(r.k), g.k_norm_w, s.dk.reshape(r.k), a.k_pre.reshape(r.k), w.k_norm_w,
                         a.k_rstd.slice_rows(0, r.k[0]), false);
    dq = s.dq_pre;
    dk = s.dk_pre;
  }
  // d h = dq·Wq + dk·Wk + dv·Wv: the first GEMM writes, the others accumulate.
  be_.linear_backward(s.dh, g.q_w, g.q_b, gemm_input(be_, s.grad_c, dq), a.h, w.q_w, pass.weight_grads);
  const TensorView gk = gemm_input(be_, s.grad_c, dk);
  be_.linear_backward(TensorView(), g.k_w, g.k_b, gk, a.h, w.k_w, pass.weight_grads);
  be_.matmul(s.dh, gk, w.k_w, false, false, /*accumulate=*/true);
  const TensorView gv = gemm_input(be_, s.grad_c, s.dv.reshape({N, G * HD}));
  be_.linear_backward(TensorView(), g.v_w, g.v_b, gv, a.h, w.v_w, pass.weight_grads);
  be_.matmul(s.dh, gv, w.v_w, false, false, /*accumulate=*/true);
  const TensorView dh = column_parallel_input_grad(tp_, s.dh, s.seq_nc, "d h of the q|k|v projections");
  norm_backward(be_, c_, s.dres, g.norm_w, g.norm_b, dh, res_in, w.norm_w, a.norm_mean, a.norm_rstd,
                /*accumulate=*/true);
}

void AttentionBlock::decode(const TensorView& x, const AttentionWeights& w, const AttentionActs& a,
                            const TensorView& k_cache, const TensorView& v_cache, int64_t length,
                            const TensorView& positions, const TensorView& proj) {
  const int64_t n = x.dim(0), S = k_cache.dim(1), NH = c_.n_heads, G = c_.n_kv_heads, HD = c_.head_dim;
  LMT_CHECK(k_cache.dim(0) == 1 && length >= 0 && length + n <= S)
      << "attention decode of " << n << " tokens after " << length << " into a cache " << k_cache.to_string();
  AttentionActs d = a;  // k, v: the new tokens' cache rows, written by the projections
  d.k = k_cache.reshape({S, G * HD}).slice_rows(length, length + n);
  d.v = v_cache.reshape({S, G * HD}).slice_rows(length, length + n);
  d.att_c = d.att;
  project_qkv(n, x, w, d, positions, proj, TensorView());
  be_.attention_prefill(d.att.reshape({n, NH, HD}), d.q.reshape({n, NH, HD}), k_cache, v_cache, length, scale());
  materialize(be_, project_out(n, x, x, w, d, /*bf16=*/false, proj, TensorView()));
}

void AttentionBlock::decode_rows(const TensorView& x, const AttentionWeights& w, const AttentionActs& a,
                                 const TensorView& k_cache, const TensorView& v_cache, std::span<const int64_t> lengths,
                                 const TensorView& positions, const TensorView& proj) {
  const int64_t R = x.dim(0), S = k_cache.dim(1), NH = c_.n_heads, G = c_.n_kv_heads, HD = c_.head_dim;
  LMT_CHECK(k_cache.dim(0) == R && static_cast<int64_t>(lengths.size()) == R && a.k.numel() == R * G * HD &&
            a.v.numel() == R * G * HD)
      << "attention decode_rows of " << R << " rows: " << lengths.size() << " lengths, cache " << k_cache.to_string()
      << ", k " << a.k.to_string();
  AttentionActs d = a;
  d.att_c = d.att;
  project_qkv(R, x, w, d, positions, proj, TensorView());
  const TensorView q = d.q.reshape({R, NH * HD}), att = d.att.reshape({R, NH * HD});
  const TensorView k_new = d.k.reshape({R, G * HD}), v_new = d.v.reshape({R, G * HD});
  for (int64_t r = 0; r < R; ++r) {
    const int64_t len = lengths[r];
    if (len == -1) continue;
    LMT_CHECK(len >= 0 && len < S) << "attention decode_rows: row " << r << " at " << len << " of a cache of " << S;
    const Shape one{1, S, G, HD};
    const TensorView kc(k_cache.as<float>() + r * S * G * HD, one, DType::kF32, k_cache.device());
    const TensorView vc(v_cache.as<float>() + r * S * G * HD, one, DType::kF32, v_cache.device());
    be_.copy(kc.reshape({S, G * HD}).slice_rows(len, len + 1), k_new.slice_rows(r, r + 1));
    be_.copy(vc.reshape({S, G * HD}).slice_rows(len, len + 1), v_new.slice_rows(r, r + 1));
    be_.attention_decode(att.slice_rows(r, r + 1).reshape({1, NH, HD}), q.slice_rows(r, r + 1).reshape({1, NH, HD}),
                         kc, vc, len + 1, scale());
  }
  materialize(be_, project_out(R, x, x, w, d, /*bf16=*/false, proj, TensorView()));
}

void AttentionBlock::decode_segments(const TensorView& x, const AttentionWeights& w, const AttentionActs& a,
                                     const TensorView& k_cache, const TensorView& v_cache,
                                     std::span<const DecodeSegment> segments, const TensorView& positions,
                                     const TensorView& proj) {
  const int64_t n = x.dim(0), R = k_cache.dim(0), S = k_cache.dim(1), NH = c_.n_heads, G = c_.n_kv_heads,
                HD = c_.head_dim;
  LMT_CHECK(a.k.numel() == n * G * HD && a.v.numel() == n * G * HD)
      << "attention decode_segments of " << n << " rows: k " << a.k.to_string() << ", v " << a.v.to_string();
  AttentionActs d = a;
  d.att_c = d.att;
  project_qkv(n, x, w, d, positions, proj, TensorView());
  const TensorView q = d.q.reshape({n, NH * HD}), att = d.att.reshape({n, NH * HD});
  const TensorView k_new = d.k.reshape({n, G * HD}), v_new = d.v.reshape({n, G * HD});
  const Shape one{1, S, G, HD};
  int64_t begin = 0;
  for (const DecodeSegment& seg : segments) {
    const int64_t end = begin + seg.size;
    LMT_CHECK(seg.row >= 0 && seg.row < R && seg.size >= 1 && seg.start >= 0 && seg.start + seg.size <= S && end <= n)
        << "attention decode_segments: segment of " << seg.size << " rows at " << seg.start << " of cache row " << seg.row
        << " (rows " << R << ", S " << S << ", " << begin << " of " << n << " rows used)";
    const TensorView kc(k_cache.as<float>() + seg.row * S * G * HD, one, DType::kF32, k_cache.device());
    const TensorView vc(v_cache.as<float>() + seg.row * S * G * HD, one, DType::kF32, v_cache.device());
    be_.copy(kc.reshape({S, G * HD}).slice_rows(seg.start, seg.start + seg.size), k_new.slice_rows(begin, end));
    be_.copy(vc.reshape({S, G * HD}).slice_rows(seg.start, seg.start + seg.size), v_new.slice_rows(begin, end));
    be_.attention_prefill(att.slice_rows(begin, end).reshape({seg.size, NH, HD}),
                          q.slice_rows(begin, end).reshape({seg.size, NH, HD}), kc, vc, seg.start, scale());
    begin = end;
  }
  LMT_CHECK(begin == n) << "attention decode_segments: the segments cover " << begin << " of " << n << " rows";
  materialize(be_, project_out(n, x, x, w, d, /*bf16=*/false, proj, TensorView()));
}

}  // namespace lmt::model
