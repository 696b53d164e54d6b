#include "lmt/data/prepare_inputs.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

namespace lmt::data {
namespace fs = std::filesystem;
namespace {

// The format comes from the file's first bytes (io::open_input's rules: gzip and zstd are read,
// bzip2/xz/zip refused there with their command); JSONL-ness from the name without .gz/.zst.
Status add_file(const fs::path& p, std::vector<InputFile>* out) {
  const std::string path = p.string();
  LMT_ASSIGN_OR_RETURN(io::InputFormat format, io::detect_input_format(path));
  std::error_code ec;
  const uintmax_t size = fs::file_size(p, ec);
  if (ec) return IoError("cannot read the size of input " + path + ": " + ec.message());
  out->push_back({path, io::is_jsonl_name(path), static_cast<uint64_t>(size), format});
  return Status::Ok();
}

// In an output directory of `lmtrain data clean` (it holds clean_report.json) only the shards
// shard_*.jsonl are documents; the report and the removed-document samples are not.
bool is_clean_metadata(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p.parent_path() / "clean_report.json", ec)) return false;
  const std::string name = p.filename().string();
  return !(name.starts_with("shard_") && name.ends_with(".jsonl"));
}

}  // namespace

StatusOr<std::vector<InputFile>> list_input_files(const std::vector<std::string>& paths) {
  if (paths.empty()) return InvalidArgument("no inputs given", "pass --input FILE_OR_DIR ...");
  std::vector<InputFile> files;
  for (const std::string& path : paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) return NotFound("input " + path + " does not exist", "check the --input paths");
    if (!fs::is_directory(st)) {
      LMT_RETURN_IF_ERROR(add_file(path, &files));
      continue;
    }
    std::vector<fs::path> found;
    fs::recursive_directory_iterator it(path, ec), end;  // symlinked directories are not entered (no cycles)
    if (ec) return IoError("cannot list input directory " + path + ": " + ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) return IoError("cannot list input directory " + path + ": " + ec.message());
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file(ec) && !is_clean_metadata(it->path())) found.push_back(it->path());
    }
    if (found.empty()) return InvalidArgument("input directory " + path + " holds no files", "check the --input paths");
    std::sort(found.begin(), found.end(), [](const fs::path& a, const fs::path& b) { return a.string() < b.string(); });
    for (const fs::path& p : found) LMT_RETURN_IF_ERROR(add_file(p, &files));
  }
  return files;
}

std::string DocumentReader::where(const Document& doc) const {
  const std::string& path = files_[static_cast<size_t>(doc.file)].path;
  return doc.line > 0 ? path + ":" + std::to_string(doc.line) : path;
}

Status DocumentReader::parse_line(const std::string& path, std::string_view line, Document* doc) {
  const std::string at = path + ":" + std::to_string(line_);
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return InvalidArgument(at + ": not a JSON object (or not valid UTF-8 JSON)",
                           "a .jsonl input holds one JSON object per line");
  auto field = j.find(text_field_);
  if (field == j.end() || !field->is_string())
    return InvalidArgument(at + ": no string field '" + text_field_ + "'",
                           "--text-field NAME chooses the field that holds the document text");
  doc->text = std::move(field->get_ref<std::string&>());
  if (keep_records_) doc->record.assign(line);
  else doc->record.clear();
  doc->line = line_;
  return Status::Ok();
}

StatusOr<bool> DocumentReader::next(Document* doc) {
  uint64_t skipped = 0;  // blank lines' bytes, credited to the next document for progress
  while (file_index_ < files_.size()) {
    const InputFile& f = files_[file_index_];
    doc->file = static_cast<int>(file_index_);
    if (!f.jsonl) {  // one file, one document
      ++file_index_;
      doc->line = 0;
      doc->input_bytes = skipped + f.bytes;
      doc->text.clear();
      doc->record.clear();
      if (f.bytes == 0) return true;
      if (f.format != io::InputFormat::kPlain) {
        LMT_ASSIGN_OR_RETURN(doc->text, io::read_whole_input(f.path));
        return true;
      }
      LMT_ASSIGN_OR_RETURN(io::MappedFile m, io::MappedFile::open_read_only(f.path));
      doc->text.assign(reinterpret_cast<const char*>(m.data()), m.size());
      doc->input_bytes = skipped + m.size();
      return true;
    }
    if (!file_open_) {
      map_ = io::MappedFile();
      lines_.reset();
      if (f.format != io::InputFormat::kPlain) {  // streamed; plain files keep the memory map
        LMT_ASSIGN_OR_RETURN(std::unique_ptr<io::InputStream> in, io::open_input(f.path));
        lines_ = std::make_unique<io::LineReader>(std::move(in));
      } else if (f.bytes > 0) {
        LMT_ASSIGN_OR_RETURN(map_, io::MappedFile::open_read_only(f.path));
      }
      file_open_ = true;
      offset_ = 0;
      line_ = 0;
    }
    if (lines_ != nullptr) {
      // Progress counts compressed bytes, so that the total is the files' sizes.
      std::string_view line;
      for (;;) {
        const uint64_t before = lines_->stream().compressed_offset();
        LMT_ASSIGN_OR_RETURN(bool more, lines_->next(&line));
        skipped += lines_->stream().compressed_offset() - before;
        if (!more) break;
        line_ = lines_->line_number();
        if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
        LMT_RETURN_IF_ERROR(parse_line(f.path, line, doc));
        doc->input_bytes = skipped;
        return true;
      }
      doc->input_bytes = 0;
      file_open_ = false;
      lines_.reset();
      ++file_index_;
      continue;
    }
    const char* base = reinterpret_cast<const char*>(map_.data());
    while (offset_ < map_.size()) {
      const char* begin = base + offset_;
      const size_t left = map_.size() - offset_;
      const char* nl = static_cast<const char*>(std::memchr(begin, '\n', left));
      const size_t len = nl ? static_cast<size_t>(nl - begin) : left;
      offset_ += len + (nl ? 1 : 0);
      ++line_;
      const std::string_view line(begin, len);
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) {  // blank line
        skipped += len + (nl ? 1 : 0);
        continue;
      }
      LMT_RETURN_IF_ERROR(parse_line(f.path, line, doc));
      doc->input_bytes = skipped + len + (nl ? 1 : 0);
      return true;
    }
    file_open_ = false;
    map_ = io::MappedFile();
    ++file_index_;
  }
  return false;
}

}  // namespace lmt::data
