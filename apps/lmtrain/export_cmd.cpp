// `lmtrain export --checkpoint RUN_OR_STEP --format hf|gguf --out PATH [--dtype ...]` (docs/INTEROP.md).
#include <string>

#include "commands.h"
#include "lmt/export/gguf_export.h"
#include "lmt/export/hf_export.h"

namespace lmt::cli {
namespace {

struct ExportArgs {
  std::string checkpoint;
  std::string format;
  std::string out;
  std::string dtype = "f32";
  std::string tokenizer;
};

Status run_export(const ExportArgs&) {
  return Unimplemented("'lmtrain export' is not implemented yet", "issue #16");
}

}  // namespace

void add_export_command(CLI::App& app, Runner& runner) {
  static ExportArgs a;
  CLI::App* e = app.add_subcommand("export", "export a checkpoint to Hugging Face transformers or GGUF (llama.cpp)");
  e->add_option("--checkpoint", a.checkpoint, "a run directory, a checkpoint step directory, or a Hugging Face directory")
      ->required();
  e->add_option("--format", a.format, "hf or gguf")->required();
  e->add_option("--out", a.out, "the directory (hf) or file (gguf) to create")->required();
  e->add_option("--dtype", a.dtype, "f32, bf16, f16, or q8_0 (gguf only)")->capture_default_str();
  e->add_option("--tokenizer", a.tokenizer, "the tokenizer to include (default: the checkpoint's own)");
  e->callback([&runner] { runner.set(run_export(a)); });
}

}  // namespace lmt::cli
