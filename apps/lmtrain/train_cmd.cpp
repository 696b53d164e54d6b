// `lmtrain train --config FILE --run-dir DIR [--set section.key=value ...] [--resume]
//                [--backend NAME] [--profile-steps A:B] [--peak-flops GFLOPS] [--print-keys]`
#include <cstdio>

#include "backend_flag.h"
#include "commands.h"
#include "lmt/base/stop_signal.h"
#include "lmt/config/config.h"
#include "lmt/dist/communicator.h"
#include "lmt/metrics/peaks.h"
#include "lmt/train/recipe.h"
#include "lmt/train/trainer.h"

namespace lmt::cli {
namespace {

struct TrainArgs {
  std::string config, run_dir, profile_steps, backend;
  std::vector<std::string> overrides;
  bool resume = false, print_keys = false;
  double peak_gflops = 0;  // --peak-flops: runtime.peak_gflops
  CLI::Option* peak_flag = nullptr;
};

Status run_train(const TrainArgs& a) {
  if (a.print_keys) {
    std::printf("%s", config::schema_markdown().c_str());
    return Status::Ok();
  }
  const bool peak_given = a.peak_flag->count() > 0;
  if (peak_given) LMT_RETURN_IF_ERROR(metrics::check_peak_gflops(a.peak_gflops, "--peak-flops"));
  if (a.config.empty() || a.run_dir.empty())
    return InvalidArgument("--config and --run-dir are required", "e.g. lmtrain train --config configs/demo.toml --run-dir runs/demo");
  LMT_ASSIGN_OR_RETURN(config::Config c, config::Config::from_toml_file(a.config));
  for (const auto& o : a.overrides) LMT_RETURN_IF_ERROR(c.apply_override(o));
  if (!a.profile_steps.empty()) LMT_RETURN_IF_ERROR(c.set("profile.steps", a.profile_steps, "--profile-steps"));
  if (!a.backend.empty()) LMT_RETURN_IF_ERROR(c.set("runtime.backend", a.backend, "--backend"));
  if (peak_given) LMT_RETURN_IF_ERROR(c.set("runtime.peak_gflops", a.peak_gflops, "--peak-flops"));
  LMT_ASSIGN_OR_RETURN(train::Recipe recipe, train::recipe_from_config(c, a.config));
  // Under mpirun (or srun) every process is one data-parallel rank; alone, a world of 1 (docs/DIST.md).
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<dist::Communicator> comm, dist::make_communicator());
  if (comm->rank() == 0 && comm->world() > 1)
    std::printf("data parallel: %d ranks (%s), ZeRO-%d, global batch %lld sequences\n", comm->world(), comm->name(),
                recipe.zero, static_cast<long long>(recipe.micro_batch * recipe.grad_accum * comm->world()));
  if (comm->rank() == 0) {
    std::printf("model %s: %.2fM parameters; %lld steps of %lld x %lld x %lld tokens; run directory %s\n",
                recipe.model.name.c_str(), recipe.model.param_count() / 1e6, static_cast<long long>(recipe.max_steps),
                static_cast<long long>(recipe.grad_accum), static_cast<long long>(recipe.micro_batch),
                static_cast<long long>(recipe.seq_len), a.run_dir.c_str());
  }
  // SIGTERM/SIGINT: finish the step, checkpoint, exit with status 3 (docs/RELIABILITY.md).
  if (recipe.save_on_signal) install_stop_handlers();
  auto trainer = train::Trainer::create(recipe, c.to_toml(), a.run_dir, a.resume, comm.get());
  Status s = trainer.ok() ? (*trainer)->run() : trainer.status();
  // Every rank stops on the same step after a signal; any other error may leave ranks waiting.
  if (!s.ok() && s.code() != StatusCode::kCancelled && comm->world() > 1) {  // the other ranks may be waiting in a collective: end the job
    std::fprintf(stderr, "rank %d/%d: %s\n", comm->rank(), comm->world(), s.ToString().c_str());
    std::fflush(stderr);
    comm->abort(1);
  }
  return s;
}

}  // namespace

void add_train_command(CLI::App& app, Runner& runner) {
  static TrainArgs args;
  CLI::App* t = app.add_subcommand("train", "train a model from a TOML recipe");
  t->add_option("--config", args.config, "recipe (configs/*.toml; keys: --print-keys or docs/CONFIG.md)");
  t->add_option("--run-dir", args.run_dir, "run directory: config.toml, metrics.jsonl, checkpoints/, trace.json");
  t->add_option("--set", args.overrides, "override a recipe key, e.g. --set optim.lr=3e-4 (repeatable)");
  t->add_flag("--resume", args.resume, "continue from the newest valid checkpoint in --run-dir");
  add_backend_flag(t, args.backend, "the recipe's runtime.backend, cpu");
  t->add_option("--profile-steps", args.profile_steps, "write RUN/trace.json for steps A..B-1, e.g. 10:20");
  t->add_flag("--print-keys", args.print_keys, "print every recipe key with its type, default and meaning");
  args.peak_flag = t->add_option("--peak-flops", args.peak_gflops,
                                 "GFLOP/s: dense peak of one device that MFU divides by (runtime.peak_gflops; "
                                 "default: this machine's, cached per machine)");
  t->callback([&runner] { runner.set(run_train(args)); });
}

}  // namespace lmt::cli
