#include "lmt/export/gguf_quant.h"

#include <cmath>
#include <cstring>

#include "lmt/base/bf16.h"
#include "lmt/base/check.h"
#include "lmt/io/f16.h"

namespace lmt::exporter::gguf {

int64_t encoded_bytes(GgmlType type, int64_t n) {
  switch (type) {
    case GgmlType::kF32:
      return 4 * n;
    case GgmlType::kF16:
    case GgmlType::kBf16:
      return 2 * n;
    case GgmlType::kQ8_0:
      return n / kQ8BlockSize * kQ8BlockBytes;
  }
  return 0;
}

void encode(const float* x, int64_t n, GgmlType type, std::string* out) {
  const size_t start = out->size();
  out->resize(start + static_cast<size_t>(encoded_bytes(type, n)));
  char* p = out->data() + start;
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(p, x, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = io::float_to_f16(x[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return;
    case GgmlType::kBf16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = bf16::round_from_float(x[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return;
    case GgmlType::kQ8_0: {
      LMT_CHECK(n % kQ8BlockSize == 0) << "q8_0 needs a multiple of 32 values, got " << n;
      for (int64_t b = 0; b < n / kQ8BlockSize; ++b) {
        const float* xb = x + b * kQ8BlockSize;
        char* block = p + b * kQ8BlockBytes;
        float amax = 0.0f;
        for (int64_t j = 0; j < kQ8BlockSize; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t dh = io::float_to_f16(d);
        std::memcpy(block, &dh, 2);
        for (int64_t j = 0; j < kQ8BlockSize; ++j) {
          const int8_t q = static_cast<int8_t>(std::round(xb[j] * id));  // |x·id| <= 127
          std::memcpy(block + 2 + j, &q, 1);
        }
      }
      return;
    }
  }
}

void dequantize_q8_0(const uint8_t* blocks, int64_t n, float* out) {
  for (int64_t b = 0; b < n / kQ8BlockSize; ++b) {
    const uint8_t* block = blocks + b * kQ8BlockBytes;
    uint16_t dh;
    std::memcpy(&dh, block, 2);
    const float d = io::f16_to_float(dh);
    for (int64_t j = 0; j < kQ8BlockSize; ++j) {
      int8_t q;
      std::memcpy(&q, block + 2 + j, 1);
      out[b * kQ8BlockSize + j] = d * static_cast<float>(q);
    }
  }
}

}  // namespace lmt::exporter::gguf
