// for_each_vector: the loop shape of the pointwise and row kernels (norm, activation, rope,
// elementwise): whole 16-float vectors, then one masked tail, so any length works without a scalar
// remainder loop.
//
// The body gets (offset, mask) and uses masked loads/stores throughout. In the main loop the mask is
// the constant 0xffff, which the compiler folds into plain loads and stores; that matters because
// masked stores are slower and do not forward to later loads (a row kernel re-reading its own
// partial sums stalls on them).
#pragma once

#include <cstdint>

#ifdef __AVX512F__
#include <immintrin.h>

namespace lmt::kernels::simd {

// Lanes [0, remaining) of a 16-lane mask: all 16 from 16 up, none at 0 or below.
inline __mmask16 tail_mask(int64_t remaining) {
  return remaining >= 16  ? static_cast<__mmask16>(0xffff)
         : remaining <= 0 ? static_cast<__mmask16>(0)
                          : static_cast<__mmask16>((1u << remaining) - 1u);
}

template <typename Body>
inline void for_each_vector(int64_t n, const Body& body) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) body(i, static_cast<__mmask16>(0xffff));
  if (i < n) body(i, tail_mask(n - i));
}

}  // namespace lmt::kernels::simd
#endif
