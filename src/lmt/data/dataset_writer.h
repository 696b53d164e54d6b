// DatasetWriter: builds a prepared dataset directory (shards + manifest.json) from documents given as
// token ids, and makes it appear atomically.
//
// Everything is written into a fresh sibling directory `<parent>/.<name>.tmp-XXXXXX`; commit()
// fsyncs it and renames it to `dir` in one step (io/atomic_dir.h, staging kHidden), so `dir` is
// either absent/empty or complete. An existing non-empty `dir` is refused up front and never touched.
// If commit() is not reached (error, crash of the caller's logic), the destructor removes the
// temporary directory; a killed process leaves only that dot-directory behind.
//
// Each split is a stream of documents, each followed by EOS, cut into shards of exactly
// `shard_tokens` tokens (the last one shorter): a document may continue into the next shard.
// Used by `prepare` and by tests that need datasets of known content. One thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "lmt/base/status.h"
#include "lmt/data/manifest.h"
#include "lmt/data/shard.h"
#include "lmt/io/atomic_dir.h"

namespace lmt::data {

enum class Split { kTrain = 0, kVal = 1 };
const char* split_name(Split split);

struct DatasetSpec {
  std::string tokenizer_path;         // recorded in the manifest
  std::string tokenizer_fingerprint;  // recorded in the manifest; a mixture requires equal ones
  int64_t vocab_size = 0;
  int32_t eos_id = 0;
  int64_t shard_tokens = 100'000'000;  // tokens per shard file (the last of a split may hold fewer)
};

class DatasetWriter {
 public:
  // Errors: kInvalidArgument (bad spec; `dir` exists and is not an empty directory), kIoError.
  static StatusOr<std::unique_ptr<DatasetWriter>> create(const std::string& dir, const DatasetSpec& spec);
  ~DatasetWriter();  // removes the temporary directory unless committed

  DatasetWriter(const DatasetWriter&) = delete;
  DatasetWriter& operator=(const DatasetWriter&) = delete;

  // Appends one document's ids (EOS is appended here). kInvalidArgument if an id is outside
  // [0, vocab_size) or equals the EOS id (which must only end documents), naming the index; nothing
  // is written then. An empty document becomes a lone EOS (prepare skips empty texts instead).
  Status add_document(Split split, std::span<const int32_t> ids);
  const SplitInfo& split_info(Split split) const { return splits_[static_cast<int>(split)].info; }

  // Finishes the shards, writes manifest.json with `preparation` in it, fsyncs, renames into place.
  StatusOr<Manifest> commit(const nlohmann::json& preparation);

  const std::string& dir() const { return out_.path(); }
  const std::string& tmp_dir() const { return out_.tmp_path(); }

 private:
  struct SplitState {
    SplitInfo info;
    std::optional<ShardWriter> shard;
  };

  DatasetWriter(io::AtomicDirectory out, const DatasetSpec& spec) : out_(std::move(out)), spec_(spec) {}
  // Opens the next shard of `s` when none is open or the open one is full.
  Status ensure_room(Split split);
  Status append(Split split, std::span<const int32_t> ids);
  Status close_shard(Split split);

  io::AtomicDirectory out_;  // declared before splits_: open shards close before it removes the staging
  DatasetSpec spec_;
  SplitState splits_[2];
};

}  // namespace lmt::data
