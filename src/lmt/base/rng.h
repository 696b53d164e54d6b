// Rng: a small, fast, seedable generator (xoshiro256** seeded by splitmix64) whose whole state can
// be saved and restored, so that a resumed run draws exactly the same numbers.
// Not thread-safe: give each thread its own (e.g. seeded with seed + thread index).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace lmt {

class Rng {
 public:
  using State = std::array<uint64_t, 4>;

  explicit Rng(uint64_t seed = 0) { reseed(seed); }

  void reseed(uint64_t seed) {
    uint64_t x = seed;
    for (auto& s : state_) s = splitmix64(x);
  }
  const State& state() const { return state_; }
  void set_state(const State& s) { state_ = s; }

  uint64_t next_u64() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  // Moves the state on as `draws` calls of next_u64 would, in O(log draws) steps: xoshiro's state
  // update is linear over GF(2), so the state after 2^j draws is a fixed 256x256 bit matrix (tabled
  // once, rng.cpp) times the state. Lets threads start mid-stream (model/params.cpp's init). normal()
  // takes 2 draws, uniform() 1.
  void advance(uint64_t draws);
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n) (n > 0), without modulo bias worth speaking of for n << 2^64.
  uint64_t below(uint64_t n) { return static_cast<uint64_t>((static_cast<unsigned __int128>(next_u64()) * n) >> 64); }
  // Standard normal (Box-Muller; one value per call, the pair's twin is discarded for simplicity
  // of state: the state is only the four words above).
  double normal() {
    double u1 = uniform();
    double u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  State state_{};
};

}  // namespace lmt
