#include "lmt/data/tokenizer/corpus_reader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "lmt/io/input_stream.h"

namespace lmt::data {
namespace fs = std::filesystem;
namespace {

bool is_hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// The byte at `c` starts a UTF-8 character (is not a continuation byte).
bool starts_char(std::string_view text, size_t c) { return (static_cast<unsigned char>(text[c]) & 0xC0) != 0x80; }

Status add_directory(const std::string& dir, std::vector<std::string>* files) {
  std::vector<std::string> found;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (is_hidden(it->path())) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(ec)) found.push_back(it->path().string());
  }
  if (ec) return IoError(dir + ": cannot list directory: " + ec.message(), "check that it is readable");
  if (found.empty())
    return InvalidArgument(dir + ": directory holds no input files", "--input takes text/JSONL files or directories of them");
  std::sort(found.begin(), found.end());
  files->insert(files->end(), found.begin(), found.end());
  return Status::Ok();
}

}  // namespace

size_t find_document_cut(std::string_view text, size_t n) {
  auto at = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  auto is_letter = [](unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; };
  // Printable and not '/': o200k's punctuation rule ` ?[^\s\p{L}\p{N}]+[\r\n/]*` takes a '/' that
  // follows newlines into the piece before them.
  auto starts_piece = [](unsigned char c) { return c >= 0x21 && c <= 0x7E && c != '/'; };
  if (text.size() < 3) return 0;
  for (size_t c = std::min(n, text.size() - 2); c >= 1; --c) {
    const unsigned char prev = at(c - 1), cur = at(c), next = at(c + 1);
    if (prev == '\n' && (starts_piece(cur) || (cur == ' ' && starts_piece(next)))) return c;
    if (cur == ' ' && is_letter(prev) && is_letter(next)) return c;
  }
  return 0;
}

size_t cut_outside_specials(std::string_view text, size_t cut, const std::vector<std::string>& specials) {
  // Each move goes left to the start of an occurrence, except from 0; a few rounds settle it.
  for (size_t round = 0; round <= specials.size(); ++round) {
    bool moved = false;
    for (const std::string& s : specials) {
      if (s.size() < 2 || cut == 0 || cut >= text.size()) continue;
      // Occurrences that start in [cut - len + 1, cut) straddle the cut.
      const size_t from = cut >= s.size() - 1 ? cut - (s.size() - 1) : 0;
      const std::string_view window = text.substr(from, std::min(text.size(), cut + s.size() - 1) - from);
      const size_t at = window.find(s);
      if (at == std::string_view::npos) continue;
      const size_t start = from + at;
      cut = start > 0 ? start : s.size();
      moved = true;
    }
    if (!moved) break;
  }
  return cut;
}

StatusOr<CorpusReader> CorpusReader::open(CorpusOptions options) {
  LMT_CHECK_GE(options.block_bytes, size_t{2});
  if (options.paths.empty()) return InvalidArgument("no training input given", "pass --input FILE_OR_DIR...");
  if (options.text_field.empty()) return InvalidArgument("the JSONL text field name is empty", "pass --text-field NAME");
  CorpusReader reader(std::move(options));
  for (const std::string& s : reader.options_.special_tokens) reader.lookahead_ = std::max(reader.lookahead_, s.size());
  for (const std::string& path : reader.options_.paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st))
      return NotFound(path + ": no such file or directory", "--input takes text/JSONL files and directories");
    if (fs::is_directory(st)) {
      LMT_RETURN_IF_ERROR(add_directory(path, &reader.files_));
    } else if (fs::is_regular_file(st)) {
      reader.files_.push_back(path);
    } else {
      return InvalidArgument(path + ": not a regular file or a directory", "--input takes text/JSONL files and directories");
    }
  }
  for (const std::string& file : reader.files_) {
    // Plain, gzip or zstd by the first bytes; bzip2/xz/zip are refused there, with their command.
    LMT_RETURN_IF_ERROR(io::detect_input_format(file).status());
    std::error_code ec;
    const uintmax_t size = fs::file_size(file, ec);
    if (ec) return IoError(file + ": cannot get its size: " + ec.message());
    reader.total_bytes_ += size;
  }
  return reader;
}

Status CorpusReader::open_next_file() {
  path_ = files_[file_index_++];
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<io::InputStream> in, io::open_input(path_));
  jsonl_ = io::is_jsonl_name(path_);
  if (jsonl_) {
    lines_ = std::make_unique<io::LineReader>(std::move(in));
  } else {
    in_ = std::move(in);
  }
  stream_offset_ = 0;
  line_ = 0;
  return Status::Ok();
}

Status CorpusReader::read_plain_bytes(size_t n) {
  if (pending_pos_ > 0) {  // keep only the unconsumed tail
    pending_.erase(0, pending_pos_);
    pending_pos_ = 0;
  }
  const size_t old = pending_.size();
  pending_.resize(old + n);
  auto got_or = in_->read(pending_.data() + old, n);
  if (!got_or.ok()) {
    pending_.resize(old);
    return got_or.status();
  }
  const size_t got = *got_or;
  pending_.resize(old + got);
  bytes_read_ += in_->compressed_offset() - stream_offset_;  // bytes of the file as stored
  stream_offset_ = in_->compressed_offset();
  if (got < n) {  // end of file: the document is complete
    pending_complete_ = true;
    in_.reset();
  }
  return Status::Ok();
}

StatusOr<bool> CorpusReader::read_jsonl_document() {
  const std::string& field = options_.text_field;
  for (std::string_view line;;) {
    LMT_ASSIGN_OR_RETURN(bool more, lines_->next(&line));
    bytes_read_ += lines_->stream().compressed_offset() - stream_offset_;  // bytes of the file as stored
    stream_offset_ = lines_->stream().compressed_offset();
    if (!more) break;
    ++line_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    const std::string where = path_ + ":" + std::to_string(line_);
    nlohmann::json doc = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded())
      return InvalidArgument(where + ": not valid JSON (or not UTF-8)",
                             "each line of a .jsonl file must be one JSON object such as {\"" + field + "\": \"...\"}");
    if (!doc.is_object())
      return InvalidArgument(where + ": a JSON " + std::string(doc.type_name()) + ", not an object",
                             "each line of a .jsonl file must be one JSON object such as {\"" + field + "\": \"...\"}");
    auto it = doc.find(field);
    if (it == doc.end()) {
      std::string fields;
      for (auto f = doc.begin(); f != doc.end(); ++f) fields += (fields.empty() ? "" : ", ") + f.key();
      return InvalidArgument(where + ": no field \"" + field + "\" (this line has: " + (fields.empty() ? "none" : fields) + ")",
                             "--text-field NAME selects the field that holds the document text");
    }
    if (!it->is_string())
      return InvalidArgument(where + ": field \"" + field + "\" is a " + it->type_name() + ", not a string",
                             "--text-field NAME selects the field that holds the document text");
    pending_ = std::move(it->get_ref<std::string&>());
    pending_pos_ = 0;
    pending_complete_ = true;
    ++documents_;
    return true;
  }
  return false;
}

StatusOr<bool> CorpusReader::refill() {
  for (;;) {
    if (lines_ != nullptr) {
      LMT_ASSIGN_OR_RETURN(bool got, read_jsonl_document());
      if (got) return true;
      lines_.reset();
    }
    if (file_index_ == files_.size()) return false;
    LMT_RETURN_IF_ERROR(open_next_file());
    if (!jsonl_) {  // the whole file is one document, read as the blocks need it
      pending_.clear();
      pending_pos_ = 0;
      pending_complete_ = false;
      ++documents_;
      return true;
    }
  }
}

StatusOr<bool> CorpusReader::next(TextBlock* block) {
  block->clear();
  const size_t cap = options_.block_bytes;
  auto take = [&](size_t n) {
    block->text.append(pending_, pending_pos_, n);
    block->segment_ends.push_back(block->text.size());
    pending_pos_ += n;
  };
  while (block->text.size() < cap) {
    if (pending_pos_ == pending_.size() && pending_complete_) {
      LMT_ASSIGN_OR_RETURN(bool more, refill());
      if (!more) break;
      continue;
    }
    const size_t room = cap - block->text.size();
    // A cut at `room` must see what follows it: the next character, and a special token that
    // might straddle it.
    if (!pending_complete_ && pending_.size() - pending_pos_ < room + lookahead_) {
      LMT_RETURN_IF_ERROR(read_plain_bytes(std::max(cap, lookahead_)));
      continue;
    }
    if (pending_.size() - pending_pos_ <= room) {
      take(pending_.size() - pending_pos_);  // the rest of the document fits
      continue;
    }
    // The document runs past this block: cut it where the pieces stay exact.
    size_t cut = find_document_cut(std::string_view(pending_).substr(pending_pos_), room);
    if (cut == 0) {
      if (!block->text.empty()) break;  // the next block has a whole block of room to look in
      const size_t far = 8 * cap;
      while (!pending_complete_ && pending_.size() - pending_pos_ < far + lookahead_)
        LMT_RETURN_IF_ERROR(read_plain_bytes(std::max(cap, lookahead_)));
      const std::string_view rest = std::string_view(pending_).substr(pending_pos_);
      if (rest.size() <= far) {
        cut = rest.size();
      } else {
        cut = find_document_cut(rest, far);
        if (cut == 0) {
          cut = far;
          while (cut > 1 && !starts_char(rest, cut)) --cut;
        }
      }
    }
    take(cut_outside_specials(std::string_view(pending_).substr(pending_pos_), cut, options_.special_tokens));
    break;
  }
  return !block->text.empty();
}

}  // namespace lmt::data
