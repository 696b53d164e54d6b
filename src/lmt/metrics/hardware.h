// What this machine can do: CPU identification, ISA features, and measured dense peak throughput.
//
// Peaks are measured, not looked up: an in-register loop of independent FMAs (fp32: vfmadd on zmm;
// bf16: AMX tdpbf16ps where present, else AVX512-BF16 vdpbf16ps, else, or where that unit is slower
// than the fp32 FMAs (with_fastest_bf16), the fp32 peak) runs on one
// core, best of several trials, times the thread count (robust on a shared machine, where a trial
// on all cores at once loses whenever any core is busy). Those are the denominators of "fraction of
// peak" and MFU, so the figure means the same on any CPU. The figure a process uses is looked up
// once, through the per-machine peak cache (metrics/peaks.h: a cached measurement is reused, else
// measured and stored); measure_peaks() is the measurement itself.
#pragma once

#include <string>

namespace lmt::metrics {

struct CpuInfo {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD"
  std::string brand;   // e.g. "Intel(R) Xeon(R) ..."
  // CPUID leaf 1's display family and model (extended fields folded in), e.g. AMD family 25
  // model 17 = Zen 4 "Genoa", family 26 = Zen 5. Virtual machines often report the same brand
  // string ("AMD EPYC") for different generations, whose peaks differ 2x (Zen 4 runs AVX-512 on
  // 256-bit units), so the peak cache keys on these too. 0 when unknown.
  int family = 0;
  int model = 0;
  int threads = 1;     // OpenMP threads this process uses
  bool avx512f = false;
  bool avx512_bf16 = false;
  bool amx_bf16 = false;  // CPU has it and the OS granted the tile state
};

struct Peaks {
  double fp32_gflops = 0;   // dense fp32 FMA peak on `threads` threads
  double bf16_gflops = 0;   // dense bf16 (f32 accumulate) peak of bf16_unit
  // The unit bf16 matmuls run on: "amx", "avx512_bf16", or "fp32": no bf16 unit, or one slower than
  // the fp32 FMAs (with_fastest_bf16()); bf16 then runs with its operands widened to f32, at fp32 speed.
  std::string bf16_unit;
  // A bf16 unit that measured slower than the fp32 FMAs, so bf16 does not run on it (empty: none):
  // its name and peak. Set by measure_peaks() only; the peak cache keeps bf16_unit alone.
  std::string slow_bf16_unit;
  double slow_bf16_gflops = 0;
};

// A bf16 unit below kSlowBf16Unit times the fp32 FMA peak is not used: bf16 operands widened to f32
// are exact, and the fp32 FMAs then multiply them faster. Seen on an Intel Xeon (family 6 model 207)
// without AMX, whose vdpbf16ps runs at half the rate of its fp32 FMAs (173 against 354 GFLOP/s on 2
// cores); AMD's Zen 4 and 5 run it at twice that rate. The margin keeps a unit about as fast as the
// fp32 FMAs where it is, so two measurements of one machine choose alike.
inline constexpr double kSlowBf16Unit = 0.8;
// `p` with its bf16 on the fp32 units where its bf16 unit is slow (above): bf16_unit "fp32",
// bf16_gflops = fp32_gflops, the unit moved to slow_bf16_*. Applied to every measurement and every
// cached entry, so MFU always divides by the peak of the unit bf16 matmuls run on.
Peaks with_fastest_bf16(Peaks p);
// Whether `c` has a bf16 unit (AVX512-BF16 or AMX) that `p` leaves unused, as slower than the fp32
// FMAs (with_fastest_bf16): bf16 matmuls then run widened to f32.
bool bf16_unit_unused(const CpuInfo& c, const Peaks& p);

const CpuInfo& cpu_info();
// Measures the dense peaks of `info`'s CPU on info.threads threads: each unit's best of `trials`
// single-core trials (at least 1), times the thread count. ~20 ms per trial and unit; call it from
// one thread (each trial runs on the calling core).
Peaks measure_peaks(const CpuInfo& info, int trials);
// This machine's peaks for this process: machine_peaks().peaks (metrics/peaks.h), i.e. the peak
// cache's entry for this CPU and thread count, or a measurement (best of 5) that is then stored.
// The first call reads the cache or takes ~0.1 s; later calls return the same figures.
const Peaks& measured_peaks();

// One line for benchmark output: "AMD EPYC (AuthenticAMD), 2 threads, avx512f avx512_bf16; peaks
// fp32 383 GFLOP/s, bf16 (avx512_bf16) 766 GFLOP/s".
std::string machine_summary();

// This process's peak resident memory in bytes (VmHWM of /proc/self/status); 0 where unknown.
int64_t peak_rss_bytes();

}  // namespace lmt::metrics
