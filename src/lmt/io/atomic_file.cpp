#include "lmt/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <utility>

#include "lmt/io/files.h"

namespace lmt::io {

StatusOr<AtomicFileWriter> AtomicFileWriter::create(const std::string& path, TmpName tmp_name) {
  static std::atomic<unsigned> counter{0};
  std::string tmp = path + ".tmp";
  if (tmp_name == TmpName::kUnique) tmp += "." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == ENOENT) {
      return NotFound(tmp + ": cannot create: directory '" + parent_directory(path) + "' does not exist",
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
  if (const int err = write_all(fd_, data, size); err != 0)
    return IoError(tmp_path_ + ": write failed: " + errno_text(err), "check free disk space and quotas");
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
  return fsync_directory(parent_directory(path_));
}

Status write_file_atomically(const std::string& path, std::string_view bytes, TmpName tmp_name) {
  LMT_ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::create(path, tmp_name));
  LMT_RETURN_IF_ERROR(w.append(bytes.data(), bytes.size()));
  return w.commit();
}

}  // namespace lmt::io
