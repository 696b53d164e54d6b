// The GGUF element encodings against hand-computed values (gguf_quant.h). The same encoders are
// compared byte for byte with gguf-py's (numpy float16, gguf.quants BF16/Q8_0) on real weights in
// tests/interop/test_gguf_llamacpp.py.
#include "lmt/export/gguf_quant.h"

#include <gtest/gtest.h>

#include "lmt/io/f16.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace lmt::exporter::gguf {
namespace {

// GGUF's f16 elements are io::float_to_f16 (shared with the Hugging Face export).
uint16_t f32_to_f16(float f) { return io::float_to_f16(f); }

TEST(GgufQuant, F16HandValues) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(0.01f), 0x211f);     // 1.28 · 2^-7: exponent 8, mantissa round(0.28 · 1024) = 287
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);  // the largest half
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);  // below the midpoint to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // the tie rounds to even: Inf
  EXPECT_EQ(f32_to_f16(1e9f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  const uint16_t nan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);      // tie between 0x3c00 and 0x3c01: even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie between 0x3c01 and 0x3c02: even
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  EXPECT_EQ(f32_to_f16(0x1p-14f), 0x0400);    // the smallest normal
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);    // the smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);    // half of it: tie to even (0)
  EXPECT_EQ(f32_to_f16(0x1.8p-24f), 0x0002);  // 1.5 subnormal steps: tie to even (2)
  EXPECT_EQ(f32_to_f16(-3 * 0x1p-24f), 0x8003);
  EXPECT_EQ(f32_to_f16(0x1.ff8p-15f), 0x03ff);  // the largest subnormal (1023 · 2^-24)
  EXPECT_EQ(f32_to_f16(0x1.ffcp-15f), 0x0400);  // 1023.5 · 2^-24: tie to even, the smallest normal
}

TEST(GgufQuant, Bf16AndF32Encodings) {
  const float x[] = {1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f};
  std::string out;
  encode(x, 4, GgmlType::kBf16, &out);
  ASSERT_EQ(out.size(), 8u);
  uint16_t b[4];
  std::memcpy(b, out.data(), 8);
  EXPECT_EQ(b[0], 0x3f80);
  EXPECT_EQ(b[1], 0x3f80);  // tie: even
  EXPECT_EQ(b[2], 0x3f82);  // tie: even
  EXPECT_EQ(b[3], 0xc020);
  out.clear();
  encode(x, 4, GgmlType::kF32, &out);
  ASSERT_EQ(out.size(), 16u);
  EXPECT_EQ(std::memcmp(out.data(), x, 16), 0);
}

TEST(GgufQuant, Q8_0HandBlock) {
  // max |x| = 1.27, so d = 0.01 (f16 0x211f) and q = round(x / 0.01), half away from zero.
  std::vector<float> x(32, 0.0f);
  x[0] = -1.27f;
  x[1] = 0.5f;
  x[2] = 0.013f;   // 1.3 -> 1
  x[3] = -0.037f;  // -3.7 -> -4
  x[4] = 1.0f;
  x[31] = 0.26f;  // 26
  std::string out;
  encode(x.data(), 32, GgmlType::kQ8_0, &out);
  ASSERT_EQ(out.size(), 34u);
  uint16_t d;
  std::memcpy(&d, out.data(), 2);
  EXPECT_EQ(d, 0x211f);
  const int8_t* q = reinterpret_cast<const int8_t*>(out.data() + 2);
  EXPECT_EQ(q[0], -127);
  EXPECT_EQ(q[1], 50);
  EXPECT_EQ(q[2], 1);
  EXPECT_EQ(q[3], -4);
  EXPECT_EQ(q[4], 100);
  EXPECT_EQ(q[5], 0);
  EXPECT_EQ(q[31], 26);
  float back[32];
  dequantize_q8_0(reinterpret_cast<const uint8_t*>(out.data()), 32, back);
  const float df = 0.01000213623046875f;  // the f16 scale 0x211f: 2^-7 · (1 + 287/1024)
  EXPECT_FLOAT_EQ(back[0], -127 * df);
  EXPECT_FLOAT_EQ(back[3], -4 * df);
}

TEST(GgufQuant, Q8_0ZeroBlockAndSizes) {
  std::vector<float> x(64, 0.0f);
  x[40] = -3.0f;  // second block: d = 3/127, q = -127
  std::string out;
  encode(x.data(), 64, GgmlType::kQ8_0, &out);
  ASSERT_EQ(out.size(), 68u);
  EXPECT_EQ(out.substr(0, 34), std::string(34, '\0'));  // d = 0, every q = 0
  EXPECT_EQ(static_cast<int8_t>(out[34 + 2 + 8]), -127);
  EXPECT_EQ(encoded_bytes(GgmlType::kQ8_0, 64), 68);
  EXPECT_EQ(encoded_bytes(GgmlType::kF16, 3), 6);
  EXPECT_EQ(encoded_bytes(GgmlType::kBf16, 3), 6);
  EXPECT_EQ(encoded_bytes(GgmlType::kF32, 3), 12);
}

}  // namespace
}  // namespace lmt::exporter::gguf
