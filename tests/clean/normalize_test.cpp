// Normalisation, clean.toml parsing and decontamination against the real eval files.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "common/shared_data.h"
#include "lmt/clean/decontaminate.h"
#include "lmt/clean/normalize.h"
#include "lmt/clean/options.h"

namespace lmt::clean {
namespace {

TEST(Normalize, EachStep) {
  NormalizeOptions all;
  // NFC: e + combining acute -> U+00E9; CRLF -> LF; trailing blanks, runs of spaces, blank-line runs.
  EXPECT_EQ(normalize_text("  Caf\x65\xcc\x81  au\t\tlait  \r\n\r\n\r\n\r\nnext\x01 line\xc2\x85 \n", all),
            "Caf\xc3\xa9 au lait\n\nnext line");
  NormalizeOptions none{false, false, false};
  const std::string raw = "Caf\x65\xcc\x81\r\n\x01";
  EXPECT_EQ(normalize_text(raw, none), raw);
  NormalizeOptions nfc_only{true, false, false};
  EXPECT_EQ(normalize_text(raw, nfc_only), "Caf\xc3\xa9\r\n\x01");
  NormalizeOptions ctrl_only{false, false, true};
  EXPECT_EQ(normalize_text(raw, ctrl_only), "Caf\x65\xcc\x81\r\n");
  EXPECT_EQ(normalize_text("a\n\nb\nc", all), "a\n\nb\nc");
}

TEST(Options, TomlKeysTypesAndErrors) {
  auto o = parse_clean_options("[gopher_quality]\nmin_doc_words = 10\n[c4]\nenabled = false\n[minhash]\nthreshold = 0.7\n", "t.toml");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->gopher_quality.min_doc_words, 10);
  EXPECT_FALSE(o->c4.enabled);
  EXPECT_DOUBLE_EQ(o->minhash.threshold, 0.7);
  auto bad = parse_clean_options("[gopher_quality]\nmin_doc_word = 10\n", "t.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("t.toml: unknown key 'gopher_quality.min_doc_word'"), std::string::npos);
  EXPECT_NE(bad.status().hint().find("gopher_quality.min_doc_words"), std::string::npos);
  auto type = parse_clean_options("[c4]\nenabled = 3\n", "t.toml");
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.status().message().find("'c4.enabled' must be a bool"), std::string::npos);
  EXPECT_FALSE(parse_clean_options("[c4\n", "t.toml").ok());
  EXPECT_FALSE(parse_clean_options("[decontaminate]\naction = \"delete\"\n", "t.toml").ok());
  // Every documented key parses with its documented default.
  std::string all;
  std::string section;
  for (const auto& k : clean_keys()) {
    const std::string s = k.key.substr(0, k.key.find('.'));
    if (s != section) { all += "[" + s + "]\n"; section = s; }
    all += k.key.substr(k.key.find('.') + 1) + " = " + k.default_value + "\n";
  }
  auto round = parse_clean_options(all, "defaults.toml");
  ASSERT_TRUE(round.ok()) << round.status().ToString() << "\n" << all;
  EXPECT_EQ(options_fingerprint(*round), options_fingerprint(CleanOptions{}));
}

const std::string kEval = std::string(LMT_SHARED_DATA) + "/eval";

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

TEST(Decontaminate, FindsRealEvalItems) {
  LMT_SKIP_WITHOUT_SHARED("eval/arc/arc_easy.llmfoundry.jsonl");
  // ARC-Easy (llm-foundry format) line 1: "Which statement best explains why photosynthesis is the
  // foundation of most food webs?" (15 words) with its choices.
  auto idx = ContaminationIndex::build({kEval + "/arc/arc_easy.llmfoundry.jsonl", kEval + "/hellaswag/hellaswag_val.llamacpp.jsonl"}, 13);
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  ASSERT_EQ(idx->files().size(), 2u);
  EXPECT_EQ(idx->files()[0].task, "arc_easy");
  EXPECT_EQ(idx->files()[1].task, "hellaswag");
  EXPECT_GT(idx->files()[0].items, 2000);
  const std::string doc = "Teachers often ask: which statement BEST explains why photosynthesis is the foundation of most "
                          "food-webs? The answer is sunlight.";
  auto hit = idx->find(doc);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->file, 0);
  EXPECT_EQ(hit->line, 1);
  // 12 of the 13 words are not enough.
  EXPECT_FALSE(idx->find("statement best explains why photosynthesis is the foundation of most food webs").has_value());
  // HellaSwag line 1: "Roof shingle removal: A man is sitting on a roof. he starts pulling up roofing on a roof."
  auto h = idx->find("roof shingle removal a man is sitting on a roof he starts pulling up roofing");
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->file, 1);
  EXPECT_EQ(h->line, 1);
  EXPECT_FALSE(idx->find("A perfectly ordinary document about gardening, flowers and trees in the spring time of year.").has_value());
}

TEST(Decontaminate, TaskFromContentAndErrors) {
  LMT_SKIP_WITHOUT_SHARED("eval/openbookqa/test.jsonl");
  // The folder names the task.
  auto idx = ContaminationIndex::build({kEval + "/openbookqa/test.jsonl"}, 8);
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  EXPECT_EQ(idx->files()[0].task, "openbookqa");
  auto explicit_task = ContaminationIndex::build({"piqa=" + kEval + "/piqa/valid.jsonl"}, 13);
  ASSERT_TRUE(explicit_task.ok()) << explicit_task.status().ToString();
  EXPECT_EQ(explicit_task->files()[0].task, "piqa");
  EXPECT_EQ(ContaminationIndex::build({kEval + "/nope.jsonl"}, 13).status().code(), StatusCode::kNotFound);
  (void)first_line;
}

}  // namespace
}  // namespace lmt::clean

namespace lmt::clean {
namespace {

// docs/DATA_CLEAN.md lists every key of clean.toml with its default, as a table row
// "| `section.key` | default | doc |"; a key added without its row fails here (the message is the row).
TEST(Options, DocumentedInDataCleanMd) {
  std::ifstream in(std::string(LMT_SOURCE_DIR) + "/docs/DATA_CLEAN.md");
  ASSERT_TRUE(in.good());
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& k : clean_keys()) {
    const std::string row = "| `" + k.key + "` | `" + k.default_value + "` | " + k.type + " | " + k.doc + " |";
    EXPECT_NE(doc.find(row), std::string::npos) << row;
  }
}

}  // namespace
}  // namespace lmt::clean
