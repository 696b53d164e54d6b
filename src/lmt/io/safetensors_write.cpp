// Safetensors writer: validates the request, builds the padded JSON header, writes atomically.
#include <nlohmann/json.hpp>
#include <set>

#include "lmt/io/atomic_file.h"
#include "lmt/io/safetensors.h"

namespace lmt::io {
namespace {

using ordered_json = nlohmann::ordered_json;  // keeps keys in insertion order, as the format's readers expect

constexpr std::string_view kMetadataKey = "__metadata__";

Status bad_tensor(const std::string& path, const std::string& tensor, const std::string& what, const std::string& hint) {
  return InvalidArgument(path + ": cannot write tensor '" + tensor + "': " + what, hint);
}

// Everything a caller can get wrong is rejected before the first byte is written.
Status validate(const std::string& path, const std::vector<TensorToWrite>& tensors, std::vector<uint64_t>* bytes) {
  std::set<std::string_view> seen;
  for (const TensorToWrite& t : tensors) {
    if (t.name.empty()) return InvalidArgument(path + ": cannot write a tensor with an empty name", "give every tensor a name");
    if (t.name == kMetadataKey) return bad_tensor(path, t.name, "the name is reserved", "rename the tensor");
    if (!seen.insert(t.name).second) {
      return bad_tensor(path, t.name, "the name appears twice", "tensor names must be unique in one file");
    }
    std::optional<size_t> elem_bytes = safetensors_dtype_size(t.dtype);
    if (!elem_bytes) {
      return bad_tensor(path, t.name, "unknown dtype \"" + t.dtype + "\"", "use a safetensors dtype: F32, BF16, F16, F64, I32, I64, U8, ...");
    }
    int64_t numel = 0;
    uint64_t n_bytes = 0;
    if (!detail::checked_numel(t.shape, &numel) ||
        __builtin_mul_overflow(static_cast<uint64_t>(numel), *elem_bytes, &n_bytes)) {
      return bad_tensor(path, t.name, "shape has a negative dimension or too many elements", "check the shape");
    }
    if (n_bytes > 0 && t.data == nullptr) return bad_tensor(path, t.name, "data is null", "pass the tensor's bytes");
    bytes->push_back(n_bytes);
  }
  return Status::Ok();
}

// The JSON header padded with spaces so that 8 + header length is a multiple of 8 (the data section
// then starts 8-byte aligned in the file, and in any page-aligned mapping of it).
StatusOr<std::string> build_header(const std::string& path, const std::vector<TensorToWrite>& tensors,
                                   const std::vector<uint64_t>& bytes, const std::map<std::string, std::string>& metadata) {
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json meta = ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header[std::string(kMetadataKey)] = std::move(meta);
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    ordered_json entry = ordered_json::object();
    entry["dtype"] = tensors[i].dtype;
    entry["shape"] = tensors[i].shape;
    entry["data_offsets"] = {offset, offset + bytes[i]};
    header[tensors[i].name] = std::move(entry);
    offset += bytes[i];
  }
  std::string text;
  try {
    text = header.dump();  // throws only on invalid UTF-8 in a name or metadata string
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(path + ": cannot write the header: " + e.what(), "tensor names and metadata must be valid UTF-8");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::vector<uint64_t> bytes;
  LMT_RETURN_IF_ERROR(validate(path, tensors, &bytes));
  LMT_ASSIGN_OR_RETURN(std::string header, build_header(path, tensors, bytes, metadata));

  uint8_t length_field[8];
  for (int i = 0; i < 8; ++i) length_field[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));

  LMT_ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::create(path));
  LMT_RETURN_IF_ERROR(out.append(length_field, sizeof(length_field)));
  LMT_RETURN_IF_ERROR(out.append(header.data(), header.size()));
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (bytes[i] > 0) LMT_RETURN_IF_ERROR(out.append(tensors[i].data, bytes[i]));
  }
  return out.commit();
}

}  // namespace lmt::io
