// GgufWriter: assembles one GGUF v3 file (ggml's gguf.h layout, little endian):
//
//   u32 magic "GGUF" | u32 version 3 | u64 tensor count | u64 metadata count
//   metadata: string key, u32 value type, value   (string = u64 length + bytes, no terminator;
//             array = u32 element type, u64 count, elements)
//   tensor infos: string name, u32 n_dims, u64 ne[n_dims] (ne[0] = the contiguous dimension,
//             i.e. [in, out] for an nn.Linear [out, in] matrix), u32 ggml type, u64 data offset
//   zero padding to the alignment, then the data: every tensor starts at a multiple of the alignment
//   (offsets are relative to the start of the data section), zero padded between tensors.
//
// Tensor bytes come from a producer called once, while the file is written, so that only one tensor
// is in memory at a time. write() creates the file atomically and never replaces an existing one.
// Keys and tensor names must be unique (add_* returns InvalidArgument otherwise).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/export/gguf_format.h"

namespace lmt::exporter::gguf {

class GgufWriter {
 public:
  using Producer = std::function<std::string()>;  // returns exactly the tensor's encoded bytes

  explicit GgufWriter(uint32_t alignment = kAlignment);

  Status add_u32(const std::string& key, uint32_t v);
  Status add_i32(const std::string& key, int32_t v);
  Status add_f32(const std::string& key, float v);
  Status add_bool(const std::string& key, bool v);
  Status add_string(const std::string& key, const std::string& v);
  Status add_string_array(const std::string& key, const std::vector<std::string>& v);
  Status add_i32_array(const std::string& key, const std::vector<int32_t>& v);
  Status add_f32_array(const std::string& key, const std::vector<float>& v);

  // `ne` in ggml order (ne[0] contiguous), 1 to 4 dims. q8_0 needs ne[0] % 32 == 0.
  Status add_tensor(const std::string& name, const std::vector<int64_t>& ne, GgmlType type, Producer produce);

  // Everything before the data section (header, metadata, tensor infos, padding).
  std::string header() const;
  // Writes the file: `path` must not exist (FailedPrecondition naming it otherwise).
  Status write(const std::string& path) const;

  int64_t tensor_count() const { return static_cast<int64_t>(tensors_.size()); }

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    int64_t bytes = 0;
    int64_t offset = 0;  // into the data section
    Producer produce;
  };
  Status add_kv(const std::string& key, ValueType type, std::string value);

  uint32_t alignment_;
  int64_t kv_count_ = 0;
  std::string kv_bytes_;
  std::vector<std::string> keys_;
  std::vector<Tensor> tensors_;
  int64_t data_bytes_ = 0;
};

}  // namespace lmt::exporter::gguf
