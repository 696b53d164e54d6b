#include "lmt/data/sequence_order.h"

#include <bit>

#include "lmt/base/check.h"

namespace lmt::data {

IndexPermutation::IndexPermutation(uint64_t n, uint64_t key) : n_(n) {
  LMT_CHECK_GE(n, 1u);
  // A balanced Feistel network permutes [0, 2^(2h)); choose the smallest such domain >= n, so cycle
  // walking needs fewer than 4 encryptions per index on average.
  int bits = n <= 1 ? 2 : std::bit_width(n - 1);
  if (bits < 2) bits = 2;
  if (bits % 2) ++bits;
  half_bits_ = bits / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  uint64_t k = key;
  for (uint64_t& rk : round_keys_) rk = k = mix64(k);
}

uint64_t IndexPermutation::encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (uint64_t rk : round_keys_) {
    const uint64_t next = left ^ (mix64(right ^ rk) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t IndexPermutation::operator()(uint64_t i) const {
  LMT_DCHECK(i < n_);
  // Cycle walking: re-encrypt until the value falls inside [0, n); this stays a bijection of [0, n).
  uint64_t y = encrypt(i);
  while (y >= n_) y = encrypt(y);
  return y;
}

SequenceOrder::SequenceOrder(int64_t windows, int64_t group, bool shuffle, uint64_t key)
    : windows_(windows), group_(group), shuffle_(shuffle), key_(key) {
  LMT_CHECK_GE(windows, 1);
  LMT_CHECK_GE(group, 1);
  if (shuffle) {
    LMT_CHECK_GE(windows, group) << "a shuffled epoch needs at least one window per stratum";
    stratum_size_ = windows / group;
    positions_ = stratum_size_ * group;
  } else {
    stratum_size_ = windows;
    positions_ = windows;
  }
}

int64_t SequenceOrder::window(int64_t epoch, int64_t position) const {
  LMT_DCHECK(position >= 0 && position < positions_);
  if (!shuffle_) return position;
  const uint64_t epoch_key = mix64(key_ ^ mix64(static_cast<uint64_t>(epoch)));
  const uint64_t rotation = epoch_key % static_cast<uint64_t>(windows_);
  const int64_t stratum = position % group_, index = position / group_;
  const IndexPermutation pi(static_cast<uint64_t>(stratum_size_), mix64(epoch_key + static_cast<uint64_t>(stratum)));
  const uint64_t rotated = static_cast<uint64_t>(stratum * stratum_size_) + pi(static_cast<uint64_t>(index));
  return static_cast<int64_t>((rotated + rotation) % static_cast<uint64_t>(windows_));
}

}  // namespace lmt::data
