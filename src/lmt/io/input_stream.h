// The one way lmtrain opens a user's text or JSONL input: plain, gzip or zstd, decided by the
// file's first bytes (gzip 1f 8b, zstd 28 b5 2f fd), not by its name.
//
// - open_input(path) gives an InputStream of the file's (decompressed) bytes. Multi-member gzip
//   (`cat a.gz b.gz`) and multi-frame zstd (`cat a.zst b.zst`, skippable frames) read as the
//   concatenation of their contents, as `gzip -dc` / `zstd -dc` print them; zero bytes after the
//   last gzip member (tar padding) are ignored, as gzip does, other trailing bytes are an error.
// - bzip2, xz and zip (by magic bytes or by the .bz2/.xz/.zip suffix) are refused here, and only
//   here, with the command that decompresses them. A file named .gz/.zst whose bytes are not gzip/
//   zstd is refused too (kDataLoss): it is most likely damaged.
// - Errors name the file and both offsets: a truncated stream ("ends at compressed byte X, after Y
//   uncompressed bytes"), corrupt data and CRC/checksum mismatches (kDataLoss), I/O (kIoError).
//
// Plain files keep their fast paths: callers that memory-map (data prepare/clean) ask
// detect_input_format() first and map a kPlain file as before; only compressed files stream.
// Memory: a stream holds a 256 KiB input buffer plus the decoder's window (zstd: up to 128 MiB for
// frames written with --long; default levels use <= 8 MiB). One thread per stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "lmt/base/status.h"

namespace lmt::io {

enum class InputFormat { kPlain, kGzip, kZstd };

const char* input_format_name(InputFormat f);  // "plain", "gzip", "zstd"

// The format of `path` from its first bytes. Errors: kNotFound (no such file), kInvalidArgument
// (not a regular file; bzip2/xz/zip, with the command that decompresses it), kDataLoss (named
// .gz/.zst/.zstd but not in that format), kIoError.
StatusOr<InputFormat> detect_input_format(const std::string& path);

// `path` without a trailing .gz/.zst/.zstd ("a.jsonl.gz" -> "a.jsonl"): what the content is named,
// e.g. to tell JSONL from plain text by its suffix.
std::string strip_compression_suffix(const std::string& path);

// Whether `path` names a JSONL file (one JSON object per line): .jsonl or .ndjson, also with a
// trailing .gz/.zst/.zstd. Every reader of user text tells JSONL from plain text by this.
bool is_jsonl_name(const std::string& path);

class InputStream {
 public:
  virtual ~InputStream() = default;
  InputStream(const InputStream&) = delete;
  InputStream& operator=(const InputStream&) = delete;

  // Fills buf[0, n) with the next decompressed bytes; returns fewer than n only at the end of the
  // content (0: nothing left). Errors: kDataLoss (truncated/corrupt, naming file and offsets),
  // kIoError. After an error the stream must not be read again.
  virtual StatusOr<size_t> read(char* buf, size_t n) = 0;

  const std::string& path() const { return path_; }
  InputFormat format() const { return format_; }
  // Bytes of the file consumed so far (for progress: it reaches the file's size at the end).
  uint64_t compressed_offset() const { return compressed_offset_; }
  // Decompressed bytes returned so far.
  uint64_t uncompressed_offset() const { return uncompressed_offset_; }

 protected:
  InputStream(std::string path, InputFormat format) : path_(std::move(path)), format_(format) {}
  std::string path_;
  InputFormat format_;
  uint64_t compressed_offset_ = 0;
  uint64_t uncompressed_offset_ = 0;
};

// Opens `path` (errors as detect_input_format).
StatusOr<std::unique_ptr<InputStream>> open_input(const std::string& path);

// The whole decompressed content of `path`, for small inputs (eval task files, tokenizer encode).
StatusOr<std::string> read_whole_input(const std::string& path);

// Splits a stream into lines. A line is returned without its '\n' (a '\r' before it is kept); a
// last line without '\n' is returned too; a file ending in '\n' has no empty line after it.
class LineReader {
 public:
  explicit LineReader(std::unique_ptr<InputStream> in, size_t chunk_bytes = size_t{1} << 20);

  // Sets *line to the next line, valid until the next call; false at the end.
  StatusOr<bool> next(std::string_view* line);
  // Whether the line last returned ended in '\n'.
  bool had_newline() const { return had_newline_; }
  int64_t line_number() const { return line_number_; }  // 1-based number of the last line returned
  const InputStream& stream() const { return *in_; }

 private:
  std::unique_ptr<InputStream> in_;
  size_t chunk_;
  std::string buf_;      // buf_[pos_, buf_.size()) is read but not yet returned
  size_t pos_ = 0;
  size_t scanned_ = 0;   // buf_[pos_, scanned_) holds no '\n'
  bool eof_ = false;
  bool had_newline_ = false;
  int64_t line_number_ = 0;
};

}  // namespace lmt::io
