#include "lmt/io/atomic_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <utility>
#include <vector>

#include "lmt/io/files.h"

namespace lmt::io {
namespace fs = std::filesystem;

StatusOr<AtomicDirectory> AtomicDirectory::create(const std::string& path, Staging staging) {
  fs::path target = fs::path(path).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "out/" -> "out"
  if (target.empty() || target.filename().empty() || target.filename() == "." || target.filename() == "..")
    return InvalidArgument("'" + path + "' does not name a new directory", "give a path such as runs/out");
  const std::string parent = parent_directory(target.string());
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) return IoError("cannot create directory " + parent + ": " + ec.message(), "check that it is writable");

  if (staging == Staging::kSuffix) {
    std::string tmp = target.string() + ".tmp";
    fs::remove_all(tmp, ec);  // a crash's leftovers
    if (ec) return IoError("cannot remove the stale " + tmp + ": " + ec.message());
    fs::create_directory(tmp, ec);
    if (ec) return IoError("cannot create " + tmp + ": " + ec.message(), "check that " + parent + " is writable");
    return AtomicDirectory(target.string(), std::move(tmp));
  }
  const std::string tmpl = (fs::path(parent) / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr)
    return IoError("cannot create a temporary directory beside " + target.string() + ": " + errno_text(),
                   "check that " + parent + " is writable");
  ::chmod(buf.data(), 0755);  // mkdtemp makes it 0700; the finished directory should be readable like any output
  return AtomicDirectory(target.string(), buf.data());
}

AtomicDirectory::AtomicDirectory(AtomicDirectory&& other) noexcept
    : path_(std::move(other.path_)),
      tmp_path_(std::move(other.tmp_path_)),
      committed_(std::exchange(other.committed_, true)) {}  // the moved-from object must not remove

AtomicDirectory::~AtomicDirectory() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_path_, ec);  // our own staging directory: nothing else lives there
}

Status AtomicDirectory::commit() {
  LMT_CHECK(!committed_) << "AtomicDirectory::commit() twice for " << path_;
  LMT_RETURN_IF_ERROR(fsync_directory(tmp_path_));
  // rename(2) replaces an empty directory and fails on a non-empty one, so a directory that filled
  // up since the caller looked is never overwritten.
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    return IoError("cannot rename " + tmp_path_ + " to " + path_ + ": " + errno_text(err),
                   err == ENOTEMPTY || err == EEXIST ? path_ + " was created meanwhile and is never overwritten"
                                                     : "check the permissions of " + parent_directory(path_));
  }
  committed_ = true;
  return fsync_directory(parent_directory(path_));
}

}  // namespace lmt::io
