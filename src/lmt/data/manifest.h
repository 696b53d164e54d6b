// manifest.json: the description of a prepared dataset directory (docs/FORMATS.md has the schema).
//
// It names the tokenizer (path, fingerprint, vocabulary size, EOS id), the token width, and for each
// split ("train", "val") its shard files in stream order with their token/document counts and
// checksums. `preparation` keeps what `lmtrain data prepare` recorded about its inputs (sources with
// per-file counts, options); readers treat it as information only. Plain values; no threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmt/base/status.h"

namespace lmt::data {

inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr int kManifestVersion = 1;

struct ShardEntry {
  std::string file;  // relative to the dataset directory
  int64_t tokens = 0;
  int64_t documents = 0;  // documents that start in this shard
  uint64_t checksum = 0;  // the shard header's data_checksum
};

struct SplitInfo {
  int64_t documents = 0;
  int64_t tokens = 0;  // EOS included
  std::vector<ShardEntry> shards;
};

struct Manifest {
  std::string tokenizer_path;
  std::string tokenizer_fingerprint;
  int64_t vocab_size = 0;
  int32_t eos_id = 0;
  uint32_t token_bytes = 2;  // 2: uint16, 4: uint32
  int64_t shard_tokens = 0;
  SplitInfo train, val;
  nlohmann::json preparation = nlohmann::json::object();

  // "train" or "val"; nullptr for any other name.
  const SplitInfo* split(const std::string& name) const;
};

nlohmann::json manifest_to_json(const Manifest& manifest);
// Parses and checks `dir`/manifest.json. Errors name the file and the key: kNotFound (no manifest:
// not a prepared dataset), kDataLoss (unparsable, missing or ill-typed keys, counts that disagree).
StatusOr<Manifest> read_manifest(const std::string& dir);

}  // namespace lmt::data
