// `lmtrain bench collectives`: the gradient collectives of data parallelism on a buffer of --mb
// MiB of f32, under mpirun: MPI_Allreduce (message passing), and through symmetric shared memory
// the all-reduce, reduce-scatter and all-gather (dist/symmetric_buffer.h), next to a memcpy of the
// same bytes on one rank as the bandwidth yardstick. Median of --iters after one warm-up; every
// collective starts after a barrier. Run alone it is a world of 1 and refuses (nothing to measure).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_stats.h"
#include "commands.h"
#include "lmt/base/timer.h"
#include "lmt/dist/communicator.h"
#include "lmt/metrics/hardware.h"

namespace lmt::cli {
namespace {

struct CollectivesArgs {
  double mb = 475;  // gpt2-124m's f32 gradients
  int iters = 5;
  bool json = false;
};

template <typename F>
StatusOr<double> median_seconds(dist::Communicator& comm, int iters, F&& body) {
  std::vector<double> t;
  for (int i = 0; i <= iters; ++i) {
    LMT_RETURN_IF_ERROR(comm.barrier());
    Timer timer;
    LMT_RETURN_IF_ERROR(body());
    if (i > 0) t.push_back(timer.seconds());
  }
  return median(std::move(t));
}

Status run_collectives_bench(const CollectivesArgs& a) {
  if (!(a.mb > 0) || a.iters <= 0) return InvalidArgument("--mb and --iters must be positive");
  LMT_RETURN_IF_ERROR(check_real_flag("--mb", a.mb, 1e-6, 1e6, "buffer size in MiB"));
  LMT_RETURN_IF_ERROR(check_flag("--iters", a.iters, 1, 1000000, "timed repetitions"));
  LMT_RETURN_IF_ERROR(check_fits_in_memory(2.0 * a.mb * (1 << 20), "--mb " + std::to_string(a.mb), "lower --mb"));
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<dist::Communicator> comm, dist::make_communicator());
  const int w = comm->world();
  if (w == 1)
    return FailedPrecondition("bench collectives measures communication between ranks; this is a world of 1",
                              "run it under mpirun -np 2 (docs/DIST.md has the flags)");
  const int64_t n = static_cast<int64_t>(a.mb * (1 << 20) / 4);
  std::vector<float> msg(static_cast<size_t>(n), 1.0f), copy(static_cast<size_t>(n));
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<dist::SymmetricBuffer> sym, comm->allocate_symmetric(n * 4));
  std::fill_n(static_cast<float*>(sym->data()), n, 1.0f);
  std::vector<int64_t> counts(static_cast<size_t>(w)), byte_counts(static_cast<size_t>(w));
  for (int r = 0; r < w; ++r) {
    counts[static_cast<size_t>(r)] = n * (r + 1) / w - n * r / w;
    byte_counts[static_cast<size_t>(r)] = counts[static_cast<size_t>(r)] * 4;
  }
  nlohmann::json t;
  LMT_ASSIGN_OR_RETURN(t["memcpy"], median_seconds(*comm, a.iters, [&] {
                         std::memcpy(copy.data(), msg.data(), static_cast<size_t>(n) * 4);
                         return Status::Ok();
                       }));
  LMT_ASSIGN_OR_RETURN(t["mpi_allreduce"], median_seconds(*comm, a.iters, [&] { return comm->all_reduce_sum(msg.data(), n); }));
  LMT_ASSIGN_OR_RETURN(t["shm_allreduce"], median_seconds(*comm, a.iters, [&] { return sym->all_reduce_sum_f32(0, n); }));
  LMT_ASSIGN_OR_RETURN(t["shm_reduce_scatter"],
                       median_seconds(*comm, a.iters, [&] { return sym->reduce_scatter_sum_f32(0, counts); }));
  LMT_ASSIGN_OR_RETURN(t["shm_all_gather"],
                       median_seconds(*comm, a.iters, [&] { return sym->all_gather_bytes(0, byte_counts); }));
  if (!comm->is_root()) return Status::Ok();
  if (a.json) {
    nlohmann::json j = {{"bench", "collectives"}, {"mb", a.mb}, {"ranks", w}, {"seconds", t},
                        {"threads", metrics::cpu_info().threads}, {"machine", metrics::machine_summary()}};
    std::printf("%s\n", j.dump().c_str());
    return Status::Ok();
  }
  std::printf("machine: %s\n", metrics::machine_summary().c_str());
  std::printf("%d ranks, %.0f MiB of f32 (median of %d):\n", w, a.mb, a.iters);
  for (const auto& [name, secs] : t.items())
    std::printf("  %-20s %8.1f ms  %6.1f GB/s of buffer\n", name.c_str(), secs.get<double>() * 1e3,
                static_cast<double>(n) * 4 / secs.get<double>() / 1e9);
  return Status::Ok();
}

}  // namespace

void add_collectives_bench(CLI::App* bench, Runner& runner) {
  static CollectivesArgs ca;
  CLI::App* c = bench->add_subcommand("collectives", "gradient collectives under mpirun: MPI vs shared memory");
  c->add_option("--mb", ca.mb, "buffer size in MiB of f32")->capture_default_str();
  c->add_option("--iters", ca.iters, "timed repetitions (the median is reported)")->capture_default_str();
  c->add_flag("--json", ca.json, "print one JSON object");
  c->callback([&runner] { runner.set(run_collectives_bench(ca)); });
}

}  // namespace lmt::cli
