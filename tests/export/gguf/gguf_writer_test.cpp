// GgufWriter: the exact byte layout of a small file (built here by hand from the GGUF v3 spec),
// alignment, refusals, and atomicity (an existing file is never replaced, a failed write leaves
// nothing behind).
#include "lmt/export/gguf_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "common/files.h"

namespace lmt::exporter::gguf {
namespace {

class GgufWriterTest : public test::ScratchDirTest {};

template <typename T>
void put(std::string* s, T v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void put_str(std::string* s, const std::string& v) {
  put<uint64_t>(s, v.size());
  *s += v;
}

TEST_F(GgufWriterTest, HeaderMetadataTensorInfosAndAlignedData) {
  GgufWriter w;
  ASSERT_TRUE(w.add_u32("a", 7).ok());
  ASSERT_TRUE(w.add_string("s", "xy").ok());
  ASSERT_TRUE(w.add_bool("b", true).ok());
  ASSERT_TRUE(w.add_f32("f", 1.5f).ok());
  ASSERT_TRUE(w.add_i32_array("ia", {1, -2}).ok());
  ASSERT_TRUE(w.add_string_array("sa", {"p", "qr"}).ok());
  ASSERT_TRUE(w.add_tensor("t0", {3}, GgmlType::kF32, [] { return std::string(12, '\x11'); }).ok());
  ASSERT_TRUE(w.add_tensor("t1", {32, 2}, GgmlType::kQ8_0, [] { return std::string(68, '\x22'); }).ok());

  std::string want;
  want += "GGUF";
  put<uint32_t>(&want, 3);
  put<uint64_t>(&want, 2);  // tensors
  put<uint64_t>(&want, 6);  // metadata
  put_str(&want, "a"), put<uint32_t>(&want, 4), put<uint32_t>(&want, 7);
  put_str(&want, "s"), put<uint32_t>(&want, 8), put_str(&want, "xy");
  put_str(&want, "b"), put<uint32_t>(&want, 7), put<uint8_t>(&want, 1);
  put_str(&want, "f"), put<uint32_t>(&want, 6), put<float>(&want, 1.5f);
  put_str(&want, "ia"), put<uint32_t>(&want, 9), put<uint32_t>(&want, 5), put<uint64_t>(&want, 2);
  put<int32_t>(&want, 1), put<int32_t>(&want, -2);
  put_str(&want, "sa"), put<uint32_t>(&want, 9), put<uint32_t>(&want, 8), put<uint64_t>(&want, 2);
  put_str(&want, "p"), put_str(&want, "qr");
  put_str(&want, "t0"), put<uint32_t>(&want, 1), put<uint64_t>(&want, 3), put<uint32_t>(&want, 0),
      put<uint64_t>(&want, 0);
  put_str(&want, "t1"), put<uint32_t>(&want, 2), put<uint64_t>(&want, 32), put<uint64_t>(&want, 2);
  put<uint32_t>(&want, 8), put<uint64_t>(&want, 32);  // q8_0, after t0's 12 bytes padded to 32
  const size_t info_end = want.size();
  want.resize((want.size() + 31) / 32 * 32, '\0');
  ASSERT_GT(want.size(), info_end);  // this header does need padding
  want += std::string(12, '\x11') + std::string(20, '\0') + std::string(68, '\x22');

  EXPECT_EQ(w.header(), want.substr(0, w.header().size()));
  EXPECT_EQ(w.header().size() % 32, 0u);
  ASSERT_TRUE(w.write(path("m.gguf")).ok());
  EXPECT_EQ(test::read_bytes(path("m.gguf")), want);
  EXPECT_EQ(entries(), std::vector<std::string>{"m.gguf"});  // no temporary file left
}

TEST_F(GgufWriterTest, RefusesDuplicatesAndBadTensors) {
  GgufWriter w;
  ASSERT_TRUE(w.add_u32("k", 1).ok());
  EXPECT_EQ(w.add_string("k", "again").code(), StatusCode::kInvalidArgument);
  auto bytes = [] { return std::string(); };
  ASSERT_TRUE(w.add_tensor("t", {4}, GgmlType::kF32, bytes).ok());
  EXPECT_EQ(w.add_tensor("t", {4}, GgmlType::kF32, bytes).code(), StatusCode::kInvalidArgument);
  const Status q8 = w.add_tensor("q", {33, 2}, GgmlType::kQ8_0, bytes);
  EXPECT_EQ(q8.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(q8.message().find("multiple of 32"), std::string::npos) << q8.ToString();
  EXPECT_EQ(w.add_tensor("z", {0}, GgmlType::kF32, bytes).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("d", {1, 1, 1, 1, 1}, GgmlType::kF32, bytes).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor(std::string(64, 'n'), {1}, GgmlType::kF32, bytes).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.tensor_count(), 1);
}

TEST_F(GgufWriterTest, NeverReplacesAnExistingFile) {
  test::write_bytes(path("m.gguf"), "precious");
  GgufWriter w;
  ASSERT_TRUE(w.add_u32("k", 1).ok());
  const Status s = w.write(path("m.gguf"));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("already exists"), std::string::npos) << s.ToString();
  EXPECT_EQ(test::read_bytes(path("m.gguf")), "precious");
  EXPECT_EQ(entries(), std::vector<std::string>{"m.gguf"});
}

TEST_F(GgufWriterTest, AFailedWriteLeavesNothing) {
  GgufWriter w;
  // A producer that returns the wrong size stands for a failure in the middle of the data.
  ASSERT_TRUE(w.add_tensor("t", {4}, GgmlType::kF32, [] { return std::string(3, 'x'); }).ok());
  const Status s = w.write(path("m.gguf"));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(entries().empty());
  EXPECT_FALSE(w.write(path("missing/m.gguf")).ok());
  EXPECT_TRUE(entries().empty());
}

}  // namespace
}  // namespace lmt::exporter::gguf
