// Safetensors round trips, the real stories260K checkpoint, float conversion and writer atomicity.
#include "lmt/io/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "lmt/base/bf16.h"
#include "lmt/io/f16.h"
#include "safetensors_test_util.h"

namespace lmt::io {
namespace {

using testing::make_file;
using testing::read_bytes;
using testing::write_bytes;
namespace fs = std::filesystem;

class SafetensorsTest : public testing::ScratchDirTest {};

TEST_F(SafetensorsTest, RoundTripKeepsDtypesShapesBytesOrderAndMetadata) {
  const float f32[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
  const uint16_t bf[4] = {bf16(1.0f).bits, bf16(-3.5f).bits, bf16(0.25f).bits, bf16(100.0f).bits};
  const int32_t i32[4] = {1, -2, 2147483647, -2147483647 - 1};
  const double f64[3] = {0.5, -1e10, 3.0};
  const uint16_t f16[2] = {0x3c00, 0xc000};  // 1.0, -2.0
  const float scalar = 42.0f;
  const std::vector<TensorToWrite> tensors = {
      {"w.f32", "F32", {2, 3}, f32}, {"w.bf16", "BF16", {4}, bf},   {"w.i32", "I32", {2, 2}, i32},
      {"empty", "F32", {0}, nullptr}, {"w.f64", "F64", {3}, f64},   {"w.f16", "F16", {2, 1}, f16},
      {"scalar", "F32", {}, &scalar},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "12"}};
  const std::string p = path("rt.safetensors");
  ASSERT_TRUE(write_safetensors(p, tensors, meta).ok());
  EXPECT_FALSE(fs::exists(p + ".tmp"));

  auto file = SafetensorsFile::open(p);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->metadata(), meta);
  EXPECT_EQ(file->data_section_offset() % 8, 0u) << "the header is padded to 8 bytes";
  // "empty" has no bytes, so it sorts before "w.f64", which starts at the same offset.
  const std::vector<std::string> expected_order = {"w.f32", "w.bf16", "w.i32", "empty", "w.f64", "w.f16", "scalar"};
  EXPECT_EQ(file->names(), expected_order);

  for (const TensorToWrite& w : tensors) {
    const TensorInfo* t = file->find(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(t->dtype, w.dtype);
    EXPECT_EQ(t->shape, w.shape);
    ASSERT_EQ(t->size, static_cast<size_t>(t->numel()) * *safetensors_dtype_size(w.dtype));
    if (t->size > 0) {
      EXPECT_EQ(std::memcmp(t->data, w.data, t->size), 0) << w.name;
    }
  }
  EXPECT_EQ(file->find("empty")->numel(), 0);
  EXPECT_EQ(file->find("empty")->data, nullptr);
  EXPECT_EQ(file->find("scalar")->numel(), 1);
  EXPECT_EQ(file->find("missing"), nullptr);

  float out[6];
  ASSERT_TRUE(file->read_f32("w.f32", out, 6).ok());
  EXPECT_EQ(std::memcmp(out, f32, sizeof(f32)), 0);
  ASSERT_TRUE(file->read_f32("w.bf16", out, 4).ok());
  EXPECT_EQ(out[1], -3.5f);
  EXPECT_EQ(out[3], 100.0f);
  ASSERT_TRUE(file->read_f32("w.f64", out, 3).ok());
  EXPECT_EQ(out[1], -1e10f);
  ASSERT_TRUE(file->read_f32("w.f16", out, 2).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  ASSERT_TRUE(file->read_f32("scalar", out, 1).ok());
  EXPECT_EQ(out[0], 42.0f);
  EXPECT_TRUE(file->read_f32("empty", out, 0).ok());
}

TEST_F(SafetensorsTest, HeaderKeepsTheGivenKeyOrderWithMetadataFirst) {
  const float x[1] = {1.0f};
  const std::string p = path("order.safetensors");
  ASSERT_TRUE(write_safetensors(p, {{"zeta", "F32", {1}, x}, {"alpha", "F32", {1}, x}}, {{"k", "v"}}).ok());
  const std::string bytes = read_bytes(p);
  const size_t meta = bytes.find("__metadata__"), zeta = bytes.find("\"zeta\""), alpha = bytes.find("\"alpha\"");
  ASSERT_NE(alpha, std::string::npos);
  EXPECT_LT(meta, zeta);
  EXPECT_LT(zeta, alpha);
  EXPECT_NE(bytes.find("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"), std::string::npos) << bytes;
}

TEST(F16, ConvertsNormalsSubnormalsZerosInfinitiesAndNan) {
  EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_float(0xc000), -2.0f);
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_float(0x0400), 0x1p-14f);           // smallest normal
  EXPECT_EQ(f16_to_float(0x0001), 0x1p-24f);           // smallest subnormal
  EXPECT_EQ(f16_to_float(0x03ff), 1023 * 0x1p-24f);    // largest subnormal
  EXPECT_EQ(f16_to_float(0x8001), -0x1p-24f);
  EXPECT_TRUE(std::signbit(f16_to_float(0x8000)) && f16_to_float(0x8000) == 0.0f);
  EXPECT_EQ(f16_to_float(0x7c00), INFINITY);
  EXPECT_EQ(f16_to_float(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(f16_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7c01)));
}

TEST(SafetensorsReal, ReadsTheStories260KCheckpoint) {
  const std::string p = LMT_SHARED_DATA "/models/stories260K/hf/model.safetensors";
  if (!fs::exists(p)) GTEST_SKIP() << "shared test data absent: " << p << " (see ../shared/data/README)";
  auto file = SafetensorsFile::open(p);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->tensors().size(), 47u);
  EXPECT_EQ(file->names().front(), "model.embed_tokens.weight");
  const std::pair<const char*, std::vector<int64_t>> expected[] = {
      {"model.embed_tokens.weight", {512, 64}},
      {"model.layers.0.self_attn.q_proj.weight", {64, 64}},
      {"model.layers.0.self_attn.k_proj.weight", {32, 64}},
      {"model.layers.0.mlp.gate_proj.weight", {172, 64}},
      {"model.norm.weight", {64}},
  };
  for (const auto& [name, shape] : expected) {
    const TensorInfo* t = file->find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, "F32") << name;
    EXPECT_EQ(t->shape, shape) << name;
  }
  for (const TensorInfo& t : file->tensors()) {
    std::vector<float> values(static_cast<size_t>(t.numel()));
    ASSERT_TRUE(file->read_f32(t.name, values.data(), t.numel()).ok()) << t.name;
    for (float v : values) ASSERT_TRUE(std::isfinite(v)) << t.name;
  }
  // RMSNorm weights of a trained model are not all zero.
  std::vector<float> norm(64);
  ASSERT_TRUE(file->read_f32("model.norm.weight", norm.data(), 64).ok());
  EXPECT_GT(std::abs(norm[0]) + std::abs(norm[63]), 0.0f);
}

TEST_F(SafetensorsTest, ReadF32ReportsUnknownNamesWrongNumelAndUnconvertedDtypes) {
  const int32_t i[2] = {1, 2};
  const float f[2] = {1, 2};
  const std::string p = path("r.safetensors");
  ASSERT_TRUE(write_safetensors(p, {{"ints", "I32", {2}, i}, {"floats", "F32", {2}, f}}).ok());
  auto file = SafetensorsFile::open(p);
  ASSERT_TRUE(file.ok());
  float out[2];
  Status s = file->read_f32("nope", out, 2);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("nope"), std::string::npos);
  EXPECT_NE(s.message().find(p), std::string::npos);
  s = file->read_f32("floats", out, 3);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(s.hint().empty());
  EXPECT_EQ(file->read_f32("ints", out, 2).code(), StatusCode::kUnimplemented);
}

TEST_F(SafetensorsTest, OpenReportsMissingFilesDirectoriesAndEmptyFiles) {
  auto missing = SafetensorsFile::open(path("absent.safetensors"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("absent.safetensors"), std::string::npos);
  EXPECT_EQ(SafetensorsFile::open(dir_).status().code(), StatusCode::kInvalidArgument);
  write_bytes(path("empty"), "");
  auto empty = SafetensorsFile::open(path("empty"));
  EXPECT_EQ(empty.status().code(), StatusCode::kDataLoss);
}

TEST_F(SafetensorsTest, FileWithNoTensorsIsValid) {
  const std::string p = path("none.safetensors");
  ASSERT_TRUE(write_safetensors(p, {}, {{"a", "b"}}).ok());
  auto file = SafetensorsFile::open(p);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_TRUE(file->tensors().empty());
  EXPECT_EQ(file->metadata().at("a"), "b");
}

TEST_F(SafetensorsTest, WriterReplacesAnExistingFileOnlyOnSuccess) {
  const float a[1] = {1.0f}, b[2] = {2.0f, 3.0f};
  const std::string p = path("w.safetensors");
  ASSERT_TRUE(write_safetensors(p, {{"a", "F32", {1}, a}}).ok());
  const std::string before = read_bytes(p);

  Status dup = write_safetensors(p, {{"x", "F32", {1}, a}, {"x", "F32", {1}, a}});
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.message().find("'x'"), std::string::npos) << dup.message();
  EXPECT_EQ(write_safetensors(p, {{"x", "Q4", {1}, a}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(write_safetensors(p, {{"x", "F32", {-1}, a}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(write_safetensors(p, {{"x", "F32", {1}, nullptr}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(write_safetensors(p, {{"__metadata__", "F32", {1}, a}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(write_safetensors(p, {{"", "F32", {1}, a}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(write_safetensors(p, {{"bad\xff", "F32", {1}, a}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(read_bytes(p), before) << "a failed write must leave the old file intact";
  EXPECT_FALSE(fs::exists(p + ".tmp"));

  ASSERT_TRUE(write_safetensors(p, {{"b", "F32", {2}, b}}).ok());
  auto file = SafetensorsFile::open(p);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->names(), std::vector<std::string>{"b"});
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

TEST_F(SafetensorsTest, WriteIntoMissingDirectoryFailsAndLeavesNothing) {
  const float a[1] = {1.0f};
  const std::string p = path("no/such/dir/w.safetensors");
  Status s = write_safetensors(p, {{"a", "F32", {1}, a}});
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
  EXPECT_FALSE(s.hint().empty());
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

TEST_F(SafetensorsTest, FailedRenameRemovesTheTemporaryFile) {
  // The destination is a non-empty directory: the data is written, then rename() fails.
  const float a[1] = {1.0f};
  const std::string p = path("target");
  fs::create_directory(p);
  write_bytes(p + "/keep", "x");
  Status s = write_safetensors(p, {{"a", "F32", {1}, a}});
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find(p), std::string::npos);
  EXPECT_TRUE(fs::is_directory(p));
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

}  // namespace
}  // namespace lmt::io
