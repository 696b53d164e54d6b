// `lmtrain train --config FILE --run-dir DIR [--set section.key=value ...] [--resume [--allow-changes]]
//                [--backend NAME] [--profile-steps A:B] [--peak-flops GFLOPS] [--print-keys] [--json]`
//
// --json: the human text (the trainer's step lines) goes to stderr; stdout gets compact JSON lines:
// {"type":"start",...} before the first step and {"type":"end","status":"ok"|"error"|"stopped",...}.
// Missing --config/--run-dir and --allow-changes without --resume are usage errors (exit 2).
//
// Resume safety: `--resume` on a run that has RUN/config.toml continues with that saved recipe
// (--config may then be left out). A --config, --set or flag that resolves to a different value of
// any key is refused, listing each key with its saved and given values, unless --allow-changes is
// given; then the run continues with the changes and records them in metrics.jsonl (an event
// "config_changed" with the list). So `--resume` without the original `--set train.max_steps=30`
// can never silently switch to the recipe file's max_steps.
#include <cstdio>
#include <filesystem>
#include <map>

#include "backend_flag.h"
#include "commands.h"
#include "lmt/base/stop_signal.h"
#include "lmt/config/config.h"
#include "lmt/dist/communicator.h"
#include "lmt/metrics/peaks.h"
#include "lmt/runtime/omp_env.h"
#include "lmt/train/recipe.h"
#include "lmt/train/trainer.h"

namespace lmt::cli {
namespace {

struct TrainArgs {
  std::string config, run_dir, profile_steps, backend;
  std::vector<std::string> configs;  // --config, repeatable: later files overlay earlier ones
  std::vector<std::string> overrides;
  bool resume = false, print_keys = false, allow_changes = false, json = false;
  double peak_gflops = 0;  // --peak-flops: runtime.peak_gflops
  CLI::Option* peak_flag = nullptr;
};

// The keys whose values differ between the run's saved recipe and the given one, as
// {"key", "saved", "given", "from"} (values in TOML syntax; "" where a key is absent).
nlohmann::json recipe_changes(const config::Config& saved, const config::Config& given) {
  nlohmann::json out = nlohmann::json::array();
  std::map<std::string, std::pair<std::string, std::string>> both;
  for (const auto& [k, v] : saved.values()) both[k].first = config::value_to_string(v);
  for (const auto& [k, v] : given.values()) both[k].second = config::value_to_string(v);
  for (const auto& [k, sv] : both)
    if (sv.first != sv.second)
      out.push_back({{"key", k}, {"saved", sv.first}, {"given", sv.second}, {"from", given.has(k) ? given.where(k) : ""}});
  return out;
}

std::string changes_text(const nlohmann::json& changes) {
  std::string s;
  for (const auto& c : changes)
    s += "\n  " + c["key"].get<std::string>() + ": saved " + c["saved"].get<std::string>() + ", given " +
         c["given"].get<std::string>() + " (" + c["from"].get<std::string>() + ")";
  return s;
}

Status train_body(const TrainArgs& a, const JsonStdout& out);

// An explicit runtime.wait_policy (recipe or --set) replaces the start-up choice (LMT_WAIT_POLICY or
// auto). Applying it may re-execute the program (runtime/omp_env.h), so it runs first: before
// JsonStdout moves stdout and before anything is written or started. A recipe that does not load
// is left to train_body(), which reports it.
void apply_recipe_wait_policy(const TrainArgs& a) {
  const std::string saved_path = a.run_dir + "/config.toml";
  const bool has_saved = a.resume && !a.run_dir.empty() && std::filesystem::exists(saved_path);
  if (a.config.empty() && !has_saved) return;
  auto c = config::Config::from_toml_file(a.config.empty() ? saved_path : a.config);
  if (!c.ok()) return;
  for (size_t i = 1; i < a.configs.size(); ++i) {  // the overlays, as train_body() reads them
    auto more = config::Config::from_toml_file(a.configs[i]);
    if (!more.ok()) return;
    c->overlay(*more);
  }
  for (const auto& o : a.overrides)
    if (!c->apply_override(o).ok()) return;
  const std::string where = c->where("runtime.wait_policy");
  if (where.ends_with(" (default)")) return;
  if (auto p = runtime::parse_wait_policy(c->get_string("runtime.wait_policy"), "runtime.wait_policy"); p.ok())
    runtime::apply_wait_policy(*p);
}

Status run_train(TrainArgs a) {
  a.config = a.configs.empty() ? "" : a.configs.front();
  if (!a.print_keys) apply_recipe_wait_policy(a);
  JsonStdout out(a.json && !a.print_keys);
  return train_body(a, out);
}

Status train_body(const TrainArgs& a, const JsonStdout& out) {
  if (a.print_keys) {
    std::printf("%s", config::schema_markdown().c_str());
    return Status::Ok();
  }
  const bool peak_given = a.peak_flag->count() > 0;
  if (peak_given) LMT_RETURN_IF_ERROR(metrics::check_peak_gflops(a.peak_gflops, "--peak-flops"));
  const std::string saved_path = a.run_dir + "/config.toml";
  const bool has_saved = a.resume && !a.run_dir.empty() && std::filesystem::exists(saved_path);
  if (a.run_dir.empty() || (a.config.empty() && !has_saved))
    return UsageError("--config and --run-dir are required (--config may be left out to --resume a run that has "
                           "RUN/config.toml)",
                           "e.g. lmtrain train --config configs/demo.toml --run-dir runs/demo");
  if (a.allow_changes && !a.resume)
    return UsageError("--allow-changes is for --resume", "remove it, or add --resume to continue a run");
  const std::string recipe_file = a.config.empty() ? saved_path : a.config;
  LMT_ASSIGN_OR_RETURN(config::Config c, config::Config::from_toml_file(recipe_file));
  for (size_t i = 1; i < a.configs.size(); ++i) {  // e.g. the layout `lmtrain plan --emit-config` wrote
    LMT_ASSIGN_OR_RETURN(config::Config more, config::Config::from_toml_file(a.configs[i]));
    c.overlay(more);
  }
  for (const auto& o : a.overrides) LMT_RETURN_IF_ERROR(c.apply_override(o));
  if (!a.profile_steps.empty()) LMT_RETURN_IF_ERROR(c.set("profile.steps", a.profile_steps, "--profile-steps"));
  if (!a.backend.empty()) LMT_RETURN_IF_ERROR(c.set("runtime.backend", a.backend, "--backend"));
  if (peak_given) LMT_RETURN_IF_ERROR(c.set("runtime.peak_gflops", a.peak_gflops, "--peak-flops"));
  nlohmann::json changes = nlohmann::json::array();
  if (has_saved) {  // resume safety: the saved recipe wins unless changes are allowed
    LMT_ASSIGN_OR_RETURN(config::Config saved, config::Config::from_toml_file(saved_path));
    changes = recipe_changes(saved, c);
    if (!changes.empty() && !a.allow_changes)
      return FailedPrecondition("--resume: the given recipe differs from the run's saved recipe " + saved_path + " in " +
                                    std::to_string(changes.size()) + " key(s):" + changes_text(changes),
                                "resume with the saved recipe (lmtrain train --run-dir " + a.run_dir +
                                    " --resume, without --config and --set), or pass --allow-changes to continue with "
                                    "these changes (recorded in metrics.jsonl); nothing was changed");
  }
  LMT_ASSIGN_OR_RETURN(train::Recipe recipe, train::recipe_from_config(c, recipe_file));
  // Under mpirun (or srun) every process is one data-parallel rank; alone, a world of 1 (docs/DIST.md).
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<dist::Communicator> comm, dist::make_communicator());
  // parallel.* against the world, before anything is printed or written (every rank decides alike).
  LMT_RETURN_IF_ERROR(train::resolve_parallel_layout(recipe.parallel, comm->world()).status());
  if (comm->rank() == 0 && out.enabled())
    out.emit({{"type", "start"}, {"run_dir", a.run_dir}, {"model", recipe.model.name}, {"params", recipe.model.param_count()},
              {"max_steps", recipe.max_steps}, {"grad_accum", recipe.grad_accum}, {"micro_batch", recipe.micro_batch},
              {"seq_len", recipe.seq_len}, {"world", comm->world()}, {"resume", a.resume}});
  if (comm->rank() == 0) {
    std::printf("model %s: %.2fM parameters; %lld steps of %lld x %lld x %lld tokens; run directory %s\n",
                recipe.model.name.c_str(), recipe.model.param_count() / 1e6, static_cast<long long>(recipe.max_steps),
                static_cast<long long>(recipe.grad_accum), static_cast<long long>(recipe.micro_batch),
                static_cast<long long>(recipe.seq_len), a.run_dir.c_str());
  }
  // SIGTERM/SIGINT: finish the step, checkpoint, exit with status 3 (docs/RELIABILITY.md).
  if (recipe.save_on_signal) install_stop_handlers();
  auto trainer = train::Trainer::create(recipe, c.to_toml(), a.run_dir, a.resume, comm.get());
  if (trainer.ok() && comm->rank() == 0 && comm->world() > 1)  // the gradients' transport: mpi, or nccl on GPUs
    std::printf("data parallel: %d ranks (%s), ZeRO-%d, global batch %lld sequences\n", comm->world(),
                (*trainer)->gradient_transport(), recipe.zero,
                static_cast<long long>(recipe.micro_batch * recipe.grad_accum * comm->world()));
  if (trainer.ok() && !changes.empty()) {
    if (comm->rank() == 0) std::fprintf(stderr, "warning: --allow-changes: resuming with a changed recipe:%s\n", changes_text(changes).c_str());
    const Status e = (*trainer)->record_event({{"event", "config_changed"}, {"changes", changes}});
    if (!e.ok()) return e;
  }
  Status s = trainer.ok() ? (*trainer)->run() : trainer.status();
  if (comm->rank() == 0 && out.enabled()) {
    nlohmann::json end = {{"type", "end"},
                          {"status", s.ok() ? "ok" : s.code() == StatusCode::kCancelled ? "stopped" : "error"},
                          {"run_dir", a.run_dir}, {"metrics", a.run_dir + "/metrics.jsonl"}};
    if (trainer.ok()) end["step"] = (*trainer)->step();
    if (!s.ok()) end["error"] = s.message();
    out.emit(end);
  }
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
  t->add_option("--config", args.configs,
                "recipe (configs/*.toml; keys: --print-keys or docs/CONFIG.md); repeat it to overlay more files, later "
                "ones winning key by key (e.g. --config base.toml --config layout.toml from lmtrain plan --emit-config)");
  t->add_option("--run-dir", args.run_dir, "run directory: config.toml, metrics.jsonl, checkpoints/, trace.json");
  add_set_flag(t, args.overrides);
  t->add_flag("--resume", args.resume,
              "continue from the newest valid checkpoint in --run-dir, with the run's saved recipe (RUN/config.toml)");
  t->add_flag("--allow-changes", args.allow_changes,
              "with --resume: continue even though --config/--set change the saved recipe (recorded in metrics.jsonl)");
  add_backend_flag(t, args.backend, "the recipe's runtime.backend, cpu");
  t->add_option("--profile-steps", args.profile_steps, "write RUN/trace.json for steps A..B-1, e.g. 10:20");
  t->add_flag("--print-keys", args.print_keys, "print every recipe key with its type, default and meaning");
  args.peak_flag = t->add_option("--peak-flops", args.peak_gflops,
                                 "GFLOP/s: dense peak of one device that MFU divides by (runtime.peak_gflops; "
                                 "default: this machine's, cached per machine)");
  t->add_flag("--json", args.json, "compact JSON lines on stdout (start, end); the step lines go to stderr");
  t->callback([&runner] { runner.set(run_train(args)); });
}

}  // namespace lmt::cli
