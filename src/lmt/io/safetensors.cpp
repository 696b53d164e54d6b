// Safetensors reader: header parsing and validation, tensor lookup, conversion to float.
// The writer is in safetensors_write.cpp.
#include "lmt/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "lmt/base/bf16.h"
#include "lmt/io/f16.h"

namespace lmt::io {
namespace {

using nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr const char* kCorruptHint =
    "the file is corrupt or truncated (or not safetensors at all); re-download or re-export it";

struct DtypeSize {
  std::string_view name;
  size_t bytes;
};
constexpr DtypeSize kDtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
    {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"I64", 8},     {"U64", 8}, {"F64", 8},
};

Status corrupt(const std::string& file, const std::string& what, const std::string& hint = kCorruptHint) {
  return DataLoss(file + ": " + what, hint);
}

Status corrupt_tensor(const std::string& file, const std::string& tensor, const std::string& what,
                      const std::string& hint = kCorruptHint) {
  return DataLoss(file + ": tensor '" + tensor + "': " + what, hint);
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// The header length is little-endian whatever the host is; assemble it byte by byte.
uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Integers only: JSON floats (64.0), strings and negatives are not offsets or dims.
std::optional<uint64_t> as_non_negative_integer(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

StatusOr<json> parse_header_json(const uint8_t* begin, uint64_t size, const std::string& file) {
  json header;
  try {
    // nlohmann throws on syntax errors and invalid UTF-8; the exception stays inside this function.
    header = json::parse(begin, begin + size);
  } catch (const json::exception& e) {
    return corrupt(file, "header (" + std::to_string(size) + " bytes at file offset 8) is not valid JSON: " + e.what());
  }
  if (!header.is_object()) {
    return corrupt(file, std::string("header is JSON but not an object (it is: ") + header.type_name() + ")");
  }
  return header;
}

Status parse_metadata(const json& value, const std::string& file, std::map<std::string, std::string>* out) {
  const std::string hint = "__metadata__ must map strings to strings; " + std::string(kCorruptHint);
  if (!value.is_object()) return corrupt(file, "__metadata__ is not an object", hint);
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) return corrupt(file, "__metadata__ key '" + key + "' is not a string", hint);
    (*out)[key] = v.get<std::string>();
  }
  return Status::Ok();
}

StatusOr<std::vector<int64_t>> parse_shape(const std::string& name, const json& entry, const std::string& file) {
  auto it = entry.find("shape");
  if (it == entry.end()) return corrupt_tensor(file, name, "missing \"shape\"");
  if (!it->is_array()) return corrupt_tensor(file, name, "\"shape\" is not an array");
  std::vector<int64_t> shape;
  for (const json& d : *it) {
    if (d.is_number_integer() && !d.is_number_unsigned() && d.get<int64_t>() < 0) {
      return corrupt_tensor(file, name, "negative dimension " + std::to_string(d.get<int64_t>()) + " in \"shape\"");
    }
    std::optional<uint64_t> dim = as_non_negative_integer(d);
    if (!dim) return corrupt_tensor(file, name, "\"shape\" holds a non-integer: " + d.dump());
    if (*dim > static_cast<uint64_t>(INT64_MAX)) return corrupt_tensor(file, name, "dimension " + d.dump() + " is too large");
    shape.push_back(static_cast<int64_t>(*dim));
  }
  return shape;
}

// Checks one header entry on its own: types, dtype, offsets inside the data section, byte length.
StatusOr<TensorInfo> parse_entry(const std::string& name, const json& entry, const std::string& file,
                                 uint64_t data_size) {
  if (!entry.is_object()) return corrupt_tensor(file, name, "header entry is not an object");
  TensorInfo t;
  t.name = name;

  auto dtype = entry.find("dtype");
  if (dtype == entry.end()) return corrupt_tensor(file, name, "missing \"dtype\"");
  if (!dtype->is_string()) return corrupt_tensor(file, name, "\"dtype\" is not a string");
  t.dtype = dtype->get<std::string>();
  std::optional<size_t> elem_bytes = safetensors_dtype_size(t.dtype);
  if (!elem_bytes) {
    return corrupt_tensor(file, name, "unknown dtype \"" + t.dtype + "\"",
                          "supported: BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 I64 U64 F64");
  }

  LMT_ASSIGN_OR_RETURN(t.shape, parse_shape(name, entry, file));

  auto offsets = entry.find("data_offsets");
  if (offsets == entry.end()) return corrupt_tensor(file, name, "missing \"data_offsets\"");
  if (!offsets->is_array() || offsets->size() != 2) return corrupt_tensor(file, name, "\"data_offsets\" is not [begin, end]");
  std::optional<uint64_t> begin = as_non_negative_integer((*offsets)[0]);
  std::optional<uint64_t> end = as_non_negative_integer((*offsets)[1]);
  if (!begin || !end) return corrupt_tensor(file, name, "\"data_offsets\" " + offsets->dump() + " are not non-negative integers");
  const std::string range = "data_offsets [" + std::to_string(*begin) + ", " + std::to_string(*end) + "]";
  if (*begin > *end) return corrupt_tensor(file, name, range + " has begin > end");
  if (*end > data_size) {
    return corrupt_tensor(file, name, range + " ends beyond the data section (" + std::to_string(data_size) + " bytes)");
  }

  int64_t numel = 0;
  uint64_t expected_bytes = 0;
  if (!detail::checked_numel(t.shape, &numel) ||
      __builtin_mul_overflow(static_cast<uint64_t>(numel), *elem_bytes, &expected_bytes)) {
    return corrupt_tensor(file, name, "shape " + shape_string(t.shape) + " has more elements than any file can hold");
  }
  if (*end - *begin != expected_bytes) {
    return corrupt_tensor(file, name,
                          range + " span " + std::to_string(*end - *begin) + " bytes but " + t.dtype +
                              shape_string(t.shape) + " needs " + std::to_string(expected_bytes));
  }
  t.data_begin = *begin;
  t.size = static_cast<size_t>(expected_bytes);
  return t;
}

// Tensors must tile the data section exactly, like the reference implementation requires: an
// overlap means two tensors alias, a hole means the header and the data disagree.
Status check_tiling(const std::vector<TensorInfo>& sorted, const std::string& file, uint64_t data_size) {
  uint64_t covered = 0;  // data bytes [0, covered) belong to the tensors seen so far
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : sorted) {
    if (t.data_begin < covered) {
      return corrupt_tensor(file, t.name,
                            "data at offset " + std::to_string(t.data_begin) + " overlaps tensor '" + previous->name +
                                "' (which ends at " + std::to_string(covered) + ")");
    }
    if (t.data_begin > covered) {
      return corrupt_tensor(file, t.name,
                            std::to_string(t.data_begin - covered) + " unused bytes (a hole) at data offset " +
                                std::to_string(covered) + " before this tensor");
    }
    covered = t.data_begin + t.size;
    previous = &t;
  }
  if (covered != data_size) {
    return corrupt(file, std::to_string(data_size - covered) + " unused bytes after the last tensor at data offset " +
                             std::to_string(covered) + " (the data section holds " + std::to_string(data_size) + ")");
  }
  return Status::Ok();
}

}  // namespace

namespace detail {
bool checked_numel(const std::vector<int64_t>& shape, int64_t* numel) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  }
  *numel = n;
  return true;
}
}  // namespace detail

std::optional<size_t> safetensors_dtype_size(std::string_view dtype) {
  for (const DtypeSize& d : kDtypes) {
    if (d.name == dtype) return d.bytes;
  }
  return std::nullopt;
}

int64_t TensorInfo::numel() const {
  int64_t n = 0;
  return detail::checked_numel(shape, &n) ? n : -1;
}

StatusOr<SafetensorsFile> SafetensorsFile::parse(const uint8_t* bytes, size_t size, const std::string& name) {
  if (size < 8) {
    return corrupt(name, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  }
  const uint64_t header_len = read_le64(bytes);
  if (header_len > kSafetensorsMaxHeaderBytes) {
    return corrupt(name, "header length " + std::to_string(header_len) + " is absurd (limit " +
                             std::to_string(kSafetensorsMaxHeaderBytes) + " bytes)",
                   "this is not a safetensors file (a git-lfs pointer or a PyTorch .bin?) or it is corrupt");
  }
  if (header_len > size - 8) {
    return corrupt(name, "header length " + std::to_string(header_len) + " exceeds the " + std::to_string(size - 8) +
                             " bytes after the length field");
  }
  LMT_ASSIGN_OR_RETURN(json header, parse_header_json(bytes + 8, header_len, name));

  SafetensorsFile file;
  file.path_ = name;
  file.data_offset_ = 8 + header_len;
  const uint64_t data_size = size - file.data_offset_;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      LMT_RETURN_IF_ERROR(parse_metadata(value, name, &file.metadata_));
      continue;
    }
    LMT_ASSIGN_OR_RETURN(TensorInfo t, parse_entry(key, value, name, data_size));
    file.tensors_.push_back(std::move(t));
  }
  // File order; empty tensors sort before a tensor that starts at the same offset.
  std::stable_sort(file.tensors_.begin(), file.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.data_begin != b.data_begin ? a.data_begin < b.data_begin : a.size < b.size;
  });
  LMT_RETURN_IF_ERROR(check_tiling(file.tensors_, name, data_size));

  const uint8_t* data_section = bytes + file.data_offset_;
  for (size_t i = 0; i < file.tensors_.size(); ++i) {
    TensorInfo& t = file.tensors_[i];
    t.data = t.size == 0 ? nullptr : data_section + t.data_begin;
    file.index_.emplace(t.name, i);
  }
  return file;
}

StatusOr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  LMT_ASSIGN_OR_RETURN(MappedFile mapping, MappedFile::open_read_only(path));
  LMT_ASSIGN_OR_RETURN(SafetensorsFile file, parse(mapping.data(), mapping.size(), path));
  file.mapping_ = std::move(mapping);  // the mapping's address does not change, so data pointers stay valid
  return file;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const TensorInfo& t : tensors_) out.push_back(t.name);
  return out;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Status SafetensorsFile::read_f32(const std::string& name, float* dst, int64_t numel) const {
  const TensorInfo* t = find(name);
  if (t == nullptr) {
    std::string hint = tensors_.empty() ? "the file holds no tensors"
                                        : "the file holds " + std::to_string(tensors_.size()) + " tensors, e.g. '" +
                                              tensors_.front().name + "'; check the model's naming family";
    return NotFound(path_ + ": no tensor named '" + name + "'", hint);
  }
  if (t->numel() != numel) {
    return InvalidArgument(path_ + ": tensor '" + name + "' is " + t->dtype + shape_string(t->shape) + " with " +
                               std::to_string(t->numel()) + " elements, but " + std::to_string(numel) + " were asked for",
                           "the model configuration does not match this checkpoint");
  }
  const uint8_t* src = t->data;
  // memcpy per element: tensor data in a safetensors file need not be aligned.
  if (t->dtype == "F32") {
    if (numel > 0) std::memcpy(dst, src, t->size);
  } else if (t->dtype == "BF16" || t->dtype == "F16") {
    const bool is_bf16 = t->dtype == "BF16";
    for (int64_t i = 0; i < numel; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = is_bf16 ? bf16::to_float(h) : f16_to_float(h);
    }
  } else if (t->dtype == "F64") {
    for (int64_t i = 0; i < numel; ++i) {
      double d;
      std::memcpy(&d, src + 8 * i, 8);
      dst[i] = static_cast<float>(d);
    }
  } else {
    return Unimplemented(path_ + ": tensor '" + name + "' has dtype " + t->dtype + ", which read_f32 does not convert",
                         "read_f32 converts F32, BF16, F16 and F64; read other dtypes through TensorInfo::data");
  }
  return Status::Ok();
}

}  // namespace lmt::io
