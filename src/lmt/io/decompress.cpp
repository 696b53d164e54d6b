#include "lmt/io/decompress.h"

#include <unistd.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "lmt/io/files.h"

namespace lmt::io::internal {
namespace {

constexpr size_t kInBuffer = size_t{256} << 10;

// An fd-owning base with the input buffer the decoders consume.
class FdStream : public InputStream {
 public:
  FdStream(int fd, std::string path, InputFormat f) : InputStream(std::move(path), f), fd_(fd) {}
  ~FdStream() override {
    if (fd_ >= 0) ::close(fd_);
  }

 protected:
  // Reads up to `n` bytes of the file into `dst`; 0 at its end.
  StatusOr<size_t> read_file(char* dst, size_t n) {
    for (;;) {
      const ssize_t got = ::read(fd_, dst, n);
      if (got >= 0) {
        file_read_ += static_cast<uint64_t>(got);
        return static_cast<size_t>(got);
      }
      if (errno == EINTR) continue;
      return IoError(path_ + ": read failed at byte " + std::to_string(file_read_) + ": " + errno_text(),
                     "check that the file is readable");
    }
  }
  std::string where() const {
    return "at compressed byte " + std::to_string(compressed_offset_) + " (after " + std::to_string(uncompressed_offset_) +
           " uncompressed bytes)";
  }
  int fd_;
  uint64_t file_read_ = 0;  // bytes read from the file (the decoder may not have consumed them all)
};

class PlainStream final : public FdStream {
 public:
  PlainStream(int fd, std::string path) : FdStream(fd, std::move(path), InputFormat::kPlain) {}
  StatusOr<size_t> read(char* buf, size_t n) override {
    size_t done = 0;
    while (done < n) {
      LMT_ASSIGN_OR_RETURN(size_t got, read_file(buf + done, n - done));
      if (got == 0) break;
      done += got;
    }
    compressed_offset_ = uncompressed_offset_ = file_read_;
    return done;
  }
};

class GzipStream final : public FdStream {
 public:
  GzipStream(int fd, std::string path) : FdStream(fd, std::move(path), InputFormat::kGzip), in_(kInBuffer) {
    init_rc_ = inflateInit2(&zs_, 15 + 16);  // +16: a gzip header and trailer (CRC-32, size)
  }
  ~GzipStream() override {
    if (init_rc_ == Z_OK) inflateEnd(&zs_);
  }

  StatusOr<size_t> read(char* buf, size_t n) override {
    if (init_rc_ != Z_OK) return Internal(path_ + ": cannot start the gzip decoder (zlib error " + std::to_string(init_rc_) + ")");
    const uint64_t base = uncompressed_offset_;
    zs_.next_out = reinterpret_cast<Bytef*>(buf);
    zs_.avail_out = static_cast<uInt>(std::min<size_t>(n, size_t{1} << 30));
    const size_t want = zs_.avail_out;
    while (zs_.avail_out > 0) {
      if (zs_.avail_in == 0 && !eof_) {
        LMT_ASSIGN_OR_RETURN(size_t got, read_file(reinterpret_cast<char*>(in_.data()), in_.size()));
        zs_.next_in = in_.data();
        zs_.avail_in = static_cast<uInt>(got);
        eof_ = got == 0;
      }
      if (zs_.avail_in == 0 && eof_) {
        if (in_member_)
          return DataLoss(path_ + ": truncated gzip stream: the file ends " + where() + " inside a gzip member",
                          "the file was cut short (an interrupted download or copy?); `gzip -t " + path_ + "` checks it");
        break;  // the end of the last member
      }
      if (!in_member_ && members_ > 0 && (zero_padded_ || zs_.next_in[0] == 0)) {
        // Zero bytes after the last member (tar-style padding) are ignored, as `gzip -d` does.
        while (zs_.avail_in > 0 && zs_.next_in[0] == 0) {
          ++zs_.next_in;
          --zs_.avail_in;
        }
        zero_padded_ = true;
        compressed_offset_ = file_read_ - zs_.avail_in;
        if (zs_.avail_in == 0) continue;
        return DataLoss(path_ + ": the bytes after the last gzip member and its zero padding, " + where() + ", are not zero",
                        "the file has trailing garbage; `gzip -t " + path_ + "` checks it");
      }
      const bool member_start = !in_member_;
      const uint64_t member_offset = file_read_ - zs_.avail_in;
      in_member_ = true;
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      compressed_offset_ = file_read_ - zs_.avail_in;
      uncompressed_offset_ = base + (want - zs_.avail_out);
      if (rc == Z_STREAM_END) {  // a member ends; another may follow (`cat a.gz b.gz`)
        in_member_ = false;
        ++members_;
        inflateReset(&zs_);
        continue;
      }
      if (rc == Z_OK || rc == Z_BUF_ERROR) continue;
      const std::string msg = zs_.msg != nullptr ? zs_.msg : "zlib error " + std::to_string(rc);
      if (rc == Z_MEM_ERROR) return Internal(path_ + ": out of memory decompressing gzip data " + where());
      if (member_start && members_ > 0 && rc == Z_DATA_ERROR) {
        compressed_offset_ = member_offset;  // where the bad "member" starts
        return DataLoss(path_ + ": the bytes after the last gzip member, " + where() + ", are not a gzip member (" + msg + ")",
                        "the file has trailing garbage; `gzip -t " + path_ + "` checks it");
      }
      return DataLoss(path_ + ": corrupt gzip data " + where() + ": " + msg,
                      "the file is damaged; `gzip -t " + path_ + "` checks it; fetch it again");
    }
    return want - zs_.avail_out;
  }

 private:
  z_stream zs_{};
  int init_rc_ = Z_OK;
  std::vector<Bytef> in_;
  bool eof_ = false;
  bool in_member_ = false;
  int64_t members_ = 0;       // members decoded completely
  bool zero_padded_ = false;  // zero bytes followed the last member
};

class ZstdStream final : public FdStream {
 public:
  ZstdStream(int fd, std::string path) : FdStream(fd, std::move(path), InputFormat::kZstd), in_(ZSTD_DStreamInSize()) {
    ds_ = ZSTD_createDStream();
    if (ds_ != nullptr) ZSTD_DCtx_setParameter(ds_, ZSTD_d_windowLogMax, 27);  // frames up to `zstd --long=27`
  }
  ~ZstdStream() override { ZSTD_freeDStream(ds_); }

  StatusOr<size_t> read(char* buf, size_t n) override {
    if (ds_ == nullptr) return Internal(path_ + ": cannot start the zstd decoder");
    const uint64_t base = uncompressed_offset_;
    ZSTD_outBuffer out{buf, n, 0};
    while (out.pos < out.size) {
      if (in_pos_ == in_size_ && !eof_) {
        LMT_ASSIGN_OR_RETURN(size_t got, read_file(in_.data(), in_.size()));
        in_pos_ = 0;
        in_size_ = got;
        eof_ = got == 0;
      }
      const bool at_end = in_pos_ == in_size_ && eof_;
      if (at_end && !in_frame_) break;  // the end of the last frame
      ZSTD_inBuffer in{in_.data(), in_size_, in_pos_};
      const size_t before = out.pos;
      const size_t rc = ZSTD_decompressStream(ds_, &out, &in);
      in_pos_ = in.pos;
      compressed_offset_ = file_read_ - (in_size_ - in_pos_);
      uncompressed_offset_ = base + out.pos;
      if (ZSTD_isError(rc)) {
        const std::string msg = ZSTD_getErrorName(rc);
        if (ZSTD_getErrorCode(rc) == ZSTD_error_memory_allocation)
          return Internal(path_ + ": out of memory decompressing zstd data " + where());
        return DataLoss(path_ + ": corrupt zstd data " + where() + ": " + msg,
                        "the file is damaged; `zstd -t " + path_ + "` checks it; fetch it again");
      }
      in_frame_ = rc != 0;  // 0: a frame is complete and flushed; another may follow
      if (at_end && in_frame_ && out.pos == before)
        return DataLoss(path_ + ": truncated zstd stream: the file ends " + where() + " inside a zstd frame",
                        "the file was cut short (an interrupted download or copy?); `zstd -t " + path_ + "` checks it");
    }
    return out.pos;
  }

 private:
  ZSTD_DStream* ds_ = nullptr;
  std::vector<char> in_;
  size_t in_pos_ = 0, in_size_ = 0;
  bool eof_ = false;
  bool in_frame_ = false;
};

}  // namespace

std::unique_ptr<InputStream> make_plain_stream(int fd, std::string path) { return std::make_unique<PlainStream>(fd, std::move(path)); }
std::unique_ptr<InputStream> make_gzip_stream(int fd, std::string path) { return std::make_unique<GzipStream>(fd, std::move(path)); }
std::unique_ptr<InputStream> make_zstd_stream(int fd, std::string path) { return std::make_unique<ZstdStream>(fd, std::move(path)); }

}  // namespace lmt::io::internal
