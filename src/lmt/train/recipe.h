// Recipe: a validated, typed training recipe built from a Config (config/config.h). Every value the
// trainer uses comes from here; errors name the recipe key.
#pragma once

#include <cstdint>
#include <string>

#include "lmt/config/config.h"
#include "lmt/data/loader.h"
#include "lmt/eval/suite.h"
#include "lmt/model/activations.h"
#include "lmt/model/config.h"
#include "lmt/optim/optimizer.h"
#include "lmt/optim/schedule.h"
#include "lmt/runtime/omp_env.h"
#include "lmt/train/parallel_layout.h"

namespace lmt::train {

enum class SpikeAction : uint8_t { kLog, kSkip, kRollback };

struct Recipe {
  model::ModelConfig model;
  std::string init_from;  // model.init_from: weights to start from ("" = random init; train/init_from.h)
  model::RunOptions run;
  std::string backend = "cpu";  // runtime.backend: the kernel backend's registry name (kernels/registry.h)
  // runtime.wait_policy (runtime/omp_env.h), checked here; `lmtrain train` applies it before
  // anything starts, when the recipe or --set gives it (else LMT_WAIT_POLICY decides).
  runtime::WaitPolicy wait_policy = runtime::WaitPolicy::kAuto;
  int64_t max_steps = 0, micro_batch = 0, seq_len = 0, grad_accum = 1, batch_warmup_tokens = 0, log_every = 1;
  uint64_t seed = 0;
  bool doc_masking = true;
  bool reset_positions = false;  // data.reset_positions: the model reads Batch::positions (restart per document)
  double stall_timeout_s = 1800;  // train.stall_timeout_s: end the run after this long without progress (0: never)
  bool save_on_signal = true;  // train.save_on_signal: SIGTERM/SIGINT checkpoint and exit (the CLI installs the handlers)
  float grad_clip = 1.0f;
  optim::OptimizerConfig optim;
  optim::ScheduleConfig schedule;
  data::LoaderOptions train_data;  // split "train"; batch/seq/seed filled in
  data::LoaderOptions val_data;    // split "val" of the same datasets, no shuffle, one pass
  int64_t checkpoint_every = 0, checkpoint_keep = 3;
  bool checkpoint_async = true;
  int64_t eval_every = 0, eval_batches = 16;
  std::vector<eval::TaskSpec> eval_tasks;  // multiple-choice tasks scored every eval_tasks_every steps
  int64_t eval_tasks_every = 0;
  int64_t layer_grad_norm_every = 0;
  bool skip_nonfinite = true;
  int64_t max_bad_steps = 5, spike_window = 50;
  double spike_zscore = 6.0;
  double loss_margin = 3.0;     // divergence: loss > ln(vocab) + loss_margin
  int64_t max_rollbacks = 3;    // more rollbacks than this within spike_window steps stop the run
  SpikeAction spike_action = SpikeAction::kLog;
  int64_t profile_begin = -1, profile_end = -1;  // steps [begin, end) are traced; -1: off
  int zero = 0;                 // ZeRO stage 0-3 (train.zero, or its alias parallel.zero); matters only with world > 1
  ParallelLayout parallel;      // parallel.dp/tp/pp/sp, checked against the model; the world is checked at start
  int64_t bucket_bytes = 25 << 20;  // dist.bucket_mb in bytes; 0: one all-reduce after backward
  int64_t zero3_vocab_rows = 0;     // dist.zero3_vocab_rows (train/zero3.h)
  bool shared_memory = true;        // dist.shared_memory: symmetric memory when all ranks share a node
  double peak_gflops = 0;  // runtime.peak_gflops: the MFU denominator per device in GFLOP/s; 0: this machine's (metrics/peaks.h)
};

// Builds and validates the recipe. Errors about a key name where its value came from
// (Config::where: the recipe file, or the --set flag); `source` (the config file) names the rest.
// Reads the dataset manifest: model.vocab_size defaults to the dataset's. Checks what involves
// several keys (seq_len against the model, token counts) and that the model, its optimizer state
// and one micro-batch's activations fit in this machine's memory; refuses an absurd
// OMP_NUM_THREADS (base/limits.h).
StatusOr<Recipe> recipe_from_config(const config::Config& c, const std::string& source);

}  // namespace lmt::train
