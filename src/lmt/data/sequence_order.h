// Which training window each position of an epoch reads: the loader's shuffling, as pure functions
// of (seed, epoch, position), so a cursor is just two integers and resuming costs nothing.
//
// A split of N tokens holds W = ⌊(N − 1) / T⌋ windows; window w is tokens [w·T, w·T + T + 1)
// (inputs are its first T, targets its last T). The tokens after the last whole window are not
// used in that epoch (at most T of them).
//
// Unshuffled, position p reads window p. Shuffled (grain's "index shuffle" idea, made stratified):
//   * each epoch the windows are rotated by a seeded offset and cut into G = B·world contiguous
//     strata of S = ⌊W/G⌋ windows (the W mod G left over change with the rotation every epoch);
//   * position p reads stratum p mod G at index π(⌊p/G⌋), π a seeded bijection of [0, S) per
//     (epoch, stratum): a 6-round Feistel network with cycle walking, O(1) time and memory.
// Consecutive positions p … p+G−1 (one global batch) therefore come from G different strata: a
// document shorter than about (G−2)/G of the data can never fill a whole global batch, and its
// windows are spread over the epoch instead of arriving back to back.
// Immutable; thread-safe.
#pragma once

#include <cstdint>

namespace lmt::data {

// A seeded bijection of [0, n) (n >= 1).
class IndexPermutation {
 public:
  IndexPermutation(uint64_t n, uint64_t key);
  uint64_t operator()(uint64_t i) const;
  uint64_t size() const { return n_; }

 private:
  uint64_t encrypt(uint64_t x) const;

  uint64_t n_;
  int half_bits_;
  uint64_t half_mask_;
  uint64_t round_keys_[6];
};

class SequenceOrder {
 public:
  // windows W >= 1; group G >= 1 (rows of a global batch, B·world); with shuffle W >= G.
  SequenceOrder(int64_t windows, int64_t group, bool shuffle, uint64_t key);

  int64_t windows() const { return windows_; }
  // Positions an epoch has: S·G shuffled, W unshuffled.
  int64_t positions_per_epoch() const { return positions_; }
  // The window read at `position` in [0, positions_per_epoch()) of `epoch`.
  int64_t window(int64_t epoch, int64_t position) const;

 private:
  int64_t windows_, group_, stratum_size_, positions_;
  bool shuffle_;
  uint64_t key_;
};

// splitmix64's finaliser: a cheap, well-mixed 64-bit hash for deriving keys.
inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace lmt::data
