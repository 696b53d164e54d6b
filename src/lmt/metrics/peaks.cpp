#include "lmt/metrics/peaks.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <thread>

#include "lmt/base/log.h"
#include "lmt/metrics/device_peaks.h"
#include "lmt/metrics/peak_cache.h"

namespace lmt::metrics {

MachinePeaks resolve_peaks(const CpuInfo& info, const std::string& cache_path, int trials, int others) {
  MachinePeaks m;
  m.cache_path = cache_path;
  if (!cache_path.empty()) {
    if (std::optional<Peaks> cached = read_cached_peaks(cache_path, peak_cache_key(info), &m.warning)) {
      m.peaks = *cached;
      m.source = PeakSource::kCache;
      return m;
    }
  }
  m.peaks = measure_peaks(info, trials);
  m.source = PeakSource::kMeasured;
  if (!cache_path.empty() && others > 0) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "the peak FLOP/s were measured while %d other task(s) ran, so they may read low and MFU high; not "
                  "cached. hint: run `lmtrain bench peak` on a quiet machine",
                  others);
    m.warning += (m.warning.empty() ? "" : "; ") + std::string(buf);
    return m;
  }
  if (!cache_path.empty()) {
    Status s = write_cached_peaks(cache_path, info, m.peaks, trials);
    if (!s.ok()) m.warning += (m.warning.empty() ? "" : "; ") + s.message() + " (" + s.hint() + ")";
  }
  return m;
}

int others_running() {
  int least = -1;
  for (int sample = 0; sample < 5; ++sample) {
    if (sample > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::ifstream in("/proc/stat");
    std::string key;
    int running = -1;
    while (in >> key) {
      if (key == "procs_running") {
        in >> running;
        break;
      }
      in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
    if (running < 1) return 0;
    least = least < 0 ? running - 1 : std::min(least, running - 1);
  }
  return std::max(least, 0);
}

const MachinePeaks& machine_peaks() {
  static const MachinePeaks peaks = [] {
    MachinePeaks m = resolve_peaks(cpu_info(), peak_cache_path());
    if (!m.warning.empty()) {
      LMT_LOG(WARNING) << m.warning;
    }
    LMT_LOG(DEBUG) << "peaks (" << peak_source_name(m.source) << (m.cache_path.empty() ? "" : ", cache " + m.cache_path)
                   << "): fp32 " << m.peaks.fp32_gflops << " GFLOP/s, bf16 " << m.peaks.bf16_gflops << " GFLOP/s";
    return m;
  }();
  return peaks;
}

const Peaks& measured_peaks() { return machine_peaks().peaks; }

double peak_flops(DType compute, const PeakOptions& options) {
  if (options.override_gflops > 0) return options.override_gflops * 1e9;
  const Peaks& p = machine_peaks().peaks;
  return (compute == DType::kBF16 ? p.bf16_gflops : p.fp32_gflops) * 1e9;
}

Status check_peak_gflops(double gflops, std::string_view where) {
  if (std::isfinite(gflops) && gflops > 0 && gflops <= 1e9) return Status::Ok();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", gflops);
  return InvalidArgument(std::string(where) + " " + buf + " is out of range: it must be in (0, 1e9] GFLOP/s",
                         "the dense peak of one device in GFLOP/s, e.g. 989400 for an H100 SXM in bf16; "
                         "`lmtrain bench peak` prints this machine's");
}

std::string_view peak_source_name(PeakSource s) { return s == PeakSource::kCache ? "cache" : "measured"; }

StatusOr<double> device_peak_flops(std::string_view accelerator, DType compute, const PeakOptions& options) {
  if (accelerator.empty() || options.override_gflops > 0) return peak_flops(compute, options);
  LMT_ASSIGN_OR_RETURN(const DeviceSpec gpu, device_spec_for_gpu(accelerator));
  return dense_peak_flops(gpu, compute == DType::kBF16 ? Precision::kBf16 : Precision::kFp32);
}

}  // namespace lmt::metrics
