// The GGUF v3 constants lmtrain writes (ggml's gguf.h / gguf-py's constants.py): metadata value
// types, the ggml tensor types of the exported weights, llama.cpp's token types and file types.
#pragma once

#include <cstdint>

namespace lmt::exporter::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
inline constexpr uint32_t kVersion = 3;
inline constexpr uint32_t kAlignment = 32;  // general.alignment (ggml's default)

enum class ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// ggml_type values of the element types lmtrain exports.
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ8_0 = 8, kBf16 = 30 };

inline constexpr int64_t kQ8BlockSize = 32;   // values per q8_0 block
inline constexpr int64_t kQ8BlockBytes = 34;  // f16 scale + 32 int8

// llama_token_type (tokenizer.ggml.token_type).
enum class TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// llama_ftype (general.file_type): what most of the weights are.
enum class FileType : uint32_t { kAllF32 = 0, kMostlyF16 = 1, kMostlyQ8_0 = 7, kMostlyBf16 = 32 };

}  // namespace lmt::exporter::gguf
