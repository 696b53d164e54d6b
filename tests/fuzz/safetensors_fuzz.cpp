// safetensors_fuzz: the safetensors reader (io/safetensors.h), on the file's bytes.
//
// Input: a whole .safetensors file. SafetensorsFile::parse() must turn every input into either a
// valid file or a Status. Checked beyond "no crash": every tensor's data span lies inside the input,
// and read_f32() succeeds on every float tensor it accepted.
// Seeds: files written by write_safetensors() (F32, BF16, F16, F64, I32, a scalar, an empty tensor,
// metadata).
//   build-fuzz/bin/safetensors_fuzz -max_total_time=60 -max_len=4096 CORPUS_DIR
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "fuzz_util.h"
#include "lmt/io/safetensors.h"

namespace {

void write_seeds(const std::string& dir) {
  using lmt::io::TensorToWrite;
  const float f[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
  const uint16_t h[4] = {0x3f80, 0xc000, 0x0000, 0x7f80};
  const double d[2] = {1.0 / 3, -1e300};
  const int32_t i[3] = {1, -1, 1 << 30};
  const std::vector<std::pair<std::string, std::vector<TensorToWrite>>> files = {
      {"f32", {{"w", "F32", {2, 3}, f}}},
      {"mixed",
       {{"a.weight", "BF16", {4}, h}, {"b", "F16", {2, 2}, h}, {"c", "F64", {2}, d}, {"d", "I32", {3}, i}}},
      {"scalar_empty", {{"s", "F32", {}, f}, {"e", "F32", {0, 3}, nullptr}, {"t", "F32", {1}, f + 1}}},
  };
  for (const auto& [name, tensors] : files) {
    const std::map<std::string, std::string> meta =
        name == "mixed" ? std::map<std::string, std::string>{{"format", "pt"}} : std::map<std::string, std::string>{};
    if (!lmt::io::write_safetensors(dir + "/" + name + ".safetensors", tensors, meta).ok())
      lmt::fuzz::fail("seed " + name + " could not be written");
  }
}

}  // namespace

LMT_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = lmt::io::SafetensorsFile::parse(data, size, "<fuzz>");
  if (!file.ok()) return 0;
  for (const lmt::io::TensorInfo& t : file->tensors()) {
    if (t.size != 0 && (t.data < data || t.data + t.size > data + size)) lmt::fuzz::fail("tensor " + t.name + " outside the input");
    if (t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16" || t.dtype == "F64") {
      std::vector<float> out(static_cast<size_t>(t.numel()));
      if (!file->read_f32(t.name, out.data(), t.numel()).ok()) lmt::fuzz::fail("read_f32 refused tensor " + t.name);
    }
  }
  return 0;
}
