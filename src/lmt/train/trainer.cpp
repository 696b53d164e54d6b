#include "lmt/train/trainer.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "lmt/base/log.h"
#include "lmt/base/timer.h"
#include "lmt/base/trace.h"
#include "lmt/io/atomic_file.h"
#include "lmt/metrics/hardware.h"
#include "lmt/metrics/profiler.h"
#include "lmt/model/flops.h"
#include "lmt/optim/gradients.h"
#include "lmt/optim/schedule.h"

namespace lmt::train {
namespace fs = std::filesystem;

Trainer::Trainer(Recipe recipe, std::string run_dir, std::string resolved_toml)
    : recipe_(std::move(recipe)),
      run_dir_(std::move(run_dir)),
      resolved_toml_(std::move(resolved_toml)),
      spikes_(recipe_.spike_window, recipe_.spike_zscore) {}

StatusOr<std::unique_ptr<Trainer>> Trainer::create(const Recipe& recipe, const std::string& resolved_toml,
                                                   const std::string& run_dir, bool resume) {
  std::unique_ptr<Trainer> t(new Trainer(recipe, run_dir, resolved_toml));
  LMT_RETURN_IF_ERROR(t->setup(resume));
  return t;
}

Status Trainer::setup(bool resume) {
  std::error_code ec;
  const std::string ckpt_dir = run_dir_ + "/checkpoints";
  const bool has_run = fs::exists(run_dir_ + "/metrics.jsonl") || fs::exists(ckpt_dir);
  if (has_run && !resume)
    return FailedPrecondition("run directory " + run_dir_ + " already holds a run (metrics.jsonl or checkpoints/)",
                              "pass --resume to continue it, or choose a new --run-dir; nothing was overwritten");
  fs::create_directories(run_dir_, ec);
  if (ec) return IoError("cannot create run directory " + run_dir_ + ": " + ec.message());

  model_ = std::make_unique<model::Transformer>(recipe_.model, kernels::cpu_backend());
  model_->init(recipe_.seed);
  model_->prepare(recipe_.micro_batch, recipe_.seq_len, recipe_.run);
  LMT_ASSIGN_OR_RETURN(optimizer_, optim::Optimizer::create(recipe_.optim, model_->layout(), model_->backend()));
  LMT_ASSIGN_OR_RETURN(train_loader_, data::Loader::open(recipe_.train_data));
  if (train_loader_->vocab_size() > recipe_.model.vocab_size)
    return InvalidArgument("the dataset's vocabulary (" + std::to_string(train_loader_->vocab_size()) +
                               ") is larger than the model's (" + std::to_string(recipe_.model.vocab_size) + ")",
                           "remove model.vocab_size from the recipe to take the dataset's");
  checkpointer_ = std::make_unique<AsyncCheckpointer>(ckpt_dir, recipe_.checkpoint_keep, recipe_.checkpoint_async);
  const auto& peaks = metrics::measured_peaks();
  peak_flops_ = (recipe_.run.compute == DType::kBF16 ? peaks.bf16_gflops : peaks.fp32_gflops) * 1e9;

  if (resume && fs::exists(ckpt_dir)) {
    std::vector<std::string> skipped;
    auto latest = io::find_latest_checkpoint(ckpt_dir, &skipped);
    for (const auto& s : skipped) LMT_LOG(WARNING) << "resume: skipping damaged checkpoint " << s;
    if (!latest.ok()) return latest.status();
    LMT_ASSIGN_OR_RETURN(nlohmann::json st, io::load_checkpoint(*latest, model_->layout(), model_->params().as<float>(),
                                                                 optimizer_->state()));
    model_->refresh_compute_weights();
    step_ = st.at("step").get<int64_t>();
    updates_ = st.at("updates").get<int64_t>();
    tokens_ = st.at("tokens").get<int64_t>();
    bad_in_a_row_ = st.at("bad_in_a_row").get<int64_t>();
    run_seconds_ = st.value("run_seconds", 0.0);
    LMT_RETURN_IF_ERROR(spikes_.restore(st.at("spike_window")));
    LMT_RETURN_IF_ERROR(train_loader_->restore(st.at("loader")));
    last_checkpoint_step_ = step_;
    LMT_LOG(INFO) << "resumed from " << *latest << " at step " << step_ << " (" << tokens_ << " tokens)";
  } else if (resume) {
    LMT_LOG(INFO) << "resume: no checkpoint in " << ckpt_dir << "; starting from step 0";
  }
  LMT_ASSIGN_OR_RETURN(io::AtomicFileWriter cfg, io::AtomicFileWriter::create(run_dir_ + "/config.toml"));
  LMT_RETURN_IF_ERROR(cfg.append(resolved_toml_.data(), resolved_toml_.size()));
  LMT_RETURN_IF_ERROR(cfg.commit());
  LMT_ASSIGN_OR_RETURN(metrics::MetricsLog log, metrics::MetricsLog::open(run_dir_ + "/metrics.jsonl"));
  metrics_ = std::make_unique<metrics::MetricsLog>(std::move(log));
  return Status::Ok();
}

nlohmann::json Trainer::trainer_state() const {
  return {{"step", step_},
          {"updates", updates_},
          {"tokens", tokens_},
          {"bad_in_a_row", bad_in_a_row_},
          {"run_seconds", run_seconds_},
          {"spike_window", spikes_.state()},
          {"loader", train_loader_->cursor()},
          {"seed", recipe_.seed}};
}

Status Trainer::save_checkpoint() {
  io::CheckpointData d;
  d.layout = &model_->layout();
  d.params = model_->params().as<float>();
  d.optimizer_state = optimizer_->state();
  d.trainer_state = trainer_state();
  d.config_toml = resolved_toml_;
  last_checkpoint_step_ = step_;
  return checkpointer_->start(step_, d);
}

// Reloads parameters and optimizer state from the newest checkpoint, keeping the data position:
// the batches since that checkpoint (the window that led to the spike) are skipped.
Status Trainer::rollback() {
  LMT_RETURN_IF_ERROR(checkpointer_->wait());
  std::vector<std::string> skipped;
  auto latest = io::find_latest_checkpoint(checkpointer_->dir(), &skipped);
  if (!latest.ok()) {
    LMT_LOG(WARNING) << "step " << step_ << ": loss spike, but no checkpoint to roll back to; skipping the update";
    return Status::Ok();
  }
  LMT_ASSIGN_OR_RETURN(nlohmann::json st, io::load_checkpoint(*latest, model_->layout(), model_->params().as<float>(),
                                                               optimizer_->state()));
  model_->refresh_compute_weights();
  updates_ = st.at("updates").get<int64_t>();
  LMT_LOG(WARNING) << "step " << step_ << ": rolled back to " << *latest << ", skipping the data since then";
  return metrics_->write({{"event", "rollback"}, {"step", step_}, {"checkpoint", *latest}});
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
    Status s = (*loader)->next(&b);
    if (s.code() == StatusCode::kOutOfRange) break;
    LMT_RETURN_IF_ERROR(s);
    sum += model_->forward(b.tokens.data(), b.targets.data(), recipe_.doc_masking ? b.doc_ids.data() : nullptr, false);
    ++n;
  }
  if (n == 0) return FailedPrecondition("the validation split has fewer tokens than one batch", "prepare the data with a larger --val-fraction");
  return sum / static_cast<double>(n);
}

Status Trainer::train_step() {
  LMT_TRACE_SCOPE("train_step");
  Timer step_timer;
  const Recipe& r = recipe_;
  const int64_t accum = optim::accumulation_steps(r.grad_accum, r.batch_warmup_tokens, tokens_);
  double t_data = 0, t_fwd = 0, t_bwd = 0, t_opt = 0, t_ckpt = 0, loss = 0;
  if (inject_) inject_(step_ + 1, *model_);
  model_->zero_grads();
  for (int64_t i = 0; i < accum; ++i) {
    Timer t;
    {
      LMT_TRACE_SCOPE("data_fetch");
      LMT_RETURN_IF_ERROR(train_loader_->next(&batch_));
    }
    t_data += t.seconds();
    t.reset();
    const double l = model_->forward(batch_.tokens.data(), batch_.targets.data(),
                                     r.doc_masking ? batch_.doc_ids.data() : nullptr, true, 1.0f / static_cast<float>(accum));
    t_fwd += t.seconds();
    t.reset();
    model_->backward();
    t_bwd += t.seconds();
    loss += l / static_cast<double>(accum);
  }
  ++step_;
  const int64_t step_tokens = accum * r.micro_batch * r.seq_len;
  tokens_ += step_tokens;

  double norm;
  {
    LMT_TRACE_SCOPE("clip");
    norm = optim::global_grad_norm(model_->backend(), model_->grads());
  }
  nlohmann::json rec = {{"step", step_}, {"tokens", tokens_}, {"loss", loss}, {"grad_norm", norm}, {"accum", accum}};
  if (r.layer_grad_norm_every > 0 && step_ % r.layer_grad_norm_every == 0) {
    std::vector<double> per_layer(r.model.n_layers, 0.0);
    for (const auto& p : model_->layout().params())
      if (p.layer >= 0) per_layer[p.layer] += model_->backend().sum_squares(model_->layout().view(p, model_->grads().data(), DType::kF32));
    for (double& v : per_layer) v = std::sqrt(v);
    rec["layer_grad_norms"] = per_layer;
  }
  const double lr_mult = optim::lr_multiplier(r.schedule, step_, r.max_steps);
  const bool nonfinite = !std::isfinite(loss) || !std::isfinite(norm);
  double z = 0;
  const bool spike = !nonfinite && spikes_.is_spike(loss, &z);
  if (nonfinite) {
    if (!r.skip_nonfinite)
      return FailedPrecondition("step " + std::to_string(step_) + ": the loss or gradient norm is not finite",
                                "set stability.skip_nonfinite = true to skip such updates, or lower optim.lr");
    LMT_LOG(WARNING) << "step " << step_ << ": non-finite loss (" << loss << ") or gradient norm (" << norm << "); update skipped";
    rec["skipped"] = "nonfinite";
    ++bad_in_a_row_;
  } else if (spike && r.spike_action != SpikeAction::kLog) {
    LMT_LOG(WARNING) << "step " << step_ << ": loss spike " << loss << " (z = " << z << ")";
    rec["skipped"] = "spike";
    rec["spike_z"] = z;
    ++bad_in_a_row_;
    if (r.spike_action == SpikeAction::kRollback) LMT_RETURN_IF_ERROR(rollback());
  } else {
    if (spike) {
      LMT_LOG(WARNING) << "step " << step_ << ": loss spike " << loss << " (z = " << z << "), logged";
      rec["spike_z"] = z;
    }
    bad_in_a_row_ = 0;
    spikes_.accept(loss);
    Timer t;
    LMT_TRACE_SCOPE("optimizer_step");
    ++updates_;
    optimizer_->step(model_->params(), model_->grads(), model_->compute_mirror(), static_cast<float>(lr_mult),
                     optim::clip_factor(norm, r.grad_clip), updates_);
    t_opt = t.seconds();
  }
  if (bad_in_a_row_ >= r.max_bad_steps)
    return FailedPrecondition("stopping after " + std::to_string(bad_in_a_row_) + " bad steps in a row (step " +
                                  std::to_string(step_) + ": non-finite or spiking loss)",
                              "lower optim.lr or raise schedule.warmup_steps; the last good checkpoint is intact");

  if (r.checkpoint_every > 0 && step_ % r.checkpoint_every == 0) {
    Timer t;
    LMT_RETURN_IF_ERROR(save_checkpoint());
    t_ckpt = t.seconds();
  }
  const double secs = step_timer.seconds();
  run_seconds_ += secs;
  const model::FlopsPerToken f = model::flops_per_token(r.model, r.seq_len);
  const double tps = static_cast<double>(step_tokens) / secs;
  rec["lr"] = r.optim.lr * lr_mult;
  rec["tokens_per_s"] = tps;
  rec["tflops"] = f.training * tps * 1e-12;
  rec["tflops_6n"] = f.six_n * tps * 1e-12;
  rec["mfu"] = f.training * tps / peak_flops_;
  rec["mfu_6n"] = f.six_n * tps / peak_flops_;
  rec["time"] = {{"step", secs}, {"data", t_data}, {"forward", t_fwd}, {"backward", t_bwd}, {"optimizer", t_opt},
                 {"checkpoint_wait", t_ckpt}};
  rec["arena_peak_bytes"] = model_->arena().peak();
  rec["rss_bytes"] = metrics::rss_bytes();
  LMT_RETURN_IF_ERROR(metrics_->write(rec));

  if (r.eval_every > 0 && step_ % r.eval_every == 0) {
    LMT_ASSIGN_OR_RETURN(double val, evaluate());
    last_eval_step_ = step_;
    LMT_RETURN_IF_ERROR(metrics_->write({{"step", step_}, {"tokens", tokens_}, {"val_loss", val}, {"val_ppl", std::exp(val)}}));
    std::printf("step %6lld | val loss %.4f | val ppl %.2f\n", static_cast<long long>(step_), val, std::exp(val));
  }
  if (step_ % r.log_every == 0 || step_ == r.max_steps) print_progress(loss, lr_mult, norm, tps, rec["mfu"]);
  return Status::Ok();
}

void Trainer::print_progress(double loss, double lr_mult, double norm, double tps, double mfu) const {
  const double per_step = run_seconds_ / static_cast<double>(std::max<int64_t>(step_, 1));
  const double eta = per_step * static_cast<double>(recipe_.max_steps - step_);
  std::printf("step %6lld/%lld | loss %.4f | lr %.2e | gnorm %.3f | %.0f tok/s | MFU %.1f%% | ETA %dm%02ds\n",
              static_cast<long long>(step_), static_cast<long long>(recipe_.max_steps), loss, recipe_.optim.lr * lr_mult,
              norm, tps, 100 * mfu, static_cast<int>(eta) / 60, static_cast<int>(eta) % 60);
  std::fflush(stdout);
}

Status Trainer::run(int64_t stop_after) {
  const int64_t last = stop_after > 0 ? std::min(stop_after, recipe_.max_steps) : recipe_.max_steps;
  while (step_ < last) {
    if (step_ + 1 == recipe_.profile_begin) Tracer::start();
    LMT_RETURN_IF_ERROR(train_step());
    if (step_ + 1 == recipe_.profile_end) {
      const auto events = Tracer::stop();
      LMT_RETURN_IF_ERROR(metrics::write_chrome_trace(run_dir_ + "/trace.json", events));
      std::printf("profile of steps %lld..%lld (%s/trace.json, open in Perfetto):\n%s",
                  static_cast<long long>(recipe_.profile_begin), static_cast<long long>(recipe_.profile_end - 1),
                  run_dir_.c_str(), metrics::profile_summary(events, "train_step").c_str());
    }
  }
  if (last_eval_step_ != step_) {
    LMT_ASSIGN_OR_RETURN(double val, evaluate());
    LMT_RETURN_IF_ERROR(metrics_->write({{"step", step_}, {"tokens", tokens_}, {"val_loss", val}, {"val_ppl", std::exp(val)}}));
    std::printf("final | val loss %.4f | val ppl %.2f\n", val, std::exp(val));
  }
  if (last_checkpoint_step_ != step_) LMT_RETURN_IF_ERROR(save_checkpoint());
  LMT_RETURN_IF_ERROR(checkpointer_->wait());
  std::printf("run directory: %s (metrics.jsonl, checkpoints/%s)\n", run_dir_.c_str(), io::checkpoint_name(step_).c_str());
  return Status::Ok();
}

}  // namespace lmt::train
