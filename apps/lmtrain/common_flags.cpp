// --quiet / --verbose on every lmtrain command (docs/CLI.md).
#include "commands.h"
#include "lmt/base/log.h"

namespace lmt::cli {

void add_log_flags(CLI::App* cmd) {
  // Both given: the last one wins (each sets the level when it is parsed).
  cmd->add_flag_callback(
      "--quiet", [] { set_log_level(LogLevel::WARNING); }, "print warnings and errors only; no progress bars (log level warning)");
  cmd->add_flag_callback("--verbose", [] { set_log_level(LogLevel::DEBUG); }, "print debug messages (log level debug)");
  for (CLI::App* sub : cmd->get_subcommands([](CLI::App*) { return true; })) add_log_flags(sub);
}

}  // namespace lmt::cli
