#include "lmt/train/trainer.h"

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <unistd.h>

#include "lmt/base/build_info.h"
#include "lmt/base/format.h"
#include "lmt/base/log.h"
#include "lmt/train/memory_report.h"
#include "lmt/base/stop_signal.h"
#include "lmt/data/manifest.h"
#include "lmt/eval/decode.h"
#include "lmt/base/timer.h"
#include "lmt/base/trace.h"
#include "lmt/io/atomic_file.h"
#include "lmt/kernels/registry.h"
#include "lmt/metrics/hardware.h"
#include "lmt/metrics/peaks.h"
#include "lmt/metrics/profiler.h"
#include "lmt/model/flops.h"
#include "lmt/optim/schedule.h"
#include "lmt/train/init_from.h"
#include "lmt/train/device_world.h"
#include "lmt/train/moe_state.h"
#include "lmt/train/zero3.h"

namespace lmt::train {
namespace fs = std::filesystem;

namespace {

// Host stand-ins for tensors that live on a device (views on the host are used as they are): a
// checkpoint or init-from weights are read into views(), then store() copies them where they belong.
class HostStaging {
 public:
  HostStaging(kernels::Backend& be, const std::vector<std::pair<std::string, TensorView>>& state)
      : be_(be), state_(state), views_(state), copies_(state.size()) {
    for (size_t i = 0; i < state.size(); ++i) {
      if (state[i].second.device().is_host()) continue;
      copies_[i] = Tensor(state[i].second.shape(), state[i].second.dtype());
      views_[i].second = copies_[i].view();
    }
  }
  const std::vector<std::pair<std::string, TensorView>>& views() const { return views_; }
  void store() {
    for (size_t i = 0; i < state_.size(); ++i)
      if (copies_[i].view().present()) be_.copy(state_[i].second, copies_[i]);
  }
  void load() {  // the reverse: the device tensors into views()
    for (size_t i = 0; i < state_.size(); ++i)
      if (copies_[i].view().present()) be_.copy(copies_[i], state_[i].second);
  }

 private:
  kernels::Backend& be_;
  std::vector<std::pair<std::string, TensorView>> state_, views_;
  std::vector<Tensor> copies_;
};

// A loader cursor saved with (batch b, world w) replayed on (b', w') with the same global batch
// b·w = b'·w': positions are global (row · world + rank), so the per-rank row scales by w / w'.
StatusOr<nlohmann::json> adapt_cursor(nlohmann::json c, int64_t batch, int world) {
  if (!c.is_object() || !c.contains("world") || !c.contains("batch") || !c.contains("sources")) return c;
  // Malformed values are left for Loader::restore() to name.
  if (!c["world"].is_number_integer() || !c["batch"].is_number_integer() || !c["sources"].is_array()) return c;
  const int64_t w0 = c["world"].get<int64_t>(), b0 = c["batch"].get<int64_t>();
  if (w0 <= 0 || b0 <= 0) return c;
  for (const auto& src : c["sources"])
    if (!src.is_object() || !src.contains("row") || !src["row"].is_number_integer()) return c;
  if (w0 == world && b0 == batch) return c;
  if (b0 * w0 != batch * world)
    return FailedPrecondition("the checkpoint's global batch is " + std::to_string(b0) + " × " + std::to_string(w0) +
                                  " ranks, this run's is " + std::to_string(batch) + " × " + std::to_string(world),
                              "resume with train.micro_batch × ranks equal to the saved run's");
  for (auto& src : c["sources"]) {
    const int64_t pos = src["row"].get<int64_t>() * w0;
    if (pos % world != 0)
      return FailedPrecondition("the checkpoint's data position " + std::to_string(pos) + " is not a multiple of " +
                                    std::to_string(world) + " ranks", "resume with the saved run's number of ranks");
    src["row"] = pos / world;
  }
  c["world"] = world;
  c["batch"] = batch;
  return c;
}
// Each micro-batch drawn is progress for the stall watchdog.
class BeatingMicroBatches final : public MicroBatchSource {
 public:
  BeatingMicroBatches(MicroBatchSource& inner, std::function<void(int64_t)> beat)
      : inner_(inner), beat_(std::move(beat)) {}
  StatusOr<const data::Batch*> next() override {
    beat_(drawn_++);
    return inner_.next();
  }

 private:
  MicroBatchSource& inner_;
  std::function<void(int64_t)> beat_;
  int64_t drawn_ = 0;
};

}  // namespace

Trainer::Trainer(Recipe recipe, std::string run_dir, std::string resolved_toml)
    : recipe_(std::move(recipe)),
      run_dir_(std::move(run_dir)),
      resolved_toml_(std::move(resolved_toml)),
      spikes_(recipe_.spike_window, recipe_.spike_zscore),
      divergence_(std::log(static_cast<double>(std::max<int64_t>(recipe_.model.vocab_size, 2))) + recipe_.loss_margin) {}

StatusOr<std::unique_ptr<Trainer>> Trainer::create(const Recipe& recipe, const std::string& resolved_toml,
                                                   const std::string& run_dir, bool resume,
                                                   dist::Communicator* comm) {
  std::unique_ptr<Trainer> t(new Trainer(recipe, run_dir, resolved_toml));
  if (comm == nullptr) {
    t->own_comm_ = std::make_unique<dist::SoloCommunicator>();
    comm = t->own_comm_.get();
  }
  t->comm_ = comm;
  t->root_ = comm->rank() == 0;
  // parallel.* against the world: dp · tp · pp must be the world.
  if (recipe.zero == 3 && !recipe.eval_tasks.empty())
    return Unimplemented("eval.tasks with train.zero = 3: the tasks' decoder reads whole parameters, which ZeRO 3 shards",
                         "score the run's checkpoints with `lmtrain eval`, or use train.zero = 0, 1 or 2 with eval.tasks");
  if (recipe.parallel.ep > 1 && recipe.zero == 3)
    return Unimplemented("parallel.ep = " + std::to_string(recipe.parallel.ep) +
                             " with train.zero = 3: expert parallelism is not combined with ZeRO-3 yet",
                         "use train.zero = 0, 1 or 2 with parallel.ep, or parallel.ep = 1 (docs/MOE.md)");
  LMT_ASSIGN_OR_RETURN(const dist::ParallelSizes sizes, resolve_parallel_layout(recipe.parallel, comm->world()));
  if (comm->world() > 1) {  // a device backend's memory is reduced by its own communicator (NCCL for cuda)
    LMT_ASSIGN_OR_RETURN(kernels::Backend* backend, kernels::find_backend(recipe.backend));
    LMT_ASSIGN_OR_RETURN(comm, world_for_backend(*backend, *comm, &t->device_comm_));
    t->comm_ = comm;
  }
  LMT_ASSIGN_OR_RETURN(t->topology_, dist::Topology::create(*comm, sizes));
  if (recipe.parallel.ep > 1) {  // groups of ep consecutive data-parallel ranks
    const int ep = static_cast<int>(recipe.parallel.ep), r = t->topology_->dp_rank();
    LMT_ASSIGN_OR_RETURN(t->ep_comm_, t->topology_->dp().split(r / ep, r % ep));
    // Sharded experts: the data-parallel ranks holding the same experts reduce them (and, holding
    // the rest replicated, everything) among themselves; the ep group sums the rest first.
    if (t->shard_experts()) {
      LMT_ASSIGN_OR_RETURN(t->edp_comm_, t->topology_->dp().split(r % ep, r / ep));
    }
  }
  LMT_RETURN_IF_ERROR(t->setup(resume));
  return t;
}

Status Trainer::setup(bool resume) {
  // What a device backend cannot do yet is refused before anything is written: ZeRO-3, which keeps
  // its shards in host memory (several processes: create()).
  LMT_ASSIGN_OR_RETURN(kernels::Backend* backend, kernels::find_backend(recipe_.backend));
  if (recipe_.zero == 3) LMT_RETURN_IF_ERROR(Zero3::supports(*backend));
  LMT_RETURN_IF_ERROR(check_model_parallel());
  std::error_code ec;
  const std::string ckpt_dir = run_dir_ + "/checkpoints";
  const bool has_run = fs::exists(run_dir_ + "/metrics.jsonl") || fs::exists(ckpt_dir);
  // Every rank checks before rank 0 writes anything (same answer on a shared file system).
  LMT_RETURN_IF_ERROR(comm_->barrier());
  if (has_run && !resume) {
    const auto incomplete = io::incomplete_checkpoints(ckpt_dir);
    const bool only_incomplete = !incomplete.empty() && !io::find_latest_checkpoint(ckpt_dir, nullptr).ok();
    if (only_incomplete)
      return FailedPrecondition("run directory " + run_dir_ + " already holds a run whose only checkpoints are incomplete (" +
                                    incomplete.front() + ": the save never committed)",
                                "pass --resume to start it over from step 0 (the incomplete checkpoints are removed), or "
                                "choose a new --run-dir; nothing was overwritten");
    return FailedPrecondition("run directory " + run_dir_ + " already holds a run (metrics.jsonl or checkpoints/)",
                              "pass --resume to continue it, or choose a new --run-dir; nothing was overwritten");
  }
  if (root_) {
    fs::create_directories(run_dir_, ec);
    if (ec) return IoError("cannot create run directory " + run_dir_ + ": " + ec.message(), "check that its parent is writable");
    LMT_ASSIGN_OR_RETURN(io::RunLock lock, io::RunLock::acquire(run_dir_));
    lock_.emplace(std::move(lock));
  }
  LMT_RETURN_IF_ERROR(comm_->barrier());  // the directory exists and is ours

  LMT_RETURN_IF_ERROR(init_model(*backend));
  model_->prepare(recipe_.micro_batch, recipe_.seq_len, recipe_.run);
  if (ep_comm_) {
    model::ExpertParallel ep;
    ep.rank = ep_comm_->rank();
    ep.size = ep_comm_->world();
    dist::Communicator* c = ep_comm_.get();
    ep.all_to_all_v = [c](const void* send, const std::vector<int64_t>& sb, void* recv, const std::vector<int64_t>& rb) {
      return c->all_to_all_v(send, sb, recv, rb);
    };
    model_->set_expert_parallel(std::move(ep));
  }
  // Under tensor or pipeline parallelism the reduction over the data-parallel ranks runs after
  // backward, in one piece: some gradients are summed over the model's groups first
  // (ModelSplit::reduce_partial_grads), and a pipeline's last backward runs on a replica.
  dp_ = std::make_unique<DataParallel>(edp_comm_ ? *edp_comm_ : topology_->dp(), model_->layout(), recipe_.optim,
                                       recipe_.zero, split_->split() ? 0 : recipe_.bucket_bytes);
  if (edp_comm_) dp_->set_data_group(topology_->dp());  // the loss is a mean over every data-parallel rank
  split_->add_groups(*dp_, model_->layout());
  if (recipe_.shared_memory) LMT_RETURN_IF_ERROR(dp_->use_shared_memory(*model_));
  if (recipe_.layer_grad_norm_every > 0 && ((dp_->sharded() && recipe_.zero == 2) || recipe_.zero == 3))
    return InvalidArgument("metrics.layer_grad_norm_every needs the full gradients, which train.zero = " +
                               std::to_string(recipe_.zero) + " shards",
                           "use train.zero = 1, or set metrics.layer_grad_norm_every = 0");
  LMT_RETURN_IF_ERROR(dp_->shard_parameters(*model_, recipe_.zero3_vocab_rows));  // ZeRO 3: no full buffers
  StepEngineConfig step_config;
  step_config.grad_clip = recipe_.grad_clip;
  step_config.doc_masking = recipe_.doc_masking;
  step_config.reset_positions = recipe_.reset_positions;
  LMT_ASSIGN_OR_RETURN(engine_, StepEngine::create(*model_, *dp_, recipe_.optim, step_config));
  if (PipelinePlan* pp = split_->pipeline())  // after the storage is final (shared memory)
    pp->prepare_schedule(*model_, recipe_.micro_batch, recipe_.seq_len, recipe_.run);
  if (split_->split()) engine_->set_model_split(split_.get());
  if (root_ && (topology_->dp_size() > 1 || recipe_.zero == 3)) {
    const DataParallel::StateMemory sm = dp_->model_state_memory(*model_, engine_->optimizer());
    LMT_LOG(INFO) << "ZeRO " << recipe_.zero << " over " << dp_->world() << " rank(s)"
                  << (shard_experts() ? ", experts sharded over ep = " + std::to_string(recipe_.parallel.ep) : std::string())
                  << ": "
                  << describe_state_memory(sm.total(), sm.params_grads, sm.mirror, sm.optimizer_state, sm.gather_buffers,
                                           planned_state_memory(recipe_.model, recipe_.zero, topology_->dp_size(), recipe_.run.compute,
                                                                shard_experts() ? recipe_.parallel.ep : 1));
  }
  data::LoaderOptions lo = recipe_.train_data;
  lo.rank = topology_->dp_rank();
  lo.world = topology_->dp_size();
  LMT_ASSIGN_OR_RETURN(train_loader_, data::Loader::open(lo));
  batches_ = std::make_unique<LoaderMicroBatches>(*train_loader_);
  if (train_loader_->vocab_size() > recipe_.model.vocab_size)
    return InvalidArgument("the dataset's vocabulary (" + std::to_string(train_loader_->vocab_size()) +
                               ") is larger than the model's (" + std::to_string(recipe_.model.vocab_size) + ")",
                           "remove model.vocab_size from the recipe to take the dataset's");
  if (root_) {  // checkpoints carry a copy of the dataset's tokenizer (io::kCheckpointTokenizerDir)
    auto manifest = data::read_manifest(recipe_.train_data.stages[0].sources[0].path);
    if (manifest.ok() && !manifest->tokenizer_path.empty() && fs::exists(manifest->tokenizer_path, ec)) {
      tokenizer_path_ = fs::absolute(manifest->tokenizer_path, ec).string();
    } else if (manifest.ok()) {
      LMT_LOG(WARNING) << "the dataset's tokenizer '" << manifest->tokenizer_path << "' is not found from here: "
                       << "checkpoints will not carry a copy (pass --tokenizer to eval/generate/export)";
    }
  }
  if (!recipe_.eval_tasks.empty()) {  // tokenised with the tokenizer the data was prepared with
    LMT_ASSIGN_OR_RETURN(data::Manifest manifest, data::read_manifest(recipe_.train_data.stages[0].sources[0].path));
    auto tok = data::load_tokenizer(manifest.tokenizer_path);
    if (!tok.ok()) return tok.status().WithContext("eval.tasks: the dataset's tokenizer");
    LMT_ASSIGN_OR_RETURN(eval::TaskSuite suite, eval::TaskSuite::load(recipe_.eval_tasks, **tok));
    tasks_ = std::make_unique<eval::TaskSuite>(std::move(suite));
  }
  if (root_) checkpointer_ = std::make_unique<AsyncCheckpointer>(ckpt_dir, recipe_.checkpoint_keep, recipe_.checkpoint_async, model_->backend());
  LMT_ASSIGN_OR_RETURN(peak_flops_, metrics::device_peak_flops(model_->backend().device_description(), recipe_.run.compute,
                                                               {.override_gflops = recipe_.peak_gflops}));

  LMT_RETURN_IF_ERROR(check_validation_split());

  if (resume) {
    LMT_ASSIGN_OR_RETURN(const std::string latest, recover_checkpoints());
    if (!latest.empty()) {
      TrainerState st;
      LMT_RETURN_IF_ERROR(load_checkpoint(latest, &st));
      step_ = st.step;
      updates_ = st.updates;
      tokens_ = st.tokens;
      bad_in_a_row_ = st.bad_in_a_row;
      run_seconds_ = st.run_seconds;
      const std::string where = latest + "/trainer_state.json";
      Status rs = spikes_.restore(st.spike_window);
      if (rs.ok()) rs = divergence_.restore(st.grad_norm_window);
      if (!rs.ok()) return rs.WithContext(where);
      LMT_ASSIGN_OR_RETURN(nlohmann::json cursor, adapt_cursor(st.loader, lo.batch, lo.world));
      Status ls = train_loader_->restore(cursor);
      if (!ls.ok()) return ls.WithContext(where);
      last_checkpoint_step_ = step_;
      if (root_) {
        LMT_LOG(INFO) << "resumed from " << latest << " at step " << step_ << " (" << tokens_ << " tokens)";
      }
    } else if (root_) {
      LMT_LOG(WARNING) << "resume: no valid checkpoint in " << ckpt_dir << "; starting from step 0";
    }
  }
  if (root_) {
    LMT_ASSIGN_OR_RETURN(io::AtomicFileWriter cfg, io::AtomicFileWriter::create(run_dir_ + "/config.toml"));
    LMT_RETURN_IF_ERROR(cfg.append(resolved_toml_.data(), resolved_toml_.size()));
    LMT_RETURN_IF_ERROR(cfg.commit());
    std::string repaired;
    LMT_ASSIGN_OR_RETURN(metrics::MetricsLog log,
                         metrics::MetricsLog::open(run_dir_ + "/metrics.jsonl", resume ? step_ : -1, &repaired));
    if (!repaired.empty()) {  // braces: LMT_LOG is an if/else macro
      LMT_LOG(WARNING) << run_dir_ << "/metrics.jsonl: " << repaired;
    }
    metrics_ = std::make_unique<metrics::MetricsLog>(std::move(log));
    LMT_RETURN_IF_ERROR(write_record(run_header(resume ? step_ : -1)));
    if (!quarantined_.is_null()) {
      quarantined_["step"] = step_;
      LMT_RETURN_IF_ERROR(write_record(quarantined_));
      quarantined_ = nullptr;
    }
  }
  return Status::Ok();
}

// Both splits are verified once, here (the training loader verified its shards when it opened).
// Without a val split, validation is off with a warning, unless eval.every asks for it.
Status Trainer::check_validation_split() {
  const std::string& primary = recipe_.val_data.stages[0].sources[0].path;
  LMT_ASSIGN_OR_RETURN(data::Manifest manifest, data::read_manifest(primary));
  const data::SplitInfo* val = manifest.split("val");
  if (val == nullptr || val->tokens == 0) {
    if (recipe_.eval_every > 0)
      return FailedPrecondition("eval.every = " + std::to_string(recipe_.eval_every) + " but dataset " + primary +
                                    " has no validation split",
                                "prepare it again with --val-fraction > 0 (a one-document input is split by tokens), "
                                "or set eval.every = 0 to train without validation");
    has_val_ = false;
    if (root_) {
      LMT_LOG(WARNING) << "dataset " << primary << " has no validation split: training without validation loss "
                       << "(prepare it with --val-fraction > 0 to get one)";
    }
    return Status::Ok();
  }
  data::LoaderOptions o = recipe_.val_data;
  o.verify = true;
  auto loader = data::Loader::open(o);
  if (!loader.ok()) return loader.status().WithContext("validation data");
  return Status::Ok();
}

// Rank 0 removes incomplete checkpoints and renames damaged ones aside (under the run lock); then
// every rank finds the same newest valid checkpoint.
StatusOr<std::string> Trainer::recover_checkpoints() {
  const std::string dir = run_dir_ + "/checkpoints";
  std::string latest;
  if (root_ && fs::exists(dir)) {
    for (const auto& tmp : io::incomplete_checkpoints(dir)) {
      LMT_LOG(WARNING) << "removing incomplete checkpoint " << tmp << " (its save never committed)";
    }
    LMT_RETURN_IF_ERROR(io::remove_incomplete_checkpoints(dir));
    std::vector<std::string> notes;
    LMT_ASSIGN_OR_RETURN(latest, io::recover_latest_checkpoint(dir, &notes));
    for (const auto& n : notes) {
      LMT_LOG(WARNING) << n;
    }
    if (!notes.empty()) {  // into metrics.jsonl now, or once it is open (at setup)
      quarantined_ = {{"type", "event"}, {"event", "checkpoints_quarantined"}, {"step", step_}, {"notes", notes}};
      if (metrics_) {
        LMT_RETURN_IF_ERROR(write_record(quarantined_));
        quarantined_ = nullptr;
      }
    }
  }
  LMT_RETURN_IF_ERROR(comm_->barrier());
  if (!root_ && fs::exists(dir)) {
    auto found = io::find_latest_checkpoint(dir, nullptr);
    if (found.ok()) latest = *found;
  }
  return latest;
}

Status Trainer::check_model_parallel() const {
  const int tp = topology_->tp_size(), pp = topology_->pp_size();
  if (shard_experts()) {
    const std::string what = "parallel.ep = " + std::to_string(recipe_.parallel.ep) + " (the experts sharded over it)";
    const std::string hint = "set parallel.ep = 1 for this (docs/MOE.md, Expert parallelism)";
    if (!recipe_.eval_tasks.empty()) return Unimplemented(what + " with eval.tasks: the decoder runs whole models", hint);
    if (recipe_.layer_grad_norm_every > 0)
      return Unimplemented(what + " with metrics.layer_grad_norm_every: per-layer norms of sharded experts are not combined",
                           hint);
  }
  if (tp == 1 && pp == 1) return Status::Ok();
  const std::string what = tp > 1 && pp > 1 ? "parallel.tp = " + std::to_string(tp) + " with parallel.pp = " + std::to_string(pp)
                           : tp > 1         ? "parallel.tp = " + std::to_string(tp)
                                            : "parallel.pp = " + std::to_string(pp);
  const std::string hint = "use parallel.tp = 1 and parallel.pp = 1 for this (docs/DIST.md, what runs today)";
  if (recipe_.zero == 3)
    return Unimplemented(what + " with train.zero = 3: ZeRO-3 does not shard tensor- or pipeline-parallel parts yet",
                         "use train.zero = 0, 1 or 2 with parallel.tp/pp > 1");
  if (tp > 1 && recipe_.optim.name == "muon")
    return Unimplemented(what + " with optim.name = \"muon\": Muon orthogonalises whole matrices, which tensor parallelism splits",
                         "use optim.name = \"adamw\" with parallel.tp > 1");
  if (!recipe_.eval_tasks.empty()) return Unimplemented(what + " with eval.tasks: the decoder runs whole models", hint);
  if (recipe_.layer_grad_norm_every > 0)
    return Unimplemented(what + " with metrics.layer_grad_norm_every: per-layer norms of split gradients are not combined", hint);
  return Status::Ok();
}

// The model, initialised: from the seed (or init_from) in the whole model's layout, then, under
// tensor or pipeline parallelism, this rank's part of it, so every layout starts from the single
// process's weights.
Status Trainer::init_model(kernels::Backend& backend) {
  split_ = std::make_unique<ModelSplit>(*topology_, recipe_.model, recipe_.seq_len, recipe_.parallel.pp_layers,
                                        shard_experts() ? ep_comm_.get() : nullptr);
  model_ = std::make_unique<model::Transformer>(split_->local_config(), backend);
  if (split_->split()) {
    const model::ParamLayout& whole = split_->whole_layout();
    Tensor full({whole.total_numel()}, DType::kF32);
    model::init_params(whole, full.as<float>(), recipe_.seed);
    if (!recipe_.init_from.empty()) LMT_RETURN_IF_ERROR(init_params_from(recipe_.init_from, whole, full.as<float>()));
    HostStaging local(backend, {{"params", model_->params()}});  // ModelSplit works in host memory
    split_->scatter(full.as<float>(), local.views()[0].second.as<float>());
    local.store();
    model_->refresh_compute_weights();
    if (TensorParallelPlan* tp = split_->tensor()) model_->set_tensor_parallel(tp->model_group(recipe_.parallel.sp));
    if (PipelinePlan* pp = split_->pipeline()) model_->set_pipeline_role(pp->role());
    return Status::Ok();
  }
  model_->init(recipe_.seed);
  if (!recipe_.init_from.empty()) {  // a resume replaces these with its checkpoint's below
    HostStaging host(backend, {{"params", model_->params()}});
    LMT_RETURN_IF_ERROR(init_params_from(recipe_.init_from, model_->layout(), host.views()[0].second.as<float>()));
    host.store();
  }
  return Status::Ok();
}

StatusOr<std::vector<float>> Trainer::full_params() {
  std::vector<float> local(static_cast<size_t>(model_->layout().total_numel()));
  if (dp_->zero3()) {
    LMT_RETURN_IF_ERROR(dp_->gather_params(*model_, local.data()));
  } else {
    HostStaging host(model_->backend(), {{"params", model_->params()}});
    host.load();
    const TensorView v = host.views()[0].second;
    std::memcpy(local.data(), v.data(), v.bytes());
  }
  if (!split_->split()) return local;
  std::vector<float> full(static_cast<size_t>(split_->whole_layout().total_numel()));
  LMT_RETURN_IF_ERROR(split_->gather(local.data(), full.data()));
  return full;
}

// Loads checkpoint `path` on every rank: full parameters, and this rank's slice of the full
// optimizer state (the whole of it unless sharded).
Status Trainer::load_checkpoint(const std::string& path, TrainerState* state) {
  nlohmann::json j;
  if (split_->split()) {  // the whole model and state, then this rank's part of each (host only)
    const model::ParamLayout& whole = split_->whole_layout();
    Tensor full_params({whole.total_numel()}, DType::kF32);
    std::vector<std::pair<std::string, Tensor>> full;
    for (auto& [n, v] : engine_->optimizer().state()) full.emplace_back(n, Tensor({whole.total_numel()}, DType::kF32));
    std::vector<std::pair<std::string, TensorView>> views;
    for (auto& [n, t] : full) views.emplace_back(n, t.view());
    const Tensor bias = whole_router_bias_buffer(*model_, recipe_.model);  // the whole model's; this stage's rows kept
    add_router_bias(bias.view(), views);
    LMT_ASSIGN_OR_RETURN(j, train::load_checkpoint(path, whole, full_params.as<float>(), views));
    set_router_bias(*model_, bias.view());
    HostStaging local(model_->backend(), {{"params", model_->params()}});  // ModelSplit works in host memory
    split_->scatter(full_params.as<float>(), local.views()[0].second.as<float>());
    local.store();
    // Each state buffer's part, in this rank's layout; then the dp shard of it (or all of it).
    auto part = dp_->full_state_buffers(engine_->optimizer());
    for (size_t i = 0; i < part.size(); ++i) split_->scatter(full[i].second.as<float>(), part[i].second.as<float>());
    if (dp_->sharded()) {
      dp_->load_state_slice(engine_->optimizer(), part);
    } else {
      auto st = engine_->optimizer().state();
      for (size_t i = 0; i < st.size(); ++i) model_->backend().copy(st[i].second, part[i].second.view().reshape(st[i].second.shape()));
    }
    model_->refresh_compute_weights();
    LMT_ASSIGN_OR_RETURN(*state, TrainerState::parse(j, path + "/trainer_state.json"));
    return Status::Ok();
  }
  // ZeRO 3 holds a shard of the parameters: load the full ones aside, then keep the slice.
  Tensor full_params;
  if (dp_->zero3()) full_params = Tensor({model_->layout().total_numel()}, DType::kF32);
  // The model's own buffer on a host backend, a staging copy on a device (ZeRO 3 holds no full one).
  HostStaging host(model_->backend(), {{"params", dp_->zero3() ? full_params.view() : model_->params()}});
  float* params = host.views()[0].second.as<float>();
  if (dp_->sharded()) {
    auto full = dp_->full_state_buffers(engine_->optimizer());
    std::vector<std::pair<std::string, TensorView>> views;
    for (auto& [n, t] : full) views.emplace_back(n, t.view());
    add_router_bias(own_router_bias(*model_), views);
    LMT_ASSIGN_OR_RETURN(j, train::load_checkpoint(path, model_->layout(), params, views));
    dp_->load_state_slice(engine_->optimizer(), full);
  } else {
    std::vector<std::pair<std::string, TensorView>> views = engine_->optimizer().state();
    add_router_bias(own_router_bias(*model_), views);
    HostStaging staged(model_->backend(), views);
    LMT_ASSIGN_OR_RETURN(j, train::load_checkpoint(path, model_->layout(), params, staged.views()));
    staged.store();
  }
  if (dp_->zero3()) dp_->load_params(*model_, params);
  else host.store();
  model_->router_bias_written();  // loaded into its host copy above
  model_->refresh_compute_weights();
  LMT_ASSIGN_OR_RETURN(*state, TrainerState::parse(j, path + "/trainer_state.json"));
  return Status::Ok();
}

// The "header" record (docs/FORMATS.md): what ran, where, and on what layout.
nlohmann::json Trainer::run_header(int64_t resumed_from_step) const {
  const metrics::CpuInfo& cpu = metrics::cpu_info();
  // With a pinned peak (runtime.peak_gflops) nothing is measured, so only the pinned figure is known.
  nlohmann::json peaks = {{"source", "runtime.peak_gflops"}};
  if (recipe_.peak_gflops <= 0) {
    const metrics::MachinePeaks& mp = metrics::machine_peaks();
    peaks = {{"fp32_gflops", mp.peaks.fp32_gflops}, {"bf16_gflops", mp.peaks.bf16_gflops}, {"bf16_unit", mp.peaks.bf16_unit},
             {"source", std::string(metrics::peak_source_name(mp.source))}};
  }
  peaks["mfu_peak_gflops"] = peak_flops_ * 1e-9;  // one device, the compute dtype's: what MFU divides by
  const dist::ParallelSizes& sz = topology_->sizes();
  nlohmann::json h = {{"type", "header"},
                      {"lmtrain_version", build_version()},
                      {"git_commit", build_git_commit()},
                      {"run_dir", run_dir_},
                      {"config_toml", resolved_toml_},
                      {"machine", {{"cpu_vendor", cpu.vendor}, {"cpu_brand", cpu.brand}, {"threads", cpu.threads},
                                   {"avx512f", cpu.avx512f}, {"avx512_bf16", cpu.avx512_bf16}, {"amx_bf16", cpu.amx_bf16}}},
                      {"peaks", peaks},
                      {"world", {{"world_size", topology_->world_size()}, {"dp", sz.dp}, {"tp", sz.tp}, {"pp", sz.pp}, {"ep", recipe_.parallel.ep}}},
                      {"model", {{"name", recipe_.model.name}, {"parameters", recipe_.model.param_count()}}},
                      {"max_steps", recipe_.max_steps}};
  if (resumed_from_step >= 0) h["resumed_from_step"] = resumed_from_step;
  return h;
}

Status Trainer::record_event(nlohmann::json event) {
  event["type"] = "event";
  if (!event.contains("step")) event["step"] = step_;
  return write_record(event);
}

Status Trainer::write_record(const nlohmann::json& rec) { return root_ ? metrics_->write(rec) : Status::Ok(); }

TrainerState Trainer::trainer_state() const {
  TrainerState s;
  s.step = step_;
  s.updates = updates_;
  s.tokens = tokens_;
  s.bad_in_a_row = bad_in_a_row_;
  s.run_seconds = run_seconds_;
  s.seed = recipe_.seed;
  s.spike_window = spikes_.state();
  s.grad_norm_window = divergence_.state();
  s.loader = train_loader_->cursor();
  return s;
}

Status Trainer::save_checkpoint() {
  beat("the checkpoint", step_);
  CheckpointData d;
  d.layout = &model_->layout();
  Tensor full_params;  // ZeRO 3: the parameters gathered from every rank's shard (collective)
  if (dp_->zero3()) {
    full_params = Tensor({model_->layout().total_numel()}, DType::kF32);
    LMT_RETURN_IF_ERROR(dp_->gather_params(*model_, full_params.as<float>()));
  }
  d.params = dp_->zero3() ? full_params.as<float>() : static_cast<const float*>(model_->params().data());
  d.params_device = dp_->zero3() ? Device::host() : model_->params().device();
  std::vector<std::pair<std::string, Tensor>> full;  // gathered shards (ZeRO 1/2): collective
  if (dp_->sharded()) {
    LMT_ASSIGN_OR_RETURN(full, dp_->gather_state(engine_->optimizer()));
    for (auto& [n, t] : full) d.optimizer_state.emplace_back(n, t.view());
  } else {
    d.optimizer_state = engine_->optimizer().state();
  }
  // Tensor/pipeline parallelism: this rank holds a part; the checkpoint holds the whole model (collective).
  Tensor whole_params;
  std::vector<std::pair<std::string, Tensor>> whole_state;
  if (split_->split()) {
    // ModelSplit works in host memory: a device backend's parameters and state are staged first.
    std::vector<std::pair<std::string, TensorView>> local = d.optimizer_state;
    local.emplace_back("params", TensorView(const_cast<float*>(d.params), Shape{model_->layout().total_numel()},
                                            DType::kF32, d.params_device));
    HostStaging host(model_->backend(), local);
    host.load();
    std::vector<std::pair<std::string, TensorView>> local_state = host.views();
    const TensorView local_params = local_state.back().second;
    local_state.pop_back();
    whole_params = Tensor({split_->whole_layout().total_numel()}, DType::kF32);
    LMT_RETURN_IF_ERROR(split_->gather(local_params.as<float>(), whole_params.as<float>()));
    LMT_ASSIGN_OR_RETURN(whole_state, split_->gather_state(local_state));
    d.layout = &split_->whole_layout();
    d.params = whole_params.as<float>();
    d.params_device = Device::host();
    d.optimizer_state.clear();
    for (auto& [n, t] : whole_state) d.optimizer_state.emplace_back(n, t.view());
  }
  LMT_ASSIGN_OR_RETURN(const Tensor bias, whole_router_bias(*model_, recipe_.model, pipeline_group()));  // collective
  add_router_bias(bias.view(), d.optimizer_state);
  d.trainer_state = trainer_state().to_json();
  d.config_toml = resolved_toml_;
  d.tokenizer_path = tokenizer_path_;
  last_checkpoint_step_ = step_;
  Status s = root_ ? checkpointer_->start(step_, d) : Status::Ok();  // start() snapshots `full`
  Status b = comm_->barrier();
  return s.ok() ? b : s;
}

// Reloads parameters and optimizer state from the newest checkpoint, keeping the data position:
// the batches since that checkpoint (the window that led to the spike) are skipped.
Status Trainer::rollback() {
  beat("the rollback", step_);
  if (root_) LMT_RETURN_IF_ERROR(checkpointer_->wait());
  LMT_RETURN_IF_ERROR(comm_->barrier());  // the newest checkpoint is committed before anyone reads it
  LMT_ASSIGN_OR_RETURN(const std::string latest, recover_checkpoints());
  if (latest.empty()) {
    if (root_) {
      LMT_LOG(WARNING) << "step " << step_ << ": bad step, but no checkpoint to roll back to; skipping the update";
    }
    return Status::Ok();
  }
  // Rollbacks that keep coming (even with good steps between them) do not help: stop.
  rollback_steps_.push_back(step_);
  while (!rollback_steps_.empty() && rollback_steps_.front() <= step_ - recipe_.spike_window) rollback_steps_.pop_front();
  if (static_cast<int64_t>(rollback_steps_.size()) > recipe_.max_rollbacks)
    return FailedPrecondition("step " + std::to_string(step_) + ": " + last_bad_ + ", after " +
                                  std::to_string(rollback_steps_.size() - 1) + " rollbacks in the last " +
                                  std::to_string(recipe_.spike_window) + " steps already: rolling back does not help",
                              "lower optim.lr or raise schedule.warmup_steps and resume from " + latest + "; it is intact");
  TrainerState st;
  LMT_RETURN_IF_ERROR(load_checkpoint(latest, &st));
  updates_ = st.updates;
  if (root_) {
    LMT_LOG(WARNING) << "step " << step_ << ": rolled back to " << latest << ", skipping the data since then";
  }
  return write_record({{"type", "event"}, {"event", "rollback"}, {"step", step_}, {"checkpoint", latest}});
}

StatusOr<double> Trainer::evaluate() {
  LMT_TRACE_SCOPE("eval");
  data::LoaderOptions o = recipe_.val_data;
  o.verify = false;  // verified when the training loader opened the same shards
  auto loader = data::Loader::open(o);
  if (!loader.ok()) return loader.status().WithContext("validation data");
  double sum = 0;
  int64_t n = 0;
  data::Batch b;
  while (recipe_.eval_batches <= 0 || n < recipe_.eval_batches) {
    beat("validation batch", step_, n);
    Status s = (*loader)->next(&b);
    if (s.code() == StatusCode::kOutOfRange) break;
    LMT_RETURN_IF_ERROR(s);
    if (PipelinePlan* pp = split_->pipeline()) {  // through every stage; the last one's loss
      LMT_ASSIGN_OR_RETURN(const double l, pp->evaluate(b, recipe_.doc_masking, recipe_.reset_positions));
      sum += l;
    } else {
      sum += model_->forward(b.tokens.data(), b.targets.data(), recipe_.doc_masking ? b.doc_ids.data() : nullptr,
                             false, 1.0f, recipe_.reset_positions ? b.positions.data() : nullptr);
    }
    ++n;
  }
  if (n == 0) return FailedPrecondition("the validation split has fewer tokens than one batch", "prepare the data with a larger --val-fraction");
  return sum / static_cast<double>(n);
}

// Scores eval.tasks; the suite re-prepares the model for training afterwards.
Status Trainer::evaluate_tasks() {
  LMT_TRACE_SCOPE("eval_tasks");
  eval::ScoreOptions score;  // the defaults, and a beat per scoring pass
  int64_t passes = 0;
  score.on_batch = [this, &passes] { beat("eval.tasks pass", step_, passes++); };
  LMT_ASSIGN_OR_RETURN(auto results, tasks_->run(*model_, score));
  if (!root_) return Status::Ok();  // every rank scores (same weights); rank 0 reports
  nlohmann::json rec = eval::TaskSuite::metrics_record(results, step_, tokens_);
  for (const auto& [k, v] : rec.items())
    if (k.size() > 4 && k.compare(k.size() - 4, 4, "_acc") == 0)
      std::printf("step %6lld | %s %.4f\n", static_cast<long long>(step_), k.c_str(), v.get<double>());
  return metrics_->write(rec);
}

Status Trainer::train_step() {
  LMT_TRACE_SCOPE("train_step");
  Timer step_timer;
  const Recipe& r = recipe_;
  StepOptions so;
  so.accum = optim::accumulation_steps(r.grad_accum, r.batch_warmup_tokens, tokens_);
  // Per-layer gradient norms (logged this step) need every rank's full reduced gradients.
  so.full_grads = r.layer_grad_norm_every > 0 && (step_ + 1) % r.layer_grad_norm_every == 0;
  const int64_t accum = so.accum;
  double t_ckpt = 0;
  if (inject_) inject_(step_ + 1, *model_);
  StepResult res;
  TensorParallelPlan* tp = split_->tensor();
  if (tp) tp->take_comm_seconds();  // what validation or a checkpoint summed is not this step's
  BeatingMicroBatches batches(*batches_, [this](int64_t k) { beat("micro-batch", step_ + 1, k); });
  LMT_RETURN_IF_ERROR(engine_->compute_gradients(batches, so, &res));
  if (tp) res.time.tp_comm = tp->take_comm_seconds();
  const double loss = res.loss, norm = res.grad_norm;
  ++step_;
  const int64_t step_tokens = accum * r.micro_batch * r.seq_len * topology_->dp_size();
  tokens_ += step_tokens;

  nlohmann::json rec = {{"type", "step"}, {"step", step_}, {"tokens", tokens_}, {"loss", loss}, {"grad_norm", norm}, {"accum", accum}};
  if (r.model.moe.enabled()) {
    // Over the data-parallel ranks: tensor-parallel peers route the same tokens (identical stats);
    // pipeline stages each hold their layers'.
    LMT_RETURN_IF_ERROR(sum_moe_stats_over_ranks(topology_->dp(), topology_->dp_size(), *model_));
    LMT_ASSIGN_OR_RETURN(const std::vector<model::MoeStepStats> whole, whole_moe_stats(*model_, r.model, pipeline_group()));
    rec["moe"] = moe_record(r.model, whole);
  }
  if (r.layer_grad_norm_every > 0 && step_ % r.layer_grad_norm_every == 0) {
    std::vector<double> per_layer(r.model.n_layers, 0.0);
    for (const auto& p : model_->layout().params())
      if (p.layer >= 0) per_layer[p.layer] += model_->backend().sum_squares(model_->layout().view(p, model_->grads().data(), DType::kF32, model_->grads().device()));
    for (double& v : per_layer) v = std::sqrt(v);
    rec["layer_grad_norms"] = per_layer;
  }
  const double lr_mult = optim::lr_multiplier(r.schedule, step_, r.max_steps);
  const bool nonfinite = !res.finite;
  const std::string diverged = nonfinite ? "" : divergence_.check(loss, norm);
  double z = 0;
  const bool spike = !nonfinite && diverged.empty() && spikes_.is_spike(loss, &z);
  if (nonfinite || !diverged.empty()) {
    std::ostringstream why;
    if (nonfinite) why << "non-finite loss (" << loss << ") or gradient norm (" << norm << ")";
    else why << diverged;
    if (!r.skip_nonfinite)
      return FailedPrecondition("step " + std::to_string(step_) + ": " + why.str(),
                                "set stability.skip_nonfinite = true to skip such updates, or lower optim.lr");
    LMT_RETURN_IF_ERROR(bad_step(&rec, nonfinite ? "nonfinite" : "diverged", why.str(), !nonfinite));
  } else if (spike && r.spike_action != SpikeAction::kLog) {
    rec["spike_z"] = z;
    char why[96];
    std::snprintf(why, sizeof why, "loss spike %.4f (z = %.1f)", loss, z);
    LMT_RETURN_IF_ERROR(bad_step(&rec, "spike", why, true));
  } else {
    if (spike) {
      clear_progress();
      LMT_LOG(WARNING) << "step " << step_ << ": loss spike " << loss << " (z = " << z << "), logged";
      rec["spike_z"] = z;
    }
    bad_in_a_row_ = 0;
    spikes_.accept(loss);
    divergence_.accept(norm);
    ++updates_;
    LMT_RETURN_IF_ERROR(engine_->apply_update(static_cast<float>(lr_mult), updates_, &res));
    model_->update_router_bias();  // kBiasUpdate: from this step's loads (this rank's; see docs/MOE.md)
  }
  model_->reset_moe_stats();
  if (bad_in_a_row_ >= r.max_bad_steps) {
    (void)write_record(rec);  // the step that stops the run is logged too
    return FailedPrecondition("stopping after " + std::to_string(bad_in_a_row_) + " bad steps in a row (step " +
                                  std::to_string(step_) + ": " + last_bad_ + ")",
                              "lower optim.lr or raise schedule.warmup_steps; the last good checkpoint is intact");
  }

  if (r.checkpoint_every > 0 && step_ % r.checkpoint_every == 0) {
    Timer t;
    LMT_RETURN_IF_ERROR(save_checkpoint());
    t_ckpt = t.seconds();
  }
  const double secs = step_timer.seconds();
  run_seconds_ += secs;
  const model::FlopsPerToken f = model::flops_per_token(r.model, r.seq_len);
  const int world = topology_->world_size();  // MFU's peak counts every device
  const double tps = static_cast<double>(step_tokens) / secs;
  rec["lr"] = r.optim.lr * lr_mult;
  rec["tokens_per_s"] = tps;
  rec["tflops"] = f.training * tps * 1e-12;
  rec["tflops_6n"] = f.six_n * tps * 1e-12;
  rec["mfu"] = mfu(tps);
  rec["mfu_6n"] = f.six_n * tps / (peak_flops_ * world);
  rec["step_time"] = {{"step", secs}, {"data", res.time.data}, {"forward", res.time.forward}, {"backward", res.time.backward},
                 {"optimizer", res.time.update + res.time.gather}, {"checkpoint_wait", t_ckpt},
                 {"grad_reduce", res.time.reduce}};
  if (tp) rec["step_time"]["tp_comm"] = res.time.tp_comm;  // inside forward and backward
  if (const PipelinePlan* pp = split_->pipeline()) {
    rec["step_time"]["pp_wait"] = res.time.pp_wait;  // blocked on the neighbour stages
    rec["pp_bubble"] = pp->bubble_fraction(accum);     // the schedule's ideal idle fraction
  }
  if (world > 1) rec["world"] = world;
  rec["arena_peak_bytes"] = model_->arena().peak();
  rec["rss_bytes"] = metrics::rss_bytes();
  LMT_RETURN_IF_ERROR(write_record(rec));
  loss_window_.add(loss);
  norm_window_.add(norm);
  token_window_.add(static_cast<double>(step_tokens), secs);

  if (has_val_ && r.eval_every > 0 && step_ % r.eval_every == 0) {
    LMT_ASSIGN_OR_RETURN(double val, evaluate());
    last_eval_step_ = step_;
    last_val_loss_ = val;
    LMT_RETURN_IF_ERROR(write_record({{"type", "val"}, {"step", step_}, {"tokens", tokens_}, {"val_loss", val}, {"val_ppl", std::exp(val)}}));
    if (root_) {
      clear_progress();
      std::printf("step %6lld | val loss %.4f | val ppl %s\n", static_cast<long long>(step_), val, perplexity_text(val).c_str());
      std::fflush(stdout);
    }
  }
  if (tasks_ && r.eval_tasks_every > 0 && step_ % r.eval_tasks_every == 0) {
    clear_progress();
    LMT_RETURN_IF_ERROR(evaluate_tasks());
  }
  show_progress(lr_mult);
  return Status::Ok();
}

// A step whose update is skipped: logged, counted, and (for a spike or divergence, when
// stability.spike_action = "rollback") rolled back to the newest checkpoint.
Status Trainer::bad_step(nlohmann::json* rec, const std::string& kind, const std::string& why, bool may_roll_back) {
  if (root_) {
    clear_progress();
    LMT_LOG(WARNING) << "step " << step_ << ": " << why << "; update skipped";
  }
  (*rec)["skipped"] = kind;
  last_bad_ = why;
  ++bad_in_a_row_;
  if (may_roll_back && recipe_.spike_action == SpikeAction::kRollback) return rollback();
  return Status::Ok();
}

double Trainer::mfu(double tokens_per_s) const {
  const model::FlopsPerToken f = model::flops_per_token(recipe_.model, recipe_.seq_len);
  return f.training * tokens_per_s / (peak_flops_ * topology_->world_size());  // the peak counts every device
}

void Trainer::show_progress(double lr_mult) {
  if (!progress_) return;
  const double tps = token_window_.rate();
  char lr[32];
  std::snprintf(lr, sizeof lr, "%.2e", recipe_.optim.lr * lr_mult);
  // On a narrow terminal the bar drops fields from the last: lr and gnorm go first.
  std::vector<progress::Field> fields = {progress::number("loss", loss_window_.mean(), 4)};
  if (!std::isnan(last_val_loss_)) fields.push_back(progress::number("val loss", last_val_loss_, 4));
  fields.push_back(progress::rate(tps, "tok/s"));
  fields.push_back(progress::percent("MFU", mfu(tps)));
  fields.push_back(progress::number("gnorm", norm_window_.mean(), 3));
  fields.push_back({"lr", lr});
  progress_->update(step_, std::move(fields));
}

Status Trainer::run(int64_t stop_after) {
  const int64_t last = stop_after > 0 ? std::min(stop_after, recipe_.max_steps) : recipe_.max_steps;
  const size_t window = static_cast<size_t>(std::max<int64_t>(recipe_.log_every, 1));
  loss_window_ = progress::WindowMean(window);
  norm_window_ = progress::WindowMean(window);
  token_window_ = progress::WindowRate(window);
  if (root_)
    progress_ = std::make_unique<progress::Progress>(progress::Options{
        .label = "step", .total = recipe_.max_steps, .start = step_, .line_every_units = recipe_.log_every});
  // However run() returns (done, stopped, failed), the bar's line is ended before anything else is
  // printed, and the display stops with it.
  struct EndProgress {
    std::unique_ptr<progress::Progress>* p;
    ~EndProgress() { p->reset(); }
  } end_progress{&progress_};
  // A rank that stops making progress ends the run (stall_watchdog.h); the watch ends with run().
  if (recipe_.stall_timeout_s > 0) {
    StallWatchdog::OnStall on_stall = on_stall_;
    if (!on_stall) {
      on_stall = [rank = comm_->rank(), world = comm_->world()](const std::string& report) {
        end_stalled_process(rank, world, report);
      };
    }
    // The gradients' communicator (NCCL on GPUs) may fail in the background, leaving its next
    // collective waiting forever: reported at once.
    dist::Communicator* grads = &dp_->comm();
    auto health = [grads]() -> std::string {
      const Status s = grads->async_error();
      return s.ok() ? std::string() : "the gradients' communicator (" + std::string(grads->name()) +
                                          ") failed: " + s.message() + ". Its collectives cannot complete";
    };
    watchdog_ = std::make_unique<StallWatchdog>(recipe_.stall_timeout_s, std::move(on_stall), health);
  }
  struct EndWatch {
    std::unique_ptr<StallWatchdog>* w;
    ~EndWatch() { w->reset(); }
  } end_watch{&watchdog_};
  while (step_ < last) {
    beat("step", step_ + 1);
    if (const int sig = agreed_stop_signal(); sig != 0) return stop_on_signal(sig);
    if (step_ + 1 == recipe_.profile_begin) Tracer::start();
    LMT_RETURN_IF_ERROR(train_step());
    if (step_ + 1 == recipe_.profile_end) {
      const auto events = Tracer::stop();
      if (root_) {
      clear_progress();
      LMT_RETURN_IF_ERROR(metrics::write_chrome_trace(run_dir_ + "/trace.json", events));
      std::printf("profile of steps %lld..%lld (%s/trace.json, open in Perfetto):\n%s",
                  static_cast<long long>(recipe_.profile_begin), static_cast<long long>(recipe_.profile_end - 1),
                  run_dir_.c_str(), metrics::profile_summary(events, "train_step").c_str());
      }
    }
  }
  if (progress_) progress_->finish();
  // The final checkpoint comes first: nothing after it (validation, task scores) can lose the run.
  if (last_checkpoint_step_ != step_) LMT_RETURN_IF_ERROR(save_checkpoint());
  if (root_) LMT_RETURN_IF_ERROR(checkpointer_->wait());
  LMT_RETURN_IF_ERROR(comm_->barrier());
  const std::string saved = run_dir_ + "/checkpoints/" + io::checkpoint_name(step_);
  Status after = final_evaluations();
  if (!after.ok()) return after.WithContext("after the final checkpoint " + saved + " was written");
  if (root_) std::printf("run directory: %s (metrics.jsonl, checkpoints/%s)\n", run_dir_.c_str(), io::checkpoint_name(step_).c_str());
  return Status::Ok();
}

Status Trainer::final_evaluations() {
  if (has_val_ && last_eval_step_ != step_) {
    LMT_ASSIGN_OR_RETURN(double val, evaluate());
    LMT_RETURN_IF_ERROR(write_record({{"type", "val"}, {"step", step_}, {"tokens", tokens_}, {"val_loss", val}, {"val_ppl", std::exp(val)}}));
    if (root_) std::printf("final | val loss %.4f | val ppl %s\n", val, perplexity_text(val).c_str());
  }
  if (tasks_ && (recipe_.eval_tasks_every <= 0 || step_ % recipe_.eval_tasks_every != 0))
    LMT_RETURN_IF_ERROR(evaluate_tasks());
  return Status::Ok();
}

// Every rank stops after the same step: a signal seen by any rank counts for all (one small
// all-reduce per step, only when there are several ranks).
int Trainer::agreed_stop_signal() {
  const int mine = stop_requested();
  if (comm_->world() == 1) return mine;
  double any = mine != 0 ? 1 : 0;
  if (!comm_->all_reduce_sum(&any, 1).ok()) return mine;
  return any > 0 ? (mine != 0 ? mine : SIGTERM) : 0;
}

Status Trainer::stop_on_signal(int sig) {
  if (step_ > 0 && last_checkpoint_step_ != step_) LMT_RETURN_IF_ERROR(save_checkpoint());
  if (root_) LMT_RETURN_IF_ERROR(checkpointer_->wait());  // synchronous: the checkpoint is committed
  LMT_RETURN_IF_ERROR(comm_->barrier());
  LMT_RETURN_IF_ERROR(write_record({{"type", "event"}, {"event", "stopped"}, {"step", step_}, {"signal", stop_signal_name(sig)}}));
  const std::string where = step_ > 0 ? "checkpoint " + run_dir_ + "/checkpoints/" + io::checkpoint_name(step_) + " is saved"
                                      : "no step had run, nothing to save";
  return Cancelled("stopped by " + std::string(stop_signal_name(sig)) + " after step " + std::to_string(step_) + "; " + where,
                   "continue it with the same command and --resume");
}

}  // namespace lmt::train
