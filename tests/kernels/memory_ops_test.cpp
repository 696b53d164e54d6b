// The memory ops of a step (fill, copy, positions, count_valid_targets, sum) against what the host
// code they replaced computed: memset, memcpy, n % T, a counting loop and an f64 sum in index order.
// op_test checks cpu against ref; this pins both to the previous code path, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "lmt/base/rng.h"
#include "lmt/kernels/backend.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace lmt::kernels {
namespace {

class MemoryOps : public ::testing::TestWithParam<std::string> {
 protected:
  Backend& be() { return GetParam() == "ref" ? ref_backend() : cpu_backend(); }
};

TEST_P(MemoryOps, FillZeroWritesWhatMemsetWrites) {
  for (DType t : {DType::kF32, DType::kF64}) {
    Tensor x({40000}, t), want({40000}, t);
    std::memset(x.view().data(), 0xFF, x.bytes());  // NaN bits everywhere
    be().fill(x, 0.0);
    EXPECT_EQ(std::memcmp(x.view().data(), want.view().data(), x.bytes()), 0) << dtype_name(t);
  }
  Tensor i({33}, DType::kI32);
  be().fill(i, -100);
  for (int64_t n = 0; n < 33; ++n) ASSERT_EQ(i.as<int32_t>()[n], -100);
  Tensor h({19}, DType::kBF16);
  be().fill(h, 1.0 + 1.0 / 256);  // a tie: rounds to even (1.0)
  for (int64_t n = 0; n < 19; ++n) ASSERT_EQ(h.as<bf16>()[n].bits, bf16(1.0f).bits);
}

// The cpu backend streams f32 fills of 2^24 elements and more past the caches (the gradient buffer):
// a view that starts off a cache line and ends in a partial vector is filled exactly, its neighbours
// untouched.
TEST_P(MemoryOps, LargeFillReachesEveryElementAndNoOther) {
  const int64_t n = (int64_t{1} << 24) + 37;
  Tensor buf({n + 10}, DType::kF32);
  float* p = buf.as<float>();
  std::fill_n(p, n + 10, -7.0f);
  const TensorView view(p + 3, Shape{n}, DType::kF32);
  be().fill(view, 0.25);
  for (int64_t i = 0; i < 3; ++i) ASSERT_EQ(p[i], -7.0f) << i;
  EXPECT_EQ(std::count(p + 3, p + 3 + n, 0.25f), n);
  for (int64_t i = 3 + n; i < n + 10; ++i) ASSERT_EQ(p[i], -7.0f) << i;
  be().fill(view, 0.0);  // and zero, bit for bit what memset writes
  std::vector<float> zeros(1 << 20, 0.0f);
  for (int64_t i = 0; i < n; i += int64_t(zeros.size())) {
    const int64_t len = std::min<int64_t>(zeros.size(), n - i);
    ASSERT_EQ(std::memcmp(p + 3 + i, zeros.data(), len * sizeof(float)), 0) << i;
  }
}

TEST_P(MemoryOps, CopyIsByteForByte) {
  Tensor src({5, 1001}, DType::kF32), dst({5005}, DType::kF32);
  float* s = src.as<float>();
  for (int64_t n = 0; n < src.numel(); ++n) s[n] = static_cast<float>(n) * 0.37f - 11.0f;
  s[3] = std::numeric_limits<float>::quiet_NaN();
  s[4] = -0.0f;
  be().copy(dst, src);  // shapes differ, numel agrees
  EXPECT_EQ(std::memcmp(dst.view().data(), src.view().data(), src.bytes()), 0);
  Tensor i({7}, DType::kI32), j({7}, DType::kI32);
  for (int n = 0; n < 7; ++n) i.as<int32_t>()[n] = n * n - 9;
  be().copy(j, i);
  EXPECT_EQ(std::memcmp(i.view().data(), j.view().data(), i.bytes()), 0);
}

TEST_P(MemoryOps, PositionsAreRowIndexOrACopyOfTheGivenOnes) {
  const int64_t B = 3, T = 5;
  Tensor pos({B * T}, DType::kI32), given({B * T}, DType::kI32);
  be().positions(pos, TensorView(), T);
  for (int64_t n = 0; n < B * T; ++n) ASSERT_EQ(pos.as<int32_t>()[n], n % T) << n;
  const std::vector<int32_t> docs = {0, 1, 2, 0, 1, 0, 1, 2, 3, 4, 0, 0, 1, 2, 3};
  std::copy(docs.begin(), docs.end(), given.as<int32_t>());
  be().positions(pos, given, T);
  for (int64_t n = 0; n < B * T; ++n) ASSERT_EQ(pos.as<int32_t>()[n], docs[n]) << n;
}

TEST_P(MemoryOps, CountValidTargetsAndSumMatchTheHostLoops) {
  const int64_t N = 4099;
  Tensor targets({N}, DType::kI32), losses({N}, DType::kF32);
  Rng rng(3);
  int64_t want_count = 0;
  double want_sum = 0;
  for (int64_t n = 0; n < N; ++n) {
    const int32_t t = rng.uniform() < 0.2 ? -100 : static_cast<int32_t>(rng.below(50));
    targets.as<int32_t>()[n] = t;
    want_count += t != -100;
    losses.as<float>()[n] = static_cast<float>(rng.uniform() * 10.0);
    want_sum += losses.as<float>()[n];  // the Transformer's previous loop, in this order
  }
  EXPECT_EQ(be().count_valid_targets(targets, -100), want_count);
  EXPECT_EQ(be().count_valid_targets(targets, 7), N - [&] {
    int64_t c = 0;
    for (int64_t n = 0; n < N; ++n) c += targets.as<int32_t>()[n] == 7;
    return c;
  }());
  EXPECT_EQ(be().sum(losses), want_sum);  // bit for bit
}

INSTANTIATE_TEST_SUITE_P(Backends, MemoryOps, ::testing::Values("ref", "cpu"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(MemoryOpsDeath, PositionOutsideTheRowStops) {
  Tensor pos({4}, DType::kI32), given({4}, DType::kI32);
  given.as<int32_t>()[2] = 4;  // T = 4: positions are in [0, 4)
  EXPECT_DEATH(ref_backend().positions(pos, given, 4), "outside \\[0, T=4\\)");
  EXPECT_DEATH(cpu_backend().positions(pos, given, 4), "outside \\[0, T=4\\)");
  EXPECT_DEATH(cpu_backend().positions(pos, TensorView(), 3), "must be positive and divide N=4");
}

}  // namespace
}  // namespace lmt::kernels
