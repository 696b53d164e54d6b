// The one place that chooses the peak FLOP/s an MFU or "fraction of peak" divides by.
//
// MFU = achieved model FLOP/s / (devices · dense peak of one device for the compute dtype). The
// peak of this machine comes from the peak cache (metrics/peak_cache.h): a cached measurement for
// this CPU and thread count is reused as is; without one it is measured (best of 5 single-core
// trials, metrics/hardware.h) and stored, unless other tasks were running (then it is not trusted enough to keep). A user can pin the figure instead (`--peak-flops GFLOPS`
// on `train`, `bench train` and `bench model`; the recipe key `runtime.peak_gflops`), e.g. to
// compare runs on different machines against one denominator, or to use a datasheet figure.
// Threading: machine_peaks() and peak_flops() are safe to call from any thread (the first call
// resolves once, under a function-local static).
#pragma once

#include <string>
#include <string_view>

#include "lmt/base/status.h"
#include "lmt/metrics/hardware.h"
#include "lmt/tensor/dtype.h"

namespace lmt::metrics {

enum class PeakSource { kCache, kMeasured };

// This machine's peaks and where they came from.
struct MachinePeaks {
  Peaks peaks;
  PeakSource source = PeakSource::kMeasured;
  std::string cache_path;  // the cache consulted ("" : none)
  std::string warning;     // a damaged cache, or one that could not be written ("" : none)
};

// Resolves the peaks of the CPU `info` describes through the cache file at `cache_path` ("" : no
// cache): the entry for peak_cache_key(info) when there is one (nothing measured), else
// measure_peaks(info, trials), stored in the cache (a failed store is a warning, not an error).
// A measurement taken while other processes run (`others_running` >= 1: they compete for the
// cores, and a peak measured then has read up to 3x low here) is used for this process only, not
// stored, and `warning` says so and how to measure properly (`lmtrain bench peak` on a quiet
// machine, which always stores).
int others_running();  // runnable tasks besides this thread: the least of 5 samples of /proc/stat's
                       // procs_running (1 ms apart) minus 1; 0 when unreadable
MachinePeaks resolve_peaks(const CpuInfo& info, const std::string& cache_path, int trials = 5,
                           int others_running = metrics::others_running());

// This process's resolve_peaks(cpu_info(), peak_cache_path()): resolved on the first call (warnings
// are logged then), the same object afterwards.
const MachinePeaks& machine_peaks();

// Options of peak_flops().
struct PeakOptions {
  // > 0: the dense peak of one device in GFLOP/s to use instead of this machine's (--peak-flops,
  // runtime.peak_gflops); nothing is measured or read. 0: this machine's peak.
  double override_gflops = 0;
};

// The dense peak in FLOP/s of one device (this machine, or the override) for matmuls in `compute`:
// the bf16 unit's peak for kBF16, the fp32 FMA peak otherwise. 0 when it could not be measured
// (then MFU figures are reported as 0 or inf; callers that divide check).
double peak_flops(DType compute, const PeakOptions& options = {});

// The same for the device a backend computes on, named by Backend::device_description(): empty for
// the host (peak_flops above); a GPU's dense datasheet peak from its metrics/device_peaks.h entry
// (bf16 tensor cores for kBF16, strict fp32 otherwise). The override wins as above. NotFound for a
// GPU the table does not know, with a hint to pass the peak.
StatusOr<double> device_peak_flops(std::string_view accelerator, DType compute, const PeakOptions& options = {});

// Checks a user's peak override in GFLOP/s: finite and in (0, 1e9]. `where` names the flag or key.
Status check_peak_gflops(double gflops, std::string_view where);

std::string_view peak_source_name(PeakSource s);  // "cache" or "measured"

}  // namespace lmt::metrics
