#include "lmt/export/gguf_writer.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>

#include "lmt/export/gguf_quant.h"
#include "lmt/io/atomic_file.h"

namespace lmt::exporter::gguf {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is written little endian");

template <typename T>
void put(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}

void put_string(std::string* out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out->append(s);
}

int64_t align_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {}

Status GgufWriter::add_kv(const std::string& key, ValueType type, std::string value) {
  if (key.empty()) return InvalidArgument("GGUF metadata key is empty");
  if (std::find(keys_.begin(), keys_.end(), key) != keys_.end())
    return InvalidArgument("GGUF metadata key '" + key + "' is set twice");
  keys_.push_back(key);
  put_string(&kv_bytes_, key);
  put<uint32_t>(&kv_bytes_, static_cast<uint32_t>(type));
  kv_bytes_ += value;
  ++kv_count_;
  return Status::Ok();
}

Status GgufWriter::add_u32(const std::string& key, uint32_t v) {
  std::string b;
  put(&b, v);
  return add_kv(key, ValueType::kU32, std::move(b));
}

Status GgufWriter::add_i32(const std::string& key, int32_t v) {
  std::string b;
  put(&b, v);
  return add_kv(key, ValueType::kI32, std::move(b));
}

Status GgufWriter::add_f32(const std::string& key, float v) {
  std::string b;
  put(&b, v);
  return add_kv(key, ValueType::kF32, std::move(b));
}

Status GgufWriter::add_bool(const std::string& key, bool v) {
  std::string b;
  put<uint8_t>(&b, v ? 1 : 0);
  return add_kv(key, ValueType::kBool, std::move(b));
}

Status GgufWriter::add_string(const std::string& key, const std::string& v) {
  std::string b;
  put_string(&b, v);
  return add_kv(key, ValueType::kString, std::move(b));
}

Status GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::string b;
  put<uint32_t>(&b, static_cast<uint32_t>(ValueType::kString));
  put<uint64_t>(&b, v.size());
  for (const std::string& s : v) put_string(&b, s);
  return add_kv(key, ValueType::kArray, std::move(b));
}

Status GgufWriter::add_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::string b;
  put<uint32_t>(&b, static_cast<uint32_t>(ValueType::kI32));
  put<uint64_t>(&b, v.size());
  for (int32_t x : v) put(&b, x);
  return add_kv(key, ValueType::kArray, std::move(b));
}

Status GgufWriter::add_f32_array(const std::string& key, const std::vector<float>& v) {
  std::string b;
  put<uint32_t>(&b, static_cast<uint32_t>(ValueType::kF32));
  put<uint64_t>(&b, v.size());
  for (float x : v) put(&b, x);
  return add_kv(key, ValueType::kArray, std::move(b));
}

Status GgufWriter::add_tensor(const std::string& name, const std::vector<int64_t>& ne, GgmlType type,
                              Producer produce) {
  if (name.empty() || name.size() >= 64)  // GGML_MAX_NAME
    return InvalidArgument("GGUF tensor name '" + name + "' is empty or longer than 63 bytes");
  for (const Tensor& t : tensors_)
    if (t.name == name) return InvalidArgument("GGUF tensor '" + name + "' is added twice");
  if (ne.empty() || ne.size() > 4) return InvalidArgument("GGUF tensor '" + name + "' must have 1 to 4 dimensions");
  int64_t n = 1;
  for (int64_t d : ne) {
    if (d <= 0) return InvalidArgument("GGUF tensor '" + name + "' has a dimension <= 0");
    n *= d;
  }
  if (type == GgmlType::kQ8_0 && ne[0] % kQ8BlockSize != 0)
    return InvalidArgument("GGUF tensor '" + name + "': q8_0 rows must be a multiple of 32 values, got " +
                           std::to_string(ne[0]));
  Tensor t{name, ne, type, encoded_bytes(type, n), align_up(data_bytes_, alignment_), std::move(produce)};
  data_bytes_ = t.offset + t.bytes;
  tensors_.push_back(std::move(t));
  return Status::Ok();
}

std::string GgufWriter::header() const {
  std::string h;
  put<uint32_t>(&h, kMagic);
  put<uint32_t>(&h, kVersion);
  put<uint64_t>(&h, tensors_.size());
  put<uint64_t>(&h, static_cast<uint64_t>(kv_count_));
  h += kv_bytes_;
  for (const Tensor& t : tensors_) {
    put_string(&h, t.name);
    put<uint32_t>(&h, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(&h, static_cast<uint64_t>(d));
    put<uint32_t>(&h, static_cast<uint32_t>(t.type));
    put<uint64_t>(&h, static_cast<uint64_t>(t.offset));
  }
  h.resize(static_cast<size_t>(align_up(static_cast<int64_t>(h.size()), alignment_)), '\0');
  return h;
}

Status GgufWriter::write(const std::string& path) const {
  std::error_code ec;
  if (std::filesystem::exists(path, ec))
    return FailedPrecondition(path + " already exists",
                              "lmtrain export never replaces a file: remove it or choose another --out");
  LMT_ASSIGN_OR_RETURN(io::AtomicFileWriter w, io::AtomicFileWriter::create(path, io::TmpName::kUnique));
  const std::string h = header();
  LMT_RETURN_IF_ERROR(w.append(h.data(), h.size()));
  int64_t written = 0;
  const std::string zeros(alignment_, '\0');
  for (const Tensor& t : tensors_) {
    LMT_RETURN_IF_ERROR(w.append(zeros.data(), static_cast<size_t>(t.offset - written)));
    const std::string bytes = t.produce();
    if (static_cast<int64_t>(bytes.size()) != t.bytes)
      return Internal("GGUF tensor '" + t.name + "' produced " + std::to_string(bytes.size()) + " bytes, expected " +
                      std::to_string(t.bytes));
    LMT_RETURN_IF_ERROR(w.append(bytes.data(), bytes.size()));
    written = t.offset + t.bytes;
  }
  // The final rename replaces whatever appeared at `path` meanwhile; check once more just before it.
  if (std::filesystem::exists(path, ec))
    return FailedPrecondition(path + " appeared while the GGUF file was written", "it was left as it is");
  return w.commit();
}

}  // namespace lmt::exporter::gguf
