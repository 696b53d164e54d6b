// Reading the texts that `lmtrain tokenizer encode` and `lmtrain bench tokenizer` work on.
//
// A JSONL file (*.jsonl / *.ndjson, or any file whose first non-blank line is a JSON object with a
// string `text` field) holds one document per line in its `text` field; blank lines are skipped.
// Any other file is raw bytes (invalid UTF-8 is fine). gzip/zstd files read as their content
// (io::read_whole_input; "a.jsonl.gz" is JSONL). Errors name the file and line. The whole
// (decompressed) file is read into memory. Thread-safe (no shared state).
#pragma once

#include <string>
#include <vector>

#include "lmt/base/status.h"

namespace lmt::cli {

// One text per line: the `text` field of each JSONL line, or each line of a plain file (without
// its '\n'; a final line without '\n' counts, an empty file has none).
StatusOr<std::vector<std::string>> read_text_lines(const std::string& path);

// One text per document: the `text` field of each JSONL line, or the whole plain file as one text.
StatusOr<std::vector<std::string>> read_documents(const std::string& path);

}  // namespace lmt::cli
