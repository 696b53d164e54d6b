// Hugging Face safetensors: reader (memory-mapped, fully validated) and atomic writer.
//
// Format: 8-byte little-endian header length N, then N bytes of JSON
//   {"<name>": {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}
// then the data section; offsets are relative to its start (byte 8 + N). Data is little-endian,
// row-major. Spec: https://github.com/huggingface/safetensors (we apply the same checks as its
// reference implementation: tensors tile the data section exactly, with no overlap and no hole).
//
// Reader contract: open() rejects every malformed file with a Status (kDataLoss for corrupt content,
// kNotFound/kIoError for the file itself) whose message names the file and the tensor (or byte
// offset) at fault and carries a hint. After a successful open(), every TensorInfo::data span lies
// inside the mapping, so reading it cannot go out of bounds. The SafetensorsFile owns the mapping;
// TensorInfo pointers are valid while it lives (moves keep them valid). Tensor data may be
// unaligned (the format does not promise alignment): read through memcpy or read_f32().
// A SafetensorsFile is immutable after open(), so concurrent reads from threads are safe.
//
// Writer contract: write_safetensors() is all-or-nothing (see atomic_file.h): on any error `path`
// is left as it was and no temporary file remains.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/io/mapped_file.h"

namespace lmt::io {

// Bytes per element of a safetensors dtype string ("F32" -> 4), or nullopt when the dtype is not
// one of BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 I64 U64 F64. Sub-byte dtypes
// (F4, F6_*) are not supported.
std::optional<size_t> safetensors_dtype_size(std::string_view dtype);

// Largest header the reader accepts (the reference implementation's limit).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct TensorInfo {
  std::string name;
  std::string dtype;           // as written in the file: "F32", "BF16", ...
  std::vector<int64_t> shape;  // [] is a scalar (one element); a 0 anywhere means no elements
  uint64_t data_begin = 0;     // offset in the data section
  const uint8_t* data = nullptr;  // points into the mapping; may be unaligned; nullptr when size == 0
  size_t size = 0;                // bytes == numel() * dtype size

  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates the whole header (see the reader contract above).
  static StatusOr<SafetensorsFile> open(const std::string& path);

  // The parser behind open(), on bytes the caller owns and keeps alive while the result is used
  // (the result borrows them). `name` is used in error messages. Never reads outside
  // [bytes, bytes + size). For fuzzing and tests.
  static StatusOr<SafetensorsFile> parse(const uint8_t* bytes, size_t size, const std::string& name);

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

  const std::string& path() const { return path_; }
  // Tensors in file order (sorted by data offset).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  std::vector<std::string> names() const;
  // nullptr when the file has no tensor of that name.
  const TensorInfo* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Byte offset of the data section in the file (8 + header length).
  uint64_t data_section_offset() const { return data_offset_; }

  // Copies tensor `name` into dst[numel] as float, converting F32/BF16/F16/F64 (F64 rounds).
  // Errors: kNotFound (no such tensor), kInvalidArgument (numel differs from the tensor's),
  // kUnimplemented (another dtype).
  Status read_f32(const std::string& name, float* dst, int64_t numel) const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  MappedFile mapping_;  // empty when built by parse() on borrowed bytes
  uint64_t data_offset_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
  std::string name;
  std::string dtype;           // any dtype safetensors_dtype_size() knows: "F32", "BF16", "I32", "F64", ...
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel * dtype size bytes, little-endian; may be null when empty
};

// Writes tensors (in the given order, header keys in that order, "__metadata__" first when
// non-empty) to `path` atomically. The header is padded with spaces so the data section starts at
// a multiple of 8 bytes, as the reference implementation does. Errors: kInvalidArgument (duplicate
// or empty or reserved name, unknown dtype, negative dim, null data), kNotFound (directory
// missing), kIoError.
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

namespace detail {
// numel of `shape` into *numel; false when a dim is negative or the product overflows int64.
bool checked_numel(const std::vector<int64_t>& shape, int64_t* numel);
}  // namespace detail

}  // namespace lmt::io
