// Measured memory read bandwidth: the roofline of memory-bound work such as decoding, which reads
// every weight once per token (lmtrain bench decode divides the bytes of weights by this figure).
//
// STREAM-like: one buffer of `bytes` (much larger than the last-level cache; 256 MiB by default) is
// first written (faulting its pages in), then summed `trials` times by all of this process's OpenMP
// threads, each thread over a contiguous slice with 4 independent vector accumulators; the best
// trial is the bandwidth (a busy core only ever slows a trial). Costs ~bytes × (trials + 1) of
// memory traffic: ~0.3 s for the defaults. Not cached (cheap enough to measure per benchmark).
#pragma once

#include <cstdint>

namespace lmt::metrics {

struct Bandwidth {
  double read_gb_per_s = 0;  // 1e9 bytes per second, best trial
  int64_t bytes = 0;         // buffer size measured
  int threads = 0;
  int trials = 0;
};

Bandwidth measure_read_bandwidth(int64_t bytes = int64_t{256} << 20, int trials = 5);

}  // namespace lmt::metrics
