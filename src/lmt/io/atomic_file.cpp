#include "lmt/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

namespace lmt::io {
namespace {

// Linux transfers at most ~2 GiB per write(); larger tensors go in chunks.
constexpr size_t kMaxWriteChunk = size_t{1} << 30;

std::string errno_text() { return std::strerror(errno); }

std::string directory_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// A rename is durable only once the directory entry is on disk.
Status fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError(dir + ": cannot open directory to fsync it: " + errno_text());
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return IoError(dir + ": fsync of directory failed: " + std::strerror(err));
  return Status::Ok();
}

}  // namespace

StatusOr<AtomicFileWriter> AtomicFileWriter::create(const std::string& path) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == ENOENT) {
      return NotFound(tmp + ": cannot create: directory '" + directory_of(path) + "' does not exist",
                      "create the output directory first");
    }
    return IoError(tmp + ": cannot create: " + errno_text(), "check that the directory is writable and has space");
  }
  return AtomicFileWriter(path, tmp, fd);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      tmp_path_(std::move(other.tmp_path_)),
      fd_(std::exchange(other.fd_, -1)),
      committed_(std::exchange(other.committed_, true)) {}  // the moved-from object must not unlink

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) abandon();
}

void AtomicFileWriter::abandon() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_path_.c_str());
  committed_ = true;  // nothing left to clean up
}

Status AtomicFileWriter::append(const void* data, size_t size) {
  if (fd_ < 0) return FailedPrecondition(path_ + ": append after commit or failure");
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd_, p, std::min(size, kMaxWriteChunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return IoError(tmp_path_ + ": write failed: " + (n < 0 ? errno_text() : "wrote 0 bytes"),
                     "check free disk space and quotas");
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status AtomicFileWriter::commit() {
  if (fd_ < 0) return FailedPrecondition(path_ + ": commit called twice or after a failure");
  if (::fsync(fd_) != 0) return IoError(tmp_path_ + ": fsync failed: " + errno_text());
  int fd = std::exchange(fd_, -1);
  // close() can report deferred write errors (NFS); a file that failed to close is not committed.
  if (::close(fd) != 0) return IoError(tmp_path_ + ": close failed: " + errno_text());
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    return IoError(path_ + ": cannot rename " + tmp_path_ + " over it: " + errno_text(),
                   "the destination must be a file (not a directory) on the same filesystem");
  }
  committed_ = true;
  return fsync_directory(directory_of(path_));
}

}  // namespace lmt::io
