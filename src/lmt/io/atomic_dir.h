// AtomicDirectory: builds a directory so that readers see either no directory at path() or the
// complete one (DESIGN.md §6). The directory counterpart of AtomicFileWriter.
//
// Protocol: create() makes an empty staging directory (and path()'s parent, if missing). The
// caller writes its files into tmp_path() and makes each durable itself (fsync before close, e.g.
// through AtomicFileWriter). commit() fsyncs tmp_path(), renames it to path() in one step and fsyncs
// the parent, so the new entry survives a power loss. If commit() is never reached or fails before
// the rename, the destructor removes tmp_path() with everything in it: path() is then untouched.
//
// Never overwrites: rename(2) fails on a non-empty path(), which keeps its contents (an empty
// directory is replaced). A caller that must refuse an existing path() checks before create(), with
// an error that names what the directory is (a checkpoint, a dataset).
//
// Staging names:
//   kSuffix  `path + ".tmp"`: a fixed, predictable name, so a crash's leftover can be listed and is
//            replaced by the next create() of the same path. Two writers of one path must not overlap.
//   kHidden  `<parent>/.<name>.tmp-XXXXXX` (mkdtemp, then mode 0755): unique and hidden from
//            listings; a killed process leaves only that dot-directory behind.
// Move-only; one thread at a time.
#pragma once

#include <string>

#include "lmt/base/status.h"

namespace lmt::io {

class AtomicDirectory {
 public:
  enum class Staging { kSuffix, kHidden };

  // `path` names the directory to appear (not "", "." or ".."; a trailing '/' is ignored).
  // Errors: kInvalidArgument (such a path), kIoError (the parent or the staging directory cannot be
  // created, or a stale kSuffix staging directory cannot be removed).
  static StatusOr<AtomicDirectory> create(const std::string& path, Staging staging);

  AtomicDirectory(AtomicDirectory&& other) noexcept;
  AtomicDirectory& operator=(AtomicDirectory&&) = delete;
  AtomicDirectory(const AtomicDirectory&) = delete;
  AtomicDirectory& operator=(const AtomicDirectory&) = delete;
  ~AtomicDirectory();  // removes tmp_path() unless committed

  // fsync tmp_path(), rename it to path(), fsync the parent. Call once. Errors: kIoError (a
  // non-empty path() appeared meanwhile: it is left as it was; or a failed fsync/rename).
  Status commit();

  const std::string& path() const { return path_; }
  const std::string& tmp_path() const { return tmp_path_; }
  bool committed() const { return committed_; }

 private:
  AtomicDirectory(std::string path, std::string tmp_path) : path_(std::move(path)), tmp_path_(std::move(tmp_path)) {}

  std::string path_;
  std::string tmp_path_;
  bool committed_ = false;  // also true once moved from: nothing to clean up then
};

}  // namespace lmt::io
