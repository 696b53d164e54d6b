// Small POSIX file helpers shared by every writer of durable state (atomic files and directories,
// shards, checkpoints, metrics): errno rendering, whole-buffer writes and directory fsync.
//
// Durability rule (DESIGN.md §6): data is durable once its file is fsynced; a create, rename or
// unlink is durable once the directory holding the entry is fsynced as well.
// All functions are thread-safe (they touch only their arguments and errno).
#pragma once

#include <cstddef>
#include <string>

#include "lmt/base/status.h"

namespace lmt::io {

// strerror() of `err` (default: the current errno), e.g. "No space left on device".
std::string errno_text(int err);
std::string errno_text();

// Writes all `size` bytes to `fd`, in chunks the kernel accepts, retrying short writes and EINTR.
// Returns 0, or the errno of the failing write (EIO if a write transferred nothing). The caller
// names the file in its error message: `IoError(path + ": write failed: " + errno_text(err))`.
int write_all(int fd, const void* data, size_t size);

// The directory holding `path` ("." for a bare file name).
std::string parent_directory(const std::string& path);

// fsync(2) of a directory, so that entries created, renamed or removed in it survive a power loss.
// Errors: kIoError naming `dir`.
Status fsync_directory(const std::string& dir);

}  // namespace lmt::io
