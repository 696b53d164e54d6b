// lmtrain: the command line. Each subcommand lives in its own *_cmd.cpp and registers itself here.
//
// The conventions every command follows are in docs/CLI.md (tests/e2e/cli_convention_test.cpp checks them).
// Exit codes: 0 success; 1 a command failed (bad file, bad value: the message says which and how to
// fix it); 2 usage error (unknown subcommand or option, missing or conflicting options, malformed
// value, a bad LMT_LOG_LEVEL) with usage on stderr; 3 (kExitStopped) a run stopped by SIGTERM/SIGINT
// after saving its checkpoint.
// Commands report failures as Status values; an exception that escapes one anyway is caught here
// (a last resort, not the design) and reported with the command's name, exit code 1.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "lmt/base/limits.h"
#include "lmt/base/log.h"
#include "lmt/base/status.h"
#include "lmt/base/stop_signal.h"
#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/metrics/hardware.h"
#include "lmt/runtime/omp_env.h"

#ifndef LMT_VERSION
#define LMT_VERSION "0.0.0"
#endif

namespace {

// "lmtrain data prepare": the subcommand path that was parsed, for messages.
std::string command_name(const CLI::App& app) {
  std::string name = "lmtrain";
  for (const CLI::App* a = &app; !a->get_subcommands().empty();) {
    a = a->get_subcommands().front();
    name += " " + a->get_name();
  }
  return name;
}

// The deepest subcommand that was parsed (the one whose usage a usage error shows).
const CLI::App* parsed_leaf(const CLI::App& app) {
  const CLI::App* a = &app;
  while (!a->get_subcommands().empty()) a = a->get_subcommands().front();
  return a;
}

// The usage text of `cmd` with its full command path ("Usage: lmtrain data info [OPTIONS]").
std::string usage_of(const CLI::App* cmd) {
  std::string parents;
  for (const CLI::App* p = cmd->get_parent(); p != nullptr; p = p->get_parent())
    parents = p->get_name() + (parents.empty() ? "" : " " + parents);
  return cmd->get_parent() == nullptr ? cmd->help() : cmd->help(parents);
}

int report(const lmt::Status& status, const CLI::App* usage = nullptr) {
  if (status.ok()) return 0;
  std::cerr << "lmtrain: " << status.ToString() << "\n";
  if (status.code() == lmt::StatusCode::kUsage) {
    if (usage != nullptr) std::cerr << "\n" << usage_of(usage);
    return 2;
  }
  return status.code() == lmt::StatusCode::kCancelled ? lmt::kExitStopped : 1;
}

// LMT_LOG_LEVEL, when set, must name a level: anything else is a usage error (exit 2).
lmt::Status check_log_level_env() {
  const char* env = std::getenv("LMT_LOG_LEVEL");
  lmt::LogLevel level;
  if (env == nullptr) return lmt::Status::Ok();
  if (!lmt::parse_log_level(env, &level))
    return lmt::UsageError(std::string("LMT_LOG_LEVEL='") + env + "' is not a log level",
                           std::string("set it to one of ") + lmt::log_level_names() + ", or unset it (default info)");
  lmt::set_log_level(level);
  return lmt::Status::Ok();
}

// The cpu backend's bf16 GEMMs run on the unit the measured peaks name (metrics::with_fastest_bf16()):
// widened to f32 on the fp32 FMAs where the CPU's bf16 unit measured slower than them. Asked at the
// first bf16 GEMM only, so commands without one measure nothing.
lmt::kernels::CpuBf16Gemms choose_cpu_bf16_gemms() {
  const lmt::metrics::CpuInfo& cpu = lmt::metrics::cpu_info();
  if (!cpu.avx512_bf16 && !cpu.amx_bf16) return lmt::kernels::CpuBf16Gemms::kNative;  // nothing to measure
  if (!lmt::metrics::bf16_unit_unused(cpu, lmt::metrics::measured_peaks())) return lmt::kernels::CpuBf16Gemms::kNative;
  LMT_LOG(INFO) << "bf16 GEMMs run with their operands widened to f32: this CPU's bf16 unit measured slower "
                   "than its fp32 FMAs (lmtrain bench peak; LMT_CPU_BF16_GEMM=native|widened overrides)";
  return lmt::kernels::CpuBf16Gemms::kWidened;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lmtrain: pre-train decoder-only language models, end to end", "lmtrain"};
  app.set_version_flag("--version", std::string("lmtrain ") + LMT_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);

  lmt::cli::Runner runner;
  lmt::cli::add_bench_command(app, runner);
  lmt::cli::add_plan_command(app, runner);
  CLI::App* tokenizer_cmd = lmt::cli::add_tokenizer_command(app, runner);
  lmt::cli::add_tokenizer_train_command(tokenizer_cmd, runner);
  lmt::cli::add_data_command(app, runner);
  lmt::cli::add_model_command(app, runner);
  lmt::cli::add_train_command(app, runner);
  lmt::cli::add_eval_command(app, runner);
  lmt::cli::add_generate_command(app, runner);
  lmt::cli::add_export_command(app, runner);
  lmt::cli::add_logits_command(app, runner);
  lmt::cli::add_report_command(app, runner);
  lmt::cli::add_log_flags(&app);  // --quiet/--verbose on every command

  if (const lmt::Status env = check_log_level_env(); !env.ok()) return report(env);
  lmt::kernels::set_cpu_bf16_gemm_chooser(choose_cpu_bf16_gemms);

  // The OpenMP wait policy (runtime/omp_env.h): LMT_WAIT_POLICY, else auto. libgomp read its
  // environment when it was loaded, so this may re-execute the program once, before anything is
  // read or written; a command with its own choice (--wait-policy, runtime.wait_policy) applies it
  // again the same way. The user's OMP_WAIT_POLICY / GOMP_SPINCOUNT always win.
  lmt::runtime::set_program_args(argc, argv);
  {
    auto policy = lmt::runtime::wait_policy_from_env();
    if (!policy.ok()) return report(policy.status());
    lmt::runtime::apply_startup_wait_policy(*policy);
  }

  // An absurd OMP_NUM_THREADS (70000) crashes the first parallel region: refuse it before any work.
  if (const lmt::Status omp = lmt::check_omp_num_threads(); !omp.ok()) return report(omp);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // help on stdout, exit 0
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    const std::string first = argc > 1 ? argv[1] : "";
    auto named_first = [&](const CLI::App* sub) { return sub->get_name() == first; };
    if (!first.empty() && first[0] != '-' && app.get_subcommands(named_first).empty())
      what = "unknown subcommand '" + first + "'";
    std::cerr << "lmtrain: " << what << "\n\n";
    // Usage of the subcommand that failed to parse, else of the whole program.
    std::cerr << usage_of(parsed_leaf(app));
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << command_name(app) << ": error: out of memory\n"
              << "hint: lower the batch size, sequence length or model size (lmtrain plan estimates memory)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << command_name(app) << ": error: unexpected failure: " << e.what() << "\n"
              << "hint: this is a bug in lmtrain; nothing already written was overwritten. Please report it with "
                 "the command line\n";
    return 1;
  }
  return report(runner.status(), parsed_leaf(app));
}
