#include "lmt/data/shard.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "lmt/io/files.h"

namespace lmt::data {
namespace {

static_assert(std::endian::native == std::endian::little, "shards are little-endian and read in place");

constexpr size_t kWriteBuffer = size_t{1} << 20;
constexpr size_t kHeaderChecksummed = offsetof(ShardHeader, header_checksum);

const char* kRecoverHint =
    "the shard is corrupt or incomplete (an interrupted copy?); copy it again or re-run `lmtrain data prepare`";

uint64_t align8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

using io::errno_text;

// printf-free rendering of the magic bytes, escaping what is not printable.
std::string printable(const char* bytes, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c >= 32 && c < 127) {
      s += static_cast<char>(c);
    } else {
      static const char kHex[] = "0123456789abcdef";
      s += "\\x";
      s += kHex[c >> 4];
      s += kHex[c & 15];
    }
  }
  return s;
}

template <typename Word>
Status scan_tokens(const std::string& path, const Word* tokens, const ShardHeader& h, const uint64_t* starts) {
  const uint64_t n = h.token_count, vocab = h.vocab_size, eos = h.eos_id;
  uint64_t j = (h.doc_count > 0 && starts[0] == 0) ? 1 : 0;  // a start at 0 needs no EOS before it
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t id = tokens[i];
    if (id >= vocab)
      return DataLoss("shard " + path + ": token id " + std::to_string(id) + " at offset " + std::to_string(i) +
                          " is outside the vocabulary [0, " + std::to_string(vocab) + ")",
                      "the shard does not belong to this tokenizer or is corrupt; re-run `lmtrain data prepare`");
    const bool starts_next = j < h.doc_count && starts[j] == i + 1;
    if (id == eos && i + 1 < n) {
      if (!starts_next)
        return DataLoss("shard " + path + ": EOS at offset " + std::to_string(i) +
                            " is not followed by a document start in the doc index",
                        kRecoverHint);
      ++j;
    } else if (starts_next) {
      return DataLoss("shard " + path + ": the doc index starts a document at offset " + std::to_string(i + 1) +
                          " but the token before it is not EOS",
                      kRecoverHint);
    }
  }
  return Status::Ok();
}

}  // namespace

// ---- ShardWriter ---------------------------------------------------------------------------------

StatusOr<ShardWriter> ShardWriter::create(const std::string& path, const ShardSpec& spec) {
  if (spec.vocab_size <= 0 || spec.vocab_size > (int64_t{1} << 31))
    return InvalidArgument("shard " + path + ": vocab_size " + std::to_string(spec.vocab_size) +
                           " is outside [1, 2^31]");
  if (spec.eos_id < 0 || spec.eos_id >= spec.vocab_size)
    return InvalidArgument("shard " + path + ": eos id " + std::to_string(spec.eos_id) + " is outside [0, " +
                           std::to_string(spec.vocab_size) + ")");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return IoError("cannot create shard " + path + ": " + errno_text(),
                   errno == EEXIST ? "the file exists and is never overwritten; choose another output directory"
                                   : "check that the directory exists and is writable");
  ShardWriter w(path, fd, spec);
  const ShardHeader placeholder{};  // rewritten by finish(); a crash leaves a zero magic behind
  if (const int err = io::write_all(fd, &placeholder, sizeof placeholder); err != 0)
    return IoError("cannot write shard " + path + ": " + errno_text(err));
  return w;
}

ShardWriter::ShardWriter(std::string path, int fd, const ShardSpec& spec)
    : path_(std::move(path)), fd_(fd), spec_(spec), token_bytes_(token_bytes_for_vocab(spec.vocab_size)) {
  buffer_.reserve(kWriteBuffer);
}

ShardWriter::ShardWriter(ShardWriter&& o) noexcept
    : path_(std::move(o.path_)), fd_(o.fd_), spec_(o.spec_), token_bytes_(o.token_bytes_), tokens_(o.tokens_),
      doc_starts_(std::move(o.doc_starts_)), buffer_(std::move(o.buffer_)), checksum_(o.checksum_),
      finished_(o.finished_) {
  o.fd_ = -1;
  o.finished_ = true;
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_ && !path_.empty()) ::unlink(path_.c_str());  // created exclusively by us: ours to remove
}

Status ShardWriter::flush() {
  checksum_.update(buffer_.data(), buffer_.size());
  if (const int err = io::write_all(fd_, buffer_.data(), buffer_.size()); err != 0)
    return IoError("cannot write shard " + path_ + ": " + errno_text(err), "is the disk full?");
  buffer_.clear();
  return Status::Ok();
}

Status ShardWriter::write_bytes(const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const size_t take = std::min(size, kWriteBuffer - buffer_.size());
    buffer_.insert(buffer_.end(), p, p + take);
    p += take;
    size -= take;
    if (buffer_.size() == kWriteBuffer) LMT_RETURN_IF_ERROR(flush());
  }
  return Status::Ok();
}

Status ShardWriter::append(std::span<const int32_t> ids) {
  LMT_CHECK(!finished_) << "append() after finish() on " << path_;
  constexpr size_t kChunk = 4096;
  uint16_t narrow[kChunk];
  for (size_t i = 0; i < ids.size(); i += kChunk) {
    const size_t n = std::min(kChunk, ids.size() - i);
    for (size_t k = 0; k < n; ++k) LMT_DCHECK(ids[i + k] >= 0 && ids[i + k] < spec_.vocab_size);
    if (token_bytes_ == 4) {
      LMT_RETURN_IF_ERROR(write_bytes(ids.data() + i, n * 4));
    } else {
      for (size_t k = 0; k < n; ++k) narrow[k] = static_cast<uint16_t>(ids[i + k]);
      LMT_RETURN_IF_ERROR(write_bytes(narrow, n * 2));
    }
  }
  tokens_ += static_cast<int64_t>(ids.size());
  return Status::Ok();
}

StatusOr<ShardSummary> ShardWriter::finish() {
  LMT_CHECK(!finished_) << "finish() twice on " << path_;
  const uint64_t token_bytes = static_cast<uint64_t>(tokens_) * token_bytes_;
  const uint64_t zeros = 0;
  LMT_RETURN_IF_ERROR(write_bytes(&zeros, align8(token_bytes) - token_bytes));
  LMT_RETURN_IF_ERROR(write_bytes(doc_starts_.data(), doc_starts_.size() * sizeof(uint64_t)));
  LMT_RETURN_IF_ERROR(flush());

  ShardHeader h{};
  std::memcpy(h.magic, kShardMagic, sizeof h.magic);
  h.version = kShardVersion;
  h.token_bytes = token_bytes_;
  h.vocab_size = static_cast<uint64_t>(spec_.vocab_size);
  h.token_count = static_cast<uint64_t>(tokens_);
  h.doc_count = doc_starts_.size();
  h.eos_id = static_cast<uint32_t>(spec_.eos_id);
  h.data_checksum = checksum_.digest();
  h.header_checksum = xxh64(&h, kHeaderChecksummed);
  if (::pwrite(fd_, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h))
    return IoError("cannot write the header of shard " + path_ + ": " + errno_text());
  if (::fsync(fd_) != 0) return IoError("cannot fsync shard " + path_ + ": " + errno_text());
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return IoError("cannot close shard " + path_ + ": " + errno_text());
  finished_ = true;
  return ShardSummary{path_, tokens_, static_cast<int64_t>(doc_starts_.size()), h.data_checksum};
}

// ---- ShardReader ---------------------------------------------------------------------------------

StatusOr<ShardReader> ShardReader::open(const std::string& path, Verify verify) {
  ShardReader r;
  auto file = io::MappedFile::open_read_only(path);
  if (!file.ok()) {
    if (file.status().code() == StatusCode::kNotFound)
      return NotFound("shard " + path + " does not exist",
                      "the dataset directory is incomplete; copy it again or re-run `lmtrain data prepare`");
    return file.status().WithContext("shard " + path);
  }
  r.file_ = std::move(file).value();
  LMT_RETURN_IF_ERROR(r.validate(verify));
  return r;
}

Status ShardReader::validate(Verify verify) {
  const std::string& p = path();
  const uint64_t size = file_.size();
  if (size < kShardHeaderBytes)
    return DataLoss("shard " + p + " is truncated: " + std::to_string(size) + " bytes, the header alone is " +
                        std::to_string(kShardHeaderBytes),
                    kRecoverHint);
  std::memcpy(&header_, file_.data(), sizeof header_);
  const ShardHeader& h = header_;
  if (std::memcmp(h.magic, kShardMagic, sizeof h.magic) != 0)
    return DataLoss("shard " + p + ": bad magic '" + printable(h.magic, 8) + "' (expected 'LMTSHARD')",
                    "this is not an lmtrain token shard, or its first bytes are corrupt");
  if (h.version != kShardVersion)
    return DataLoss("shard " + p + ": format version " + std::to_string(h.version) + ", this lmtrain reads version " +
                        std::to_string(kShardVersion),
                    "prepare the data again with this lmtrain, or use the lmtrain that wrote it");
  if (xxh64(&h, kHeaderChecksummed) != h.header_checksum)
    return DataLoss("shard " + p + ": header checksum mismatch (stored " + hex64(h.header_checksum) + ", computed " +
                        hex64(xxh64(&h, kHeaderChecksummed)) + ")",
                    kRecoverHint);
  if (h.token_bytes != 2 && h.token_bytes != 4)
    return DataLoss("shard " + p + ": token width " + std::to_string(h.token_bytes) + " bytes (expected 2 or 4)",
                    kRecoverHint);
  if (h.vocab_size == 0 || h.vocab_size > (uint64_t{1} << 31) || (h.token_bytes == 2 && h.vocab_size > 65536))
    return DataLoss("shard " + p + ": vocab_size " + std::to_string(h.vocab_size) + " does not fit " +
                        std::to_string(h.token_bytes) + "-byte tokens",
                    kRecoverHint);
  if (h.eos_id >= h.vocab_size)
    return DataLoss("shard " + p + ": eos id " + std::to_string(h.eos_id) + " is outside the vocabulary [0, " +
                        std::to_string(h.vocab_size) + ")",
                    kRecoverHint);
  // Sizes are compared in a form that cannot overflow before the multiplication is known to fit.
  const uint64_t payload = size - kShardHeaderBytes;
  const bool counts_fit = h.token_count <= payload / h.token_bytes && h.doc_count <= payload / 8;
  const uint64_t expected =
      counts_fit ? kShardHeaderBytes + align8(h.token_count * h.token_bytes) + h.doc_count * 8 : 0;
  if (!counts_fit || expected != size)
    return DataLoss("shard " + p + ": size mismatch: the file has " + std::to_string(size) + " bytes, its header (" +
                        std::to_string(h.token_count) + " tokens, " + std::to_string(h.doc_count) +
                        " documents) implies " + (counts_fit ? std::to_string(expected) : std::string("more")),
                    kRecoverHint);
  tokens_ = file_.data() + kShardHeaderBytes;
  doc_starts_ = reinterpret_cast<const uint64_t*>(tokens_ + align8(h.token_count * h.token_bytes));
  for (uint64_t i = 0; i < h.doc_count; ++i) {
    const bool ordered = i == 0 || doc_starts_[i] > doc_starts_[i - 1];
    if (!ordered || doc_starts_[i] >= h.token_count)
      return DataLoss("shard " + p + ": doc index entry " + std::to_string(i) + " (" + std::to_string(doc_starts_[i]) +
                          ") is " + (ordered ? "past the last token" : "not after the previous entry"),
                      kRecoverHint);
  }
  if (verify == Verify::kHeader) return Status::Ok();

  const uint64_t computed = xxh64(tokens_, payload);
  if (computed != h.data_checksum)
    return DataLoss("shard " + p + ": checksum mismatch (stored " + hex64(h.data_checksum) + ", computed " +
                        hex64(computed) + ")",
                    kRecoverHint);
  if (h.token_bytes == 2) return scan_tokens(p, reinterpret_cast<const uint16_t*>(tokens_), h, doc_starts_);
  return scan_tokens(p, reinterpret_cast<const uint32_t*>(tokens_), h, doc_starts_);
}

int32_t ShardReader::token(int64_t i) const {
  LMT_DCHECK(i >= 0 && i < token_count());
  if (header_.token_bytes == 2) return reinterpret_cast<const uint16_t*>(tokens_)[i];
  return static_cast<int32_t>(reinterpret_cast<const uint32_t*>(tokens_)[i]);
}

void ShardReader::read(int64_t start, int64_t n, int32_t* out) const {
  LMT_CHECK(start >= 0 && n >= 0 && start + n <= token_count())
      << path() << ": read [" << start << ", " << start + n << ") of " << token_count();
  if (n == 0) return;  // `out` may be null then (an empty vector's data()): no memcpy from or to it
  if (header_.token_bytes == 2) {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(tokens_) + start;
    for (int64_t i = 0; i < n; ++i) out[i] = src[i];
  } else {
    std::memcpy(out, reinterpret_cast<const uint32_t*>(tokens_) + start, static_cast<size_t>(n) * 4);
  }
}

}  // namespace lmt::data
