// SHA-256 (FIPS 180-4) of a byte stream, for tokenizer fingerprints: a digest that is stable across
// machines, compilers and lmtrain versions, so a dataset manifest can name the exact tokenizer.
// A Sha256 is a plain value used by one thread at a time.
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
  std::string hex_digest();  // 64 lower-case hex digits; ends the stream

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

}  // namespace lmt::data
