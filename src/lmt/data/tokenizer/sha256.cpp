#include "lmt/data/tokenizer/sha256.h"

#include <nettle/sha2.h>

namespace lmt::data {
namespace {

sha256_ctx* context(unsigned char* bytes) { return reinterpret_cast<sha256_ctx*>(bytes); }

}  // namespace

Sha256::Sha256() {
  static_assert(sizeof(sha256_ctx) == kContextBytes, "nettle's sha256_ctx changed size: update kContextBytes");
  static_assert(alignof(sha256_ctx) <= 8, "nettle's sha256_ctx needs more than 8-byte alignment");
  sha256_init(context(ctx_));
}

void Sha256::update(const void* data, size_t size) {
  if (size == 0) return;
  sha256_update(context(ctx_), size, static_cast<const uint8_t*>(data));
}

void Sha256::update_field(std::string_view s) {
  const uint64_t n = s.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));  // little-endian length
  update(len, 8);
  update(s);
}

std::string Sha256::hex_digest() {
  uint8_t digest[SHA256_DIGEST_SIZE];
  sha256_digest(context(ctx_), sizeof digest, digest);  // also resets the context
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof digest);
  for (uint8_t b : digest) {
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

}  // namespace lmt::data
