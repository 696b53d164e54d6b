// The op split of `lmtrain bench train --profile`: synthetic events with hand-computed totals, and
// real kernel calls whose entry points record their op family.
#include "lmt/metrics/profiler.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "lmt/base/trace.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace lmt::metrics {
namespace {

std::map<std::string, double> as_map(const OpSplit& s) {
  std::map<std::string, double> m;
  for (const auto& [name, ms] : s.rows) m[name] = ms;
  return m;
}

// Two steps of 10 ms; gemm 6 ms and 5 ms, norm 1 ms and 1 ms: per step gemm 5.5, norm 1, other 3.5.
TEST(OpSplit, PerStepTotalsAndTheRemainderAsOther) {
  const std::vector<TraceEvent> ev = {
      {"train_step", 0, 10000, 0},     {"op:gemm", 100, 6000, 0},     {"op:norm", 7000, 1000, 0},
      {"forward", 50, 8000, 0},        {"train_step", 20000, 10000, 0}, {"op:gemm", 20100, 5000, 0},
      {"op:norm", 26000, 1000, 0},
      {"op:gemm", 40000, 3000, 0},  // outside every step (e.g. a contended step): not counted
  };
  const OpSplit s = op_split(ev, "train_step", "op:", 2);
  EXPECT_DOUBLE_EQ(s.step_ms, 10.0);
  ASSERT_EQ(s.rows.size(), 3u);
  EXPECT_EQ(s.rows[0].first, "gemm");  // largest first
  EXPECT_EQ(s.rows.back().first, "other");
  const auto m = as_map(s);
  EXPECT_DOUBLE_EQ(m.at("gemm"), 5.5);
  EXPECT_DOUBLE_EQ(m.at("norm"), 1.0);
  EXPECT_DOUBLE_EQ(m.at("other"), 3.5);
  EXPECT_EQ(m.count("forward"), 0u);  // ranges without the prefix are not rows
}

// The kernel interface's entry points record their family while tracing is on, and only then.
TEST(OpSplit, KernelEntryPointsRecordTheirFamily) {
  kernels::Backend& be = kernels::backend("ref");
  Tensor a({4, 8}, DType::kF32), b({8, 3}, DType::kF32), c({4, 3}, DType::kF32);
  be.matmul(c.view(), a.view(), b.view(), false, false, false);  // tracing off: nothing recorded
  Tracer::start();
  {
    TraceScope step("train_step");
    be.matmul(c.view(), a.view(), b.view(), false, false, false);
    be.fill(c.view(), 1.0);
    be.scale(c.view(), 2.0f);
  }
  const std::vector<TraceEvent> ev = Tracer::stop();
  const auto m = as_map(op_split(ev, "train_step", "op:", 1));
  ASSERT_EQ(m.count("gemm"), 1u);
  ASSERT_EQ(m.count("elementwise"), 1u);
  ASSERT_EQ(m.count("other"), 1u);
  int gemm_events = 0;
  for (const auto& e : ev) gemm_events += std::string(e.name) == "op:gemm";
  EXPECT_EQ(gemm_events, 1);
  double sum = 0;
  for (const auto& [name, ms] : m) sum += ms;
  EXPECT_NEAR(sum, op_split(ev, "train_step", "op:", 1).step_ms, 1e-9);
}

// A linear layer's backward is two ranges: its input gradient (gemm_dx) and its weight and bias
// gradients (gemm_dw), each recorded only when asked for; every result is the product's (the inputs
// are multiples of 1/8, so the f32 sums are exact).
TEST(OpSplit, LinearBackwardSplitsInputAndWeightGradients) {
  kernels::Backend& be = kernels::backend("ref");
  const int64_t N = 4, C = 8, OC = 3;
  Tensor x({N, C}, DType::kF32), w({OC, C}, DType::kF32), dy({N, OC}, DType::kF32);
  for (int64_t i = 0; i < x.numel(); ++i) x.as<float>()[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  for (int64_t i = 0; i < w.numel(); ++i) w.as<float>()[i] = 0.125f * static_cast<float>(i % 5) - 0.25f;
  for (int64_t i = 0; i < dy.numel(); ++i) dy.as<float>()[i] = 0.5f * static_cast<float>(i % 3) - 0.5f;
  Tensor dx({N, C}, DType::kF32), dw({OC, C}, DType::kF32), db({OC}, DType::kF32), dx_only({N, C}, DType::kF32);
  be.fill(dw.view(), 1.0);  // the weight and bias gradients accumulate
  be.fill(db.view(), 1.0);
  Tracer::start();
  {
    TraceScope step("train_step");
    be.linear_backward(dx.view(), dw.view(), db.view(), dy.view(), x.view(), w.view());
    be.linear_backward(dx_only.view(), TensorView(), TensorView(), dy.view(), x.view(), w.view());
  }
  const std::vector<TraceEvent> ev = Tracer::stop();
  int dx_events = 0, dw_events = 0;
  for (const auto& e : ev) {
    dx_events += std::string(e.name) == "op:gemm_dx";
    dw_events += std::string(e.name) == "op:gemm_dw";
  }
  EXPECT_EQ(dx_events, 2);
  EXPECT_EQ(dw_events, 1);
  const float *px = x.as<float>(), *pw = w.as<float>(), *pd = dy.as<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      float want = 0;
      for (int64_t o = 0; o < OC; ++o) want += pd[n * OC + o] * pw[o * C + c];
      EXPECT_EQ(dx.as<float>()[n * C + c], want) << n << "," << c;
      EXPECT_EQ(dx_only.as<float>()[n * C + c], want) << n << "," << c;
    }
  for (int64_t o = 0; o < OC; ++o) {
    float want_b = 1.0f;
    for (int64_t n = 0; n < N; ++n) want_b += pd[n * OC + o];
    EXPECT_EQ(db.as<float>()[o], want_b) << o;
    for (int64_t c = 0; c < C; ++c) {
      float want = 1.0f;
      for (int64_t n = 0; n < N; ++n) want += pd[n * OC + o] * px[n * C + c];
      EXPECT_EQ(dw.as<float>()[o * C + c], want) << o << "," << c;
    }
  }
}

}  // namespace
}  // namespace lmt::metrics
