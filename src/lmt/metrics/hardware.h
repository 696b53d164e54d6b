// What this machine can do: CPU identification, ISA features, and measured dense peak throughput.
//
// Peaks are measured, not looked up: an in-register loop of independent FMAs (fp32: vfmadd on zmm;
// bf16: AMX tdpbf16ps where present, else AVX512-BF16 vdpbf16ps, else the fp32 peak) runs on one
// core, best of 5 trials, times the thread count (robust on a shared machine, where a trial on
// all cores at once loses whenever any core is busy). Those are the denominators of "fraction of
// peak" and MFU, so the figure means the same on any CPU. Measured once per process and cached.
#pragma once

#include <string>

namespace lmt::metrics {

struct CpuInfo {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD"
  std::string brand;   // e.g. "Intel(R) Xeon(R) ..."
  int threads = 1;     // OpenMP threads this process uses
  bool avx512f = false;
  bool avx512_bf16 = false;
  bool amx_bf16 = false;  // CPU has it and the OS granted the tile state
};

struct Peaks {
  double fp32_gflops = 0;   // dense fp32 FMA peak on `threads` threads
  double bf16_gflops = 0;   // dense bf16 (f32 accumulate) peak
  std::string bf16_unit;    // "amx", "avx512_bf16" or "fp32" (no bf16 unit: bf16 runs at fp32 speed)
};

const CpuInfo& cpu_info();
// Measured on cpu_info().threads threads; first call takes ~0.1 s.
const Peaks& measured_peaks();

// One line for benchmark output: "AMD EPYC (AuthenticAMD), 2 threads, avx512f avx512_bf16; peaks
// fp32 383 GFLOP/s, bf16 (avx512_bf16) 766 GFLOP/s".
std::string machine_summary();

// This process's peak resident memory in bytes (VmHWM of /proc/self/status); 0 where unknown.
int64_t peak_rss_bytes();

}  // namespace lmt::metrics
