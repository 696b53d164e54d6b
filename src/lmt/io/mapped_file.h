// MappedFile: a whole file memory-mapped read-only, unmapped when the object dies (RAII).
//
// Contract: data() points at size() bytes that stay valid and unchanged for the object's lifetime;
// moving a MappedFile keeps the same address, so pointers into it survive the move. An empty file
// maps to (nullptr, 0). The mapping is MAP_PRIVATE|PROT_READ: the file must not be truncated by
// another process while mapped (the kernel would raise SIGBUS on access to the lost pages).
// Move-only; not thread-affine (reads from several threads are fine).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lmt/base/status.h"

namespace lmt::io {

class MappedFile {
 public:
  // Errors: kNotFound (no such file), kInvalidArgument (not a regular file), kIoError (open/mmap).
  static StatusOr<MappedFile> open_read_only(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void unmap();

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace lmt::io
