// `lmtrain bench data --data DIR [--split train] [--micro-batch 4] [--seq-len 256] [--iters 2000] [--step-ms 0] [--json]`:
// the cost of the training loader (lmt/data/loader.h).
//
// Reports, per batch: the time to build one (prefetch off: next() does all the work on the calling
// thread), and what next() costs the training loop with prefetch on while the loop computes for
// --step-ms between calls (a busy wait standing in for the step; 0 measures back-to-back calls,
// which then wait on the producer). Also the time to open (and verify) the dataset. --cold evicts the
// split's shard files from the page cache (posix_fadvise DONTNEED, those files only) and opens
// without verification, so every batch reads from disk as on a dataset far larger than memory.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_stats.h"
#include "commands.h"
#include "lmt/base/timer.h"
#include "lmt/data/loader.h"
#include "lmt/data/manifest.h"
#include "lmt/metrics/hardware.h"

namespace lmt::cli {
namespace {

struct DataBenchArgs {
  std::string data, split = "train";
  int64_t batch = 4, seq = 256;
  int iters = 2000, warmup = 20;
  double step_ms = 0;
  bool cold = false;
  bool json = false;
};

struct Latency {
  double median_us = 0, mean_us = 0, max_us = 0;
};

Latency summarise(std::vector<double> us) {
  Latency t;
  t.median_us = median(us);
  t.max_us = *std::max_element(us.begin(), us.end());
  for (double u : us) t.mean_us += u / static_cast<double>(us.size());
  return t;
}

Status evict_from_page_cache(const std::string& dir, const std::string& split) {
  LMT_ASSIGN_OR_RETURN(data::Manifest m, data::read_manifest(dir));
  const data::SplitInfo* info = m.split(split);
  if (info == nullptr) return InvalidArgument("--split '" + split + "' is unknown", "use train or val");
  for (const data::ShardEntry& e : info->shards) {
    const std::string path = (std::filesystem::path(dir) / e.file).string();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return IoError("cannot open " + path + " to evict it from the page cache");
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  return Status::Ok();
}

void spin_for(double seconds) {
  const double until = now_seconds() + seconds;
  while (now_seconds() < until) {
  }
}

Status time_next(const DataBenchArgs& a, bool prefetch, double* open_ms, Latency* out) {
  data::LoaderOptions o;
  o.stages = {data::DataStage{0, {data::DataSource{a.data, 1.0}}}};
  o.split = a.split;
  o.batch = a.batch;
  o.seq = a.seq;
  o.prefetch = prefetch;
  o.verify = !a.cold;
  if (a.cold) LMT_RETURN_IF_ERROR(evict_from_page_cache(a.data, a.split));
  Timer open_timer;
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<data::Loader> loader, data::Loader::open(o));
  *open_ms = open_timer.seconds() * 1e3;
  data::Batch batch;
  std::vector<double> us;
  for (int i = 0; i < a.warmup + a.iters; ++i) {
    if (prefetch && a.step_ms > 0) spin_for(a.step_ms * 1e-3);
    Timer t;
    LMT_RETURN_IF_ERROR(loader->next(&batch));
    if (i >= a.warmup) us.push_back(t.seconds() * 1e6);
  }
  *out = summarise(std::move(us));
  return Status::Ok();
}

Status run_data_bench(const DataBenchArgs& a) {
  if (a.iters < 1 || a.warmup < 0 || a.step_ms < 0)
    return InvalidArgument("--iters must be positive, --warmup and --step-ms non-negative");
  LMT_RETURN_IF_ERROR(check_flag("--micro-batch", a.batch, 1, int64_t{1} << 20));
  LMT_RETURN_IF_ERROR(check_flag("--seq-len", a.seq, 1, int64_t{1} << 24));
  LMT_RETURN_IF_ERROR(check_flag("--iters", a.iters, 1, 10000000, "timed batches"));
  LMT_RETURN_IF_ERROR(check_flag("--warmup", a.warmup, 0, 10000000, "untimed batches"));
  LMT_RETURN_IF_ERROR(check_real_flag("--step-ms", a.step_ms, 0, 60000, "simulated step time in ms"));
  // Tokens, targets and document ids of a batch (int32), double-buffered with prefetch.
  LMT_RETURN_IF_ERROR(check_fits_in_memory(2.0 * 3 * 4 * static_cast<double>(a.batch) * static_cast<double>(a.seq + 1),
                                           "batches of --micro-batch " + std::to_string(a.batch) + " x --seq-len " + std::to_string(a.seq),
                                           "lower --micro-batch or --seq-len"));
  double open_ms = 0, open_ms_prefetch = 0;
  Latency build, wait;
  LMT_RETURN_IF_ERROR(time_next(a, false, &open_ms, &build));
  LMT_RETURN_IF_ERROR(time_next(a, true, &open_ms_prefetch, &wait));
  if (a.json) {
    nlohmann::json j = {{"bench", "data"}, {"data", a.data}, {"split", a.split}, {"batch", a.batch}, {"seq", a.seq},
                        {"iters", a.iters}, {"open_ms", open_ms},
                        {"build_us", {{"median", build.median_us}, {"mean", build.mean_us}, {"max", build.max_us}}},
                        {"step_ms", a.step_ms}, {"cold", a.cold},
                        {"next_prefetch_us", {{"median", wait.median_us}, {"mean", wait.mean_us}, {"max", wait.max_us}}},
                        {"machine", metrics::machine_summary()}};
    std::printf("%s\n", j.dump().c_str());
    return Status::Ok();
  }
  std::printf("machine: %s\n", metrics::machine_summary().c_str());
  std::printf("loader %s (%s) B=%lld T=%lld%s: open%s %.1f ms; building a batch %.1f us median (mean %.1f, max %.1f); "
              "next() with prefetch%s %.1f us median (mean %.1f, max %.1f)\n",
              a.data.c_str(), a.split.c_str(), static_cast<long long>(a.batch), static_cast<long long>(a.seq),
              a.cold ? ", cold page cache" : "", a.cold ? "" : "+verify", open_ms,
              build.median_us, build.mean_us, build.max_us,
              a.step_ms > 0 ? (" after a " + std::to_string(a.step_ms) + " ms step").c_str() : " (back to back)",
              wait.median_us, wait.mean_us, wait.max_us);
  return Status::Ok();
}

}  // namespace

void add_data_bench(CLI::App* bench, Runner& runner) {
  static DataBenchArgs db;
  CLI::App* d = bench->add_subcommand("data", "training loader cost per batch (build time, prefetched next())");
  d->add_option("--data", db.data, "a prepared dataset directory")->required();
  d->add_option("--split", db.split, "train or val")->capture_default_str();
  d->add_option("--micro-batch", db.batch, "B")->capture_default_str();
  add_deprecated_option(d, "--batch", "--micro-batch", db.batch);
  d->add_option("--seq-len", db.seq, "T")->capture_default_str();
  add_deprecated_option(d, "--seq", "--seq-len", db.seq);
  d->add_option("--iters", db.iters, "timed batches")->capture_default_str();
  d->add_option("--warmup", db.warmup, "untimed batches")->capture_default_str();
  d->add_option("--step-ms", db.step_ms, "simulated training step between prefetched next() calls")->capture_default_str();
  d->add_flag("--cold", db.cold, "drop the split's shards from the page cache before each run and skip verification");
  d->add_flag("--json", db.json, "print one JSON object");
  d->callback([&runner] { runner.set(run_data_bench(db)); });
}

}  // namespace lmt::cli
