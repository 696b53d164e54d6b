#include "lmt/io/input_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lmt/io/decompress.h"
#include "lmt/io/files.h"

namespace lmt::io {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct Refused {
  const char* name;
  const char* command;
};

// bzip2 "BZh", xz FD 37 7A 58 5A 00, zip "PK\3\4" (also an empty archive's "PK\5\6").
const Refused* refused_by_magic(const unsigned char* b, size_t n) {
  static const Refused bz2{"bzip2", "bzip2 -dk"}, xz{"xz", "xz -dk"}, zip{"zip", "unzip"};
  if (n >= 3 && b[0] == 'B' && b[1] == 'Z' && b[2] == 'h') return &bz2;
  if (n >= 6 && std::memcmp(b, "\xFD" "7zXZ\0", 6) == 0) return &xz;
  if (n >= 4 && b[0] == 'P' && b[1] == 'K' && ((b[2] == 3 && b[3] == 4) || (b[2] == 5 && b[3] == 6))) return &zip;
  return nullptr;
}

const Refused* refused_by_name(const std::string& path) {
  static const Refused bz2{"bzip2", "bzip2 -dk"}, xz{"xz", "xz -dk"}, zip{"zip", "unzip"};
  if (ends_with(path, ".bz2")) return &bz2;
  if (ends_with(path, ".xz")) return &xz;
  if (ends_with(path, ".zip")) return &zip;
  return nullptr;
}

InputFormat format_by_magic(const unsigned char* b, size_t n) {
  if (n >= 2 && b[0] == 0x1F && b[1] == 0x8B) return InputFormat::kGzip;
  if (n >= 4 && b[0] == 0x28 && b[1] == 0xB5 && b[2] == 0x2F && b[3] == 0xFD) return InputFormat::kZstd;
  // A zstd skippable frame (magic 0x184D2A50..5F, little-endian) may come first.
  if (n >= 4 && (b[0] & 0xF0) == 0x50 && b[1] == 0x2A && b[2] == 0x4D && b[3] == 0x18) return InputFormat::kZstd;
  return InputFormat::kPlain;
}

// Opens `path` and returns its fd and format (the fd is at offset 0).
StatusOr<std::pair<int, InputFormat>> open_and_detect(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file", "check the input path");
    return IoError(path + ": cannot open: " + errno_text(), "check that the file is readable");
  }
  auto fail = [fd](Status s) -> Status {
    ::close(fd);
    return s;
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(IoError(path + ": cannot stat: " + errno_text()));
  if (!S_ISREG(st.st_mode)) return fail(InvalidArgument(path + ": not a regular file", "pass text or JSONL files (plain, .gz or .zst)"));
  unsigned char magic[6] = {};
  ssize_t got;
  do got = ::pread(fd, magic, sizeof magic, 0);
  while (got < 0 && errno == EINTR);
  if (got < 0) return fail(IoError(path + ": cannot read: " + errno_text(), "check that the file is readable"));
  const size_t n = static_cast<size_t>(got);
  const Refused* r = refused_by_magic(magic, n);
  if (r == nullptr && format_by_magic(magic, n) == InputFormat::kPlain) r = refused_by_name(path);
  if (r != nullptr)
    return fail(InvalidArgument(path + ": " + r->name + "-compressed input is not read (lmtrain reads plain, gzip and zstd files)",
                                std::string("decompress it first: `") + r->command + " " + path + "`, or recompress it with gzip or zstd"));
  const InputFormat f = format_by_magic(magic, n);
  if (f == InputFormat::kPlain && (ends_with(path, ".gz") || ends_with(path, ".zst") || ends_with(path, ".zstd")))
    return fail(DataLoss(path + ": named as compressed, but its first bytes are not a gzip or zstd header",
                         "the file is damaged or misnamed; `file " + path + "` tells what it holds"));
  return std::pair<int, InputFormat>{fd, f};
}

}  // namespace

const char* input_format_name(InputFormat f) {
  switch (f) {
    case InputFormat::kGzip: return "gzip";
    case InputFormat::kZstd: return "zstd";
    default: return "plain";
  }
}

StatusOr<InputFormat> detect_input_format(const std::string& path) {
  LMT_ASSIGN_OR_RETURN(auto opened, open_and_detect(path));
  ::close(opened.first);
  return opened.second;
}

std::string strip_compression_suffix(const std::string& path) {
  for (std::string_view s : {".gz", ".zst", ".zstd"})
    if (ends_with(path, s)) return path.substr(0, path.size() - s.size());
  return path;
}

bool is_jsonl_name(const std::string& path) {
  const std::string name = strip_compression_suffix(path);
  return ends_with(name, ".jsonl") || ends_with(name, ".ndjson");
}

StatusOr<std::unique_ptr<InputStream>> open_input(const std::string& path) {
  LMT_ASSIGN_OR_RETURN(auto opened, open_and_detect(path));
  switch (opened.second) {
    case InputFormat::kGzip: return internal::make_gzip_stream(opened.first, path);
    case InputFormat::kZstd: return internal::make_zstd_stream(opened.first, path);
    default: return internal::make_plain_stream(opened.first, path);
  }
}

StatusOr<std::string> read_whole_input(const std::string& path) {
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<InputStream> in, open_input(path));
  std::string out;
  size_t chunk = size_t{1} << 16;
  if (in->format() == InputFormat::kPlain) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) chunk = static_cast<size_t>(st.st_size) + 1;  // one read, and one to see the end
  }
  for (;;) {
    const size_t old = out.size();
    out.resize(old + chunk);
    LMT_ASSIGN_OR_RETURN(size_t got, in->read(out.data() + old, chunk));
    out.resize(old + got);
    if (got < chunk) return out;
    chunk = std::min(chunk * 2, size_t{64} << 20);
  }
}

LineReader::LineReader(std::unique_ptr<InputStream> in, size_t chunk_bytes) : in_(std::move(in)), chunk_(chunk_bytes) {}

StatusOr<bool> LineReader::next(std::string_view* line) {
  for (;;) {
    const char* nl = static_cast<const char*>(std::memchr(buf_.data() + scanned_, '\n', buf_.size() - scanned_));
    if (nl != nullptr) {
      const size_t end = static_cast<size_t>(nl - buf_.data());
      *line = std::string_view(buf_.data() + pos_, end - pos_);
      pos_ = scanned_ = end + 1;
      had_newline_ = true;
      ++line_number_;
      return true;
    }
    if (eof_) {
      if (pos_ == buf_.size()) return false;
      *line = std::string_view(buf_.data() + pos_, buf_.size() - pos_);
      pos_ = scanned_ = buf_.size();
      had_newline_ = false;
      ++line_number_;
      return true;
    }
    // Keep the unreturned tail, then append a chunk (the buffer grows only for lines longer than it).
    buf_.erase(0, pos_);
    scanned_ = buf_.size();
    pos_ = 0;
    const size_t old = buf_.size();
    buf_.resize(old + chunk_);
    LMT_ASSIGN_OR_RETURN(size_t got, in_->read(buf_.data() + old, chunk_));
    buf_.resize(old + got);
    eof_ = got < chunk_;
  }
}

}  // namespace lmt::io
