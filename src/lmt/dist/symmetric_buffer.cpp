#include "lmt/dist/symmetric_buffer.h"

#include <algorithm>
#include <string>

namespace lmt::dist {

Status check_symmetric_range(const char* call, int rank, int world, int64_t bytes, int64_t elem_size, int64_t first,
                             const std::vector<int64_t>& counts) {
  const std::string who = "rank " + std::to_string(rank) + "/" + std::to_string(world) + ": " + call;
  if (static_cast<int>(counts.size()) != world)
    return InvalidArgument(who + ": " + std::to_string(counts.size()) + " counts for a world of " + std::to_string(world),
                           "pass one count per rank");
  int64_t total = 0;
  for (int64_t c : counts) {
    if (c < 0) return InvalidArgument(who + ": negative count " + std::to_string(c));
    total += c;
  }
  if (first < 0 || (first + total) * elem_size > bytes)
    return InvalidArgument(who + ": elements [" + std::to_string(first) + ", " + std::to_string(first + total) +
                               ") of " + std::to_string(elem_size) + " bytes exceed the buffer's " +
                               std::to_string(bytes) + " bytes",
                           "allocate the symmetric buffer with the size of the data it reduces");
  return Status::Ok();
}

void sum_parts_f32(float* out, const float* const* parts, int nparts, int64_t n) {
  constexpr int64_t kBlock = 4096;  // floats: 16 KiB per part, in L1 while the parts are summed
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * kBlock, len = std::min(kBlock, n - lo);
    alignas(64) float acc[kBlock];
    const float* p0 = parts[0] + lo;
    const float* p1 = nparts > 1 ? parts[1] + lo : nullptr;
    if (p1) {
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) acc[i] = p0[i] + p1[i];
    } else {
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) acc[i] = p0[i];
    }
    for (int q = 2; q < nparts; ++q) {
      const float* pq = parts[q] + lo;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) acc[i] += pq[i];
    }
    float* o = out + lo;  // every part was read above, so `out` may alias one of them
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) o[i] = acc[i];
  }
}

}  // namespace lmt::dist
