// Capacity is kept a power of two at most half full, so linear probes stay short.
#include "lmt/data/tokenizer/token_maps.h"

#include <algorithm>
#include <bit>

#include "lmt/base/check.h"

namespace lmt::data {

void BytesIdMap::reserve(size_t n) {
  const size_t want = std::bit_ceil(std::max<size_t>(16, 2 * n));
  if (want <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(want, Slot{});
  mask_ = want - 1;
  for (const Slot& s : old) {
    if (s.id < 0) continue;
    const uint64_t h = hash_bytes(arena_.data() + s.offset, s.len);
    size_t i = h & mask_;
    while (slots_[i].id >= 0) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void BytesIdMap::grow() { reserve(std::max<size_t>(16, slots_.size())); }

void BytesIdMap::insert(std::string_view key, int32_t id) {
  LMT_CHECK_GE(id, 0);
  LMT_CHECK_LT(arena_.size() + key.size(), size_t{1} << 32) << "token arena over 4 GiB";
  if (2 * (count_ + 1) > slots_.size()) grow();
  const uint64_t h = hash_bytes(key.data(), key.size());
  const auto tag = static_cast<uint32_t>(h >> 32);
  size_t i = h & mask_;
  for (;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.id < 0) break;
    if (s.tag == tag && s.len == key.size() && arena_.compare(s.offset, s.len, key) == 0) {
      s.id = id;
      return;
    }
  }
  Slot& s = slots_[i];
  s.offset = static_cast<uint32_t>(arena_.size());
  s.len = static_cast<uint32_t>(key.size());
  s.tag = tag;
  s.id = id;
  arena_.append(key);
  ++count_;
}

void PairMergeMap::reserve(size_t n) {
  const size_t want = std::bit_ceil(std::max<size_t>(16, 2 * n));
  if (want <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(want, Slot{});
  mask_ = want - 1;
  shift_ = 64 - std::countr_zero(want);
  for (const Slot& s : old) {
    if (s.key == kEmpty) continue;
    size_t i = slot_of(s.key);
    while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void PairMergeMap::grow() { reserve(std::max<size_t>(16, slots_.size())); }

void PairMergeMap::insert(int32_t left, int32_t right, Merge merge) {
  LMT_CHECK(left >= 0 && right >= 0);
  if (2 * (count_ + 1) > slots_.size()) grow();
  const uint64_t key = pack(left, right);
  size_t i = slot_of(key);
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
  if (slots_[i].key == kEmpty) ++count_;
  slots_[i] = {key, merge};
}

}  // namespace lmt::data
