// `lmtrain data clean --input PATH... --out DIR [--config clean.toml] [--workers N]
//  [--decontaminate EVALFILE...] [--json]` (docs/DATA_CLEAN.md).
#include <string>
#include <vector>

#include "commands.h"

namespace lmt::cli {
namespace {

struct CleanArgs {
  std::vector<std::string> inputs;
  std::string out;
  std::string config;
  int64_t workers = 0;
  std::vector<std::string> decontaminate;
  bool json = false;
};

Status run_clean(const CleanArgs&) {
  return Unimplemented("'lmtrain data clean' is not implemented yet", "issue #17");
}

}  // namespace

void add_data_clean_command(CLI::App* data, Runner& runner) {
  static CleanArgs a;
  CLI::App* c = data->add_subcommand("clean", "filter, deduplicate and decontaminate raw text into cleaned JSONL");
  c->add_option("--input", a.inputs, "JSONL files, text files, directories")->required();
  c->add_option("--out", a.out, "the output directory to create")->required();
  c->add_option("--config", a.config, "clean.toml: normalisation, filters, dedup settings");
  c->add_option("--workers", a.workers, "worker threads (0: one per hardware thread)")->capture_default_str();
  c->add_option("--decontaminate", a.decontaminate, "evaluation files whose items must not appear in the output");
  c->add_flag("--json", a.json, "print the summary as one JSON object");
  c->callback([&runner] { runner.set(run_clean(a)); });
}

}  // namespace lmt::cli
