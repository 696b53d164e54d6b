// libFuzzer target for the safetensors header parser (clang only: -fsanitize=fuzzer,address).
//   CXX=clang++ cmake -S . -B build-clang -G Ninja -DLMT_BUILD_BENCH=OFF && ninja -C build-clang safetensors_fuzz
//   build-clang/bin/safetensors_fuzz -max_total_time=60 -max_len=4096 [corpus_dir]
// Any crash, sanitizer report or out-of-bounds span is a bug: parse() must turn every input into
// either a valid SafetensorsFile or a Status.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "lmt/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = lmt::io::SafetensorsFile::parse(data, size, "<fuzz>");
  if (!file.ok()) return 0;
  for (const lmt::io::TensorInfo& t : file->tensors()) {
    if (t.size != 0 && (t.data < data || t.data + t.size > data + size)) std::abort();
    if (t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16" || t.dtype == "F64") {
      std::vector<float> out(static_cast<size_t>(t.numel()));
      if (!file->read_f32(t.name, out.data(), t.numel()).ok()) std::abort();
    }
  }
  return 0;
}
