#include "lmt/io/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

namespace lmt::io {
namespace {

// Linux transfers at most ~2 GiB per write(); larger buffers go in chunks.
constexpr size_t kMaxWriteChunk = size_t{1} << 30;

}  // namespace

std::string errno_text(int err) { return std::strerror(err); }
std::string errno_text() { return errno_text(errno); }

int write_all(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, std::min(size, kMaxWriteChunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

std::string parent_directory(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

Status fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError(dir + ": cannot open directory to fsync it: " + errno_text());
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return IoError(dir + ": fsync of directory failed: " + errno_text(err));
  return Status::Ok();
}

}  // namespace lmt::io
