// Attention with compute bf16 (kernels/backend.h) against the ref backend (f32) from identical inputs:
// the cpu backend's AVX512-BF16 tiles (kernels/cpu/attention_bf16_tiles.h) in this binary, and the
// GPU's tensor-core kernels (kernels/cuda/attention_fa2.cu) in cuda_attention_test (ctest label gpu,
// this source with LMT_ATTENTION_TEST_BACKEND "cuda"; it skips, with the reason, where no GPU is
// visible). Shapes cover every head-dim bucket (HD 12, 40, 64, 80, 128; padded columns), grouped-query
// heads, document masks, and lengths that are not multiples of the 64-row tiles.
//
// Bounds: rounding q, k, v, dO, P and dS to bf16 (f32 accumulation) puts out, dq, dk, dv at about
// 3e-3 to 5e-3 relative (Frobenius) from the exact result, measured on these shapes with an
// emulation in float64 (PyTorch, rounding at the kernels' points) and on an H100 (2.3e-3 to
// 5.0e-3); the bound is 1.5e-2. lse is compared by root mean square (bound 1e-2; 4.7e-4 to 4.6e-3
// on the H100), since a relative bound is ill-conditioned where lse is near 0 (T = 1: one score).
// Also: every output element is written (outputs are NaN-poisoned first), two runs agree bit for
// bit, the bf16 path really differs from f32 (where the backend has one: the cpu backend computes
// in f32 without AVX512-BF16), and on the GPU head dims above 128 fall back to the f32 kernels
// (bf16 results equal f32 results bit for bit).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "backend_under_test.h"
#include "op_compare.h"
#include "lmt/base/rng.h"
#include "lmt/kernels/cpu/attention_bf16_tiles.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

#ifndef LMT_ATTENTION_TEST_BACKEND
#define LMT_ATTENTION_TEST_BACKEND "cpu"
#endif

namespace lmt {
namespace {

using testing::relative_distance;

constexpr std::string_view kBackend = LMT_ATTENTION_TEST_BACKEND;

kernels::Backend* backend_under_test() { return testing::backend_or_null(kBackend); }
#define SKIP_WITHOUT_BACKEND() LMT_SKIP_WITHOUT_BACKEND(kBackend)

// Whether compute bf16 takes a bf16 path on this backend and machine.
bool has_bf16_path() { return kBackend == "cuda" || kernels::cpu_bf16::kAvailable; }

struct Shape5 {
  int64_t B, T, NH, G, HD;
  bool docs;
};

std::string name_of(const Shape5& s) {
  return "B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " NH" + std::to_string(s.NH) + " G" +
         std::to_string(s.G) + " HD" + std::to_string(s.HD) + (s.docs ? " docs" : "");
}

std::vector<float> randn(int64_t n, Rng& rng) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// Documents of lengths 1..T/3 packed in each row (contiguous runs, as the loader makes them).
std::vector<int32_t> doc_ids(int64_t B, int64_t T, Rng& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b) {
    int32_t id = 0;
    int64_t left = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (left == 0) left = 1 + static_cast<int64_t>(rng.uniform() * static_cast<double>(std::max<int64_t>(1, T / 3))), ++id;
      ids[static_cast<size_t>(b * T + t)] = id;
      --left;
    }
  }
  return ids;
}

// The results of one forward + backward: out, lse, dq, dk, dv, on the host.
struct Results {
  std::vector<float> out, lse, dq, dk, dv;
};

// Host inputs of one shape.
struct Inputs {
  Shape5 s;
  std::vector<float> q, k, v, dout;
  std::vector<int32_t> docs;
};

Inputs make_inputs(const Shape5& s, uint64_t seed) {
  Rng rng(seed);
  Inputs in{s, randn(s.B * s.T * s.NH * s.HD, rng), randn(s.B * s.T * s.G * s.HD, rng),
            randn(s.B * s.T * s.G * s.HD, rng), randn(s.B * s.T * s.NH * s.HD, rng), {}};
  if (s.docs) in.docs = doc_ids(s.B, s.T, rng);
  return in;
}

Tensor upload(kernels::Backend& be, const void* data, Shape shape, DType dt) {
  Tensor t(shape, dt, be.allocator());
  be.copy(t, TensorView(const_cast<void*>(data), shape, dt));
  return t;
}

std::vector<float> download(kernels::Backend& be, const Tensor& t) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  be.copy(TensorView(host.data(), t.shape(), DType::kF32), t);
  return host;
}

// Outputs start as NaN, so an element the kernels never write fails the finiteness check.
Tensor poisoned(kernels::Backend& be, Shape shape) {
  std::vector<float> nan(static_cast<size_t>(shape.numel()), std::numeric_limits<float>::quiet_NaN());
  return upload(be, nan.data(), shape, DType::kF32);
}

Results run(kernels::Backend& be, const Inputs& in, DType compute) {
  const Shape5& s = in.s;
  const Shape qs{s.B, s.T, s.NH, s.HD}, ks{s.B, s.T, s.G, s.HD};
  Tensor q = upload(be, in.q.data(), qs, DType::kF32), k = upload(be, in.k.data(), ks, DType::kF32),
         v = upload(be, in.v.data(), ks, DType::kF32), dout = upload(be, in.dout.data(), qs, DType::kF32);
  Tensor docs = s.docs ? upload(be, in.docs.data(), Shape{s.B, s.T}, DType::kI32) : Tensor();
  Tensor out = poisoned(be, qs), lse = poisoned(be, Shape{s.B, s.NH, s.T}), dq = poisoned(be, qs),
         dk = poisoned(be, ks), dv = poisoned(be, ks);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HD));
  const TensorView doc_view = s.docs ? TensorView(docs) : TensorView();
  be.attention_forward(kernels::AttentionBackend::kFlash, out, lse, q, k, v, doc_view, scale, compute);
  be.attention_backward(kernels::AttentionBackend::kFlash, dq, dk, dv, dout, q, k, v, out, lse, doc_view, scale,
                        compute);
  return {download(be, out), download(be, lse), download(be, dq), download(be, dk), download(be, dv)};
}

// The root mean square of got − want: lse is compared absolutely, since the bf16 rounding of q and k
// moves each score by an absolute amount (about 2e-3 at unit-variance inputs), whatever the score.
double rms_difference(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) e += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
  return std::sqrt(e / static_cast<double>(got.size()));
}

// The largest distance of one row of `width` floats (one query head's output or gradient, one key's
// gradients) from the reference, relative to the reference's root-mean-square row: a product that a
// kernel wrongly skips (e.g. a key that causal trimming drops from a query's row) moves its rows by
// far more than bf16 rounding does, while the whole tensor's distance would dilute it. (Relative to
// each row's own norm it would fail on rows that are ~0 exactly, e.g. dq of a document's first token.)
double worst_row_distance(const std::vector<float>& got, const std::vector<float>& want, int64_t width) {
  double worst = 0, norms = 0;
  size_t rows = 0;
  for (size_t r = 0; r + static_cast<size_t>(width) <= got.size(); r += static_cast<size_t>(width), ++rows) {
    double d = 0;
    for (size_t i = r; i < r + static_cast<size_t>(width); ++i) {
      d += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
      norms += static_cast<double>(want[i]) * want[i];
    }
    worst = std::max(worst, d);
  }
  return norms > 0 ? std::sqrt(worst / (norms / static_cast<double>(rows))) : std::sqrt(worst);
}

void expect_all_finite(const std::vector<float>& x, const std::string& what) {
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_TRUE(std::isfinite(x[i])) << what << "[" << i << "] = " << x[i] << " (never written, or NaN)";
}

const Shape5 kShapes[] = {
    {2, 130, 4, 2, 64, true}, {1, 200, 8, 8, 128, false}, {1, 77, 6, 3, 80, true}, {2, 64, 2, 1, 12, false},
    {1, 1, 1, 1, 32, false},  {1, 300, 4, 1, 40, true},   {1, 1024, 12, 12, 64, false}, {1, 257, 4, 4, 96, true}};

constexpr double kWorstRow = 0.1;

TEST(AttentionBf16, MatchesReferenceWithinBf16Rounding) {
  SKIP_WITHOUT_BACKEND();
  kernels::Backend& be = *backend_under_test();
  kernels::Backend& ref = kernels::backend("ref");
  uint64_t seed = 11;
  for (const Shape5& s : kShapes) {
    SCOPED_TRACE(name_of(s));
    const Inputs in = make_inputs(s, seed++);
    const Results want = run(ref, in, DType::kF32);
    const Results got = run(be, in, DType::kBF16);
    const Results again = run(be, in, DType::kBF16);
    const Results f32 = run(be, in, DType::kF32);
    const std::pair<const char*, std::vector<float> Results::*> fields[] = {
        {"out", &Results::out}, {"lse", &Results::lse}, {"dq", &Results::dq}, {"dk", &Results::dk}, {"dv", &Results::dv}};
    for (const auto& [name, field] : fields) {
      expect_all_finite(got.*field, name);
      EXPECT_EQ(got.*field, again.*field) << name << ": two runs differ (the kernels must be deterministic)";
      const bool lse = std::string(name) == "lse";
      const double err = lse ? rms_difference(got.*field, want.*field) : relative_distance(got.*field, want.*field);
      EXPECT_LE(err, lse ? 1e-2 : 1.5e-2) << name << ": bf16 result " << err << (lse ? " (root mean square)" : " (relative, Frobenius)")
                                         << " from ref";
      std::printf("%s %s: bf16 %.2e, f32 %.2e from ref", name_of(s).c_str(), name, err,
                  lse ? rms_difference(f32.*field, want.*field) : relative_distance(f32.*field, want.*field));
      if (!lse) {  // row by row too: every query's output and every key's gradients
        const double worst = worst_row_distance(got.*field, want.*field, s.HD);
        std::printf(", worst row %.2e", worst);
        EXPECT_LE(worst, kWorstRow) << name << ": a row of the bf16 result is " << worst << " from ref";
      }
      std::printf("\n");
    }
    // The bf16 path ran: rounding the inputs to bf16 moves out far beyond the f32 kernels' error.
    if (s.T > 1 && has_bf16_path()) {
      EXPECT_GT(relative_distance(got.out, want.out), 1e-4) << "compute bf16 gave f32 results";
    }
  }
}

// The cpu K/V packers (vector conversions, then a transposed write) against cpu_bf16::pair() element
// by element: every head-dim bucket (odd pair counts past HD included), keys past T as null rows.
TEST(AttentionBf16, CpuPackersEqualElementwisePairs) {
  if (kBackend != "cpu" || !kernels::cpu_bf16::kAvailable) GTEST_SKIP() << "the cpu backend's AVX512-BF16 packers";
  Rng rng(3);
  for (int64_t HD : {12, 40, 64, 80, 96, 128, 200}) {
    SCOPED_TRACE("HD " + std::to_string(HD));
    const int64_t HDp = (HD + 15) / 16 * 16, pairs = HDp / 2, keys = kernels::cpu_bf16::kKeyCols;
    std::vector<float> src(static_cast<size_t>(keys * HD));
    for (float& x : src) x = static_cast<float>(rng.normal());
    const float* rows[kernels::cpu_bf16::kKeyCols];
    for (int c = 0; c < keys; ++c) rows[c] = c < 50 ? src.data() + c * HD : nullptr;  // keys 50.. past T
    std::vector<uint32_t> got(static_cast<size_t>(pairs * keys), 0xdeadbeef);
    kernels::cpu_bf16::key_tile_pairs(got.data(), rows, HD, pairs);
    for (int64_t k = 0; k < pairs; ++k)
      for (int c = 0; c < keys; ++c) {
        const float lo = rows[c] && 2 * k < HD ? rows[c][2 * k] : 0.0f, hi = rows[c] && 2 * k + 1 < HD ? rows[c][2 * k + 1] : 0.0f;
        ASSERT_EQ(got[static_cast<size_t>(k * keys + c)], kernels::cpu_bf16::pair(lo, hi)) << "pair " << k << ", key " << c;
      }
    std::vector<uint32_t> two(static_cast<size_t>(HDp), 0xdeadbeef);
    for (const float* r1 : {rows[1], static_cast<const float*>(nullptr)}) {
      kernels::cpu_bf16::interleave_two_rows(two.data(), rows[0], r1, HD, HDp);
      for (int64_t e = 0; e < HDp; ++e)
        ASSERT_EQ(two[static_cast<size_t>(e)], kernels::cpu_bf16::pair(e < HD ? rows[0][e] : 0.0f, r1 && e < HD ? r1[e] : 0.0f))
            << "element " << e;
    }
  }
}

TEST(AttentionBf16, CudaHeadDimsAbove128FallBackToF32) {
  if (kBackend != "cuda") GTEST_SKIP() << "the cuda backend's limit; the cpu backend takes any head dim in bf16";
  SKIP_WITHOUT_BACKEND();
  kernels::Backend& be = *backend_under_test();
  const Inputs in = make_inputs({1, 90, 2, 1, 160, true}, 5);
  const Results bf16 = run(be, in, DType::kBF16), f32 = run(be, in, DType::kF32);
  EXPECT_EQ(bf16.out, f32.out);
  EXPECT_EQ(bf16.lse, f32.lse);
  EXPECT_EQ(bf16.dq, f32.dq);
  EXPECT_EQ(bf16.dk, f32.dk);
  EXPECT_EQ(bf16.dv, f32.dv);
}

}  // namespace
}  // namespace lmt
