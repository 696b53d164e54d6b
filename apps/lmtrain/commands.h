// Registration of lmtrain subcommands. A subcommand's callback runs its work and records the
// outcome in the Runner, which main() turns into an exit code and an error message.
#pragma once

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmt/base/limits.h"
#include "lmt/base/status.h"

namespace lmt::cli {

// Range checks for numeric flags (every numeric flag is checked before it is used): an error naming
// the flag, the value and the valid range; `hint` says what the value means.
inline Status check_flag(const std::string& flag, int64_t v, int64_t min, int64_t max, const std::string& hint = "") {
  if (v < min || v > max)
    return InvalidArgument(flag + " " + std::to_string(v) + " is out of range: it must be in [" + std::to_string(min) + ", " +
                               std::to_string(max) + "]",
                           hint);
  return Status::Ok();
}
inline Status check_real_flag(const std::string& flag, double v, double min, double max, const std::string& hint = "") {
  if (!std::isfinite(v) || v < min || v > max) {
    char buf[128];
    std::snprintf(buf, sizeof buf, " %g is out of range: it must be in [%g, %g]", v, min, max);
    return InvalidArgument(flag + buf, hint);
  }
  return Status::Ok();
}

// The CLI convention (docs/CLI.md) as helpers.
//
// A renamed flag keeps its old spelling as a hidden alias writing the same variable; using it prints
// one line "lmtrain: warning: --old is deprecated, use --new" on stderr. Returns the alias.
template <typename T>
CLI::Option* add_deprecated_option(CLI::App* cmd, const std::string& old_name, const std::string& new_name, T& target) {
  CLI::Option* o = cmd->add_option(old_name, target, "deprecated: use " + new_name);
  o->group("");  // hidden from --help
  o->each([old_name, new_name](const std::string&) {
    std::fprintf(stderr, "lmtrain: warning: %s is deprecated, use %s\n", old_name.c_str(), new_name.c_str());
  });
  return o;
}

// `--json`: compact JSON, one object per line, on stdout; the command's human text goes to stderr.
// While a JsonStdout is enabled, file descriptor 1 points at stderr (so text printed anywhere below,
// e.g. by the trainer, lands on stderr) and emit() writes to the real stdout. Restored on destruction.
class JsonStdout {
 public:
  explicit JsonStdout(bool enabled) {
    if (!enabled) return;
    std::fflush(stdout);
    fd_ = dup(STDOUT_FILENO);
    if (fd_ >= 0) dup2(STDERR_FILENO, STDOUT_FILENO);
  }
  ~JsonStdout() {
    if (fd_ < 0) return;
    std::fflush(stdout);
    dup2(fd_, STDOUT_FILENO);
    close(fd_);
  }
  JsonStdout(const JsonStdout&) = delete;
  JsonStdout& operator=(const JsonStdout&) = delete;
  bool enabled() const { return fd_ >= 0; }
  // One compact JSON object and a newline, written whole (to stdout, also when not enabled).
  void emit(const nlohmann::json& j) const {
    const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (fd_ < 0) {
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fflush(stdout);
      return;
    }
    size_t done = 0;
    while (done < line.size()) {
      const ssize_t n = write(fd_, line.data() + done, line.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
  }

 private:
  int fd_ = -1;
};

// Adds --quiet and --verbose to `cmd` and, recursively, to every subcommand under it: they set the log
// level (WARNING / DEBUG) as soon as they are parsed. Called once by main() after registration.
void add_log_flags(CLI::App* cmd);

// Adds `--set section.key=value` (repeatable) writing into `overrides`.
inline CLI::Option* add_set_flag(CLI::App* cmd, std::vector<std::string>& overrides) {
  return cmd->add_option("--set", overrides, "override a recipe key, e.g. --set optim.lr=3e-4 (repeatable)");
}

class Runner {
 public:
  void set(Status s) { status_ = std::move(s); }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// `lmtrain bench matmul|attention ...` (apps/lmtrain/bench_cmd.cpp)
void add_bench_command(CLI::App& app, Runner& runner);

// `lmtrain logits --checkpoint DIR --ids 1,2,3` (apps/lmtrain/logits_cmd.cpp)
void add_logits_command(CLI::App& app, Runner& runner);

// `lmtrain plan ...`: feasibility, memory and parallelism planning (apps/lmtrain/plan_cmd.cpp)
void add_plan_command(CLI::App& app, Runner& runner);
// `lmtrain train ...` (apps/lmtrain/train_cmd.cpp)
void add_train_command(CLI::App& app, Runner& runner);
// `lmtrain model info ...` (apps/lmtrain/model_cmd.cpp)
void add_model_command(CLI::App& app, Runner& runner);
// `lmtrain bench train ...` (apps/lmtrain/bench_train_cmd.cpp), registered under `bench`.
void add_train_bench(CLI::App* bench, Runner& runner);
// `lmtrain bench collectives ...` (apps/lmtrain/bench_collectives_cmd.cpp), registered under `bench`.
void add_collectives_bench(CLI::App* bench, Runner& runner);
// `lmtrain bench optim ...` (apps/lmtrain/bench_optim_cmd.cpp), registered under `bench`.
void add_optim_bench(CLI::App* bench, Runner& runner);
// `lmtrain bench model ...` (apps/lmtrain/bench_model_cmd.cpp), registered under `bench`.
void add_model_bench(CLI::App* bench, Runner& runner);
// `lmtrain bench decode ...` (apps/lmtrain/bench_decode_cmd.cpp), registered under `bench`.
void add_decode_bench(CLI::App* bench, Runner& runner);
// `lmtrain bench peak ...` (apps/lmtrain/bench_peak_cmd.cpp), registered under `bench`.
void add_peak_bench(CLI::App* bench, Runner& runner);
// `lmtrain tokenizer encode|decode ...` (apps/lmtrain/tokenizer_cmd.cpp). Returns the `tokenizer`
// App so that further tokenizer subcommands (train) hang under it.
CLI::App* add_tokenizer_command(CLI::App& app, Runner& runner);
// `lmtrain tokenizer train ...` (apps/lmtrain/tokenizer_train_cmd.cpp), registered under `tokenizer`.
void add_tokenizer_train_command(CLI::App* tokenizer, Runner& runner);
// `lmtrain bench tokenizer ...` (apps/lmtrain/bench_tokenizer_cmd.cpp), registered under `bench`.
void add_tokenizer_bench(CLI::App* bench, Runner& runner);

// `lmtrain data prepare|info ...` (apps/lmtrain/data_cmd.cpp); also registers `bench data` under the
// `bench` subcommand, so add_bench_command() must run first.
void add_data_command(CLI::App& app, Runner& runner);
// `lmtrain data clean ...` (apps/lmtrain/data_clean_cmd.cpp), registered under `data`.
void add_data_clean_command(CLI::App* data, Runner& runner);
// `lmtrain bench data ...` (apps/lmtrain/bench_data_cmd.cpp), registered under `bench`.
void add_data_bench(CLI::App* bench, Runner& runner);
// `lmtrain eval ...`: multiple-choice tasks and validation loss (apps/lmtrain/eval_cmd.cpp)
void add_eval_command(CLI::App& app, Runner& runner);
// `lmtrain generate ...`: sampling with a KV cache (apps/lmtrain/generate_cmd.cpp)
void add_generate_command(CLI::App& app, Runner& runner);
// `lmtrain export ...`: Hugging Face directories and GGUF files (apps/lmtrain/export_cmd.cpp)
void add_export_command(CLI::App& app, Runner& runner);

// `lmtrain report RUN [RUN...]`: an HTML report of runs (apps/lmtrain/report_cmd.cpp)
void add_report_command(CLI::App& app, Runner& runner);

}  // namespace lmt::cli
