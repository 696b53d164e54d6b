// Compressed inputs through the CLI, as a user gives them (issue #19): real corpora compressed at
// test time by Debian's gzip and zstd give byte-identical results to the plain file in
// `data prepare` (every shard), `tokenizer train` (tokenizer.json), `data clean` (every shard),
// `tokenizer encode --input` (its output) and `eval` (the JSON accuracies); truncated and corrupted
// files fail with exit 1, a message naming the file and the offset, and no output; bzip2 gets the
// one refusal with its command.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/lmtrain_cli.h"

namespace {

namespace fs = std::filesystem;
using Result = lmt::test::CliResult;
const std::string kData = LMT_SHARED_DATA;

Result run(const std::string& args) { return lmt::test::run_lmtrain(args, /*with_stderr=*/true); }

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const fs::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Every regular file under `dir` whose name starts with `prefix`, by relative path.
std::map<std::string, std::string> files_of(const fs::path& dir, const std::string& prefix) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename().string().starts_with(prefix))
      out[fs::relative(e.path(), dir).string()] = slurp(e.path());
  return out;
}

nlohmann::json last_json(const std::string& out) {
  const size_t p = out.rfind("\n{");
  return nlohmann::json::parse(p == std::string::npos ? out : out.substr(p + 1), nullptr, false);
}

class CompressedInputCli : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* t : {"gzip", "zstd", "bzip2"})
      if (std::system((std::string("command -v ") + t + " >/dev/null").c_str()) != 0)
        GTEST_SKIP() << t << " is not installed (scripts/setup.sh installs it)";
    if (!fs::exists(kData + "/corpora/medium_prose.jsonl")) GTEST_SKIP() << "shared data not found under " << kData;
    dir_ = fs::temp_directory_path() / ("lmt_compressed_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // 2 MB of real JSONL documents and the whole of tinyshakespeare as one text document.
    std::ifstream prose(kData + "/corpora/medium_prose.jsonl", std::ios::binary);
    std::string jsonl;
    for (std::string line; jsonl.size() < 2000000 && std::getline(prose, line);) jsonl += line + "\n";
    for (const char* d : {"plain", "gz", "zst"}) fs::create_directories(dir_ / d);
    write(dir_ / "plain/docs.jsonl", jsonl);
    fs::copy_file(kData + "/corpora/tinyshakespeare.txt", dir_ / "plain/shakespeare.txt");
    sh("gzip -c plain/docs.jsonl > gz/docs.jsonl.gz && gzip -c plain/shakespeare.txt > gz/shakespeare.txt.gz");
    // zstd in two frames for the JSONL (`cat a.zst b.zst`), one for the text.
    sh("head -c 1000000 plain/docs.jsonl | zstd -q -c > zst/docs.jsonl.zst && tail -c +1000001 plain/docs.jsonl | zstd -q -c >> zst/docs.jsonl.zst"
       " && zstd -q -c plain/shakespeare.txt > zst/shakespeare.txt.zst");
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void sh(const std::string& cmd) { ASSERT_EQ(std::system(("cd '" + dir_.string() + "' && " + cmd).c_str()), 0) << cmd; }
  std::string p(const std::string& rel) const { return (dir_ / rel).string(); }
  fs::path dir_;
};

TEST_F(CompressedInputCli, DataPrepareShardsAreByteIdentical) {
  const std::string gpt2 = kData + "/tokenizers/gpt2";
  auto prepare = [&](const std::string& in, const std::string& out) {
    return run("data prepare --tokenizer " + gpt2 + " --input " + p(in) + " --out " + p(out) +
               " --workers 2 --val-fraction 0.1 --shard-tokens 100000");
  };
  Result plain = prepare("plain", "ds_plain");
  ASSERT_EQ(plain.code, 0) << plain.out;
  const auto want = files_of(p("ds_plain"), "");
  size_t shards = 0;
  for (const auto& [name, bytes] : want) shards += name.find(".bin") != std::string::npos;
  ASSERT_GT(shards, 2u);
  for (const std::string d : {"gz", "zst"}) {
    Result r = prepare(d, "ds_" + d);
    ASSERT_EQ(r.code, 0) << r.out;
    auto got = files_of(p("ds_" + d), "");
    ASSERT_EQ(got.size(), want.size()) << d;
    for (const auto& [name, bytes] : want) {
      if (name.find("manifest") != std::string::npos || name.ends_with(".json")) continue;  // they name the inputs
      EXPECT_TRUE(got[name] == bytes) << d << ": " << name << " differs";
    }
  }
}

TEST_F(CompressedInputCli, TokenizerTrainOutputIsByteIdentical) {
  for (const std::string d : {"plain", "gz", "zst"}) {
    Result r = run("tokenizer train --input " + p(d) + " --vocab-size 600 --threads 2 --out " + p("tok_" + d + ".json"));
    ASSERT_EQ(r.code, 0) << d << ": " << r.out;
  }
  const std::string want = slurp(p("tok_plain.json"));
  ASSERT_GT(want.size(), 1000u);
  EXPECT_TRUE(slurp(p("tok_gz.json")) == want);
  EXPECT_TRUE(slurp(p("tok_zst.json")) == want);
}

TEST_F(CompressedInputCli, DataCleanShardsAreByteIdentical) {
  for (const std::string d : {"plain", "gz", "zst"}) {
    Result r = run("data clean --input " + p(d + (d == "plain" ? "/docs.jsonl" : "/docs.jsonl." + d)) + " --out " + p("clean_" + d) + " --workers 2");
    ASSERT_EQ(r.code, 0) << d << ": " << r.out;
  }
  const auto want = files_of(p("clean_plain"), "shard_");
  ASSERT_FALSE(want.empty());
  EXPECT_TRUE(files_of(p("clean_gz"), "shard_") == want);
  EXPECT_TRUE(files_of(p("clean_zst"), "shard_") == want);
}

TEST_F(CompressedInputCli, TokenizerEncodeInputIsIdentical) {
  sh("head -n 5 plain/docs.jsonl > five.jsonl && gzip -c five.jsonl > five.jsonl.gz && zstd -q -c five.jsonl > five.jsonl.zst");
  const std::string args = "tokenizer encode --tokenizer " + kData + "/tokenizers/gpt2 --json --input ";
  Result plain = run(args + p("five.jsonl"));
  ASSERT_EQ(plain.code, 0) << plain.out;
  ASSERT_GT(plain.out.size(), 1000u);
  for (const std::string f : {"five.jsonl.gz", "five.jsonl.zst"}) {
    Result r = run(args + p(f));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(r.out == plain.out) << f;
  }
}

TEST_F(CompressedInputCli, EvalAccuracyIsIdentical) {
  // A small tokenizer trained here, so that the tiny preset's vocabulary holds it.
  ASSERT_EQ(run("tokenizer train --input " + p("plain/shakespeare.txt") + " --vocab-size 2000 --out " + p("tok.json")).code, 0);
  const std::string arc = kData + "/eval/arc/arc_easy.llmfoundry.jsonl";
  sh("gzip -c '" + arc + "' > arc.jsonl.gz && zstd -q -c '" + arc + "' > arc.jsonl.zst");
  nlohmann::json want;
  for (const std::string& data : {arc, p("arc.jsonl.gz"), p("arc.jsonl.zst")}) {
    Result r = run("eval --preset tiny --tokenizer " + p("tok.json") + " --task arc_easy --limit 6 --batch 8 --json --data " + data);
    ASSERT_EQ(r.code, 0) << r.out;
    nlohmann::json j = last_json(r.out);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    EXPECT_EQ(j["items"], 6);
    nlohmann::json acc = {j["acc"], j["acc_norm_token"], j["acc_norm_char"]};
    if (want.is_null()) want = acc;
    else EXPECT_EQ(acc, want) << data;
  }
}

TEST_F(CompressedInputCli, TruncatedAndCorruptFilesFailNamingFileAndOffsetWithNoOutput) {
  const std::string gz = slurp(p("gz/docs.jsonl.gz")), zst = slurp(p("zst/docs.jsonl.zst"));
  fs::create_directories(dir_ / "bad");
  write(dir_ / "bad/cut.jsonl.gz", std::string_view(gz).substr(0, gz.size() / 2));
  write(dir_ / "bad/cut.jsonl.zst", std::string_view(zst).substr(0, zst.size() / 3));
  std::string corrupt = gz;
  corrupt[gz.size() - 8] = static_cast<char>(corrupt[gz.size() - 8] ^ 1);  // the gzip trailer's CRC-32
  write(dir_ / "bad/corrupt.jsonl.gz", corrupt);
  // Bytes flipped mid-stream may still inflate (to garbage) until the CRC is checked at the end:
  // the garbage then fails as JSON first, naming file and line. Either way: exit 1, no output.
  std::string flipped = gz;
  for (size_t i = gz.size() / 2; i < gz.size() / 2 + 8; ++i) flipped[i] = static_cast<char>(flipped[i] ^ 0x33);
  write(dir_ / "bad/flipped.jsonl.gz", flipped);
  {
    Result r = run("data prepare --tokenizer " + kData + "/tokenizers/gpt2 --input " + p("bad/flipped.jsonl.gz") + " --out " + p("out_flipped"));
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find(p("bad/flipped.jsonl.gz")), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(p("out_flipped")));
  }
  std::string crc = zst;
  crc.back() = static_cast<char>(crc.back() ^ 1);  // zstd's content checksum
  write(dir_ / "bad/crc.jsonl.zst", crc);
  const std::string gpt2 = kData + "/tokenizers/gpt2";
  for (const std::string name : {"cut.jsonl.gz", "cut.jsonl.zst", "corrupt.jsonl.gz", "crc.jsonl.zst"}) {
    const std::string in = p("bad/" + name);
    const std::map<std::string, std::string> cmds = {
        {"prepare", "data prepare --tokenizer " + gpt2 + " --input " + in + " --out " + p("out_prepare")},
        {"tokenizer", "tokenizer train --input " + in + " --vocab-size 300 --out " + p("out_tok.json")},
        {"clean", "data clean --input " + in + " --out " + p("out_clean") + " --workers 2"}};
    for (const auto& [what, cmd] : cmds) {
      Result r = run(cmd);
      EXPECT_EQ(r.code, 1) << what << " " << name << ": " << r.out;
      EXPECT_NE(r.out.find(in), std::string::npos) << what << " " << name << ": " << r.out;
      EXPECT_NE(r.out.find("compressed byte "), std::string::npos) << what << " " << name << ": " << r.out;
      EXPECT_NE(r.out.find(name.starts_with("cut") ? "truncated" : "corrupt"), std::string::npos) << r.out;
    }
    EXPECT_FALSE(fs::exists(p("out_prepare"))) << name;
    EXPECT_FALSE(fs::exists(p("out_tok.json"))) << name;
    EXPECT_FALSE(fs::exists(p("out_clean"))) << name;
  }
}

TEST_F(CompressedInputCli, Bzip2IsRefusedWithItsCommand) {
  sh("bzip2 -c plain/docs.jsonl > docs.jsonl.bz2");
  const std::string in = p("docs.jsonl.bz2");
  for (const std::string& cmd : {"data prepare --tokenizer " + kData + "/tokenizers/gpt2 --input " + in + " --out " + p("o1"),
                                "tokenizer train --input " + in + " --vocab-size 300 --out " + p("o2.json"),
                                "data clean --input " + in + " --out " + p("o3")}) {
    Result r = run(cmd);
    EXPECT_EQ(r.code, 1) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find(in + ": bzip2-compressed input is not read"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("bzip2 -dk " + in), std::string::npos) << r.out;
  }
  EXPECT_FALSE(fs::exists(p("o1")) || fs::exists(p("o2.json")) || fs::exists(p("o3")));
}

}  // namespace
