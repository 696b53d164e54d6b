// lmtrain: the command line. Each subcommand lives in its own *_cmd.cpp and registers itself here.
//
// Exit codes: 0 success; 1 a command failed (bad file, bad value: the message says which and how to
// fix it); 2 usage error (unknown subcommand or option, missing argument) with usage on stderr.
#include <cstdio>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "lmt/base/status.h"

#ifndef LMT_VERSION
#define LMT_VERSION "0.0.0"
#endif

namespace {

// Subcommands that later work fills in; they say so instead of pretending, and the hint says
// what to use meanwhile.
void add_pending(CLI::App& app, const char* name, const char* what, const char* meanwhile,
                 lmt::cli::Runner& runner) {
  CLI::App* sub = app.add_subcommand(name, what);
  sub->allow_extras();
  sub->callback([&runner, name, meanwhile] {
    runner.set(lmt::Unimplemented(std::string("'lmtrain ") + name + "' is not implemented yet", meanwhile));
  });
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
  add_pending(app, "export", "export to Hugging Face safetensors / GGUF (not implemented yet)",
              "no issue covers it yet; meanwhile every checkpoint holds model.safetensors with Hugging Face "
              "tensor names and model.json with its configuration, which lmtrain eval and generate load directly",
              runner);

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
    const CLI::App* failed = &app;
    while (!failed->get_subcommands().empty()) failed = failed->get_subcommands().front();
    std::cerr << failed->help();
    return 2;
  }
  const lmt::Status& status = runner.status();
  if (!status.ok()) {
    std::cerr << "lmtrain: " << status.ToString() << "\n";
    return 1;
  }
  return 0;
}
