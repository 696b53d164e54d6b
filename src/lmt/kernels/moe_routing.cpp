#include "lmt/kernels/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace lmt::kernels {

Status moe_route(const int32_t* experts, int64_t N, int64_t K, int64_t E, int64_t capacity, MoeRouting& out) {
  out.load.assign(static_cast<size_t>(E), 0);
  out.offsets.assign(static_cast<size_t>(E + 1), 0);
  out.slot_row.assign(static_cast<size_t>(N * K), -1);
  out.dropped = 0;
  for (int64_t s = 0; s < N * K; ++s) {
    const int32_t e = experts[s];
    if (e < 0 || e >= E)
      return InvalidArgument("moe_route: slot " + std::to_string(s) + " (token " + std::to_string(s / K) +
                             ") names expert " + std::to_string(e) + ", outside [0, " + std::to_string(E) + ")");
    ++out.load[e];
  }
  std::vector<int64_t> kept(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    kept[e] = capacity > 0 ? std::min(out.load[e], capacity) : out.load[e];
    out.dropped += out.load[e] - kept[e];
    out.offsets[e + 1] = out.offsets[e] + kept[e];
  }
  out.row_token.assign(static_cast<size_t>(out.offsets[E]), 0);
  std::vector<int64_t> next(out.offsets.begin(), out.offsets.end() - 1);
  for (int64_t s = 0; s < N * K; ++s) {  // slot order: stable by token index
    const int32_t e = experts[s];
    if (next[e] == out.offsets[e + 1]) continue;  // over capacity: dropped
    out.slot_row[s] = static_cast<int32_t>(next[e]);
    out.row_token[next[e]] = static_cast<int32_t>(s / K);
    ++next[e];
  }
  return Status::Ok();
}

int64_t moe_capacity(double factor, int64_t N, int64_t K, int64_t E) {
  if (factor <= 0.0) return 0;
  const double c = std::ceil(factor * static_cast<double>(N * K) / static_cast<double>(E));
  return c < 1.0 ? 1 : static_cast<int64_t>(c);
}

}  // namespace lmt::kernels
