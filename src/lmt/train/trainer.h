// Trainer: the step loop that wires model, data, optimizer, checkpoints and metrics together.
//
// One optimizer step = the StepEngine's gradients (`accumulation_steps()` micro-batches, forward +
// backward, loss scaled by 1/(accum · dp) so gradients average, the reduction, the global gradient
// norm; step_engine.h), the stability guards (non-finite loss or gradients, loss spikes) that decide
// whether the engine applies the update (clipping folded into the optimizer's fused pass, which
// also refreshes the bf16 weight mirror), then metrics, evaluation and checkpoints on their schedules.
//
// Run directory: config.toml (the resolved recipe), metrics.jsonl (a "header" record each time the
// run starts or resumes, one "step" record per step, plus "val", "eval" and "event" records;
// metrics/metrics_log.h), checkpoints/step_XXXXXXXX/, trace.json when profiling, lmtrain.lock (held by
// the running process: a second run on the same directory is refused). A run directory that
// already holds a run is never overwritten: resume it, or choose another.
//
// Reliability (docs/RELIABILITY.md):
//   - stop on request: when stop_requested() (base/stop_signal.h) is set, all ranks agree on it
//     after the current step, save a checkpoint (waiting for any async one) and run() returns
//     kCancelled naming the checkpoint;
//   - the end of a run: the final checkpoint is written before the final validation and task
//     scores, so their failure cannot lose the run;
//   - resume: damaged checkpoints newer than the newest valid one are renamed aside (*.corrupt),
//     incomplete ones (*.tmp) removed, with a warning each; with none left the run starts at step 0;
//     metrics.jsonl is cut back to the resumed step (each step appears once);
//   - divergence: DivergenceGuard from step 1, SpikeDetector once its window fills; a bad step skips
//     its update (rolling back when stability.spike_action = "rollback"); max_bad_steps bad steps in a
//     row, or more than max_rollbacks rollbacks within spike_window steps, stop the run with an error;
//   - both splits are verified against their checksums when the run starts.
// Resuming restores parameters, optimizer state, step, token count, data cursor and the spike
// window, so a stopped and resumed run produces exactly the losses of an uninterrupted one.
//
// Data parallelism (docs/DIST.md): with a Communicator of world W > 1 every rank runs this loop in
// lockstep. The ranks form a dist::Topology (dp = W today, tp = pp = 1); whatever means "data-
// parallel rank/size" asks it, not the world. Each dp rank trains on disjoint data (the loader's
// dp-rank slice), each rank's loss is scaled by 1/(accum · dp) and the
// gradients are summed across ranks once per optimizer step (DataParallel: buckets launched from the
// model's block hook during the last backward, waited on before clipping), so W ranks × micro-batch
// b train like one process × W·b. train.zero = 1 shards optimizer state and the update, 2 also the
// reduced gradients. Loss, tokens and throughput count all dp ranks, MFU's peak all W devices;
// only rank 0 prints, writes
// metrics.jsonl, config.toml and checkpoints. Checkpoints hold full (gathered) optimizer state and a
// world-independent cursor, so a run may resume on another number of ranks with the same global batch.
#pragma once

#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "lmt/data/loader.h"
#include "lmt/eval/suite.h"
#include "lmt/metrics/metrics_log.h"
#include "lmt/model/transformer.h"
#include "lmt/optim/optimizer.h"
#include "lmt/dist/communicator.h"
#include "lmt/dist/topology.h"
#include "lmt/io/run_lock.h"
#include "lmt/progress/progress.h"
#include "lmt/train/async_checkpointer.h"
#include "lmt/train/data_parallel.h"
#include "lmt/train/recipe.h"
#include "lmt/train/stability.h"
#include "lmt/train/stall_watchdog.h"
#include "lmt/train/step_engine.h"
#include "lmt/train/model_split.h"
#include "lmt/train/trainer_state.h"

namespace lmt::train {

class Trainer {
 public:
  static StatusOr<std::unique_ptr<Trainer>> create(const Recipe& recipe, const std::string& resolved_toml,
                                                   const std::string& run_dir, bool resume,
                                                   dist::Communicator* comm = nullptr);
  // Trains until recipe.max_steps (or, with stop_after > 0, until that step: a graceful stop that
  // checkpoints, as when a job's time is up; the schedule still spans max_steps). Stops early with
  // an error after max_bad_steps bad steps in a row.
  Status run(int64_t stop_after = -1);

  int64_t step() const { return step_; }
  // Appends an event record ({"type": "event", "step": step(), ...event}) to metrics.jsonl; rank 0
  // writes, the others do nothing. For what the caller knows and the trainer does not (the recipe
  // changes that `lmtrain train --resume --allow-changes` applied).
  Status record_event(nlohmann::json event);
  model::Transformer& model() { return *model_; }
  // The parallel plan and the step engine (tests: ZeRO-3's gathered parameters, memory counts).
  DataParallel& data_parallel() { return *dp_; }
  // Collective over every rank: the full model's f32 parameters (ParamLayout(recipe model)), gathered
  // from the ZeRO-3 shards and the tensor-parallel parts where the plan splits them.
  StatusOr<std::vector<float>> full_params();
  // How model() relates to the whole model (tensor and pipeline parallelism; model_split.h).
  const ModelSplit& model_split() const { return *split_; }
  StepEngine& engine() { return *engine_; }
  // Called with the 1-based number of the step about to run, before its first forward. For fault
  // injection in tests (NaN parameters, a loss spike); null by default.
  void set_fault_injector(std::function<void(int64_t step, model::Transformer& m)> f) { inject_ = std::move(f); }
  // What run() does when it has made no progress for train.stall_timeout_s (train/stall_watchdog.h;
  // called on the watchdog's thread): end_stalled_process by default; tests record the report.
  void set_stall_handler(StallWatchdog::OnStall f) { on_stall_ = std::move(f); }
  // What carries the gradients between ranks: "mpi" on host backends, the device communicator's
  // name ("nccl") on a device backend over several processes, "solo" alone.
  const char* gradient_transport() const { return device_comm_ ? device_comm_->name() : comm_->name(); }

 private:
  // parallel.ep > 1: each rank holds only its ep rank's experts (expert_shard_plan.h).
  bool shard_experts() const { return recipe_.parallel.ep > 1; }
  // The pipeline group when this run has stages (pp > 1), else nullptr.
  dist::Communicator* pipeline_group() { return topology_->pp_size() > 1 ? &topology_->pp() : nullptr; }
  Trainer(Recipe recipe, std::string run_dir, std::string resolved_toml);
  Status setup(bool resume);
  Status train_step();
  StatusOr<double> evaluate();
  Status evaluate_tasks();
  Status save_checkpoint();
  Status rollback();
  Status load_checkpoint(const std::string& path, TrainerState* state);
  StatusOr<std::string> recover_checkpoints();  // every rank: the newest valid checkpoint, "" if none
  Status check_validation_split();
  Status check_model_parallel() const;           // what tensor/pipeline parallelism do not run with
  Status init_model(kernels::Backend& backend);  // the model (this rank's part under tp), initialised
  Status final_evaluations();
  int agreed_stop_signal();                     // 0, or the signal that stops every rank
  Status stop_on_signal(int sig);
  Status bad_step(nlohmann::json* rec, const std::string& kind, const std::string& why, bool may_roll_back);
  Status write_record(const nlohmann::json& rec);  // rank 0 only
  nlohmann::json run_header(int64_t resumed_from_step) const;  // resumed_from_step -1: a fresh run
  TrainerState trainer_state() const;
  // Rank 0, after every step: the progress bar (a TTY) or a line (step 1, every log_every steps, the
  // last step) on stderr, with loss, grad norm, tok/s and MFU averaged over the last log_every steps.
  void show_progress(double lr_mult);
  double mfu(double tokens_per_s) const;  // model FLOP/s (flops_per_token().training) / the peak of all devices
  void clear_progress() { if (progress_) progress_->clear(); }  // before other output to a terminal

  Recipe recipe_;
  std::string run_dir_, resolved_toml_;
  std::string tokenizer_path_;  // the dataset's tokenizer, copied into each checkpoint ("" if not found)
  std::unique_ptr<dist::Communicator> own_comm_;  // solo, when create() got none
  std::unique_ptr<dist::Communicator> device_comm_;  // a device backend over several processes: NCCL over comm
  dist::Communicator* comm_ = nullptr;           // the world: barriers, stop agreement, rank 0
  std::unique_ptr<dist::Topology> topology_;      // dp/tp/pp groups of comm_
  std::unique_ptr<dist::Communicator> ep_comm_;   // parallel.ep > 1: ep consecutive ranks of topology_->dp()
  std::unique_ptr<dist::Communicator> edp_comm_;  // sharded experts: the dp ranks holding the same experts
  bool root_ = true;                              // rank 0: logs, metrics, checkpoints
  std::unique_ptr<ModelSplit> split_;             // tensor/pipeline parts over topology_'s groups
  std::unique_ptr<model::Transformer> model_;
  std::unique_ptr<DataParallel> dp_;              // over topology_->dp(); destroyed before model_ (ZeRO 3 unhooks it)
  std::unique_ptr<StepEngine> engine_;            // owns the optimizer; borrows model_ and dp_
  std::unique_ptr<data::Loader> train_loader_;
  std::unique_ptr<LoaderMicroBatches> batches_;   // from train_loader_
  std::unique_ptr<metrics::MetricsLog> metrics_;
  std::unique_ptr<AsyncCheckpointer> checkpointer_;
  std::optional<io::RunLock> lock_;  // rank 0
  SpikeDetector spikes_;
  DivergenceGuard divergence_;
  bool has_val_ = true;         // the dataset has a val split (else validation is off, with a warning)
  std::string last_bad_;        // why the last bad step was bad
  nlohmann::json quarantined_;  // a checkpoints_quarantined record waiting for metrics.jsonl to open
  std::deque<int64_t> rollback_steps_;  // steps that rolled back, within the last spike_window
  std::unique_ptr<eval::TaskSuite> tasks_;  // eval.tasks, tokenised once
  int64_t step_ = 0;            // optimizer steps completed (including skipped ones)
  int64_t updates_ = 0;         // updates applied (AdamW bias correction counts these)
  int64_t tokens_ = 0;          // tokens consumed
  int64_t bad_in_a_row_ = 0;
  int64_t last_checkpoint_step_ = -1, last_eval_step_ = -1;
  double run_seconds_ = 0;
  double peak_flops_ = 0;       // dense peak of one device for the compute dtype (metrics::peak_flops)
  std::function<void(int64_t, model::Transformer&)> inject_;
  StallWatchdog::OnStall on_stall_;
  std::unique_ptr<StallWatchdog> watchdog_;  // during run(), when train.stall_timeout_s > 0
  // Progress for the watchdog: `phase` (index `index`) of step `step` has begun.
  void beat(const char* phase, int64_t step, int64_t index = -1) {
    if (watchdog_) watchdog_->beat(phase, step, index);
  }
  // Progress display (rank 0, during run()) and its logging-window averages; the per-step records
  // in metrics.jsonl stay raw.
  std::unique_ptr<progress::Progress> progress_;
  progress::WindowMean loss_window_{1}, norm_window_{1};
  progress::WindowRate token_window_{1};
  double last_val_loss_ = std::numeric_limits<double>::quiet_NaN();
};

}  // namespace lmt::train
