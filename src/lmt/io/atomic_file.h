// AtomicFileWriter: writes a file so that readers see either the old file or the complete new one.
//
// Protocol (leveldb SetCurrentFile, DESIGN.md §6): bytes go to `path + ".tmp"`; commit() fsyncs it,
// renames it over `path` and fsyncs the directory so the rename itself survives a power loss.
// If commit() is never reached or fails, the destructor removes the temporary file: `path` is then
// untouched (an existing file keeps its old contents, a missing one stays missing).
// Two writers to the same path at once share the ".tmp" name, so callers serialise them, unless
// they ask for TmpName::kUnique (`path.tmp.PID.N`: writers in several processes, e.g. the ranks of
// one node updating a shared cache, each commit a whole file and the last rename wins).
// Move-only; one thread at a time.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "lmt/base/status.h"

namespace lmt::io {

enum class TmpName { kShared, kUnique };

class AtomicFileWriter {
 public:
  // Creates (truncates) `path + ".tmp"` (kUnique: `path + ".tmp.PID.N"`). Errors: kNotFound
  // (directory missing), kIoError.
  static StatusOr<AtomicFileWriter> create(const std::string& path, TmpName tmp_name = TmpName::kShared);

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();  // abandons (unlinks) the temporary file unless committed

  // Appends bytes, retrying short writes and EINTR. Errors: kIoError (e.g. disk full).
  Status append(const void* data, size_t size);
  // fsync, rename over the final path, fsync the directory. Call once.
  Status commit();

  const std::string& path() const { return path_; }
  const std::string& tmp_path() const { return tmp_path_; }

 private:
  AtomicFileWriter(std::string path, std::string tmp_path, int fd)
      : path_(std::move(path)), tmp_path_(std::move(tmp_path)), fd_(fd) {}
  void abandon();

  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// The whole of `bytes` as the new contents of `path`, through an AtomicFileWriter (create, append,
// commit): `path` ends up either unchanged or holding exactly `bytes`. Errors: as create/append/commit.
Status write_file_atomically(const std::string& path, std::string_view bytes, TmpName tmp_name = TmpName::kShared);

}  // namespace lmt::io
