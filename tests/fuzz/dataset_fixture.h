// A small prepared dataset directory for the data fuzz targets (dataset_manifest_fuzz,
// loader_cursor_fuzz): real shards written by ShardWriter and the manifest that describes them.
#pragma once

#include <string>
#include <vector>

#include "fuzz_util.h"
#include "lmt/data/manifest.h"
#include "lmt/data/shard.h"

namespace lmt::fuzz {

// Writes the shards of `dir` (created) and returns the matching manifest (not written).
// train: two shards, the second continuing a document of the first; val: one shard.
inline data::Manifest write_dataset_shards(const std::string& dir) {
  constexpr int64_t kVocab = 300;
  constexpr int32_t kEos = 0;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  data::Manifest m;
  m.tokenizer_path = "tokenizer.json";
  m.tokenizer_fingerprint = "0123456789abcdef";
  m.vocab_size = kVocab;
  m.eos_id = kEos;
  m.token_bytes = 2;
  m.shard_tokens = 64;
  struct Part {
    data::SplitInfo* split;
    const char* file;
    std::vector<std::vector<int32_t>> docs;
    bool continued;
  };
  std::vector<int32_t> long_doc;
  for (int i = 0; i < 40; ++i) long_doc.push_back(1 + (i * 37) % (kVocab - 1));
  const std::vector<Part> parts = {
      {&m.train, "train_00000.bin", {{5, 6, 7, kEos}, {8, 9, 10, 11, 12, kEos}, long_doc}, false},
      {&m.train, "train_00001.bin", {{13, 14, kEos}, {15, 16, 17, 18, 19, 20, 21, 22, kEos}, {299, kEos}}, true},
      {&m.val, "val_00000.bin", {{30, 31, 32, kEos}, {33, 34, 35, 36, 37, kEos}}, false},
  };
  for (const Part& p : parts) {
    auto w = data::ShardWriter::create(dir + "/" + p.file, {kVocab, kEos});
    if (!w.ok()) fail("fixture shard: " + w.status().ToString());
    int64_t docs = 0;
    for (size_t d = 0; d < p.docs.size(); ++d) {
      if (d > 0 || !p.continued) {
        w->start_document();
        ++docs;
      }
      if (!w->append(p.docs[d]).ok()) fail("fixture shard append");
    }
    auto s = w->finish();
    if (!s.ok()) fail("fixture shard finish");
    p.split->shards.push_back({p.file, s->tokens, docs, s->checksum});
    p.split->tokens += s->tokens;
    p.split->documents += docs;
  }
  m.preparation = {{"sources", nlohmann::json::array({"corpus.txt"})}};
  return m;
}

}  // namespace lmt::fuzz
