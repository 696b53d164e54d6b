#include "lmt/tensor/arena.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace lmt {
namespace {

TEST(Arena, AllocationsAreAlignedAndPeakIsTracked) {
  Arena a(1 << 20);
  TensorView x = a.allocate({3, 5}, DType::kF32, "x");  // 60 bytes -> 64
  TensorView y = a.allocate({7}, DType::kBF16, "y");    // 14 bytes -> 64
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(y.data()) % 64, 0u);
  EXPECT_EQ(a.used(), 128u);
  size_t mark = a.mark();
  a.allocate({1000}, DType::kF32, "tmp");  // 4000 -> 4032
  EXPECT_EQ(a.peak(), 128u + 4032u);
  a.release(mark);
  EXPECT_EQ(a.used(), 128u);
  EXPECT_EQ(a.peak(), 128u + 4032u);  // the high-water mark stays
  TensorView z = a.allocate({1}, DType::kF64, "z");
  EXPECT_EQ(static_cast<char*>(z.data()) - static_cast<char*>(x.data()), 128);  // reused space
}

TEST(Arena, MeasuringArenaGivesTheSamePeakWithoutMemory) {
  Arena real(1 << 20);
  Arena plan = Arena::Measuring();
  for (Arena* a : {&real, &plan}) {
    a->allocate({100, 3}, DType::kF32);
    size_t m = a->mark();
    a->allocate({512}, DType::kBF16);
    a->release(m);
    a->allocate({17}, DType::kI32);
  }
  EXPECT_TRUE(plan.measuring());
  EXPECT_EQ(plan.peak(), real.peak());
  EXPECT_EQ(plan.used(), real.used());
}

TEST(ArenaDeathTest, OverflowNamesTheTensor) {
  Arena a(256);
  EXPECT_DEATH(a.allocate({1000}, DType::kF32, "attn.scores"), "arena full allocating attn.scores f32\\[1000\\]");
}

}  // namespace
}  // namespace lmt
