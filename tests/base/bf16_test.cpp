// bf16 rounding against known bit patterns (round to nearest, ties to even; NaN and ±Inf kept).
#include "lmt/base/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace lmt {
namespace {

uint16_t bits_of(float f) { return bf16::round_from_float(f); }
float from_u32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Bf16, ExactValuesKeepTheirUpperBits) {
  EXPECT_EQ(bits_of(0.0f), 0x0000);
  EXPECT_EQ(bits_of(-0.0f), 0x8000);
  EXPECT_EQ(bits_of(1.0f), 0x3f80);
  EXPECT_EQ(bits_of(-2.0f), 0xc000);
  EXPECT_EQ(bits_of(0.5f), 0x3f00);
}

TEST(Bf16, RoundsToNearestTiesToEven) {
  EXPECT_EQ(bits_of(from_u32(0x3f808000)), 0x3f80);  // tie, lower is even: stays
  EXPECT_EQ(bits_of(from_u32(0x3f818000)), 0x3f82);  // tie, lower is odd: rounds up to even
  EXPECT_EQ(bits_of(from_u32(0x3f808001)), 0x3f81);  // just above the tie: up
  EXPECT_EQ(bits_of(from_u32(0x3f807fff)), 0x3f80);  // just below the tie: down
  EXPECT_EQ(bits_of(3.14159265f), 0x4049);           // pi -> 3.140625
}

TEST(Bf16, InfinitiesAndOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bits_of(inf), 0x7f80);
  EXPECT_EQ(bits_of(-inf), 0xff80);
  EXPECT_EQ(bits_of(std::numeric_limits<float>::max()), 0x7f80);  // rounds past the largest bf16
  EXPECT_EQ(bits_of(from_u32(0x7f7f7fff)), 0x7f7f);               // largest bf16 stays finite
}

TEST(Bf16, NanStaysQuietNanWithSign) {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(bf16::to_float(bits_of(qnan))));
  EXPECT_TRUE(std::isnan(bf16::to_float(bits_of(-qnan))));
  EXPECT_EQ(bits_of(-qnan) & 0x8000, 0x8000);
  // A signalling NaN whose payload lives only in the low bits must not become Inf.
  uint16_t b = bits_of(from_u32(0x7f800001));
  EXPECT_TRUE(std::isnan(bf16::to_float(b)));
  EXPECT_NE(b & 0x0040, 0);
}

TEST(Bf16, SubnormalsRoundAndToFloatIsExact) {
  EXPECT_EQ(bits_of(from_u32(0x00010000)), 0x0001);
  EXPECT_EQ(bits_of(from_u32(0x00008000)), 0x0000);  // tie to even (0)
  for (uint32_t b = 0; b < 0x10000; b += 0x101) {
    float f = bf16::to_float(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      EXPECT_EQ(bits_of(f), b) << "round trip of " << b;
    }
  }
}

}  // namespace
}  // namespace lmt
