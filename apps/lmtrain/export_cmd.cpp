// `lmtrain export --checkpoint RUN_OR_STEP --format hf|gguf --out PATH [--dtype ...] [--json]` (docs/INTEROP.md).
// Prints "exported FORMAT to PATH" (or with --json one compact JSON object) after the output is committed.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

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
  bool json = false;
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
  if (a.format == "gguf") {
    LMT_RETURN_IF_ERROR(exporter::export_gguf(em, a.out, *dtype));
  } else {
    StatusOr<int64_t> shard = exporter::parse_byte_size(a.max_shard_size);
    if (!shard.ok()) return shard.status().WithContext("--max-shard-size");
    LMT_RETURN_IF_ERROR(exporter::export_hf(em, a.out, *dtype, *shard));
  }
  if (a.json)
    std::printf("%s\n", nlohmann::json{{"format", a.format}, {"out", a.out}, {"dtype", a.dtype}, {"source", loaded->source},
                                       {"tokenizer", em.tokenizer_path}}.dump().c_str());
  else
    std::printf("exported %s (%s) to %s\n", a.format.c_str(), a.dtype.c_str(), a.out.c_str());
  return Status::Ok();
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
  e->add_flag("--json", a.json, "print one compact JSON object (format, out, dtype, source, tokenizer)");
  e->callback([&runner] { runner.set(run_export(a)); });
}

}  // namespace lmt::cli
