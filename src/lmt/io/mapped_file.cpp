#include "lmt/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "lmt/io/files.h"

namespace lmt::io {
namespace {

// Closes the descriptor on every return path; the mapping stays valid after close.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

Status open_error(const std::string& path, int err) {
  if (err == ENOENT) return NotFound(path + ": no such file", "check the path (relative paths start at the working directory)");
  if (err == EACCES) return IoError(path + ": permission denied", "check the file's read permission");
  return IoError(path + ": cannot open: " + errno_text(err));
}

}  // namespace

StatusOr<MappedFile> MappedFile::open_read_only(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return open_error(path, errno);
  FdCloser closer{fd};

  struct stat st {};
  if (::fstat(fd, &st) != 0) return IoError(path + ": fstat failed: " + errno_text());
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file", "pass the path of a file, not a directory or device");

  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ == 0) return file;  // mmap of length 0 is EINVAL; an empty file is (nullptr, 0)

  void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) return IoError(path + ": mmap of " + std::to_string(file.size_) + " bytes failed: " + errno_text());
  file.data_ = static_cast<const uint8_t*>(p);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)), path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

MappedFile::~MappedFile() { unmap(); }

void MappedFile::unmap() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace lmt::io
