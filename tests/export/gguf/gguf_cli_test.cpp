// `lmtrain export --format gguf` as a user runs it: stories260K (HF directory + tok512.bin) is
// exported in every dtype, exit 0, a GGUF v3 file; errors exit 1 with a message and leave an existing
// --out untouched. What the files contain is checked by gguf_export_test and, with llama.cpp itself,
// by tests/interop/test_gguf_llamacpp.py.
#include <gtest/gtest.h>

#include <cstring>

#include "common/files.h"
#include "common/lmtrain_cli.h"
#include "common/shared_data.h"

namespace {

const std::string kStories = std::string(LMT_SHARED_DATA) + "/models/stories260K";

class GgufCliTest : public lmt::test::ScratchDirTest {
 protected:
  void SetUp() override {
    lmt::test::ScratchDirTest::SetUp();
    LMT_SKIP_WITHOUT_SHARED("models/stories260K/hf");
  }
  lmt::test::CliResult exp(const std::string& out, const std::string& extra) {
    return lmt::test::run_lmtrain("export --checkpoint " + kStories + "/hf --format gguf --out " + out + " " + extra,
                                  true);
  }
};

TEST_F(GgufCliTest, ExportsStories260KInEveryDtype) {
  for (const char* dtype : {"f32", "f16", "bf16", "q8_0"}) {
    const std::string out = path(std::string("s-") + dtype + ".gguf");
    auto r = exp(out, std::string("--dtype ") + dtype + " --tokenizer " + kStories + "/tok512.bin");
    ASSERT_EQ(r.code, 0) << r.out;
    const std::string bytes = lmt::test::read_bytes(out);
    ASSERT_GT(bytes.size(), 24u);
    EXPECT_EQ(bytes.substr(0, 4), "GGUF");
    uint32_t version;
    std::memcpy(&version, bytes.data() + 4, 4);
    EXPECT_EQ(version, 3u);
    uint64_t tensors;
    std::memcpy(&tensors, bytes.data() + 8, 8);
    EXPECT_EQ(tensors, 2u + 5u * 9u);  // token_embd, output_norm, 9 per block (tied: no output)
  }
  // f16/bf16 halve the matrices, q8_0 is smaller still (34 bytes per 32 values, f16 fallbacks).
  const auto size = [&](const char* d) { return lmt::test::read_bytes(path(std::string("s-") + d + ".gguf")).size(); };
  EXPECT_LT(size("f16"), size("f32"));
  EXPECT_EQ(size("f16"), size("bf16"));
  EXPECT_LT(size("q8_0"), size("f16"));
}

TEST_F(GgufCliTest, ErrorsExitOneAndNeverOverwrite) {
  lmt::test::write_bytes(path("taken.gguf"), "keep me");
  auto r = exp(path("taken.gguf"), "--tokenizer " + kStories + "/tok512.bin");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("already exists"), std::string::npos) << r.out;
  EXPECT_EQ(lmt::test::read_bytes(path("taken.gguf")), "keep me");

  r = exp(path("none.gguf"), "");  // the shared HF directory has no tokenizer
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--tokenizer"), std::string::npos) << r.out;

  r = exp(path("none.gguf"), "--dtype q4_k --tokenizer " + kStories + "/tok512.bin");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("q4_k"), std::string::npos) << r.out;
  EXPECT_EQ(lmt::test::read_bytes(path("taken.gguf")), "keep me");
  EXPECT_EQ(entries(), std::vector<std::string>{"taken.gguf"});
}

}  // namespace
