// CorpusReader: streams training text out of files and directories in bounded blocks, so that
// tokenizer training never holds more than a few blocks of the input in memory.
//
// Inputs: a path is a file or a directory (walked recursively, files in byte order of their paths,
// names starting with '.' skipped). A *.jsonl / *.ndjson file holds one JSON object per line whose
// string field `text_field` is one document (blank lines are skipped); any other file is one
// document of raw bytes (any encoding; invalid UTF-8 is fine). gzip and zstd files (told by their
// first bytes, io/input_stream.h) read as their decompressed content, "a.jsonl.gz" / "a.jsonl.zst"
// as JSONL; bzip2, xz and zip are refused (io::open_input's message) rather than counted as bytes.
// total_bytes()/bytes_read() count the files as stored (compressed bytes for compressed files).
//
// Blocks: next() hands out about `block_bytes` of text at a time, made of segments. A segment is
// (part of) one document and is pre-tokenised on its own, so no piece ever spans two documents.
// A document longer than a block is cut only where the o200k and cl100k patterns always end a piece
// without looking past it, so the pieces are exactly those of the uncut document:
//   - after a '\n' followed by a printable ASCII character other than '/' (o200k's punctuation rule
//     takes a '/' after newlines), or by one space and such a character;
//   - before the space of "<ASCII letter> <ASCII letter>" (a word ends, " word" begins).
// Patterns whose whitespace rule looks ahead across a newline (GPT-2's `\s+(?!\S)` without a
// newline rule) may split the whitespace before a cut differently: a piece or two per cut. Text
// with no such point for 8 blocks running (no ASCII spaces or newlines) is cut at a UTF-8
// character boundary. A cut never splits a special token (CorpusOptions::special_tokens); one that
// would moves to the token's start, which is a boundary anyway. Memory: one JSONL line, plus up to 9 blocks of a plain-text file while
// looking for a cut.
//
// Errors (Status, naming file and line): a missing or unreadable path, a directory without files,
// a JSONL line that is not a JSON object, lacks the field, or whose field is not a string; a
// truncated or corrupt compressed file (kDataLoss, naming the compressed/uncompressed offsets).
//
// Threading: one thread at a time. Movable, not copyable.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/io/input_stream.h"

namespace lmt::data {

struct CorpusOptions {
  std::vector<std::string> paths;  // files and/or directories
  std::string text_field = "text";  // the document field of JSONL lines
  size_t block_bytes = size_t{1} << 20;
  // Cuts never fall inside an occurrence of one of these (they are pre-tokenisation boundaries
  // of their own, see piece_counter.h): a cut inside one moves to its start.
  std::vector<std::string> special_tokens;
};

// Text of one or more documents: segment i is text[segment_ends[i-1], segment_ends[i]).
struct TextBlock {
  std::string text;
  std::vector<size_t> segment_ends;  // ascending; the last one is text.size()

  std::string_view segment(size_t i) const {
    const size_t begin = i == 0 ? 0 : segment_ends[i - 1];
    return std::string_view(text).substr(begin, segment_ends[i] - begin);
  }
  void clear() {
    text.clear();
    segment_ends.clear();
  }
};

class CorpusReader {
 public:
  // Resolves `options.paths` to the list of input files and checks each one can be opened.
  static StatusOr<CorpusReader> open(CorpusOptions options);

  // Replaces *block with the next block of text. Returns false (and an empty block) at the end of
  // the input; an error names the file and line.
  StatusOr<bool> next(TextBlock* block);

  const std::vector<std::string>& files() const { return files_; }
  uint64_t total_bytes() const { return total_bytes_; }  // sum of the input files' sizes
  uint64_t bytes_read() const { return std::min(bytes_read_, total_bytes_); }  // consumed so far
  int64_t documents() const { return documents_; }       // started so far

 private:
  explicit CorpusReader(CorpusOptions options) : options_(std::move(options)) {}
  Status open_next_file();
  // Loads the next document (JSONL) or more of the current one (plain text) into pending_.
  // Returns false when the current file is exhausted.
  StatusOr<bool> refill();
  StatusOr<bool> read_jsonl_document();
  Status read_plain_bytes(size_t n);

  CorpusOptions options_;
  std::vector<std::string> files_;
  uint64_t total_bytes_ = 0;
  uint64_t bytes_read_ = 0;
  int64_t documents_ = 0;

  size_t file_index_ = 0;  // next file to open
  std::unique_ptr<io::InputStream> in_;   // the open plain-text file, if any (plain, .gz or .zst)
  std::unique_ptr<io::LineReader> lines_; // the open JSONL file, if any
  uint64_t stream_offset_ = 0;            // its compressed_offset() already added to bytes_read_
  std::string path_;                   // its name, for errors
  bool jsonl_ = false;
  int64_t line_ = 0;  // last JSONL line read (1-based)

  // The current document's text not yet handed out: pending_[pending_pos_, ...).
  std::string pending_;
  size_t pending_pos_ = 0;
  bool pending_complete_ = true;  // pending_ holds the rest of its document (nothing more to read)
  size_t lookahead_ = 2;  // bytes past a cut that must be loaded to judge it (>= longest special)
};

// Where a text longer than a block may be cut (see the header comment): the largest c in [1, n]
// with c + 1 < text.size() that is such a point; 0 if none.
size_t find_document_cut(std::string_view text, size_t n);

// `cut` (in (0, text.size())) moved off any occurrence of a special token that straddles it: to the
// occurrence's start, or past its end when it starts the text. Overlapping specials are not
// resolved the way the leftmost-first search of piece_counter.h would; that needs specials that
// overlap each other and a cut inside both.
size_t cut_outside_specials(std::string_view text, size_t cut, const std::vector<std::string>& specials);

}  // namespace lmt::data
