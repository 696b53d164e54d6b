// open_input / read_whole_input / LineReader against files compressed at test time by the real
// gzip, zstd, bzip2 and xz command-line tools (Debian): the decompressed bytes must equal the
// original's, for every read size and line-buffer size; damaged files give errors naming the file
// and an offset.
#include "common/shared_data.h"
#include "lmt/io/input_stream.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace lmt::io {
namespace {
namespace fs = std::filesystem;

const std::string kShakespeare = std::string(LMT_SHARED_DATA) + "/corpora/tinyshakespeare.txt";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

bool have(const char* tool) { return std::system((std::string("command -v ") + tool + " >/dev/null 2>&1").c_str()) == 0; }

void run(const std::string& cmd) { ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd; }

class InputStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* t : {"gzip", "zstd", "bzip2", "xz"})
      if (!have(t)) GTEST_SKIP() << t << " is not installed (scripts/setup.sh installs it)";
    dir_ = fs::temp_directory_path() / ("lmt_input_stream_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string p(const std::string& name) const { return (dir_ / name).string(); }
  // Writes `bytes` to NAME and compresses copies: NAME.gz (gzip -c) and NAME.zst (zstd -q -c).
  void make(const std::string& name, std::string_view bytes) {
    write(p(name), bytes);
    run("gzip -c '" + p(name) + "' > '" + p(name) + ".gz'");
    run("zstd -q -c '" + p(name) + "' > '" + p(name) + ".zst'");
  }
  fs::path dir_;
};

std::string read_in_chunks(InputStream& in, size_t chunk) {
  std::string out, buf(chunk, '\0');
  for (;;) {
    auto got = in.read(buf.data(), chunk);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    if (!got.ok()) return out;
    out.append(buf, 0, *got);
    if (*got < chunk) return out;
  }
}

TEST_F(InputStreamTest, DetectsByMagicBytesNotName) {
  LMT_SKIP_WITHOUT_SHARED("corpora/tinyshakespeare.txt");
  const std::string text = slurp(kShakespeare);
  ASSERT_GT(text.size(), 1000000u);
  make("corpus.txt", text);
  run("cp '" + p("corpus.txt.gz") + "' '" + p("gz_without_suffix") + "'");
  run("cp '" + p("corpus.txt.zst") + "' '" + p("zst_without_suffix") + "'");
  EXPECT_EQ(*detect_input_format(p("corpus.txt")), InputFormat::kPlain);
  EXPECT_EQ(*detect_input_format(p("corpus.txt.gz")), InputFormat::kGzip);
  EXPECT_EQ(*detect_input_format(p("gz_without_suffix")), InputFormat::kGzip);
  EXPECT_EQ(*detect_input_format(p("zst_without_suffix")), InputFormat::kZstd);
  EXPECT_EQ(strip_compression_suffix("a/b.jsonl.gz"), "a/b.jsonl");
  EXPECT_EQ(strip_compression_suffix("a/b.jsonl.zst"), "a/b.jsonl");
  EXPECT_EQ(strip_compression_suffix("a/b.txt"), "a/b.txt");
}

TEST_F(InputStreamTest, DecompressedBytesEqualTheOriginalForEveryReadSize) {
  const std::string text = slurp(kShakespeare);
  make("corpus.txt", text);
  for (const std::string name : {"corpus.txt", "corpus.txt.gz", "corpus.txt.zst"}) {
    auto whole = read_whole_input(p(name));
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    EXPECT_TRUE(*whole == text) << name;
    for (size_t chunk : {size_t{1} << 20, size_t{65536}, size_t{4093}}) {
      auto in = open_input(p(name));
      ASSERT_TRUE(in.ok());
      EXPECT_TRUE(read_in_chunks(**in, chunk) == text) << name << " chunk " << chunk;
      EXPECT_EQ((*in)->uncompressed_offset(), text.size());
      EXPECT_EQ((*in)->compressed_offset(), fs::file_size(p(name))) << name;
    }
  }
  // Byte-at-a-time reads of the first 20 kB cross every block boundary of the decoders' buffers.
  make("small.txt", text.substr(0, 20000));
  for (const std::string name : {"small.txt.gz", "small.txt.zst"}) {
    auto in = open_input(p(name));
    ASSERT_TRUE(in.ok());
    EXPECT_TRUE(read_in_chunks(**in, 1) == text.substr(0, 20000)) << name;
  }
}

TEST_F(InputStreamTest, EmptyFilesReadAsEmpty) {
  make("empty.txt", "");
  for (const std::string name : {"empty.txt", "empty.txt.gz", "empty.txt.zst"}) {
    auto whole = read_whole_input(p(name));
    ASSERT_TRUE(whole.ok()) << name << ": " << whole.status().ToString();
    EXPECT_EQ(*whole, "") << name;
    auto in = open_input(p(name));
    ASSERT_TRUE(in.ok());
    LineReader lines(std::move(*in));
    std::string_view line;
    auto got = lines.next(&line);
    ASSERT_TRUE(got.ok());
    EXPECT_FALSE(*got) << name;
  }
}

TEST_F(InputStreamTest, MultiMemberGzipAndMultiFrameZstdReadAsTheConcatenation) {
  LMT_SKIP_WITHOUT_SHARED("corpora/tinyshakespeare.txt");
  const std::string text = slurp(kShakespeare);
  const std::string a = text.substr(0, 300000), b = text.substr(300000, 500000);
  make("a.txt", a);
  make("b.txt", b);
  make("empty.txt", "");
  run("cat '" + p("a.txt.gz") + "' '" + p("empty.txt.gz") + "' '" + p("b.txt.gz") + "' > '" + p("ab.txt.gz") + "'");
  run("cat '" + p("a.txt.zst") + "' '" + p("empty.txt.zst") + "' '" + p("b.txt.zst") + "' > '" + p("ab.txt.zst") + "'");
  for (const std::string name : {"ab.txt.gz", "ab.txt.zst"}) {
    auto whole = read_whole_input(p(name));
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    EXPECT_TRUE(*whole == a + b) << name;
  }
}

// Splits like LineReader's contract: '\n' ends a line, a last unterminated line counts.
std::vector<std::string> reference_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < s.size()) {
    size_t nl = s.find('\n', at);
    if (nl == std::string::npos) nl = s.size();
    out.push_back(s.substr(at, nl - at));
    at = nl + 1;
  }
  return out;
}

TEST_F(InputStreamTest, LineReaderSplitsAcrossChunkBoundaries) {
  const std::string text = slurp(kShakespeare).substr(0, 30000);
  for (const std::string& content : {text, text + "\n", text + "\r\nlast line without newline", std::string("\n\n\n"),
                                     std::string("x"), std::string(5000, 'y') + "\n" + "z"}) {
    make("t.txt", content);
    const std::vector<std::string> want = reference_lines(content);
    for (const std::string name : {"t.txt", "t.txt.gz", "t.txt.zst"}) {
      for (size_t chunk : {size_t{1}, size_t{2}, size_t{3}, size_t{17}, size_t{4096}, size_t{1} << 20}) {
        auto in = open_input(p(name));
        ASSERT_TRUE(in.ok());
        LineReader lines(std::move(*in), chunk);
        std::vector<std::string> got;
        std::string_view line;
        for (;;) {
          auto more = lines.next(&line);
          ASSERT_TRUE(more.ok()) << more.status().ToString();
          if (!*more) break;
          got.emplace_back(line);
          EXPECT_EQ(lines.line_number(), static_cast<int64_t>(got.size()));
        }
        EXPECT_TRUE(got == want) << name << " chunk " << chunk << ": " << got.size() << " lines, want " << want.size();
      }
    }
  }
}

Status read_all(const std::string& path) {
  LMT_ASSIGN_OR_RETURN(std::string s, read_whole_input(path));
  return Status::Ok();
}

TEST_F(InputStreamTest, TruncatedStreamsNameTheFileAndOffset) {
  make("corpus.txt", slurp(kShakespeare));
  for (const std::string name : {"corpus.txt.gz", "corpus.txt.zst"}) {
    const std::string bytes = slurp(p(name));
    for (size_t keep : {bytes.size() / 2, bytes.size() - 1, size_t{10}}) {
      const std::string cut = p("cut_" + std::to_string(keep) + "_" + name);
      write(cut, std::string_view(bytes).substr(0, keep));
      const Status s = read_all(cut);
      ASSERT_FALSE(s.ok()) << name << " cut at " << keep;
      EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
      EXPECT_NE(s.message().find(cut), std::string::npos) << s.ToString();
      EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.ToString();
      EXPECT_NE(s.message().find("compressed byte " + std::to_string(keep)), std::string::npos) << s.ToString();
    }
  }
}

TEST_F(InputStreamTest, CorruptDataAndBadChecksumsAreDataLoss) {
  make("corpus.txt", slurp(kShakespeare));
  for (const std::string name : {"corpus.txt.gz", "corpus.txt.zst"}) {
    std::string bytes = slurp(p(name));
    // Flip bytes in the middle of the compressed data.
    std::string mid = bytes;
    for (size_t i = mid.size() / 2; i < mid.size() / 2 + 16; ++i) mid[i] = static_cast<char>(mid[i] ^ 0x5A);
    write(p("mid_" + name), mid);
    // gzip: the trailer's CRC-32 (8th..5th bytes from the end); zstd (-q writes a content
    // checksum by default): the last 4 bytes.
    std::string crc = bytes;
    crc[crc.size() - (name.ends_with(".gz") ? 8 : 1)] ^= 1;
    write(p("crc_" + name), crc);
    for (const std::string& bad : {"mid_" + name, "crc_" + name}) {
      const Status s = read_all(p(bad));
      ASSERT_FALSE(s.ok()) << bad;
      EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
      EXPECT_NE(s.message().find(p(bad)), std::string::npos) << s.ToString();
      EXPECT_NE(s.message().find("compressed byte "), std::string::npos) << s.ToString();
      // The tool agrees that the file is damaged.
      EXPECT_NE(std::system(((name.ends_with(".gz") ? "gzip -t '" : "zstd -q -t '") + p(bad) + "' 2>/dev/null").c_str()), 0);
    }
    const Status s = read_all(p("crc_" + name));
    EXPECT_NE(s.message().find(name.ends_with(".gz") ? "incorrect data check" : "checksum"), std::string::npos) << s.ToString();
  }
}

TEST_F(InputStreamTest, TrailingGarbageAfterGzipIsAnErrorButZeroPaddingIsIgnored) {
  make("t.txt", "hello\n");
  const std::string gz = slurp(p("t.txt.gz"));
  write(p("g.gz"), gz + "not gzip");
  const Status s = read_all(p("g.gz"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("after the last gzip member"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("compressed byte " + std::to_string(gz.size())), std::string::npos) << s.ToString();
  // Zero padding (as tar leaves it): `gzip -d` ignores it, and so does the reader; more after it does not.
  write(p("padded.gz"), gz + std::string(300000, '\0'));
  EXPECT_EQ(std::system(("gzip -dc '" + p("padded.gz") + "' 2>/dev/null | cmp -s - '" + p("t.txt") + "'").c_str()), 0);
  auto padded = read_whole_input(p("padded.gz"));
  ASSERT_TRUE(padded.ok()) << padded.status().ToString();
  EXPECT_EQ(*padded, "hello\n");
  write(p("padded_garbage.gz"), gz + std::string(1000, '\0') + "x");
  const Status g = read_all(p("padded_garbage.gz"));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("compressed byte " + std::to_string(gz.size() + 1000)), std::string::npos) << g.ToString();
}

TEST_F(InputStreamTest, Bzip2XzAndZipAreRefusedWithTheirCommand) {
  make("t.txt", "hello\n");
  run("bzip2 -kc '" + p("t.txt") + "' > '" + p("t.txt.bz2") + "'");
  run("xz -kc '" + p("t.txt") + "' > '" + p("t.txt.xz") + "'");
  run("cp '" + p("t.txt.bz2") + "' '" + p("bz2_without_suffix") + "'");
  write(p("plain_named.xz"), "not xz at all\n");
  write(p("fake.zip"), std::string("PK\x03\x04", 4) + "rest");
  struct Case {
    std::string name, hint;
  };
  for (const Case& c : {Case{"t.txt.bz2", "bzip2 -dk"}, Case{"bz2_without_suffix", "bzip2 -dk"}, Case{"t.txt.xz", "xz -dk"},
                        Case{"plain_named.xz", "xz -dk"}, Case{"fake.zip", "unzip"}}) {
    auto f = detect_input_format(p(c.name));
    ASSERT_FALSE(f.ok()) << c.name;
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(f.status().message().find(p(c.name)), std::string::npos) << f.status().ToString();
    EXPECT_NE(f.status().hint().find(c.hint), std::string::npos) << f.status().ToString();
    EXPECT_FALSE(open_input(p(c.name)).ok());
  }
}

TEST_F(InputStreamTest, NamedCompressedButPlainIsDataLoss) {
  write(p("x.jsonl.gz"), "{\"text\": \"plain\"}\n");
  auto f = detect_input_format(p("x.jsonl.gz"));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
  auto missing = open_input(p("missing.gz"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto dir = open_input(dir_.string());
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lmt::io
