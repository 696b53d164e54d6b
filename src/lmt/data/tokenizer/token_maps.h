// Flat open-addressing hash maps for the BPE hot path: token bytes -> id, and a pair of adjacent
// ids -> (merge rank, merged id). Keys live in one arena, slots in one array, so a lookup touches
// one or two cache lines and never allocates (std::unordered_map<std::string, ...> costs a node
// allocation per key and a pointer chase per probe).
//
// Built once (insert), then read-only: concurrent find() calls are safe, insert() is not.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace lmt::data {

// 64-bit hash of a byte string: 8 bytes per multiply-mix round, seeded by the length.
inline uint64_t hash_bytes(const char* p, size_t n) {
  auto mix = [](uint64_t x) {
    x ^= x >> 31;
    x *= 0x9E6C63D0676A9A99ull;
    x ^= x >> 29;
    return x;
  };
  uint64_t h = 0x9E3779B97F4A7C15ull * (n + 1);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = mix(h ^ w) * 0xD6E8FEB86659FD93ull;
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  std::memcpy(&w, p, n);
  return mix(mix(h ^ w) * 0xD6E8FEB86659FD93ull);
}

// Byte string -> int32 id. Empty keys are allowed; duplicate inserts keep the last id.
class BytesIdMap {
 public:
  void reserve(size_t n);
  void insert(std::string_view key, int32_t id);
  // The id of `key`, or -1.
  int32_t find(std::string_view key) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash_bytes(key.data(), key.size());
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.tag == tag && s.len == key.size() && std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0)
        return s.id;
    }
  }
  size_t size() const { return count_; }

 private:
  struct Slot {
    uint32_t offset = 0, len = 0, tag = 0;
    int32_t id = -1;  // -1: empty slot
  };
  void grow();
  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0, count_ = 0;
};

// (left id, right id) -> (rank, merged id). Lower rank merges first.
class PairMergeMap {
 public:
  struct Merge {
    int32_t rank = -1;  // -1: no such merge
    int32_t merged = -1;
  };
  void reserve(size_t n);
  void insert(int32_t left, int32_t right, Merge merge);  // a duplicate pair keeps the last merge
  Merge find(int32_t left, int32_t right) const {
    if (slots_.empty()) return {};
    const uint64_t key = pack(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.merge;
      if (s.key == kEmpty) return {};
    }
  }
  size_t size() const { return count_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t pack(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }
  size_t slot_of(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_; }
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge;
  };
  void grow();
  std::vector<Slot> slots_;
  size_t mask_ = 0, count_ = 0;
  int shift_ = 64;
};

}  // namespace lmt::data
