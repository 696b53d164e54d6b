// `lmtrain bench peak [--trials N] [--reset] [--json]`: measures this machine's dense peaks again
// (best of N single-core trials per unit, default 20), prints them with the machine, and stores them
// in the per-machine peak cache (metrics/peak_cache.h) that MFU figures use from then on. A busy core
// only ever lowers a trial, so the cache keeps, per unit, the best of this measurement and the one
// cached before (a measurement taken under load does not replace a quiet one); --reset stores this
// measurement as it is (e.g. after a hardware or BIOS change that lowered the peak).
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "lmt/metrics/hardware.h"
#include "lmt/metrics/peak_cache.h"

namespace lmt::cli {
namespace {

struct PeakBenchArgs {
  int trials = 20;
  bool reset = false, json = false;
};

Status run_peak_bench(const PeakBenchArgs& a) {
  LMT_RETURN_IF_ERROR(check_flag("--trials", a.trials, 1, 1000, "single-core trials per unit; the best is kept"));
  LMT_RETURN_IF_ERROR(check_omp_num_threads());
  const metrics::CpuInfo& cpu = metrics::cpu_info();
  const std::string path = metrics::peak_cache_path(), key = metrics::peak_cache_key(cpu);
  const std::optional<metrics::Peaks> previous =
      path.empty() ? std::nullopt : metrics::read_cached_peaks(path, key, /*warning=*/nullptr);
  const metrics::Peaks measured = metrics::measure_peaks(cpu, a.trials);
  metrics::Peaks p = measured;  // what is stored and used from now on
  if (previous && !a.reset && previous->bf16_unit == measured.bf16_unit) {
    p.fp32_gflops = std::max(p.fp32_gflops, previous->fp32_gflops);
    p.bf16_gflops = std::max(p.bf16_gflops, previous->bf16_gflops);
  }
  Status stored = path.empty() ? Status::Ok() : metrics::write_cached_peaks(path, cpu, p, a.trials);
  if (a.json) {
    nlohmann::json j = {{"bench", "peak"},
                        {"cpu", cpu.brand},
                        {"vendor", cpu.vendor},
                        {"family", cpu.family},
                        {"model", cpu.model},
                        {"threads", cpu.threads},
                        {"key", key},
                        {"trials", a.trials},
                        {"fp32_gflops", p.fp32_gflops},
                        {"bf16_gflops", p.bf16_gflops},
                        {"measured", {{"fp32_gflops", measured.fp32_gflops}, {"bf16_gflops", measured.bf16_gflops}}},
                        {"slow_bf16_unit", measured.slow_bf16_unit.empty() ? nlohmann::json(nullptr)
                                                                           : nlohmann::json(measured.slow_bf16_unit)},
                        {"slow_bf16_gflops", measured.slow_bf16_gflops},
                        {"bf16_unit", p.bf16_unit},
                        {"cache", path.empty() ? nlohmann::json(nullptr) : nlohmann::json(path)},
                        {"cache_written", !path.empty() && stored.ok()}};
    if (previous) j["previous"] = {{"fp32_gflops", previous->fp32_gflops}, {"bf16_gflops", previous->bf16_gflops}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("machine: %s (%s family %d model %d), %d threads\n", cpu.brand.empty() ? "unknown CPU" : cpu.brand.c_str(),
                cpu.vendor.c_str(), cpu.family, cpu.model, cpu.threads);
    std::printf("measured (best of %d trials per unit): fp32 %.0f GFLOP/s, bf16 (%s) %.0f GFLOP/s\n", a.trials,
                measured.fp32_gflops, measured.bf16_unit.c_str(), measured.bf16_gflops);
    if (!measured.slow_bf16_unit.empty())
      std::printf("bf16 unit %s: %.0f GFLOP/s, below %.0f%% of fp32's, so bf16 matmuls run on the fp32 FMAs "
                  "(operands widened to f32)\n",
                  measured.slow_bf16_unit.c_str(), measured.slow_bf16_gflops, metrics::kSlowBf16Unit * 100);
    if (previous)
      std::printf("previously cached: fp32 %.0f GFLOP/s, bf16 %.0f GFLOP/s\n", previous->fp32_gflops, previous->bf16_gflops);
    std::printf("dense peaks%s: fp32 %.0f GFLOP/s, bf16 (%s) %.0f GFLOP/s\n",
                previous && !a.reset ? " (best of both)" : "", p.fp32_gflops, p.bf16_unit.c_str(), p.bf16_gflops);
    if (path.empty()) std::printf("peak cache: off (LMT_PEAK_CACHE=off or no HOME); nothing stored\n");
    else if (stored.ok()) std::printf("peak cache: %s updated (key \"%s\")\n", path.c_str(), key.c_str());
  }
  return stored;  // a cache that cannot be written is an error here: storing is this command's job
}

}  // namespace

void add_peak_bench(CLI::App* bench, Runner& runner) {
  static PeakBenchArgs pb;
  CLI::App* p = bench->add_subcommand("peak", "measure this machine's dense fp32/bf16 peaks again and update the peak cache");
  p->add_option("--trials", pb.trials, "single-core trials per unit (the best is kept)")->capture_default_str();
  p->add_flag("--reset", pb.reset, "store this measurement even where the cached peak is higher");
  p->add_flag("--json", pb.json, "print one JSON object");
  p->callback([&runner] { runner.set(run_peak_bench(pb)); });
}

}  // namespace lmt::cli
