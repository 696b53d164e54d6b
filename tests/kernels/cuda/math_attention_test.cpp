// The attention math of the CUDA kernels (kernels/cuda/math/online_softmax.h), checked on the host.
//
// The tests replay, in plain C++, the exact tiled algorithms of kernels/cuda/attention.cu and
// attention_decode.cu: the same tile sizes (attention_tiles of the same head-dim bucket), the same
// visited tile ranges (the document-run bounds, the causal diagonal), the same mask and the same
// online-softmax calls in the same order, and the backward's per-key-tile dK/dV and per-query-tile
// dQ passes with P recomputed from lse. Each replay is compared with the ref backend (f64) within
// atol 1e-5 + rtol 1e-4. What the replays cannot check is the CUDA indexing itself (thread/row
// ownership, shared-memory layout): that needs a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "lmt/base/rng.h"
#include "lmt/kernels/cuda/math/online_softmax.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace lmt::kernels {
namespace {

namespace cm = cuda_math;
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- online softmax edge cases ------------------------------------------------------------------

TEST(OnlineSoftmaxMath, FirstUpdateFromEmptyState) {
  cm::OnlineSoftmax st;
  EXPECT_EQ(st.m, -kInf);
  EXPECT_EQ(st.l, 0.0f);
  EXPECT_EQ(st.inv_sum(), 0.0f);
  EXPECT_EQ(st.lse(), -kInf);
  float alpha = -1, p = -1;
  st.update(2.5f, alpha, p);
  EXPECT_EQ(alpha, 0.0f);  // exp(-inf - 2.5): nothing earlier to keep, and not NaN
  EXPECT_EQ(p, 1.0f);
  EXPECT_EQ(st.m, 2.5f);
  EXPECT_EQ(st.l, 1.0f);
  EXPECT_FLOAT_EQ(st.lse(), 2.5f);
}

TEST(OnlineSoftmaxMath, MaskedScoresNeverMakeNaN) {
  cm::OnlineSoftmax st;
  float alpha = -1, p = -1;
  st.update(-kInf, alpha, p);  // an all-masked start: -inf - -inf must not appear
  EXPECT_EQ(alpha, 0.0f);
  EXPECT_EQ(p, 0.0f);
  EXPECT_EQ(st.m, -kInf);
  EXPECT_EQ(st.l, 0.0f);
  EXPECT_EQ(st.rescale(-kInf), 0.0f);  // an all-masked block on an empty state
  EXPECT_EQ(cm::exp_shifted(-kInf, -kInf), 0.0f);
  EXPECT_EQ(cm::exp_shifted(-kInf, 3.0f), 0.0f);
  EXPECT_EQ(cm::attention_prob(-kInf, 1.0f), 0.0f);
  EXPECT_EQ(cm::attention_prob(0.75f, 0.75f), 1.0f);
  // A masked block after visible scores keeps everything (factor 1) and adds nothing.
  st.update(1.0f, alpha, p);
  EXPECT_EQ(st.rescale(-kInf), 1.0f);
  EXPECT_EQ(st.prob(-kInf), 0.0f);
  EXPECT_EQ(st.l, 1.0f);
  EXPECT_EQ(cm::attention_dscore(0.0f, 5.0f, -2.0f), 0.0f);
}

TEST(OnlineSoftmaxMath, AllEqualScores) {
  cm::OnlineSoftmax st;
  for (int i = 0; i < 10; ++i) {
    float alpha, p;
    st.update(-3.0f, alpha, p);
    EXPECT_EQ(p, 1.0f);
    EXPECT_EQ(alpha, i == 0 ? 0.0f : 1.0f);
  }
  EXPECT_EQ(st.m, -3.0f);
  EXPECT_EQ(st.l, 10.0f);
  EXPECT_NEAR(st.lse(), -3.0 + std::log(10.0), 1e-6);
}

TEST(OnlineSoftmaxMath, MergeEdgeCases) {
  cm::OnlineSoftmax empty1, empty2, one;
  float alpha, p;
  one.update(4.0f, alpha, p);
  cm::MergeFactors f = empty1.merge(empty2);  // empty + empty: still empty, factors 0, no NaN
  EXPECT_EQ(f.self, 0.0f);
  EXPECT_EQ(f.other, 0.0f);
  EXPECT_EQ(empty1.m, -kInf);
  EXPECT_EQ(empty1.l, 0.0f);
  cm::OnlineSoftmax a;
  f = a.merge(one);  // empty + state: takes the other unchanged
  EXPECT_EQ(f.self, 0.0f);
  EXPECT_EQ(f.other, 1.0f);
  EXPECT_EQ(a.m, 4.0f);
  EXPECT_EQ(a.l, 1.0f);
  f = a.merge(empty2);  // state + empty: unchanged
  EXPECT_EQ(f.self, 1.0f);
  EXPECT_EQ(f.other, 0.0f);
  EXPECT_EQ(a.l, 1.0f);
  cm::OnlineSoftmax same;  // equal maxima: both factors 1
  same.update(4.0f, alpha, p);
  f = a.merge(same);
  EXPECT_EQ(f.self, 1.0f);
  EXPECT_EQ(f.other, 1.0f);
  EXPECT_EQ(a.l, 2.0f);
}

TEST(OnlineSoftmaxMath, MergedPartialsEqualOneSequentialPass) {
  Rng rng(7);
  std::vector<float> s(100);
  for (float& x : s) x = static_cast<float>(rng.normal() * 6.0);
  double mx = -1e300, sum = 0;
  for (float x : s) mx = std::max(mx, double(x));
  for (float x : s) sum += std::exp(x - mx);
  const double want = mx + std::log(sum);
  cm::OnlineSoftmax seq;
  for (float x : s) {
    float alpha, p;
    seq.update(x, alpha, p);
  }
  EXPECT_NEAR(seq.lse(), want, 1e-5);
  cm::OnlineSoftmax parts[8], total;  // strided split as attention_decode_kernel's warps
  for (size_t j = 0; j < s.size(); ++j) {
    float alpha, p;
    parts[j % 8].update(s[j], alpha, p);
  }
  for (const auto& part : parts) total.merge(part);
  EXPECT_NEAR(total.lse(), want, 1e-5);
}

TEST(OnlineSoftmaxMath, BucketsAndTiles) {
  EXPECT_EQ(cm::attention_hd_bucket(8), 32);
  EXPECT_EQ(cm::attention_hd_bucket(32), 32);
  EXPECT_EQ(cm::attention_hd_bucket(33), 64);
  EXPECT_EQ(cm::attention_hd_bucket(80), 128);
  EXPECT_EQ(cm::attention_hd_bucket(256), 256);
  EXPECT_EQ(cm::attention_hd_bucket(257), 0);
  EXPECT_EQ(cm::attention_hd_bucket(0), 0);
  EXPECT_EQ(cm::attention_prob_ld(64) % 4, 0);
  for (int bucket : {32, 64, 128, 256}) {
    const cm::AttentionTiles t = cm::attention_tiles(bucket);
    for (int x : {t.fwd_q, t.fwd_k, t.dkv_k, t.dkv_q, t.dq_q, t.dq_k}) {
      EXPECT_GT(x, 0);
      EXPECT_EQ(x % 16, 0) << "tiles are 16x16 thread grids";
    }
    // Every kernel's shared memory at the largest HD of the bucket fits 99 KB (sm_86/89's opt-in
    // limit) with room for the kernels' static shared memory.
    const int64_t fwd = cm::attention_forward_smem(bucket, bucket), dkv = cm::attention_dkv_smem(bucket, bucket),
                  dq = cm::attention_dq_smem(bucket, bucket);
    for (int64_t bytes : {fwd, dkv, dq}) EXPECT_LE(bytes + 64, 99 * 1024) << "bucket " << bucket;
  }
  // Padded strides: float4-aligned, and an odd multiple of 4 for tile rows.
  for (int hd = 1; hd <= 256; ++hd) {
    const int ld = cm::attention_tile_ld(hd);
    EXPECT_GE(ld, hd);
    EXPECT_EQ(ld % 8, 4) << "HD " << hd;
  }
}

// ---- host replays of the kernels ----------------------------------------------------------------

struct Problem {
  int B, T, NH, G, HD;
  bool docs;
  float scale;
  std::vector<float> q, k, v, dout;
  std::vector<int32_t> doc_ids;
  int64_t qi(int b, int t, int h) const { return ((int64_t(b) * T + t) * NH + h) * HD; }
  int64_t ki(int b, int t, int g) const { return ((int64_t(b) * T + t) * G + g) * HD; }
  int64_t li(int b, int h, int t) const { return (int64_t(b) * NH + h) * T + t; }
  int32_t doc(int b, int t) const { return docs && t < T ? doc_ids[size_t(b) * T + t] : 0; }
};

// Short documents (lengths 1..max_len, a third of them length 1), as contiguous runs.
Problem make_problem(int B, int T, int NH, int G, int HD, bool docs, int max_len, uint64_t seed) {
  Problem p{B, T, NH, G, HD, docs, 1.0f / std::sqrt(float(HD)), {}, {}, {}, {}, {}};
  Rng rng(seed);
  auto fill = [&](std::vector<float>& x, int64_t n) {
    x.resize(size_t(n));
    for (float& y : x) y = static_cast<float>(rng.normal());
  };
  fill(p.q, int64_t(B) * T * NH * HD);
  fill(p.k, int64_t(B) * T * G * HD);
  fill(p.v, int64_t(B) * T * G * HD);
  fill(p.dout, int64_t(B) * T * NH * HD);
  p.doc_ids.resize(size_t(B) * T);
  for (int b = 0; b < B; ++b) {
    int32_t id = 0;
    int left = 0;
    for (int t = 0; t < T; ++t) {
      if (left == 0) {
        ++id;
        left = rng.uniform() < 0.33 ? 1 : 1 + int(rng.below(uint64_t(max_len)));
      }
      p.doc_ids[size_t(b) * T + t] = id;
      --left;
    }
  }
  return p;
}

// doc_run_edge of attention.cu: the first (dir -1) or last (dir +1) position of pos's document.
int doc_run_edge(const Problem& p, int b, int pos, int dir) {
  int e = pos;
  while (e + dir >= 0 && e + dir < p.T && p.doc(b, e + dir) == p.doc(b, pos)) e += dir;
  return e;
}

float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int e = 0; e < n; ++e) s = std::fma(a[e], b[e], s);
  return s;
}

// flash_forward_kernel, one (b, h, query tile) at a time.
void replay_forward(const Problem& p, std::vector<float>& out, std::vector<float>& lse) {
  const cm::AttentionTiles t = cm::attention_tiles(cm::attention_hd_bucket(p.HD));
  const int BQ = t.fwd_q, BK = t.fwd_k, HD = p.HD;
  out.assign(p.q.size(), 0.0f);
  lse.assign(size_t(p.B) * p.NH * p.T, 0.0f);
  std::vector<float> s(static_cast<size_t>(BK)), o(static_cast<size_t>(BQ) * HD);
  for (int b = 0; b < p.B; ++b)
    for (int h = 0; h < p.NH; ++h) {
      const int g = h / (p.NH / p.G);
      for (int q0 = 0; q0 < p.T; q0 += BQ) {
        const int q_valid = std::min(BQ, p.T - q0);
        const int first_key = p.docs ? doc_run_edge(p, b, q0, -1) : 0, last_key = q0 + q_valid - 1;
        std::vector<cm::OnlineSoftmax> st(static_cast<size_t>(BQ));
        std::fill(o.begin(), o.end(), 0.0f);
        for (int kt = first_key / BK; kt <= last_key / BK; ++kt) {
          const int k0 = kt * BK;
          for (int ii = 0; ii < BQ; ++ii) {
            const int i = q0 + ii;
            float mx = -kInf;
            for (int jj = 0; jj < BK; ++jj) {
              const int j = k0 + jj;
              const bool vis = cm::attention_visible(i, j, p.T, p.docs, p.doc(b, i), p.doc(b, j));
              // Padding rows (i or j >= T) are zero tiles in the kernel: masked anyway.
              s[jj] = vis ? dot(&p.q[p.qi(b, i, h)], &p.k[p.ki(b, j, g)], HD) * p.scale : -kInf;
              mx = std::max(mx, s[jj]);
            }
            const float alpha = st[ii].rescale(mx);
            float psum = 0.0f;
            for (int jj = 0; jj < BK; ++jj) {
              s[jj] = st[ii].prob(s[jj]);
              psum += s[jj];
            }
            st[ii].add(psum);
            for (int e = 0; e < HD; ++e) {
              float acc = o[size_t(ii) * HD + e] * alpha;
              for (int jj = 0; jj < BK; ++jj)
                if (k0 + jj < p.T) acc = std::fma(s[jj], p.v[p.ki(b, k0 + jj, g) + e], acc);
              o[size_t(ii) * HD + e] = acc;
            }
          }
        }
        for (int ii = 0; ii < q_valid; ++ii) {
          const int i = q0 + ii;
          for (int e = 0; e < HD; ++e) out[p.qi(b, i, h) + e] = o[size_t(ii) * HD + e] * st[ii].inv_sum();
          lse[p.li(b, h, i)] = st[ii].lse();
        }
      }
    }
}

// attention_delta_kernel, flash_backward_dkv_kernel and flash_backward_dq_kernel.
void replay_backward(const Problem& p, const std::vector<float>& out, const std::vector<float>& lse,
                     std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv) {
  const cm::AttentionTiles t = cm::attention_tiles(cm::attention_hd_bucket(p.HD));
  const int HD = p.HD, heads = p.NH / p.G;
  std::vector<float> delta(lse.size());
  for (int b = 0; b < p.B; ++b)
    for (int i = 0; i < p.T; ++i)
      for (int h = 0; h < p.NH; ++h) delta[p.li(b, h, i)] = dot(&out[p.qi(b, i, h)], &p.dout[p.qi(b, i, h)], HD);
  auto probs = [&](int b, int h, int g, int i, int j, float& pr, float& ds) {
    const bool vis = cm::attention_visible(i, j, p.T, p.docs, p.doc(b, i), p.doc(b, j));
    const float s = vis ? dot(&p.q[p.qi(b, i, h)], &p.k[p.ki(b, j, g)], HD) * p.scale : -kInf;
    pr = cm::attention_prob(s, vis ? lse[p.li(b, h, i)] : 0.0f);
    const float dp = vis ? dot(&p.dout[p.qi(b, i, h)], &p.v[p.ki(b, j, g)], HD) : 0.0f;
    ds = cm::attention_dscore(pr, dp, vis ? delta[p.li(b, h, i)] : 0.0f);
  };

  dk.assign(p.k.size(), 0.0f);
  dv.assign(p.v.size(), 0.0f);
  const int BK = t.dkv_k, BQ = t.dkv_q;
  for (int b = 0; b < p.B; ++b)
    for (int g = 0; g < p.G; ++g)
      for (int k0 = 0; k0 < p.T; k0 += BK) {
        const int k_valid = std::min(BK, p.T - k0);
        const int last_query = p.docs ? doc_run_edge(p, b, k0 + k_valid - 1, +1) : p.T - 1;
        std::vector<float> dkt(size_t(BK) * HD, 0.0f), dvt(size_t(BK) * HD, 0.0f);
        for (int hr = 0; hr < heads; ++hr) {
          const int h = g * heads + hr;
          for (int qt = k0 / BQ; qt <= last_query / BQ; ++qt)
            for (int jj = 0; jj < k_valid; ++jj)
              for (int ii = 0; ii < BQ && qt * BQ + ii < p.T; ++ii) {
                const int i = qt * BQ + ii, j = k0 + jj;
                float pr, ds;
                probs(b, h, g, i, j, pr, ds);
                for (int e = 0; e < HD; ++e) {
                  dvt[size_t(jj) * HD + e] = std::fma(pr, p.dout[p.qi(b, i, h) + e], dvt[size_t(jj) * HD + e]);
                  dkt[size_t(jj) * HD + e] = std::fma(ds, p.q[p.qi(b, i, h) + e], dkt[size_t(jj) * HD + e]);
                }
              }
        }
        for (int jj = 0; jj < k_valid; ++jj)
          for (int e = 0; e < HD; ++e) {
            dk[p.ki(b, k0 + jj, g) + e] = dkt[size_t(jj) * HD + e] * p.scale;
            dv[p.ki(b, k0 + jj, g) + e] = dvt[size_t(jj) * HD + e];
          }
      }

  dq.assign(p.q.size(), 0.0f);
  const int DQ = t.dq_q, DK = t.dq_k;
  for (int b = 0; b < p.B; ++b)
    for (int h = 0; h < p.NH; ++h) {
      const int g = h / heads;
      for (int q0 = 0; q0 < p.T; q0 += DQ) {
        const int q_valid = std::min(DQ, p.T - q0);
        const int first_key = p.docs ? doc_run_edge(p, b, q0, -1) : 0, last_key = q0 + q_valid - 1;
        std::vector<float> dqt(size_t(DQ) * HD, 0.0f);
        for (int kt = first_key / DK; kt <= last_key / DK; ++kt)
          for (int ii = 0; ii < q_valid; ++ii)
            for (int jj = 0; jj < DK && kt * DK + jj < p.T; ++jj) {
              const int i = q0 + ii, j = kt * DK + jj;
              float pr, ds;
              probs(b, h, g, i, j, pr, ds);
              for (int e = 0; e < HD; ++e)
                dqt[size_t(ii) * HD + e] = std::fma(ds, p.k[p.ki(b, j, g) + e], dqt[size_t(ii) * HD + e]);
            }
        for (int ii = 0; ii < q_valid; ++ii)
          for (int e = 0; e < HD; ++e) dq[p.qi(b, q0 + ii, h) + e] = dqt[size_t(ii) * HD + e] * p.scale;
      }
    }
}

Tensor tensor_of(const std::vector<float>& x, Shape s) {
  Tensor t(s, DType::kF32);
  std::copy(x.begin(), x.end(), t.as<float>());
  return t;
}

void expect_close(const std::vector<float>& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(int64_t(got.size()), want.numel()) << what;
  int bad = 0;
  for (size_t n = 0; n < got.size(); ++n) {
    const float w = want.as<float>()[n];
    if (!(std::fabs(got[n] - w) <= 1e-5f + 1e-4f * std::fabs(w)) && ++bad <= 5)
      ADD_FAILURE() << what << "[" << n << "]: replay " << got[n] << " vs ref " << w;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements differ";
}

struct Shape5 {
  int B, T, NH, G, HD;
  bool docs;
  int max_doc;
};

class FlashReplay : public ::testing::TestWithParam<Shape5> {};

TEST_P(FlashReplay, ForwardAndBackwardMatchRef) {
  const Shape5 c = GetParam();
  const Problem p = make_problem(c.B, c.T, c.NH, c.G, c.HD, c.docs, c.max_doc, 1234 + c.T * 7 + c.HD);
  std::vector<float> out, lse, dq, dk, dv;
  replay_forward(p, out, lse);
  replay_backward(p, out, lse, dq, dk, dv);

  Backend& ref = backend("ref");
  const Shape qs{c.B, c.T, c.NH, c.HD}, ks{c.B, c.T, c.G, c.HD};
  const Tensor q = tensor_of(p.q, qs), k = tensor_of(p.k, ks), v = tensor_of(p.v, ks), dout = tensor_of(p.dout, qs);
  Tensor docs(Shape{c.B, c.T}, DType::kI32);
  std::copy(p.doc_ids.begin(), p.doc_ids.end(), docs.as<int32_t>());
  const TensorView doc_view = c.docs ? docs.view() : TensorView();
  Tensor rout(qs, DType::kF32), rlse(Shape{c.B, c.NH, c.T}, DType::kF32);
  Tensor rdq(qs, DType::kF32), rdk(ks, DType::kF32), rdv(ks, DType::kF32);
  ref.attention_forward(AttentionBackend::kFlash, rout, rlse, q, k, v, doc_view, p.scale);
  ref.attention_backward(AttentionBackend::kFlash, rdq, rdk, rdv, dout, q, k, v, rout, rlse, doc_view, p.scale);
  expect_close(out, rout, "out");
  expect_close(lse, rlse, "lse");
  expect_close(dq, rdq, "dq");
  expect_close(dk, rdk, "dk");
  expect_close(dv, rdv, "dv");
}

// The op_test shapes (odd HD, GQA, MQA, docs) plus tiles cut by T, every HD bucket and
// documents of 1..3 tokens.
INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashReplay,
    ::testing::Values(Shape5{1, 1, 1, 1, 8, false, 1}, Shape5{2, 17, 4, 2, 16, true, 8},
                      Shape5{1, 33, 8, 1, 12, false, 1}, Shape5{1, 40, 8, 8, 64, true, 20},
                      Shape5{1, 70, 8, 4, 80, false, 1}, Shape5{2, 130, 4, 4, 64, true, 65},
                      Shape5{1, 65, 8, 2, 32, true, 32}, Shape5{1, 150, 4, 2, 64, true, 3},
                      Shape5{1, 97, 4, 1, 128, true, 3}, Shape5{1, 45, 2, 1, 200, true, 30},
                      Shape5{1, 200, 2, 2, 96, false, 1}),
    [](const ::testing::TestParamInfo<Shape5>& i) {
      const Shape5& c = i.param;
      return "B" + std::to_string(c.B) + "T" + std::to_string(c.T) + "NH" + std::to_string(c.NH) + "G" +
             std::to_string(c.G) + "HD" + std::to_string(c.HD) + (c.docs ? "_docs" + std::to_string(c.max_doc) : "");
    });

// attention_decode_kernel / attention_prefill: 8 warps take keys w, w+8, ...; their partial
// softmaxes merge in warp order.
std::vector<float> replay_decode_rows(const Problem& p, int rows, int64_t cache_row_stride, int64_t length0,
                                     int64_t step) {
  constexpr int kWarps = 8;
  std::vector<float> out(size_t(rows) * p.NH * p.HD);
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < p.NH; ++h) {
      const int g = h / (p.NH / p.G);
      const int64_t length = length0 + r * step, stride = int64_t(p.G) * p.HD;
      const float* qrow = &p.q[(size_t(r) * p.NH + h) * p.HD];
      cm::OnlineSoftmax st[kWarps];
      std::vector<float> acc(size_t(kWarps) * p.HD, 0.0f);
      for (int w = 0; w < kWarps; ++w)
        for (int64_t j = w; j < length; j += kWarps) {
          const size_t off = size_t(r * cache_row_stride + j * stride + g * p.HD);
          float alpha, pr;
          st[w].update(dot(qrow, &p.k[off], p.HD) * p.scale, alpha, pr);
          for (int e = 0; e < p.HD; ++e) acc[w * p.HD + e] = std::fma(pr, p.v[off + e], acc[w * p.HD + e] * alpha);
        }
      for (int e = 0; e < p.HD; ++e) {
        cm::OnlineSoftmax total;
        float o = 0.0f;
        for (int w = 0; w < kWarps; ++w) {
          const cm::MergeFactors f = total.merge(st[w]);
          o = o * f.self + acc[w * p.HD + e] * f.other;
        }
        out[(size_t(r) * p.NH + h) * p.HD + e] = o * total.inv_sum();
      }
    }
  return out;
}

TEST(DecodeReplay, DecodeAndPrefillMatchRef) {
  Backend& ref = backend("ref");
  struct D { int B, S, len, NH, G, HD; };
  for (D d : {D{1, 4, 1, 1, 1, 8}, D{1, 40, 33, 8, 4, 8}, D{2, 70, 65, 12, 12, 64}, D{1, 300, 257, 8, 2, 80},
              D{3, 20, 20, 6, 1, 12}}) {
    SCOPED_TRACE("decode B" + std::to_string(d.B) + " S" + std::to_string(d.S) + " len" + std::to_string(d.len));
    // Reuse Problem's storage: q [B,NH,HD] (T = 1), caches [B,S,G,HD] (T = S).
    Problem p = make_problem(d.B, d.S, d.NH, d.G, d.HD, false, 1, 99 + d.S);
    p.q.resize(size_t(d.B) * d.NH * d.HD);
    const std::vector<float> got = replay_decode_rows(p, d.B, int64_t(d.S) * d.G * d.HD, d.len, 0);
    const Shape qs{d.B, d.NH, d.HD}, ks{d.B, d.S, d.G, d.HD};
    Tensor out(qs, DType::kF32);
    ref.attention_decode(out, tensor_of(p.q, qs), tensor_of(p.k, ks), tensor_of(p.v, ks), d.len, p.scale);
    expect_close(got, out, "decode out");
  }
  struct P { int S, start, n, NH, G, HD; };
  for (P d : {P{4, 0, 1, 1, 1, 8}, P{40, 0, 33, 8, 4, 8}, P{70, 20, 1, 12, 12, 64}, P{300, 200, 57, 8, 2, 80},
              P{24, 3, 20, 6, 1, 12}}) {
    SCOPED_TRACE("prefill S" + std::to_string(d.S) + " start" + std::to_string(d.start) + " n" + std::to_string(d.n));
    Problem p = make_problem(1, d.S, d.NH, d.G, d.HD, false, 1, 77 + d.S);
    p.q.resize(size_t(d.n) * d.NH * d.HD);
    const std::vector<float> got = replay_decode_rows(p, d.n, 0, d.start + 1, 1);
    const Shape qs{d.n, d.NH, d.HD}, ks{1, d.S, d.G, d.HD};
    Tensor out(qs, DType::kF32);
    ref.attention_prefill(out, tensor_of(p.q, qs), tensor_of(p.k, ks), tensor_of(p.v, ks), d.start, p.scale);
    expect_close(got, out, "prefill out");
  }
}

}  // namespace
}  // namespace lmt::kernels
