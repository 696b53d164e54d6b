// Rng::advance (rng.h): jumping xoshiro256** ahead by any number of draws.
//
// The state update of next_u64 (xors, shifts, a rotation) is linear over GF(2): for states a, b,
// step(a ^ b) = step(a) ^ step(b). So step^k is a 256x256 bit matrix, kept here by columns (column i
// is step^k of the state with only bit i set), and applying it to a state xors the columns of its set
// bits. The table holds step^(2^j) for j < 64, each the square of the one before; advance(k) applies
// the entries of k's set bits (powers of one matrix commute, so in any order).
#include <array>
#include <cstdint>

#include "lmt/base/rng.h"

namespace lmt {
namespace {

using Bits = Rng::State;
struct BitMatrix {
  std::array<Bits, 256> column;  // column[i] = the image of the state with only bit i set
};

Bits apply(const BitMatrix& m, const Bits& s) {
  Bits out{};
  for (int i = 0; i < 256; ++i)
    if ((s[static_cast<size_t>(i / 64)] >> (i % 64)) & 1u)
      for (size_t w = 0; w < 4; ++w) out[w] ^= m.column[static_cast<size_t>(i)][w];
  return out;
}

const std::array<BitMatrix, 64>& step_powers() {
  static const std::array<BitMatrix, 64>* table = [] {
    auto* t = new std::array<BitMatrix, 64>();  // 512 KiB, built once (a few ms), kept for the process
    for (int i = 0; i < 256; ++i) {
      Bits e{};
      e[static_cast<size_t>(i / 64)] = uint64_t{1} << (i % 64);
      Rng r;
      r.set_state(e);
      r.next_u64();
      (*t)[0].column[static_cast<size_t>(i)] = r.state();
    }
    for (size_t j = 1; j < 64; ++j)
      for (size_t i = 0; i < 256; ++i) (*t)[j].column[i] = apply((*t)[j - 1], (*t)[j - 1].column[i]);
    return t;
  }();
  return *table;
}

}  // namespace

void Rng::advance(uint64_t draws) {
  if (draws == 0) return;
  const std::array<BitMatrix, 64>& p = step_powers();
  for (size_t j = 0; j < 64; ++j)
    if ((draws >> j) & 1u) state_ = apply(p[j], state_);
}

}  // namespace lmt
