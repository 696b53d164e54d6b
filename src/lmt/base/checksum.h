// checksum64: a fast 64-bit checksum for detecting corrupt or truncated files (not cryptographic).
// Processes 8 bytes per step (multiply-rotate mixing in the style of xxHash64), ~GB/s; streaming:
// Checksum64 c; c.update(a, n); c.update(b, m); c.digest() equals checksum64 of a then b.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace lmt {

class Checksum64 {
 public:
  void update(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (n > 0 && fill_ > 0) {  // finish a partial word from the previous call
      buf_[fill_++] = *p++;
      --n;
      if (fill_ == 8) mix_word(), fill_ = 0;
    }
    while (n >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      mix(w);
      p += 8;
      n -= 8;
    }
    while (n > 0) buf_[fill_++] = *p++, --n;
  }
  uint64_t digest() const {
    uint64_t h = h_ ^ (total_ + fill_);
    uint64_t tail = 0;
    std::memcpy(&tail, buf_, fill_);
    h ^= tail * kP2;
    h ^= h >> 33;
    h *= kP3;
    h ^= h >> 29;
    h *= kP4;
    return h ^ (h >> 32);
  }

 private:
  static constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full, kP3 = 0x165667B19E3779F9ull,
                            kP4 = 0x85EBCA77C2B2AE63ull;
  static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  void mix(uint64_t w) {
    h_ = rotl(h_ ^ (w * kP2), 31) * kP1;
    total_ += 8;
  }
  void mix_word() {
    uint64_t w;
    std::memcpy(&w, buf_, 8);
    mix(w);
  }
  uint64_t h_ = 0x27D4EB2F165667C5ull;
  uint64_t total_ = 0;
  uint8_t buf_[8] = {};
  size_t fill_ = 0;
};

inline uint64_t checksum64(const void* data, size_t n) {
  Checksum64 c;
  c.update(data, n);
  return c.digest();
}

inline std::string checksum_hex(uint64_t v) {
  static const char* d = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = d[v & 15];
  return s;
}

}  // namespace lmt
