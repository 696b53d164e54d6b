// Helpers for the data tests: scratch directories, datasets of known token content built without a
// tokenizer, a byte-level test tokenizer, and whole-file byte access for corruption tests.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "common/files.h"
#include "lmt/base/rng.h"
#include "lmt/data/dataset_writer.h"
#include "lmt/data/tokenizer/tokenizer.h"

namespace lmt::data::testing {

using lmt::test::read_bytes;
using lmt::test::ScratchDirTest;
using lmt::test::write_bytes;

using Docs = std::vector<std::vector<int32_t>>;

// Writes `train` (and `val`) documents to a new dataset directory; fails the test on error.
inline void write_dataset(const std::string& dir, const Docs& train, int64_t vocab, int32_t eos,
                          int64_t shard_tokens = 1000, const Docs& val = {}, const std::string& fingerprint = "test") {
  DatasetSpec spec;
  spec.tokenizer_path = "synthetic";
  spec.tokenizer_fingerprint = fingerprint;
  spec.vocab_size = vocab;
  spec.eos_id = eos;
  spec.shard_tokens = shard_tokens;
  auto w = DatasetWriter::create(dir, spec);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (const auto& d : train) ASSERT_TRUE((*w)->add_document(Split::kTrain, d).ok());
  for (const auto& d : val) ASSERT_TRUE((*w)->add_document(Split::kVal, d).ok());
  auto m = (*w)->commit(nlohmann::json::object());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
}

// Documents of random lengths in [min_len, max_len] whose tokens are all distinct, counting up
// from `first_id` (so a token id identifies its place in the stream); EOS must be outside.
inline Docs unique_token_docs(int n_docs, int min_len, int max_len, uint64_t seed, int32_t first_id = 1) {
  Rng rng(seed);
  Docs docs;
  int32_t next = first_id;
  for (int d = 0; d < n_docs; ++d) {
    const int len = min_len + static_cast<int>(rng.below(static_cast<uint64_t>(max_len - min_len + 1)));
    std::vector<int32_t> doc(static_cast<size_t>(len));
    for (auto& t : doc) t = next++;
    docs.push_back(std::move(doc));
  }
  return docs;
}

// The split's token stream: every document followed by EOS.
inline std::vector<int32_t> stream_of(const Docs& docs, int32_t eos) {
  std::vector<int32_t> s;
  for (const auto& d : docs) {
    s.insert(s.end(), d.begin(), d.end());
    s.push_back(eos);
  }
  return s;
}

// ids = bytes, EOS = 256: enough to test preparation without a real tokenizer.
class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (int32_t id : ids) s += id == 256 ? std::string("<eos>") : std::string(1, static_cast<char>(id));
    return s;
  }
  int64_t vocab_size() const override { return 257; }
  std::optional<int32_t> token_id(std::string_view token) const override {
    if (token == "<eos>") return 256;
    if (token.size() == 1) return static_cast<unsigned char>(token[0]);
    return std::nullopt;
  }
  std::optional<int32_t> eos_id() const override { return 256; }
  std::string fingerprint() const override { return "byte-tokenizer-v1"; }
};

}  // namespace lmt::data::testing
