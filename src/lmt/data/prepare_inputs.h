// Input documents for `lmtrain data prepare`: resolves files and directories and reads whole
// documents from them in a fixed order.
//
// Rules (the same as the tokenizer trainer's CorpusReader, so both see the same text): a path is a
// file or a directory, walked recursively with files in byte order of their paths and names
// starting with '.' skipped. In a directory holding clean_report.json (an output of `lmtrain data
// clean`) only its shard_*.jsonl files are read, not the report or the removed-document samples. A *.jsonl / *.ndjson file holds one JSON object per line whose string
// field `text_field` is one document (blank lines skipped); any other file is one document of raw
// bytes. A file may be gzip- or zstd-compressed (told by its first bytes; io/input_stream.h): it
// reads as its decompressed content, and "a.jsonl.gz" / "a.jsonl.zst" count as JSONL. bzip2, xz
// and zip are refused (io::open_input's message). Empty documents are returned too (the caller
// decides to skip them).
//
// Memory: a plain JSONL file is memory-mapped and parsed line by line, a compressed one streamed
// line by line (io::LineReader); a text document is read whole (one document = one file).
// Progress (Document::input_bytes) counts bytes of the files as stored, compressed or not.
// One thread at a time; movable.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/io/input_stream.h"
#include "lmt/io/mapped_file.h"

namespace lmt::data {

struct InputFile {
  std::string path;
  bool jsonl = false;
  uint64_t bytes = 0;  // size of the file as stored (compressed or not)
  io::InputFormat format = io::InputFormat::kPlain;
};

// Errors: kNotFound (a path that does not exist), kInvalidArgument (a bzip2/xz/zip file; a
// directory without files; no inputs), kDataLoss (named .gz/.zst but not compressed), kIoError.
StatusOr<std::vector<InputFile>> list_input_files(const std::vector<std::string>& paths);

struct Document {
  std::string text;
  int file = 0;             // index into the input files
  int64_t line = 0;         // 1-based JSONL line; 0 for a plain-text file
  uint64_t input_bytes = 0; // bytes of the input file this document accounts for (progress)
  std::string record;       // the JSONL line as read (no newline), when keep_records(); else empty
};

class DocumentReader {
 public:
  DocumentReader(std::vector<InputFile> files, std::string text_field)
      : files_(std::move(files)), text_field_(std::move(text_field)) {}

  // Replaces *doc with the next document; false at the end of the input. Errors name the file and
  // line (kInvalidArgument: a line that is not a JSON object or lacks the string field; kDataLoss:
// a truncated or corrupt compressed file, naming the offsets).
  StatusOr<bool> next(Document* doc);

  const std::vector<InputFile>& files() const { return files_; }
  // Also return each JSONL document's whole line in Document::record (`data clean` copies the
  // record's other fields as they are). Off by default.
  void set_keep_records(bool keep) { keep_records_ = keep; }
  // "path:line" (or "path") of a document, for messages.
  std::string where(const Document& doc) const;

 private:
  Status parse_line(const std::string& path, std::string_view line, Document* doc);

  std::vector<InputFile> files_;
  std::string text_field_;
  size_t file_index_ = 0;      // the file being read
  bool file_open_ = false;
  io::MappedFile map_;         // the current JSONL file, when plain
  std::unique_ptr<io::LineReader> lines_;  // the current JSONL file, when compressed
  uint64_t offset_ = 0;        // next byte of it
  int64_t line_ = 0;
  bool keep_records_ = false;
};

}  // namespace lmt::data
