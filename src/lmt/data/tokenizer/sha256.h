// SHA-256 (FIPS 180-4) of a byte stream, for tokenizer fingerprints: a digest that is stable across
// machines, compilers and lmtrain versions, so a dataset manifest can name the exact tokenizer.
// A thin wrapper over nettle's sha256_* (nettle-dev): nettle's context is a plain struct with no
// allocation and no error path, where OpenSSL's EVP interface allocates a context that can fail.
// A Sha256 is a plain value used by one thread at a time; nettle's context lives in its bytes, so
// this header does not include <nettle/sha2.h> (whose macros rename sha256_* for every includer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lmt::data {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Length-prefixed, so that ("ab","c") and ("a","bc") hash differently.
  void update_field(std::string_view s);
  std::string hex_digest();  // 64 lower-case hex digits; ends the stream (the object starts a new, empty one)

 private:
  // nettle's struct sha256_ctx (112 bytes in nettle 3; sha256.cpp checks the size and alignment).
  static constexpr size_t kContextBytes = 112;
  alignas(8) unsigned char ctx_[kContextBytes];
};

}  // namespace lmt::data
