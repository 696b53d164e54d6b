// The math headers of kernels/cuda (math/norm_math.h, activation_math.h, rope_math.h,
// cross_entropy_math.h) run on the host in loops shaped like their kernels — per warp-row with 32
// lane partials and the xor-butterfly warp sum, per element, per rotary pair, per 512-thread logit
// row with the block's two-level (max, Σexp) merge — and compared with the ref backend's f64 loops
// within atol 1e-5 + rtol 1e-4. Plain C++: no GPU and no CUDA headers needed, so it runs everywhere;
// the kernels themselves add only indexing around these functions.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "lmt/kernels/backend.h"
#include "lmt/kernels/cuda/math/activation_math.h"
#include "lmt/kernels/cuda/math/cross_entropy_math.h"
#include "lmt/kernels/cuda/math/norm_math.h"
#include "lmt/kernels/cuda/math/rope_math.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace lmt::kernels {
namespace {

namespace cm = cuda_math;

constexpr double kAtol = 1e-5, kRtol = 1e-4;

Backend& ref() { return backend("ref"); }

Tensor f32(Shape s) { return Tensor(s, DType::kF32); }

void fill_uniform(const Tensor& t, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = d(rng);
}

void expect_close(const float* got, const float* want, int64_t n, const std::string& what) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got[i], w = want[i];
    const bool ok = std::abs(g - w) <= kAtol + kRtol * std::abs(w) || (std::isnan(g) && std::isnan(w));
    if (!ok && ++bad <= 5) ADD_FAILURE() << what << "[" << i << "]: got " << g << ", want " << w;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << n << " elements differ";
}
void expect_close(const std::vector<float>& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(got.size()), want.numel()) << what;
  expect_close(got.data(), want.as<float>(), want.numel(), what);
}

// __shfl_xor_sync butterfly: at each step every lane combines its value with lane ^ o's (own first),
// as warp_sum / block_online_merge do. Returns lane 0's result (all lanes agree).
template <typename T, typename F>
T butterfly(std::array<T, 32> v, F combine) {
  for (int o = 16; o > 0; o >>= 1) {
    const std::array<T, 32> w = v;
    for (int i = 0; i < 32; ++i) v[i] = combine(w[i], w[i ^ o]);
  }
  return v[0];
}
float warp_sum(const std::array<float, 32>& lanes) {
  return butterfly(lanes, [](float a, float b) { return a + b; });
}

// ---- norms: norm.cu's warp-per-row kernels and its column partials ---------------------------------

struct NormRowStats {
  float mean, rstd;
};

// norm_forward_kernel for one row (layernorm when centered, rmsnorm otherwise).
NormRowStats norm_forward_row(const float* x, const float* w, const float* b, float* y, int64_t C, float eps,
                              bool centered) {
  float mean = 0.0f;
  if (centered) {
    std::array<float, 32> s{};
    for (int lane = 0; lane < 32; ++lane)
      for (int64_t c = lane; c < C; c += 32) s[lane] += x[c];
    mean = cm::norm_mean(warp_sum(s), C);
  }
  std::array<float, 32> sq{};
  for (int lane = 0; lane < 32; ++lane)
    for (int64_t c = lane; c < C; c += 32) {
      const float d = x[c] - mean;
      sq[lane] += d * d;
    }
  const float rstd = cm::norm_rstd(warp_sum(sq), C, eps);
  for (int64_t c = 0; c < C; ++c) y[c] = cm::norm_forward(x[c], mean, rstd, w[c], b != nullptr ? b[c] : 0.0f);
  return {mean, rstd};
}

// norm_backward_rows_kernel for one row; returns the recomputed mean.
float norm_backward_row(const float* x, const float* dy, const float* w, float r, float* dx, int64_t C, bool centered,
                        bool accumulate) {
  float mean = 0.0f;
  if (centered) {
    std::array<float, 32> s{};
    for (int lane = 0; lane < 32; ++lane)
      for (int64_t c = lane; c < C; c += 32) s[lane] += x[c];
    mean = cm::norm_mean(warp_sum(s), C);
  }
  std::array<float, 32> sd{}, sdx{};
  for (int lane = 0; lane < 32; ++lane)
    for (int64_t c = lane; c < C; c += 32) {
      const float dxhat = cm::norm_dxhat(dy[c], w[c]);
      sd[lane] += dxhat;
      sdx[lane] += dxhat * cm::norm_xhat(x[c], mean, r);
    }
  const float mean_dxhat = centered ? cm::norm_mean(warp_sum(sd), C) : 0.0f;
  const float mean_dxhat_xhat = cm::norm_mean(warp_sum(sdx), C);
  for (int64_t c = 0; c < C; ++c) {
    const float g =
        cm::norm_dinp(cm::norm_xhat(x[c], mean, r), cm::norm_dxhat(dy[c], w[c]), r, mean_dxhat, mean_dxhat_xhat);
    dx[c] = accumulate ? dx[c] + g : g;
  }
  return mean;
}

// norm_column_partials_kernel + column_finalize_kernel: dw[c] += Σ dy·xhat, db[c] += Σ dy (db optional).
void norm_column_sums(const float* x, const float* dy, const std::vector<float>& mean, const float* rstd, int64_t N,
                      int64_t C, float* dw, float* db) {
  const cm::NormColumnSplits cs = cm::norm_column_splits(N, C);
  for (int64_t c = 0; c < C; ++c) {
    float total_w = 0.0f, total_b = 0.0f;
    for (int64_t split = 0; split < cs.splits; ++split) {
      const int64_t r0 = split * cs.rows_per_split, r1 = std::min(N, r0 + cs.rows_per_split);
      float pw = 0.0f, pb = 0.0f;
      for (int ty = 0; ty < cm::kNormColRows; ++ty) {
        float aw = 0.0f, ab = 0.0f;
        for (int64_t r = r0 + ty; r < r1; r += cm::kNormColRows) {
          const float d = dy[r * C + c];
          aw += d * cm::norm_xhat(x[r * C + c], mean[r], rstd[r]);
          ab += d;
        }
        pw += aw;
        pb += ab;
      }
      total_w += pw;
      total_b += pb;
    }
    dw[c] += total_w;
    if (db != nullptr) db[c] += total_b;
  }
}

std::vector<float> copy_of(const Tensor& t) { return std::vector<float>(t.as<float>(), t.as<float>() + t.numel()); }

class NormMath : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, bool>> {};

TEST_P(NormMath, LayerNormMatchesRef) {
  const auto [N, C, accumulate] = GetParam();
  for (bool with_bias : {false, true}) {
    std::mt19937 rng(static_cast<unsigned>(N * 1000 + C));
    Tensor inp = f32({N, C}), w = f32({C}), b = f32({C}), out = f32({N, C}), mean = f32({N}), rstd = f32({N});
    fill_uniform(inp, rng, -2.0f, 3.0f);
    fill_uniform(w, rng, 0.5f, 1.5f);
    fill_uniform(b, rng, -1.0f, 1.0f);
    const float eps = 1e-5f;
    ref().layernorm_forward(out, mean, rstd, inp, w, with_bias ? b.view() : TensorView(), eps);
    std::vector<float> y(N * C), m(N), r(N);
    for (int64_t n = 0; n < N; ++n) {
      const NormRowStats s = norm_forward_row(inp.as<float>() + n * C, w.as<float>(),
                                              with_bias ? b.as<float>() : nullptr, y.data() + n * C, C, eps, true);
      m[n] = s.mean;
      r[n] = s.rstd;
    }
    const std::string tag = "layernorm N=" + std::to_string(N) + " C=" + std::to_string(C) + (with_bias ? " bias" : "");
    expect_close(y, out, tag + " out");
    expect_close(m, mean, tag + " mean");
    expect_close(r, rstd, tag + " rstd");

    Tensor dout = f32({N, C}), dinp = f32({N, C}), dw = f32({C}), db = f32({C});
    fill_uniform(dout, rng, -1.0f, 1.0f);
    fill_uniform(dinp, rng, -1.0f, 1.0f);
    fill_uniform(dw, rng, -1.0f, 1.0f);
    fill_uniform(db, rng, -1.0f, 1.0f);
    std::vector<float> gx = copy_of(dinp), gw = copy_of(dw), gb = copy_of(db);
    ref().layernorm_backward(dinp, dw, with_bias ? db.view() : TensorView(), dout, inp, w, mean, rstd, accumulate);
    std::vector<float> mean_save(N);
    for (int64_t n = 0; n < N; ++n)
      mean_save[n] = norm_backward_row(inp.as<float>() + n * C, dout.as<float>() + n * C, w.as<float>(),
                                       rstd.as<float>()[n], gx.data() + n * C, C, true, accumulate);
    norm_column_sums(inp.as<float>(), dout.as<float>(), mean_save, rstd.as<float>(), N, C, gw.data(),
                     with_bias ? gb.data() : nullptr);
    expect_close(gx, dinp, tag + " dinp");
    expect_close(gw, dw, tag + " dweight");
    expect_close(gb, db, tag + " dbias");
  }
}

TEST_P(NormMath, RmsNormMatchesRef) {
  const auto [N, C, accumulate] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(N * 7 + C));
  Tensor inp = f32({N, C}), w = f32({C}), out = f32({N, C}), rstd = f32({N});
  fill_uniform(inp, rng, -2.0f, 3.0f);
  fill_uniform(w, rng, 0.5f, 1.5f);
  const float eps = 1e-6f;
  ref().rmsnorm_forward(out, rstd, inp, w, eps);
  std::vector<float> y(N * C), r(N);
  for (int64_t n = 0; n < N; ++n)
    r[n] = norm_forward_row(inp.as<float>() + n * C, w.as<float>(), nullptr, y.data() + n * C, C, eps, false).rstd;
  const std::string tag = "rmsnorm N=" + std::to_string(N) + " C=" + std::to_string(C);
  expect_close(y, out, tag + " out");
  expect_close(r, rstd, tag + " rstd");

  Tensor dout = f32({N, C}), dinp = f32({N, C}), dw = f32({C});
  fill_uniform(dout, rng, -1.0f, 1.0f);
  fill_uniform(dinp, rng, -1.0f, 1.0f);
  fill_uniform(dw, rng, -1.0f, 1.0f);
  std::vector<float> gx = copy_of(dinp), gw = copy_of(dw);
  ref().rmsnorm_backward(dinp, dw, dout, inp, w, rstd, accumulate);
  for (int64_t n = 0; n < N; ++n)
    norm_backward_row(inp.as<float>() + n * C, dout.as<float>() + n * C, w.as<float>(), rstd.as<float>()[n],
                      gx.data() + n * C, C, false, accumulate);
  norm_column_sums(inp.as<float>(), dout.as<float>(), std::vector<float>(N, 0.0f), rstd.as<float>(), N, C, gw.data(),
                   nullptr);
  expect_close(gx, dinp, tag + " dinp");
  expect_close(gw, dw, tag + " dweight");
}

// Widths on both sides of the register cache (32·K columns, K <= 32) and QK-norm's many short rows.
INSTANTIATE_TEST_SUITE_P(
    Shapes, NormMath,
    ::testing::Values(std::tuple{int64_t{1}, int64_t{1}, false}, std::tuple{int64_t{3}, int64_t{7}, true},
                      std::tuple{int64_t{5}, int64_t{33}, false}, std::tuple{int64_t{4}, int64_t{768}, true},
                      std::tuple{int64_t{3}, int64_t{1100}, false}, std::tuple{int64_t{2000}, int64_t{16}, false},
                      std::tuple{int64_t{700}, int64_t{64}, true}));

TEST(NormMath, ColumnSplitsCoverEveryRowOnce) {
  for (int64_t N : {1, 7, 64, 65, 1000, 262144})
    for (int64_t C : {1, 8, 64, 768, 2048, 70000}) {
      const cm::NormColumnSplits cs = cm::norm_column_splits(N, C);
      EXPECT_GE(cs.splits, 1);
      EXPECT_LE(cs.splits, 65535);
      EXPECT_GE(cs.splits * cs.rows_per_split, N) << N << "x" << C;
      EXPECT_LT((cs.splits - 1) * cs.rows_per_split, std::max<int64_t>(N, 1)) << N << "x" << C;
    }
}

// ---- activations and GLU: activation.cu's per-element loops -----------------------------------------

std::vector<float> activation_inputs() {
  std::vector<float> v = {0.0f,  -0.0f, 1e-6f, -1e-6f, 1e-3f, -1e-3f, 0.5f,   -0.5f, 1.0f,   -1.0f, 3.0f,
                          -3.0f, 5.0f,  -5.0f, 9.0f,   -9.0f, 20.0f,  -20.0f, 80.0f, -80.0f, 1e4f,  -1e4f};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-8.0f, 8.0f);
  for (int i = 0; i < 1000; ++i) v.push_back(d(rng));
  return v;
}

TEST(ActivationMath, PointwiseMatchesRef) {
  const std::vector<float> xs = activation_inputs();
  const int64_t n = static_cast<int64_t>(xs.size());
  for (Activation a : {Activation::kGeluTanh, Activation::kSilu, Activation::kRelu}) {
    const cm::Act ca = static_cast<cm::Act>(static_cast<int>(a));
    Tensor inp = f32({n}), out = f32({n}), dout = f32({n}), dinp = f32({n});
    std::mt19937 rng(11);
    fill_uniform(dout, rng, -2.0f, 2.0f);
    for (int64_t i = 0; i < n; ++i) inp.as<float>()[i] = xs[i];
    ref().activation_forward(a, out, inp);
    ref().activation_backward(a, dinp, dout, inp);
    std::vector<float> y(n), g(n);
    for (int64_t i = 0; i < n; ++i) {
      y[i] = cm::act_forward(ca, xs[i]);
      g[i] = dout.as<float>()[i] * cm::act_grad(ca, xs[i]);
    }
    const std::string tag(activation_name(a));
    expect_close(y, out, tag + " forward");
    expect_close(g, dinp, tag + " backward");
  }
}

TEST(ActivationMath, CompileTimeDispatchEqualsRunTime) {
  for (float x : activation_inputs()) {
    EXPECT_EQ(cm::act_forward<cm::Act::kGeluTanh>(x), cm::act_forward(cm::Act::kGeluTanh, x));
    EXPECT_EQ(cm::act_grad<cm::Act::kSilu>(x), cm::act_grad(cm::Act::kSilu, x));
    EXPECT_EQ(cm::act_grad<cm::Act::kRelu>(x), cm::act_grad(cm::Act::kRelu, x));
  }
  EXPECT_TRUE(std::isfinite(cm::gelu_tanh_grad(1e20f)));  // sech² = 0 times an infinite slope term
  EXPECT_EQ(cm::gelu_tanh_grad(-1e20f), 0.0f);
}

template <cm::Act A>
void glu_case(Activation a) {
  const int64_t N = 3, H = 37;
  std::mt19937 rng(5);
  Tensor inp = f32({N, 2 * H}), out = f32({N, H}), dout = f32({N, H}), dinp = f32({N, 2 * H});
  fill_uniform(inp, rng, -6.0f, 6.0f);
  fill_uniform(dout, rng, -1.0f, 1.0f);
  ref().glu_forward(a, out, inp);
  ref().glu_backward(a, dinp, dout, inp);
  std::vector<float> y(N * H), g(N * 2 * H);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      const float gate = inp.as<float>()[n * 2 * H + h], up = inp.as<float>()[n * 2 * H + H + h];
      y[n * H + h] = cm::glu_forward<A>(gate, up);
      cm::glu_backward<A>(gate, up, dout.as<float>()[n * H + h], g[n * 2 * H + h], g[n * 2 * H + H + h]);
    }
  const std::string tag = "glu " + std::string(activation_name(a));
  expect_close(y, out, tag + " forward");
  expect_close(g, dinp, tag + " backward");
}

TEST(ActivationMath, GluMatchesRef) {
  glu_case<cm::Act::kGeluTanh>(Activation::kGeluTanh);
  glu_case<cm::Act::kSilu>(Activation::kSilu);
  glu_case<cm::Act::kRelu>(Activation::kRelu);
}

// ---- RoPE: rope.cu's per-(row, head, item) loop --------------------------------------------------------

TEST(RopeMath, ForwardAndInverseMatchRef) {
  const int64_t N = 6, NH = 3, HD = 16;
  RopeFreqs freqs = RopeFreqs::from_theta(10000.0, 12);  // partial rotary: dims 12..15 pass through
  freqs.attention_scaling = 1.3;
  const int32_t pos[N] = {0, 1, 17, 4095, 131071, 1000003};
  Tensor inp = f32({N, NH, HD}), positions({N}, DType::kI32);
  for (int64_t n = 0; n < N; ++n) positions.as<int32_t>()[n] = pos[n];
  std::mt19937 rng(3);
  fill_uniform(inp, rng, -2.0f, 2.0f);
  for (bool inverse : {false, true}) {
    Tensor out = f32({N, NH, HD});
    if (inverse)
      ref().rope_backward(out, inp, positions, freqs);
    else
      ref().rope_forward(out, inp, positions, freqs);
    const int64_t half = static_cast<int64_t>(freqs.inv_freq.size()), items = HD - half;
    std::vector<float> y(N * NH * HD);
    const float* x = inp.as<float>();
    for (int64_t idx = 0; idx < N * NH * items; ++idx) {
      const int64_t head_row = idx / items, j = idx - head_row * items, base = head_row * HD;
      if (j < half) {
        double c, s;
        cm::rope_cos_sin(static_cast<double>(pos[head_row / NH]), freqs.inv_freq[j], freqs.attention_scaling, inverse,
                         c, s);
        cm::rope_rotate(x[base + j], x[base + j + half], c, s, y[base + j], y[base + j + half]);
      } else {
        y[base + j + half] = x[base + j + half];
      }
    }
    expect_close(y, out, inverse ? "rope inverse" : "rope forward");
  }
}

// ---- cross-entropy: loss.cu's 512-thread row kernel ---------------------------------------------------

constexpr int kCeThreads = 512;

struct Pair {
  float m, s;
};

// ce_rows_kernel on one row of logits: returns the loss; overwrites `l` with dlogits when want_grad.
float ce_row(float* l, int64_t V, int32_t t, int32_t ignore_index, float z_loss, float grad_scale, bool want_grad) {
  if (t == ignore_index || t < 0 || t >= V) {
    if (want_grad)
      for (int64_t v = 0; v < V; ++v) l[v] = 0.0f;
    return t == ignore_index ? 0.0f : NAN;
  }
  const float logit_t = l[t];
  std::vector<Pair> th(kCeThreads, Pair{-INFINITY, 0.0f});
  for (int tid = 0; tid < kCeThreads; ++tid)
    for (int64_t v = tid; v < V; v += kCeThreads) cm::ce_online_update(th[tid].m, th[tid].s, l[v]);
  const auto merge = [](Pair a, Pair b) {
    cm::ce_online_merge(a.m, a.s, b.m, b.s);
    return a;
  };
  std::array<Pair, 32> warps;
  warps.fill(Pair{-INFINITY, 0.0f});
  for (int w = 0; w < kCeThreads / 32; ++w) {
    std::array<Pair, 32> lanes;
    for (int lane = 0; lane < 32; ++lane) lanes[lane] = th[w * 32 + lane];
    warps[w] = butterfly(lanes, merge);
  }
  const Pair p = butterfly(warps, merge);
  const float lse = cm::ce_lse(p.m, p.s);
  if (want_grad) {
    const float factor = cm::ce_grad_factor(lse, z_loss);
    for (int64_t v = 0; v < V; ++v) l[v] = cm::ce_dlogit(l[v], lse, factor, v == t, grad_scale);
  }
  return cm::ce_loss(lse, logit_t, z_loss);
}

// With weight = I (C = V) the logits are x itself and ref's dx is exactly the dlogits.
void identity_case(int64_t N, int64_t V, float z_loss, float grad_scale) {
  std::mt19937 rng(static_cast<unsigned>(V));
  Tensor x = f32({N, V}), w = f32({V, V}), targets({N}, DType::kI32), losses = f32({N}), dx = f32({N, V});
  fill_uniform(x, rng, -12.0f, 12.0f);
  for (int64_t v = 0; v < V; ++v) w.as<float>()[v * V + v] = 1.0f;
  std::uniform_int_distribution<int32_t> td(0, static_cast<int32_t>(V - 1));
  for (int64_t n = 0; n < N; ++n) targets.as<int32_t>()[n] = n % 3 == 1 ? -100 : td(rng);
  CrossEntropyOptions opts;
  opts.vocab_size = V;
  opts.z_loss = z_loss;
  opts.grad_scale = grad_scale;
  ref().lm_head_cross_entropy(losses, x, w, targets, opts, dx, TensorView());
  std::vector<float> got_loss(N), got_dl = copy_of(x);
  for (int64_t n = 0; n < N; ++n)
    got_loss[n] =
        ce_row(got_dl.data() + n * V, V, targets.as<int32_t>()[n], opts.ignore_index, z_loss, grad_scale, true);
  const std::string tag = "cross-entropy V=" + std::to_string(V) + " z=" + std::to_string(z_loss);
  expect_close(got_loss, losses, tag + " losses");
  expect_close(got_dl, dx, tag + " dlogits");
}

TEST(CrossEntropyMath, LossesAndDlogitsMatchRef) {
  identity_case(6, 50, 0.0f, 1.0f);
  identity_case(6, 50, 1e-2f, 0.25f);
  identity_case(5, 1500, 1e-3f, 1.0f / 3.0f);  // more logits than threads per row
}

// A general head with padding rows (V < Vp): the loss kernel's GEMMs done in f64 around the row math.
TEST(CrossEntropyMath, HeadGradientsMatchRef) {
  const int64_t N = 7, C = 16, Vp = 40, V = 37;
  std::mt19937 rng(9);
  Tensor x = f32({N, C}), w = f32({Vp, C}), targets({N}, DType::kI32), losses = f32({N}), dx = f32({N, C}),
         dw = f32({Vp, C});
  fill_uniform(x, rng, -1.0f, 1.0f);
  fill_uniform(w, rng, -1.0f, 1.0f);
  fill_uniform(dw, rng, -0.5f, 0.5f);
  const int32_t t[N] = {3, -100, 36, 0, 17, -100, 20};
  for (int64_t n = 0; n < N; ++n) targets.as<int32_t>()[n] = t[n];
  CrossEntropyOptions opts;
  opts.vocab_size = V;
  opts.z_loss = 1e-3f;
  opts.grad_scale = 0.2f;
  std::vector<float> want_dw_init = copy_of(dw);
  ref().lm_head_cross_entropy(losses, x, w, targets, opts, dx, dw);

  std::vector<float> logits(N * V), loss(N), gx(N * C), gw = want_dw_init;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += static_cast<double>(x.as<float>()[n * C + c]) * w.as<float>()[v * C + c];
      logits[n * V + v] = static_cast<float>(s);
    }
  for (int64_t n = 0; n < N; ++n)
    loss[n] = ce_row(logits.data() + n * V, V, t[n], opts.ignore_index, opts.z_loss, opts.grad_scale, true);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t v = 0; v < V; ++v) s += static_cast<double>(logits[n * V + v]) * w.as<float>()[v * C + c];
      gx[n * C + c] = static_cast<float>(s);
    }
  for (int64_t v = 0; v < V; ++v)
    for (int64_t c = 0; c < C; ++c) {
      double s = gw[v * C + c];
      for (int64_t n = 0; n < N; ++n) s += static_cast<double>(logits[n * V + v]) * x.as<float>()[n * C + c];
      gw[v * C + c] = static_cast<float>(s);
    }
  expect_close(loss, losses, "head losses");
  expect_close(gx, dx, "head dx");
  expect_close(gw, dw, "head dweight");
  for (int64_t i = V * C; i < Vp * C; ++i) ASSERT_EQ(dw.as<float>()[i], want_dw_init[i]) << "padding row touched";
}

TEST(CrossEntropyMath, OnlineMergeIsSymmetricAndKeepsEmptyPairs) {
  float m = -INFINITY, s = 0.0f;
  cm::ce_online_merge(m, s, -INFINITY, 0.0f);
  EXPECT_EQ(m, -INFINITY);
  EXPECT_EQ(s, 0.0f);
  float a_m = 1.5f, a_s = 3.25f, b_m = -0.75f, b_s = 7.5f;
  float m1 = a_m, s1 = a_s, m2 = b_m, s2 = b_s;
  cm::ce_online_merge(m1, s1, b_m, b_s);
  cm::ce_online_merge(m2, s2, a_m, a_s);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(s1, s2);
}

}  // namespace
}  // namespace lmt::kernels
