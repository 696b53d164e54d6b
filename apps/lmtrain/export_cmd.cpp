// `lmtrain export --checkpoint RUN_OR_STEP --format hf|gguf --out PATH [--dtype ...]` (docs/INTEROP.md).
#include <string>

#include "commands.h"
#include "lmt/eval/model_dir.h"
#include "lmt/export/gguf_export.h"
#include "lmt/export/hf_export.h"
#include "lmt/kernels/registry.h"
#include "lmt/model/transformer.h"

namespace lmt::cli {
namespace {

struct ExportArgs {
  std::string checkpoint;
  std::string format;
  std::string out;
  std::string dtype = "f32";
  std::string tokenizer;
  std::string max_shard_size = "5GiB";
};

Status run_export(const ExportArgs& a) {
  StatusOr<exporter::ExportDType> dtype = exporter::parse_export_dtype(a.dtype);
  if (!dtype.ok()) return dtype.status().WithContext("--dtype");
  if (a.format != "hf" && a.format != "gguf")
    return InvalidArgument("--format '" + a.format + "' is not a format lmtrain exports",
                           "use hf (a Hugging Face transformers directory) or gguf (one file for llama.cpp)");
  // Export reads the f32 master weights on the host: the reference backend computes nothing here.
  StatusOr<eval::LoadedModel> loaded = eval::load_model_dir(a.checkpoint, kernels::backend("ref"));
  if (!loaded.ok()) return loaded.status().WithContext("--checkpoint");
  const model::Transformer& m = *loaded->model;
  exporter::ExportModel em;
  em.config = m.config();
  em.layout = &m.layout();
  em.params = m.params().as<float>();
  em.tokenizer_path = a.tokenizer == "none" ? "" : a.tokenizer.empty() ? loaded->tokenizer_path : a.tokenizer;
  em.source = loaded->source;
  if (a.format == "gguf") return exporter::export_gguf(em, a.out, *dtype);
  StatusOr<int64_t> shard = exporter::parse_byte_size(a.max_shard_size);
  if (!shard.ok()) return shard.status().WithContext("--max-shard-size");
  return exporter::export_hf(em, a.out, *dtype, *shard);
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
  e->add_option("--tokenizer", a.tokenizer, "the tokenizer to include (default: the checkpoint's own; none: no tokenizer files)");
  e->add_option("--max-shard-size", a.max_shard_size, "hf: split model.safetensors into shards of at most this size (5GB, 500MB, 64KiB)")
      ->capture_default_str();
  e->callback([&runner] { runner.set(run_export(a)); });
}

}  // namespace lmt::cli
