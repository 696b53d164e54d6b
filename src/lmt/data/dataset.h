// Dataset: one split ("train" or "val") of a prepared dataset directory, read as a single token
// stream: the concatenation of its shards, memory-mapped, every document followed by EOS.
//
// open() reads manifest.json, maps every shard of the split and checks that the shards agree with
// the manifest and with each other (vocabulary, EOS, counts, checksums in the headers; a document
// that continues into the next shard; the stream ending with EOS). Verify::kFull additionally
// hashes every byte and range-checks every id (see shard.h). Every error names the file.
//
// Immutable after open(); read() may be called from any number of threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/data/manifest.h"
#include "lmt/data/shard.h"

namespace lmt::data {

class Dataset {
 public:
  // Errors: kNotFound (no directory / manifest / shard), kInvalidArgument (split other than train or
  // val), kFailedPrecondition (the split holds no tokens), kDataLoss (any inconsistency).
  static StatusOr<std::unique_ptr<Dataset>> open(const std::string& dir, const std::string& split, Verify verify);

  const std::string& dir() const { return dir_; }
  const std::string& split() const { return split_; }
  const Manifest& manifest() const { return manifest_; }
  int64_t token_count() const { return starts_.back(); }
  int64_t document_count() const;
  int64_t vocab_size() const { return manifest_.vocab_size; }
  int32_t eos_id() const { return manifest_.eos_id; }
  // Identifies the split's content (a hash of its shard checksums), wherever the directory lives.
  uint64_t content_id() const { return content_id_; }
  const std::vector<ShardReader>& shards() const { return shards_; }

  // Copies ids [start, start + n) of the stream into out[0, n) (range checked; may span shards).
  void read(int64_t start, int64_t n, int32_t* out) const;
  // The shard holding stream offset `offset` and the offset within that shard.
  std::pair<const ShardReader*, int64_t> locate(int64_t offset) const;

 private:
  Dataset() = default;

  std::string dir_, split_;
  Manifest manifest_;
  std::vector<ShardReader> shards_;
  std::vector<int64_t> starts_;  // stream offset of each shard's first token; back() = total tokens
  uint64_t content_id_ = 0;
};

}  // namespace lmt::data
