// Element encodings of the GGUF export: f32 -> f16 / bf16 (round to nearest, ties to even, as
// numpy's astype and ggml's GGML_FP32_TO_FP16 do; io::float_to_f16 and bf16::round_from_float) and q8_0, ggml's quantize_row_q8_0_ref:
// per block of 32 values, d = max|x| / 127 stored as f16, q[j] = round(x[j] / d) as int8 (half away
// from zero; 1/d is computed from the f32 d, d == 0 gives q = 0). Dequantised: x ≈ f16(d) · q.
#pragma once

#include <cstdint>
#include <string>

#include "lmt/export/gguf_format.h"

namespace lmt::exporter::gguf {

// Bytes of `n` values of `type` (n % 32 == 0 for q8_0).
int64_t encoded_bytes(GgmlType type, int64_t n);

// Appends `n` values of `x` encoded as `type` to `out`. q8_0 needs n % 32 == 0 (LMT_CHECK).
void encode(const float* x, int64_t n, GgmlType type, std::string* out);

// q8_0 blocks -> f32 (n values; for tests and round-trip checks).
void dequantize_q8_0(const uint8_t* blocks, int64_t n, float* out);

}  // namespace lmt::exporter::gguf
