// Every malformation the reader promises to reject: each case is built by hand, written to a file
// and opened. open() must fail with kDataLoss, name the file and the tensor at fault, give a hint,
// and never read outside the file (run this binary under ASan or valgrind to check the latter).
#include <gtest/gtest.h>

#include "lmt/io/safetensors.h"
#include "safetensors_test_util.h"

namespace lmt::io {
namespace {

using testing::le64;
using testing::make_file;
using testing::write_bytes;

class SafetensorsCorruptTest : public testing::ScratchDirTest {
 protected:
  // Opens `bytes` as a file and checks the failure names the file (and `tensor`, when given).
  void ExpectRejected(const std::string& label, const std::string& bytes, const std::string& tensor,
                      const std::string& why) {
    SCOPED_TRACE(label);
    const std::string p = path(label + ".safetensors");
    write_bytes(p, bytes);
    auto file = SafetensorsFile::open(p);
    ASSERT_FALSE(file.ok()) << "accepted a malformed file";
    const Status& s = file.status();
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    EXPECT_NE(s.message().find(p), std::string::npos) << "message lacks the file name: " << s.message();
    if (!tensor.empty()) {
      EXPECT_NE(s.message().find("'" + tensor + "'"), std::string::npos) << "message lacks the tensor: " << s.message();
    }
    EXPECT_NE(s.message().find(why), std::string::npos) << "message lacks '" << why << "': " << s.message();
    EXPECT_FALSE(s.hint().empty()) << s.message();
  }
};

// A one-tensor header: {"t": {"dtype": D, "shape": S, "data_offsets": O}}.
std::string one(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"t":{"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}";
}

TEST_F(SafetensorsCorruptTest, FramingErrors) {
  ExpectRejected("empty", "", "", "shorter than the 8-byte");
  ExpectRejected("five_bytes", "\x01\x02\x03\x04\x05", "", "shorter than the 8-byte");
  ExpectRejected("length_beyond_file", le64(100) + "{}", "", "exceeds");
  ExpectRejected("length_absurd", le64(100'000'001) + "{}", "", "absurd");
  ExpectRejected("length_2^64-1", le64(~uint64_t{0}) + "{}", "", "absurd");
  ExpectRejected("length_only", le64(0), "", "not valid JSON");
}

TEST_F(SafetensorsCorruptTest, HeaderIsNotAJsonObject) {
  ExpectRejected("garbage", make_file("{not json", 0), "", "not valid JSON");
  ExpectRejected("truncated_json", make_file(R"({"t":{"dtype":"F32")", 0), "", "not valid JSON");
  ExpectRejected("trailing_garbage", make_file("{}x", 0), "", "not valid JSON");
  ExpectRejected("invalid_utf8", make_file("{\"\xff\xfe\":1}", 0), "", "not valid JSON");
  ExpectRejected("array", make_file("[1,2]", 0), "", "not an object");
  ExpectRejected("number", make_file("42", 0), "", "not an object");
}

TEST_F(SafetensorsCorruptTest, EntryMissingOrMistypedFields) {
  ExpectRejected("entry_not_object", make_file(R"({"t":[1]})", 0), "t", "not an object");
  ExpectRejected("no_dtype", make_file(R"({"t":{"shape":[1],"data_offsets":[0,4]}})", 4), "t", "missing \"dtype\"");
  ExpectRejected("no_shape", make_file(R"({"t":{"dtype":"F32","data_offsets":[0,4]}})", 4), "t", "missing \"shape\"");
  ExpectRejected("no_offsets", make_file(R"({"t":{"dtype":"F32","shape":[1]}})", 4), "t", "missing \"data_offsets\"");
  ExpectRejected("dtype_number", make_file(one("5", "[1]", "[0,4]"), 4), "t", "\"dtype\" is not a string");
  ExpectRejected("shape_string", make_file(one("\"F32\"", "\"1\"", "[0,4]"), 4), "t", "\"shape\" is not an array");
  ExpectRejected("shape_float", make_file(one("\"F32\"", "[1.0]", "[0,4]"), 4), "t", "non-integer");
  ExpectRejected("shape_null", make_file(one("\"F32\"", "[null]", "[0,4]"), 4), "t", "non-integer");
  ExpectRejected("offsets_one", make_file(one("\"F32\"", "[1]", "[4]"), 4), "t", "not [begin, end]");
  ExpectRejected("offsets_three", make_file(one("\"F32\"", "[1]", "[0,4,8]"), 4), "t", "not [begin, end]");
  ExpectRejected("offsets_strings", make_file(one("\"F32\"", "[1]", R"(["0","4"])"), 4), "t", "non-negative integers");
  ExpectRejected("offsets_negative", make_file(one("\"F32\"", "[1]", "[-4,0]"), 4), "t", "non-negative integers");
  ExpectRejected("offsets_object", make_file(one("\"F32\"", "[1]", "{}"), 4), "t", "not [begin, end]");
  ExpectRejected("metadata_not_object", make_file(R"({"__metadata__":[1]})", 0), "", "__metadata__");
  ExpectRejected("metadata_number", make_file(R"({"__metadata__":{"k":1}})", 0), "", "'k'");
}

TEST_F(SafetensorsCorruptTest, BadDtypeShapeAndOffsets) {
  ExpectRejected("unknown_dtype", make_file(one("\"Q4\"", "[1]", "[0,4]"), 4), "t", "unknown dtype \"Q4\"");
  ExpectRejected("negative_dim", make_file(one("\"F32\"", "[-1,4]", "[0,4]"), 4), "t", "negative dimension -1");
  ExpectRejected("dim_too_large", make_file(one("\"F32\"", "[18446744073709551615]", "[0,4]"), 4), "t", "too large");
  ExpectRejected("numel_overflow", make_file(one("\"F32\"", "[4611686018427387904,4]", "[0,4]"), 4), "t",
                 "more elements");
  ExpectRejected("begin_after_end", make_file(one("\"F32\"", "[1]", "[4,0]"), 4), "t", "begin > end");
  ExpectRejected("end_beyond_data", make_file(one("\"F32\"", "[2]", "[0,8]"), 4), "t", "beyond the data section");
  ExpectRejected("end_huge", make_file(one("\"F32\"", "[1]", "[0,18446744073709551615]"), 4), "t", "beyond");
  ExpectRejected("length_mismatch", make_file(one("\"F32\"", "[2]", "[0,4]"), 4), "t", "needs 8");
  ExpectRejected("bf16_length_mismatch", make_file(one("\"BF16\"", "[3]", "[0,4]"), 4), "t", "needs 6");
}

TEST_F(SafetensorsCorruptTest, TensorsMustTileTheDataSection) {
  ExpectRejected("overlap",
                 make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
                 "b", "overlaps tensor 'a'");
  ExpectRejected("same_range",
                 make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4),
                 "b", "overlaps");
  ExpectRejected("hole_between",
                 make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12),
                 "b", "hole");
  ExpectRejected("hole_at_start", make_file(one("\"F32\"", "[1]", "[4,8]"), 8), "t", "hole");
  ExpectRejected("trailing_bytes", make_file(one("\"F32\"", "[1]", "[0,4]"), 12), "", "unused bytes after the last tensor");
  ExpectRejected("data_but_no_tensors", make_file("{}", 4), "", "unused bytes");
}

TEST_F(SafetensorsCorruptTest, ParseNeedsNoFileAndNamesTheSource) {
  const std::string bytes = make_file(one("\"F32\"", "[1]", "[0,4]"), 3);  // one data byte short
  auto r = SafetensorsFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "<memory>");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("<memory>: tensor 't'"), std::string::npos) << r.status().message();
}

TEST_F(SafetensorsCorruptTest, AcceptsWhatTheReferenceWriterProduces) {
  // Space padding after the JSON, keys in any order, extra fields and an unaligned data section.
  const std::string header =
      R"({"b":{"data_offsets":[4,6],"shape":[1],"dtype":"BF16","extra":true},)"
      R"("a":{"dtype":"U8","shape":[2,2],"data_offsets":[0,4]}})"
      "   ";
  const std::string bytes = make_file(header, 6);
  auto r = SafetensorsFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "<memory>");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->names(), (std::vector<std::string>{"a", "b"}));
}

}  // namespace
}  // namespace lmt::io
