#include "lmt/base/xxh64.h"

#define XXH_STATIC_LINKING_ONLY  // XXH64_state_t's definition, so that the state lives inside an Xxh64
#include <xxhash.h>

namespace lmt {
namespace {

XXH64_state_t* state(unsigned char* bytes) { return reinterpret_cast<XXH64_state_t*>(bytes); }
const XXH64_state_t* state(const unsigned char* bytes) { return reinterpret_cast<const XXH64_state_t*>(bytes); }

}  // namespace

Xxh64::Xxh64(uint64_t seed) {
  static_assert(sizeof(XXH64_state_t) == kStateBytes, "libxxhash's XXH64_state_t changed size: update kStateBytes");
  static_assert(alignof(XXH64_state_t) <= 8, "libxxhash's XXH64_state_t needs more than 8-byte alignment");
  XXH64_reset(state(state_), seed);  // cannot fail on a non-null state
}

void Xxh64::update(const void* data, size_t size) {
  if (size == 0) return;  // libxxhash accepts (NULL, 0), but a caller's empty span may carry any pointer
  XXH64_update(state(state_), data, size);
}

uint64_t Xxh64::digest() const { return XXH64_digest(state(state_)); }

uint64_t xxh64(const void* data, size_t size, uint64_t seed) { return XXH64(size == 0 ? nullptr : data, size, seed); }

std::string hex64(uint64_t value) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) s[i] = kDigits[value & 15];
  return s;
}

}  // namespace lmt
