#include "lmt/metrics/hardware.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <utility>

#include "lmt/base/timer.h"

namespace lmt::metrics {
namespace {

constexpr int kArchReqXcompPerm = 0x1023;  // arch_prctl: request permission for an xfeature
constexpr int kXfeatureXtiledata = 18;     // AMX tile data

bool os_grants_amx() {
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

CpuInfo detect() {
  CpuInfo info;
  unsigned a, b, c, d;
  char vendor[13] = {};
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
  }
  info.vendor = vendor;
  char brand[49] = {};
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
    for (unsigned leaf = 0; leaf < 3; ++leaf) {
      __get_cpuid(0x80000002 + leaf, &a, &b, &c, &d);
      unsigned regs[4] = {a, b, c, d};
      std::memcpy(brand + 16 * leaf, regs, 16);
    }
  }
  info.brand = brand;
  while (!info.brand.empty() && info.brand.back() == ' ') info.brand.pop_back();
  // OS must save zmm state (XCR0 bits 5-7 and 1-2).
  bool os_zmm = false;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    const int base_family = static_cast<int>((a >> 8) & 0xF), base_model = static_cast<int>((a >> 4) & 0xF);
    info.family = base_family == 0xF ? base_family + static_cast<int>((a >> 20) & 0xFF) : base_family;
    info.model = base_family == 0x6 || base_family == 0xF ? base_model | static_cast<int>(((a >> 16) & 0xF) << 4)
                                                          : base_model;
  }
  if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27))) {
    uint32_t xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    os_zmm = (xcr0_lo & 0xE6) == 0xE6;
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    info.avx512f = os_zmm && (b & (1u << 16));
    bool amx_tile = d & (1u << 24), amx_bf16 = d & (1u << 22);
    info.amx_bf16 = amx_tile && amx_bf16 && os_grants_amx();
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) info.avx512_bf16 = info.avx512f && (a & (1u << 5));
  info.threads = omp_get_max_threads();
  return info;
}

// The dense peak in GFLOP/s of `threads` cores given flops per iteration of `body`: one core's
// best over several single-thread trials, times the core count. Measuring one core at a time makes
// the figure robust on a shared machine (a trial needs one free core, not all of them at once), and
// a low denominator would inflate every MFU computed from it.
template <typename Body>
double time_peak(int threads, int trials, int64_t iters, double flops_per_iter, Body body) {
  body(iters / 16);  // warm up (clocks, AMX state)
  double best = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const double t0 = now_seconds();
    body(iters);
    const double secs = now_seconds() - t0;
    best = std::max(best, flops_per_iter * static_cast<double>(iters) / secs * 1e-9);
  }
  return best * threads;
}

// AVX2 + FMA (CPUs without AVX-512): 12 independent 8-wide accumulators cover two FMA pipes of
// latency 4-5.
__attribute__((target("avx2,fma"))) void fp32_fma_loop_avx2(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  volatile float sink = lanes[0] + lanes[7];
  (void)sink;
}

__attribute__((target("avx512f"))) void fp32_fma_loop(int64_t iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
}

__attribute__((target("avx512f,avx512bf16"))) void bf16_dot_loop(int64_t iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3c00), y = (__m512bh)_mm512_set1_epi16(0x2000);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
}

// AMX: 3 accumulator tiles (16x16 f32) fed by bf16 tiles (16 rows x 64 bytes); each tdpbf16ps is
// 16·16·32·2 = 16384 flops.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile,amx-bf16"))) void amx_loop(int64_t iters) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
  alignas(64) static thread_local uint16_t buf[16 * 32];
  for (auto& v : buf) v = 0x3c00;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_loadd(4, buf, 64);
  _tile_loadd(5, buf, 64);
  for (int64_t it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 5);
    _tile_dpbf16ps(2, 4, 5);
  }
  alignas(64) static thread_local float out[16 * 16];
  _tile_stored(0, out, 64);
  _tile_release();
}

}  // namespace

Peaks measure_peaks(const CpuInfo& info, int trials) {
  trials = std::max(trials, 1);
  Peaks p;
  const int threads = info.threads;
  if (info.avx512f) {
    p.fp32_gflops = time_peak(threads, trials, 2'000'000, 16 * 16 * 2, fp32_fma_loop);
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    p.fp32_gflops = time_peak(threads, trials, 2'000'000, 12 * 8 * 2, fp32_fma_loop_avx2);
  } else {
    p.fp32_gflops = 0;  // unknown: benchmarks then report fraction_of_peak as 0
  }
  if (info.amx_bf16) {
    p.bf16_gflops = time_peak(threads, trials, 500'000, 3 * 16384.0, amx_loop);
    p.bf16_unit = "amx";
  } else if (info.avx512_bf16) {
    p.bf16_gflops = time_peak(threads, trials, 2'000'000, 16 * 64, bf16_dot_loop);
    p.bf16_unit = "avx512_bf16";
  } else {
    p.bf16_gflops = p.fp32_gflops;
    p.bf16_unit = "fp32";
  }
  return with_fastest_bf16(std::move(p));
}

Peaks with_fastest_bf16(Peaks p) {
  if (p.bf16_unit != "fp32" && p.bf16_gflops < kSlowBf16Unit * p.fp32_gflops) {
    p.slow_bf16_unit = std::exchange(p.bf16_unit, "fp32");
    p.slow_bf16_gflops = std::exchange(p.bf16_gflops, p.fp32_gflops);
  }
  return p;
}

bool bf16_unit_unused(const CpuInfo& c, const Peaks& p) {
  return (c.avx512_bf16 || c.amx_bf16) && p.bf16_unit == "fp32";
}

const CpuInfo& cpu_info() {
  static const CpuInfo info = detect();
  return info;
}

std::string machine_summary() {
  const CpuInfo& c = cpu_info();
  const Peaks& p = measured_peaks();
  std::ostringstream s;
  s.precision(0);
  s << std::fixed << (c.brand.empty() ? "unknown CPU" : c.brand) << " (" << c.vendor << " family " << c.family
    << " model " << c.model << "), "
    << c.threads << " threads," << (c.avx512f ? " avx512f" : "") << (c.avx512_bf16 ? " avx512_bf16" : "")
    << (c.amx_bf16 ? " amx_bf16" : "") << "; measured peaks fp32 " << p.fp32_gflops
    << " GFLOP/s, bf16 (" << p.bf16_unit << ") " << p.bf16_gflops << " GFLOP/s";
  if (bf16_unit_unused(c, p))
    s << " (its bf16 unit measured slower than the fp32 FMAs: bf16 operands are widened to f32)";
  return s.str();
}

}  // namespace lmt::metrics

namespace lmt::metrics {

int64_t peak_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  long long kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) break;
  std::fclose(f);
  return static_cast<int64_t>(kib) * 1024;
}

}  // namespace lmt::metrics
