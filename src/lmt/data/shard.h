// Token shards: one file holds a run of token ids plus the offsets where documents start in it.
// The byte layout (little-endian, version 1) is specified in docs/FORMATS.md:
//
//   [0, 64)          ShardHeader (magic "LMTSHARD", version, token width, vocab, counts, eos, checksums)
//   [64, 64 + n·w)   token_count ids, w = 2 (uint16, when vocab_size <= 65536) or 4 (uint32) bytes each
//   zero padding     to the next multiple of 8
//   doc index        doc_count uint64: offsets (within this shard) of the tokens that start a document
//
// A dataset split is the concatenation of its shards; every document ends with the EOS id, and a
// document may continue from one shard into the next (the next shard then has no entry at 0).
//
// ShardWriter streams a shard to disk (never overwriting a file). ShardReader memory-maps one and
// validates it; every error names the file. Both are move-only. A ShardReader is immutable after
// open() and may be read from any number of threads; a ShardWriter is used by one thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/base/xxh64.h"
#include "lmt/io/mapped_file.h"

namespace lmt::data {

inline constexpr char kShardMagic[8] = {'L', 'M', 'T', 'S', 'H', 'A', 'R', 'D'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;

struct ShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;  // 2 or 4
  uint64_t vocab_size;   // every id is < vocab_size
  uint64_t token_count;
  uint64_t doc_count;    // entries of the doc index = documents that start in this shard
  uint32_t eos_id;       // ends every document; occurs nowhere else
  uint32_t reserved;     // 0
  uint64_t data_checksum;    // XXH64 (seed 0) of every byte after the header: tokens, padding, index
  uint64_t header_checksum;  // XXH64 (seed 0) of the 56 header bytes before this field
};
static_assert(sizeof(ShardHeader) == kShardHeaderBytes);

// The token width for a vocabulary: 2 bytes while every id fits uint16, else 4.
inline uint32_t token_bytes_for_vocab(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

// What every shard of a dataset shares.
struct ShardSpec {
  int64_t vocab_size = 0;
  int32_t eos_id = 0;
};

// What a finished shard holds (for the manifest).
struct ShardSummary {
  std::string path;
  int64_t tokens = 0;
  int64_t documents = 0;
  uint64_t checksum = 0;  // the header's data_checksum
};

class ShardWriter {
 public:
  // Creates `path` exclusively (an existing file is an error, never overwritten).
  // Errors: kInvalidArgument (bad spec), kIoError (exists, directory missing, permissions).
  static StatusOr<ShardWriter> create(const std::string& path, const ShardSpec& spec);

  ShardWriter(ShardWriter&& other) noexcept;
  ShardWriter& operator=(ShardWriter&&) = delete;
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  ~ShardWriter();  // an unfinished shard is closed and removed

  // The next appended token starts a document (recorded in the doc index).
  void start_document() { doc_starts_.push_back(static_cast<uint64_t>(tokens_)); }
  // Appends ids; the caller has checked them against the vocabulary (LMT_DCHECK here).
  Status append(std::span<const int32_t> ids);
  int64_t token_count() const { return tokens_; }

  // Writes the index and the header, fsyncs and closes. Call once.
  StatusOr<ShardSummary> finish();

 private:
  ShardWriter(std::string path, int fd, const ShardSpec& spec);
  Status write_bytes(const void* data, size_t size);  // buffered, feeding the checksum
  Status flush();

  std::string path_;
  int fd_ = -1;
  ShardSpec spec_;
  uint32_t token_bytes_ = 2;
  int64_t tokens_ = 0;
  std::vector<uint64_t> doc_starts_;
  std::vector<uint8_t> buffer_;
  Xxh64 checksum_;  // of everything after the header, fed as it is written
  bool finished_ = false;
};

enum class Verify {
  kHeader,  // magic, version, header checksum, exact file size, doc index order: O(documents)
  kFull,    // kHeader + data checksum + every id < vocab_size + EOS exactly before each document start
};

class ShardReader {
 public:
  // Errors: kNotFound (missing file), kDataLoss (anything malformed: the message names the file,
  // the field and the expected value; the hint says how to recover).
  static StatusOr<ShardReader> open(const std::string& path, Verify verify);

  const std::string& path() const { return file_.path(); }
  const ShardHeader& header() const { return header_; }
  int64_t token_count() const { return static_cast<int64_t>(header_.token_count); }
  int64_t vocab_size() const { return static_cast<int64_t>(header_.vocab_size); }
  int32_t eos_id() const { return static_cast<int32_t>(header_.eos_id); }
  uint32_t token_bytes() const { return header_.token_bytes; }
  // Offsets (within this shard) of the tokens that start a document, strictly increasing.
  std::span<const uint64_t> doc_starts() const { return {doc_starts_, static_cast<size_t>(header_.doc_count)}; }

  int32_t token(int64_t i) const;
  // Copies ids [start, start + n) into out[0, n) as int32 (range checked).
  void read(int64_t start, int64_t n, int32_t* out) const;

 private:
  ShardReader() = default;
  Status validate(Verify verify);

  io::MappedFile file_;
  ShardHeader header_{};
  const uint8_t* tokens_ = nullptr;
  const uint64_t* doc_starts_ = nullptr;
};

}  // namespace lmt::data
