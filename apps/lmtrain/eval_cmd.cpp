// `lmtrain eval`: multiple-choice benchmarks (log-probability of each choice, cloze formulation) and
// validation loss of a checkpoint. docs/EVAL.md describes the tasks, templates and normalisations.
//
//   lmtrain eval --checkpoint RUN_OR_STEP_DIR --task piqa --data piqa/valid.jsonl [--limit N] [--json] [--items-out F.jsonl]
//   lmtrain eval --checkpoint RUN_DIR --task val --data DATASET_DIR
//   lmtrain eval --preset gpt2-124m --tokenizer gpt2/ --task piqa --data ...   (random weights: throughput only)
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "backend_flag.h"
#include "commands.h"
#include "eval_progress.h"
#include "lmt/base/format.h"
#include "lmt/eval/item_log.h"
#include "lmt/eval/model_dir.h"
#include "lmt/eval/scoring.h"
#include "lmt/eval/tasks.h"
#include "lmt/eval/validation.h"
#include "lmt/io/atomic_file.h"
#include "lmt/metrics/hardware.h"
#include "lmt/tensor/compute_dtype.h"

namespace lmt::cli {
namespace {

struct EvalArgs {
  std::string checkpoint, preset, task, data, tokenizer, items_out, dtype = "fp32", backend = "cpu", scoring,
      decode_dtype = "fp32";
  int64_t limit = 0, batch = 8, max_seq = 0, seq = 0;
  uint64_t seed = 1;
  bool json = false, no_doc_masking = false;
};

// The model (and tokenizer, for multiple-choice tasks) named by --checkpoint or --preset.
struct Loaded {
  std::unique_ptr<model::Transformer> model;
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::string source;
};

StatusOr<Loaded> load(const EvalArgs& a, bool need_tokenizer) {
  Loaded out;
  if (a.checkpoint.empty() == a.preset.empty())
    return UsageError("pass exactly one of --checkpoint DIR and --preset NAME",
                           "--checkpoint evaluates trained weights; --preset only measures throughput on random weights");
  LMT_ASSIGN_OR_RETURN(kernels::Backend* be, backend_from_flag(a.backend));
  eval::LoadedModel lm;
  if (!a.checkpoint.empty()) {
    LMT_ASSIGN_OR_RETURN(lm, eval::load_model_dir(a.checkpoint, *be));
    out.source = lm.source;
  } else {
    LMT_ASSIGN_OR_RETURN(model::ModelConfig config, model::preset(a.preset));
    LMT_RETURN_IF_ERROR(model::model_memory_check(config, 8, 0, "--preset " + a.preset));
    lm.model = std::make_unique<model::Transformer>(config, *be);
    lm.model->init(a.seed);
    lm.source = out.source = "preset " + a.preset + " (random weights, seed " + std::to_string(a.seed) + ")";
  }
  if (need_tokenizer) {
    LMT_ASSIGN_OR_RETURN(out.tokenizer, eval::load_model_tokenizer(lm, a.tokenizer));
    if (out.tokenizer->vocab_size() > lm.model->config().vocab_size)
      return InvalidArgument("the tokenizer has " + std::to_string(out.tokenizer->vocab_size()) + " ids but the model's vocabulary is " +
                                 std::to_string(lm.model->config().vocab_size),
                             "pass the tokenizer the model was trained with (--tokenizer)");
  }
  out.model = std::move(lm.model);
  return out;
}

Status run_val(const EvalArgs& a, DType compute) {
  LMT_ASSIGN_OR_RETURN(Loaded l, load(a, /*need_tokenizer=*/false));
  eval::ValidationOptions o;
  o.batch = a.batch;
  o.seq = a.seq;
  o.max_batches = a.limit;
  o.doc_masking = !a.no_doc_masking;
  o.compute = compute;
  LMT_ASSIGN_OR_RETURN(eval::ValidationResult r, eval::evaluate_validation(*l.model, a.data, o));
  if (a.json) {
    nlohmann::json j = {{"task", "val"}, {"data", a.data}, {"model", l.source}, {"loss", r.loss}, {"ppl", r.ppl},
                        {"tokens", r.tokens}, {"batches", r.batches}, {"seconds", r.seconds}, {"tokens_per_s", r.tokens_per_s}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("model: %s\nval %s: loss %.4f | ppl %s | %lld tokens in %lld batches | %.0f tokens/s\n", l.source.c_str(),
                a.data.c_str(), r.loss, perplexity_text(r.loss).c_str(), static_cast<long long>(r.tokens),
                static_cast<long long>(r.batches), r.tokens_per_s);
  }
  return Status::Ok();
}

Status run_eval(const EvalArgs& a) {
  LMT_ASSIGN_OR_RETURN(DType compute, parse_compute_dtype(a.dtype, "--dtype"));
  LMT_ASSIGN_OR_RETURN(const DType decode_weights, parse_compute_dtype(a.decode_dtype, "--decode-dtype"));
  LMT_RETURN_IF_ERROR(check_flag("--limit", a.limit, 0, int64_t{1} << 40, "items (val: batches) to evaluate; 0: all"));
  // Whether the batch fits in memory is checked against the model once it is known.
  LMT_RETURN_IF_ERROR(check_flag("--micro-batch", a.batch, 1, int64_t{1} << 20, "rows per forward pass, e.g. --micro-batch 8"));
  LMT_RETURN_IF_ERROR(check_flag("--seq-len", a.seq, 0, model::ModelLimits::kMaxSeqLen, "val: tokens per row; 0: min(1024, model max)"));
  LMT_RETURN_IF_ERROR(check_flag("--max-seq-len", a.max_seq, 0, model::ModelLimits::kMaxSeqLen, "longest scored row; 0: model max"));
  LMT_RETURN_IF_ERROR(check_omp_num_threads());
  if (a.task == "val") {
    if (!a.items_out.empty()) return InvalidArgument("--items-out is for multiple-choice tasks, not val", "drop --items-out");
    return run_val(a, compute);
  }
  // --items-out: refuse an existing file, and create the temporary file now (proves the directory is
  // writable) so that a long run does not fail at the end; committed only after scoring succeeded.
  std::optional<io::AtomicFileWriter> items_writer;
  if (!a.items_out.empty()) {
    std::error_code ec;
    if (std::filesystem::exists(a.items_out, ec))
      return FailedPrecondition("--items-out " + a.items_out + ": already exists; not overwritten", "remove it or choose another path");
    LMT_ASSIGN_OR_RETURN(io::AtomicFileWriter w, io::AtomicFileWriter::create(a.items_out));
    items_writer.emplace(std::move(w));
  }
  // Parse the file before loading a (possibly large) model, so a bad file fails fast.
  LMT_ASSIGN_OR_RETURN(std::vector<eval::McItem> items, eval::parse_task(a.task, a.data));
  LMT_ASSIGN_OR_RETURN(Loaded l, load(a, /*need_tokenizer=*/true));
  eval::ScoreOptions so;
  so.batch = a.batch;
  so.max_seq = a.max_seq;
  so.compute = compute;
  // Default: shared-prefix, which computes in fp32; --dtype bf16 alone keeps the full path.
  if (!a.scoring.empty()) {
    LMT_ASSIGN_OR_RETURN(so.scoring, eval::parse_scoring(a.scoring));
  } else {
    so.scoring = compute == DType::kF32 ? eval::Scoring::kSharedPrefix : eval::Scoring::kFull;
  }
  so.decode_weights = decode_weights;
  if (decode_weights != DType::kF32 && so.scoring != eval::Scoring::kSharedPrefix)
    return InvalidArgument("--decode-dtype " + a.decode_dtype + " applies to --scoring shared-prefix only",
                           "drop --decode-dtype, or use --dtype bf16 for bf16 GEMMs on the full path");
  LMT_ASSIGN_OR_RETURN(eval::TaskResult r, score_with_progress(*l.model, *l.tokenizer, items, a.limit, so, a.task));
  if (items_writer) {
    LMT_ASSIGN_OR_RETURN(std::string lines, eval::items_jsonl(a.task, items, r));
    LMT_RETURN_IF_ERROR(items_writer->append(lines.data(), lines.size()));
    LMT_RETURN_IF_ERROR(items_writer->commit());
  }
  if (a.json) {
    nlohmann::json j = {{"task", a.task}, {"data", a.data}, {"model", l.source}, {"items", r.items}, {"acc", r.acc},
                        {"acc_norm_token", r.acc_norm_token}, {"acc_norm_char", r.acc_norm_char}, {"rows", r.rows},
                        {"truncated_rows", r.truncated_rows}, {"seconds", r.seconds}, {"items_per_s", r.items_per_s},
                        {"batch", a.batch}, {"dtype", a.dtype}, {"decode_dtype", compute_dtype_name(decode_weights)}, {"scoring", eval::scoring_name(so.scoring)}, {"threads", metrics::cpu_info().threads},
                        {"machine", metrics::machine_summary()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("model: %s\n", l.source.c_str());
    std::printf("%-14s %7s %8s %15s %14s %9s\n", "task", "items", "acc", "acc_norm_token", "acc_norm_char", "items/s");
    std::printf("%-14s %7lld %8.4f %15.4f %14.4f %9.2f\n", a.task.c_str(), static_cast<long long>(r.items), r.acc,
                r.acc_norm_token, r.acc_norm_char, r.items_per_s);
    if (r.truncated_rows > 0)
      std::printf("note: %lld of %lld rows had their context left-truncated to fit the sequence length\n",
                  static_cast<long long>(r.truncated_rows), static_cast<long long>(r.rows));
  }
  return Status::Ok();
}

}  // namespace

void add_eval_command(CLI::App& app, Runner& runner) {
  static EvalArgs a;
  CLI::App* e = app.add_subcommand("eval", "validation loss and multiple-choice benchmarks (arc, obqa, piqa, hellaswag, winogrande)");
  e->add_option("--checkpoint", a.checkpoint, "run directory, RUN/checkpoints/step_N, or a Hugging Face model directory");
  e->add_option("--preset", a.preset, "instead of --checkpoint: a model preset with random weights (throughput benchmarks only)");
  e->add_option("--seed", a.seed, "initialisation seed for --preset")->capture_default_str();
  e->add_option("--task", a.task, "arc_easy, arc_challenge, openbookqa, piqa, hellaswag, winogrande, or val")->required();
  e->add_option("--data", a.data, "the task's JSONL file, or for val a prepared dataset directory")->required();
  e->add_option("--limit", a.limit, "first N items (val: N batches); 0 = all")->capture_default_str();
  e->add_option("--micro-batch", a.batch, "rows per forward pass")->capture_default_str();
  add_deprecated_option(e, "--batch", "--micro-batch", a.batch);
  e->add_option("--max-seq-len", a.max_seq, "longest scored row; longer contexts are left-truncated (0: model max)")->capture_default_str();
  add_deprecated_option(e, "--max-seq", "--max-seq-len", a.max_seq);
  e->add_option("--seq-len", a.seq, "val: sequence length T (0: min(1024, model max))")->capture_default_str();
  add_deprecated_option(e, "--seq", "--seq-len", a.seq);
  e->add_flag("--no-doc-masking", a.no_doc_masking, "val: attend across document boundaries");
  e->add_option("--dtype", a.dtype, "fp32 (exact) or bf16 GEMM inputs")->capture_default_str();
  e->add_option("--scoring", a.scoring,
                 "multiple-choice: shared-prefix (context once, logits only where scored; fp32) or full (each choice its own row); "
                 "default shared-prefix, full with --dtype bf16");
  e->add_option("--decode-dtype", a.decode_dtype,
                "shared-prefix: the decoder's GEMM weights, fp32 (exact) or bf16 (f32 activations)")
      ->capture_default_str();
  add_backend_flag(e, a.backend);
  e->add_option("--tokenizer", a.tokenizer, "tokenizer path (default: the one the checkpoint's data was prepared with)");
  e->add_flag("--json", a.json, "print one JSON object");
  e->add_option("--items-out", a.items_out,
                "multiple-choice: write per-item JSONL (each choice's log-likelihood, tokens, chars, predictions, gold) to this new file");
  e->callback([&runner] { runner.set(run_eval(a)); });
}

}  // namespace lmt::cli
