#include "lmt/base/xxh64.h"

#include <bit>
#include <cstring>

namespace lmt {
namespace {

static_assert(std::endian::native == std::endian::little, "xxh64 reads lanes as little-endian words");

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ull;
constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kPrime5 = 0x27D4EB2F165667C5ull;

inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t round(uint64_t acc, uint64_t lane) {
  acc += lane * kPrime2;
  acc = std::rotl(acc, 31);
  return acc * kPrime1;
}
inline uint64_t merge_round(uint64_t h, uint64_t acc) {
  h ^= round(0, acc);
  return h * kPrime1 + kPrime4;
}

// Consumes whole 32-byte stripes; returns the number of bytes consumed.
inline size_t consume_stripes(uint64_t acc[4], const uint8_t* p, size_t size) {
  const uint8_t* const start = p;
  for (; size >= 32; size -= 32, p += 32) {
    acc[0] = round(acc[0], load64(p));
    acc[1] = round(acc[1], load64(p + 8));
    acc[2] = round(acc[2], load64(p + 16));
    acc[3] = round(acc[3], load64(p + 24));
  }
  return static_cast<size_t>(p - start);
}

}  // namespace

Xxh64::Xxh64(uint64_t seed) : seed_(seed) {
  acc_[0] = seed + kPrime1 + kPrime2;
  acc_[1] = seed + kPrime2;
  acc_[2] = seed;
  acc_[3] = seed - kPrime1;
}

void Xxh64::update(const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  total_ += size;
  if (buffered_ > 0) {
    const size_t take = std::min(size, 32 - buffered_);
    std::memcpy(buffer_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    size -= take;
    if (buffered_ < 32) return;
    consume_stripes(acc_, buffer_, 32);
    buffered_ = 0;
  }
  const size_t done = consume_stripes(acc_, p, size);
  std::memcpy(buffer_, p + done, size - done);
  buffered_ = size - done;
}

uint64_t Xxh64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = std::rotl(acc_[0], 1) + std::rotl(acc_[1], 7) + std::rotl(acc_[2], 12) + std::rotl(acc_[3], 18);
    for (uint64_t a : acc_) h = merge_round(h, a);
  } else {
    h = seed_ + kPrime5;
  }
  h += total_;
  const uint8_t* p = buffer_;
  size_t n = buffered_;
  for (; n >= 8; n -= 8, p += 8) h = std::rotl(h ^ round(0, load64(p)), 27) * kPrime1 + kPrime4;
  if (n >= 4) {
    h = std::rotl(h ^ (static_cast<uint64_t>(load32(p)) * kPrime1), 23) * kPrime2 + kPrime3;
    p += 4;
    n -= 4;
  }
  for (; n > 0; --n, ++p) h = std::rotl(h ^ (*p * kPrime5), 11) * kPrime1;
  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  h *= kPrime3;
  h ^= h >> 32;
  return h;
}

uint64_t xxh64(const void* data, size_t size, uint64_t seed) {
  Xxh64 h(seed);
  h.update(data, size);
  return h.digest();
}

std::string hex64(uint64_t value) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) s[i] = kDigits[value & 15];
  return s;
}

}  // namespace lmt
