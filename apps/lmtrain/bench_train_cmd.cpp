// `lmtrain bench train`: full training steps of a preset on random tokens, run by the trainer's
// own train::StepEngine: forward + backward for each micro-batch, the global gradient norm, and the
// fused optimizer update (which also refreshes the bf16 mirror). Prints tokens/s, MFU and the time
// split. Under mpirun every process is one data-parallel rank (dist::Topology with dp = world;
// train::DataParallel: shared-memory reduction on one node, or bucketed MPI all-reduce; ZeRO per
// --zero); tokens/s then counts all dp ranks and MFU is against the peak of all ranks' cores. It
// also times the gradient reduction alone (nothing to overlap with) and reports how much of it
// backward hid. --tp N splits each model over N ranks (tensor parallelism, model/tensor_parallel.h;
// the ranks of a group share a batch) and reports the time in the group's sums; --pp N splits its
// layers into N pipeline stages (train/pipeline_plan.h; 1F1B over the --grad-accum micro-batches)
// and reports the ideal bubble and the time rank 0 spent blocked on its neighbour.
//
// --contend (issue #21, goal 3): a busy-loop process (runtime/busy_child.h) pinned to the last CPU
// runs beside the benchmark, stopped during idle rounds and running during contended ones; each
// round times one idle and one contended step, in alternating order, and the report gives both
// tokens/s and the slowdown (contended step time / idle step time, medians over the rounds). The
// busy loop dies with the command on every path (errors, signals). --wait-policy chooses the OpenMP
// wait policy (runtime/omp_env.h) for the run.
#include <algorithm>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_stats.h"
#include "backend_flag.h"
#include "commands.h"
#include "lmt/base/rng.h"
#include "lmt/base/timer.h"
#include "lmt/base/trace.h"
#include "lmt/dist/topology.h"
#include "lmt/metrics/hardware.h"
#include "lmt/metrics/peaks.h"
#include "lmt/metrics/profiler.h"
#include "lmt/model/flops.h"
#include "lmt/model/transformer.h"
#include "lmt/optim/optimizer.h"
#include "lmt/plan/memory.h"
#include "lmt/runtime/busy_child.h"
#include "lmt/runtime/omp_env.h"
#include "lmt/train/memory_report.h"
#include "lmt/tensor/compute_dtype.h"
#include "lmt/train/data_parallel.h"
#include "lmt/train/device_world.h"
#include "lmt/train/step_engine.h"
#include "lmt/model/pipeline_split.h"
#include "lmt/model/tensor_parallel.h"
#include "lmt/train/model_split.h"

namespace lmt::cli {
namespace {

// The same random micro-batch every time (the benchmark measures compute, not data).
class RepeatedBatch final : public train::MicroBatchSource {
 public:
  explicit RepeatedBatch(data::Batch b) : batch_(std::move(b)) {}
  StatusOr<const data::Batch*> next() override { return &batch_; }

 private:
  data::Batch batch_;
};

struct TrainBenchArgs {
  std::string preset = "gpt2-124m", optimizer = "adamw", dtype = "bf16";
  std::string backend = "cpu";
  int64_t batch = 4, seq = 256, accum = 1;
  int warmup = 1, iters = 5, zero = 0, tp = 1, pp = 1;
  int64_t zero3_vocab_rows = 0;  // --zero3-vocab-rows (dist.zero3_vocab_rows)
  double bucket_mb = 25;
  double peak_gflops = 0;  // --peak-flops; 0: this machine's peak
  CLI::Option* peak_flag = nullptr;
  bool recompute = false, json = false, shared_memory = true, contend = false, profile = false, sp = false;
  bool dense_peer = false;  // --dense-peer: the MoE preset's dense model of equal active parameters
  int contend_cpu = -1;     // --contend-cpu; -1: the last CPU of this process's affinity mask
  std::string wait_policy;  // --wait-policy; "": LMT_WAIT_POLICY, else auto (applied in main)
};

Status run_train_bench(const TrainBenchArgs& a) {
  LMT_ASSIGN_OR_RETURN(model::ModelConfig config, model::preset(a.preset));
  if (a.dense_peer) {
    LMT_ASSIGN_OR_RETURN(config, model::dense_peer(config));
  }
  const std::string label = a.dense_peer ? config.name : a.preset;  // what the output calls the model
  if (a.batch <= 0 || a.seq <= 0 || a.seq > config.max_seq_len || a.accum <= 0)
    return InvalidArgument("--micro-batch and --grad-accum must be positive and --seq-len in [1, " + std::to_string(config.max_seq_len) + "]");
  model::RunOptions o;
  LMT_ASSIGN_OR_RETURN(o.compute, parse_compute_dtype(a.dtype, "--dtype"));
  o.recompute = a.recompute;
  if (a.peak_flag != nullptr && a.peak_flag->count() > 0) LMT_RETURN_IF_ERROR(metrics::check_peak_gflops(a.peak_gflops, "--peak-flops"));
  LMT_RETURN_IF_ERROR(check_flag("--micro-batch", a.batch, 1, int64_t{1} << 20));
  LMT_RETURN_IF_ERROR(check_flag("--grad-accum", a.accum, 1, int64_t{1} << 20));
  LMT_RETURN_IF_ERROR(check_flag("--warmup", a.warmup, 0, 1000000, "untimed steps"));
  LMT_RETURN_IF_ERROR(check_flag("--iters", a.iters, 1, 1000000, "timed steps"));
  LMT_RETURN_IF_ERROR(check_real_flag("--bucket-mb", a.bucket_mb, 0, 1e6, "MiB per all-reduce bucket; 0: one all-reduce"));
  LMT_RETURN_IF_ERROR(check_omp_num_threads());
  // The busy loop starts before the model is built, so every later error path passes through its
  // destructor (the CLI tests fail the memory check below on purpose to see it reaped).
  std::unique_ptr<runtime::BusyChild> busy;
  if (a.contend) {
    if (dist::launched_by_mpi())
      return InvalidArgument("--contend runs in one process", "run lmtrain bench train --contend without mpirun");
    const int cpu = a.contend_cpu >= 0 ? a.contend_cpu : runtime::last_allowed_cpu();
    LMT_ASSIGN_OR_RETURN(busy, runtime::BusyChild::start(cpu));
    std::fprintf(stderr, "contend: busy-loop process %d on cpu %d (running in the contended rounds only)\n",
                 static_cast<int>(busy->pid()), busy->cpu());
  }
  LMT_ASSIGN_OR_RETURN(kernels::Backend* be, backend_from_flag(a.backend));
  // Master weights, gradients, AdamW's moments and the bf16 mirror, plus the activation arena, in the
  // memory the backend computes in (this machine's, or its GPU's).
  LMT_RETURN_IF_ERROR(model::activation_memory_check(
      config, a.batch, a.seq, o, (16.0 + (o.compute == DType::kBF16 ? 2.0 : 0.0)) * config.param_count_estimate(),
      "--preset " + a.preset + " --micro-batch " + std::to_string(a.batch) + " --seq-len " + std::to_string(a.seq),
      "lower --micro-batch (raise --grad-accum to keep the batch) or --seq-len, or pass --recompute",
      be->memory_target()));
  if (a.zero < 0 || a.zero > 3) return InvalidArgument("--zero " + std::to_string(a.zero) + " is not a ZeRO stage", "use 0, 1, 2 or 3");
  LMT_RETURN_IF_ERROR(check_flag("--tp", a.tp, 1, 1 << 16, "tensor-parallel ranks"));
  LMT_RETURN_IF_ERROR(check_flag("--pp", a.pp, 1, 1 << 16, "pipeline stages"));
  if (a.sp && (a.tp == 1 || (a.batch * a.seq) % a.tp != 0))
    return InvalidArgument("--sp needs --tp > 1 dividing --micro-batch × --seq-len", "add --tp 2, or drop --sp");
  o.sequence_shards = a.sp ? a.tp : 1;
  if ((a.tp > 1 || a.pp > 1) && a.zero == 3)
    return Unimplemented("--tp/--pp with --zero 3: not combined yet (as in lmtrain train)", "use --zero 0-2 with --tp or --pp");
  if (a.tp > 1 && a.optimizer == "muon")
    return Unimplemented("--tp " + std::to_string(a.tp) + " with --optimizer muon: Muon needs whole matrices",
                         "use --optimizer adamw with --tp");
  LMT_RETURN_IF_ERROR(model::tensor_parallel_supported(config, a.tp));
  LMT_RETURN_IF_ERROR(model::pipeline_supported(config, a.pp));
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<dist::Communicator> comm, dist::make_communicator());
  LMT_ASSIGN_OR_RETURN(const dist::ParallelSizes sizes, dist::sizes_for_world(comm->world(), a.tp, a.pp));
  // A device backend over several processes reduces its memory with its own communicator (NCCL).
  std::unique_ptr<dist::Communicator> device_comm;
  LMT_ASSIGN_OR_RETURN(dist::Communicator* const world_comm,
                       train::world_for_backend(*be, *comm, &device_comm));
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<dist::Topology> topo, dist::Topology::create(*world_comm, sizes));
  const int world = topo->world_size(), dp_size = topo->dp_size();
  // Tensor and pipeline parallelism (--tp, --pp): this rank builds its part of the model
  // (train/model_split.h); the weights are random either way.
  train::ModelSplit model_split(*topo, config, a.seq);
  train::TensorParallelPlan* tp = model_split.tensor();
  train::PipelinePlan* pp = model_split.pipeline();
  const model::ModelConfig& local = model_split.local_config();
  model::Transformer m(local, *be);
  m.init(1);
  m.prepare(a.batch, a.seq, o);
  if (tp) m.set_tensor_parallel(tp->model_group(a.sp));
  optim::OptimizerConfig oc;
  oc.name = a.optimizer;
  // Under --tp/--pp the data-parallel reduction runs after backward, unbucketed (as in lmtrain train:
  // some gradients are summed over the model's groups first; a pipeline's last backward is a replica's).
  train::DataParallel dp(topo->dp(), m.layout(), oc, a.zero,
                         model_split.split() ? 0 : static_cast<int64_t>(a.bucket_mb * 1024 * 1024));
  model_split.add_groups(dp, m.layout());
  if (a.shared_memory) LMT_RETURN_IF_ERROR(dp.use_shared_memory(m));
  LMT_RETURN_IF_ERROR(dp.shard_parameters(m, a.zero3_vocab_rows));  // --zero 3
  train::StepEngineConfig ec;
  ec.grad_clip = 1.0f;
  ec.time_device_reduction = true;  // grad_reduce on GPUs: the device's time, not the host's queueing
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<train::StepEngine> engine, train::StepEngine::create(m, dp, oc, ec));
  if (pp) pp->prepare_schedule(m, a.batch, a.seq, o);
  if (model_split.split()) engine->set_model_split(&model_split);
  const int64_t N = a.batch * a.seq;
  data::Batch batch;
  batch.B = a.batch;
  batch.T = a.seq;
  batch.tokens.resize(N);
  batch.targets.resize(N);
  Rng rng(3 + static_cast<uint64_t>(topo->dp_rank()));  // the ranks of a tensor-parallel group share a batch
  for (int64_t i = 0; i < N; ++i) {
    batch.tokens[i] = static_cast<int32_t>(rng.below(config.vocab_size));
    batch.targets[i] = static_cast<int32_t>(rng.below(config.vocab_size));
  }
  RepeatedBatch source(std::move(batch));
  train::StepOptions so;
  so.accum = a.accum;
  std::vector<double> t_fwd, t_bwd, t_opt, t_gather, t_step, t_comm, t_contended, t_z3, t_tp, t_pp;
  int64_t step_no = 0;
  // One step, timed; with `contended`, the busy loop runs during it (and is stopped again after).
  auto timed_step = [&](bool contended, train::StepResult* r) -> StatusOr<double> {
    if (contended) LMT_RETURN_IF_ERROR(busy->resume());
    if (tp) tp->take_comm_seconds();
    Timer t;
    Status st;
    {
      TraceScope scope(contended ? "train_step_contended" : "train_step");  // --profile splits idle steps
      st = engine->step(source, so, 1.0f, ++step_no, r);
      be->synchronize();  // a device backend may still be running the step's last ops
    }
    if (tp) r->time.tp_comm = tp->take_comm_seconds();
    const double secs = t.seconds();
    if (contended) LMT_RETURN_IF_ERROR(busy->pause());
    LMT_RETURN_IF_ERROR(st);
    return secs;
  };
  for (int it = 0; it < a.warmup + a.iters; ++it) {
    if (a.profile && it == a.warmup) Tracer::start();
    train::StepResult r, rc;
    // With --contend, a contended step after the idle one in even rounds, before it in odd ones.
    const bool contended_first = busy != nullptr && it % 2 == 1;
    double contended_s = 0;
    if (contended_first) {
      LMT_ASSIGN_OR_RETURN(contended_s, timed_step(true, &rc));
    }
    LMT_ASSIGN_OR_RETURN(const double idle_s, timed_step(false, &r));
    if (busy != nullptr && !contended_first) {
      LMT_ASSIGN_OR_RETURN(contended_s, timed_step(true, &rc));
    }
    if (it >= a.warmup) {
      t_fwd.push_back(r.time.forward);
      t_bwd.push_back(r.time.backward);
      t_opt.push_back(r.time.norm + r.time.update);
      t_gather.push_back(r.time.gather);
      t_comm.push_back(r.time.reduce);
      t_step.push_back(idle_s);
      if (busy != nullptr) t_contended.push_back(contended_s);
      t_z3.push_back(r.time.zero3_comm);
      t_tp.push_back(r.time.tp_comm);
      t_pp.push_back(r.time.pp_wait);
    }
  }
  // Time per op family over the timed steps (--profile): where each percent of the step went.
  const std::vector<TraceEvent> events = a.profile ? Tracer::stop() : std::vector<TraceEvent>();
  const metrics::OpSplit ops = metrics::op_split(events, "train_step", "op:", a.iters);
  const int busy_pid = busy != nullptr ? static_cast<int>(busy->pid()) : -1, busy_cpu = busy != nullptr ? busy->cpu() : -1;
  if (busy != nullptr) busy->stop();
  // The same reduction with nothing to hide behind (no backward between arm and finish): what the
  // exposed `grad reduce` time would be without overlap. Collective, so every rank runs it.
  std::vector<double> t_alone;
  for (int k = 0; k < 3 && dp_size > 1; ++k) {
    LMT_RETURN_IF_ERROR(comm->barrier());
    LMT_ASSIGN_OR_RETURN(const double alone_s, engine->time_reduction_alone());
    t_alone.push_back(alone_s);
  }
  const double alone = t_alone.empty() ? 0.0 : median(t_alone), exposed = median(t_comm);
  const double hidden = std::max(0.0, alone - exposed);
  const double secs = median(t_step), tps = static_cast<double>(N * a.accum * dp_size) / secs;
  const model::FlopsPerToken f = model::flops_per_token(config, a.seq);
  LMT_ASSIGN_OR_RETURN(double peak, metrics::device_peak_flops(be->device_description(), o.compute,
                                                               {.override_gflops = a.peak_gflops}));
  peak *= world;
  const double mfu = f.training * tps / peak, mfu_6n = f.six_n * tps / peak;
  // Model-state memory this rank holds (counted from its buffers), against the planner's
  // per-device prediction (plan/memory.h: 16 B/param, ZeRO shards over the ranks, two gathered
  // layers under ZeRO 3).
  const train::DataParallel::StateMemory sm = dp.model_state_memory(m, engine->optimizer());
  // (Under --tp, of this rank's part: its heads and FFN units, and the replicated tensors whole.)
  const train::PlannedStateMemory predicted = train::planned_state_memory(local, a.zero, dp_size, o.compute);
  const nlohmann::json memory = {
      {"params_grads", sm.params_grads},
      {"mirror", sm.mirror},
      {"optimizer_state", sm.optimizer_state},
      {"gather_buffers", sm.gather_buffers},
      {"model_states", sm.total()},
      {"plan_model_states", predicted.total()},
      {"plan_optimizer_state", predicted.optimizer_state},
      {"peak_rss", metrics::peak_rss_bytes()},
      {"device_peak", be->device_memory_peak_bytes()}};
  const nlohmann::json split = {{"forward", median(t_fwd)},         {"backward", median(t_bwd)},
                                {"grad_reduce", exposed},              {"grad_reduce_alone", alone},
                                {"hidden_by_overlap", hidden},         {"optimizer", median(t_opt)},
                                {"param_gather", median(t_gather)},   {"zero3_comm", median(t_z3)},
                                {"tp_comm", median(t_tp)},            {"pp_wait", median(t_pp)}};
  if (comm->rank() != 0) return Status::Ok();
  const runtime::OmpEnvInfo omp = runtime::omp_env_info();
  const nlohmann::json omp_json = {{"wait_policy", omp.policy}, {"OMP_WAIT_POLICY", omp.omp_wait_policy},
                                   {"GOMP_SPINCOUNT", omp.gomp_spincount}};
  nlohmann::json contend;
  if (!t_contended.empty()) {
    const double csecs = median(t_contended);
    contend = {{"idle_tokens_per_s", tps}, {"contended_tokens_per_s", static_cast<double>(N * a.accum) / csecs},
               {"idle_seconds", secs}, {"contended_seconds", csecs}, {"slowdown", csecs / secs},
               {"rounds", t_contended.size()}, {"busy_pid", busy_pid}, {"busy_cpu", busy_cpu}};
  }
  if (a.json) {
    nlohmann::json j = {{"bench", "train"}, {"preset", a.preset}, {"dense_peer", a.dense_peer}, {"model", label}, {"backend", a.backend}, {"batch", a.batch}, {"seq", a.seq}, {"accum", a.accum},
                        {"dtype", a.dtype}, {"optimizer", a.optimizer}, {"recompute", a.recompute},
                        {"params", config.param_count()}, {"seconds", secs}, {"tokens_per_s", tps}, {"mfu", mfu},
                        {"mfu_6n", mfu_6n}, {"time", split}, {"world", world}, {"dp", dp_size}, {"tp", a.tp}, {"sp", a.sp}, {"pp", a.pp}, {"zero", a.zero}, {"zero3_vocab_streamed", dp.zero3_streamed()},
                        {"pp_bubble", pp ? pp->bubble_fraction(a.accum) : 0.0},
                        {"reduction", dp_size == 1 ? "none" : dp.shared_memory() ? "shared_memory" : world_comm->name()},
                        {"memory_per_rank", memory},
                        {"threads", metrics::cpu_info().threads}, {"omp", omp_json},
                        {"machine", metrics::machine_summary()}, {"device", be->device_description()}};
    if (a.profile) {
      nlohmann::json rows = nlohmann::json::object();
      for (const auto& [name, ms] : ops.rows) rows[name] = ms;
      j["profile"] = {{"step_ms", ops.step_ms}, {"ms_per_step", rows}};
    }
    if (!contend.is_null()) j["contend"] = contend;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("machine: %s\n", metrics::machine_summary().c_str());
    std::printf("train %s B=%lld T=%lld accum=%lld %s %s ranks=%d zero=%d: %.1f ms/step (forward %.1f, backward %.1f, "
                "grad reduce %.1f, optimizer %.1f, param gather %.1f), %.0f tokens/s, MFU %.1f%% (6N: %.1f%%)\n",
                label.c_str(), static_cast<long long>(a.batch), static_cast<long long>(a.seq),
                static_cast<long long>(a.accum), a.dtype.c_str(), a.optimizer.c_str(), world, a.zero, secs * 1e3,
                median(t_fwd) * 1e3, median(t_bwd) * 1e3, exposed * 1e3, median(t_opt) * 1e3, median(t_gather) * 1e3,
                tps, mfu * 100, mfu_6n * 100);
    const double mib = 1.0 / (1 << 20);
    std::printf("memory per rank (MiB): params+grads %.2f, bf16 mirror %.2f, optimizer state %.2f (plan: %.2f), "
                "gather buffers %.2f; model states %.2f (plan: %.2f); peak RSS %.0f\n",
                memory["params_grads"].get<double>() * mib, memory["mirror"].get<double>() * mib,
                memory["optimizer_state"].get<double>() * mib, memory["plan_optimizer_state"].get<double>() * mib,
                memory["gather_buffers"].get<double>() * mib, memory["model_states"].get<double>() * mib,
                memory["plan_model_states"].get<double>() * mib, memory["peak_rss"].get<double>() * mib);
    if (a.profile) {
      std::printf("time per step by op family (profiled; %.1f ms/step):\n", ops.step_ms);
      for (const auto& [name, ms] : ops.rows)
        std::printf("  %-16s %9.1f ms %6.1f%%\n", name.c_str(), ms, ops.step_ms > 0 ? 100.0 * ms / ops.step_ms : 0.0);
    }
    if (!contend.is_null())
      std::printf("contended (busy loop on cpu %d, wait policy %s, %zu rounds): idle %.0f tokens/s, contended %.0f "
                  "tokens/s, slowdown %.2fx\n",
                  busy_cpu, omp.policy.c_str(), t_contended.size(), tps, contend["contended_tokens_per_s"].get<double>(),
                  contend["slowdown"].get<double>());
    if (tp)
      std::printf("tensor parallel over %d ranks (dp %d): %.1f ms/step in the group's sums (inside forward and backward)\n",
                  a.tp, dp_size, median(t_tp) * 1e3);
    if (pp)
      std::printf("pipeline over %d stages, %lld micro-batches (1F1B): ideal bubble %.1f%%; %.1f ms/step blocked on the "
                  "neighbour stages (this is rank 0: the first stage)\n",
                  a.pp, static_cast<long long>(a.accum), 100 * pp->bubble_fraction(a.accum), median(t_pp) * 1e3);
    if (a.zero == 3)
      std::printf("ZeRO 3: %.1f ms/step in gathers and reduce-scatters (inside forward and backward); the vocabulary %s\n",
                  median(t_z3) * 1e3, dp.zero3_streamed() ? "streamed in chunks" : "gathered whole");
    if (dp_size > 1)
      std::printf("gradient reduction over %s: %.1f ms exposed after backward; %.1f ms alone; %.1f ms hidden by overlap\n",
                  dp.shared_memory() ? "shared memory" : "MPI messages", exposed * 1e3, alone * 1e3, hidden * 1e3);
  }
  return Status::Ok();
}

}  // namespace

void add_train_bench(CLI::App* bench, Runner& runner) {
  static TrainBenchArgs tb;
  CLI::App* t = bench->add_subcommand("train", "full training steps (forward, backward, optimizer): tokens/s, MFU");
  t->add_option("--preset", tb.preset, "model preset")->capture_default_str();
  t->add_option("--micro-batch", tb.batch, "micro-batch B")->capture_default_str();
  add_deprecated_option(t, "--batch", "--micro-batch", tb.batch);
  t->add_option("--seq-len", tb.seq, "sequence length T")->capture_default_str();
  add_deprecated_option(t, "--seq", "--seq-len", tb.seq);
  t->add_option("--grad-accum", tb.accum, "micro-batches per optimizer step")->capture_default_str();
  add_deprecated_option(t, "--accum", "--grad-accum", tb.accum);
  t->add_option("--dtype", tb.dtype, "bf16 or fp32")->capture_default_str();
  t->add_option("--optimizer", tb.optimizer, "adamw or muon")->capture_default_str();
  t->add_flag("--recompute", tb.recompute, "activation checkpointing per block");
  t->add_flag("--dense-peer", tb.dense_peer,
              "with an MoE preset: run its dense peer instead (every FFN dense with hidden (top_k + shared) × expert_ffn: "
              "the MoE model's active parameters without the routers), to compare MFU with");
  add_backend_flag(t, tb.backend);
  t->add_option("--warmup", tb.warmup, "untimed steps")->capture_default_str();
  t->add_option("--iters", tb.iters, "timed steps (the median is reported)")->capture_default_str();
  tb.peak_flag = t->add_option("--peak-flops", tb.peak_gflops, "GFLOP/s: dense peak of one rank that MFU divides by (default: this machine's, cached)");
  t->add_flag("--json", tb.json, "print one JSON object");
  t->add_flag("--profile", tb.profile,
              "also print the timed steps' time split by op family (gemm, attention, norm, ...; the kernel interface's ranges)");
  t->add_option("--zero", tb.zero, "ZeRO stage under mpirun (0, 1, 2, 3: parameters sharded too)")->capture_default_str();
  t->add_option("--tp", tb.tp, "tensor-parallel ranks under mpirun (parallel.tp; data parallel over the rest)")
      ->capture_default_str();
  t->add_flag("--sp", tb.sp, "with --tp: sequence parallelism (parallel.sp): norms and the residual stream on sequence shards");
  t->add_option("--pp", tb.pp,
                "pipeline stages under mpirun (parallel.pp; 1F1B over --grad-accum micro-batches; data parallel over the rest)")
      ->capture_default_str();
  t->add_flag("--shared-memory,!--no-shared-memory", tb.shared_memory,
              "under mpirun on one node: reduce through shared memory (default), or with --no-shared-memory through MPI "
              "messages (dist.shared_memory)");
  t->add_option("--zero3-vocab-rows", tb.zero3_vocab_rows,
                 "--zero 3: vocabulary rows per streamed chunk of the embedding and LM head; 0 automatic, -1 gathered "
                 "whole (dist.zero3_vocab_rows)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 40))
      ->capture_default_str();
  t->add_option("--bucket-mb", tb.bucket_mb, "gradient all-reduce bucket size in MiB (0: one after backward)")->capture_default_str();
  t->add_flag("--contend", tb.contend,
              "run a busy-loop process beside the benchmark: each round times one idle and one contended step; reports "
              "both tokens/s and the slowdown");
  t->add_option("--contend-cpu", tb.contend_cpu, "with --contend: the CPU the busy loop is pinned to (default: the last one)");
  t->add_option("--wait-policy", tb.wait_policy,
                "OpenMP wait policy: auto, spin or passive (default: LMT_WAIT_POLICY, else auto; the user's "
                "OMP_WAIT_POLICY / GOMP_SPINCOUNT win)");
  t->callback([&runner] {
    // Applied first: it may re-execute the program (runtime/omp_env.h).
    if (!tb.wait_policy.empty()) {
      auto p = runtime::parse_wait_policy(tb.wait_policy, "--wait-policy");
      if (!p.ok()) return runner.set(p.status());
      runtime::apply_wait_policy(*p);
    }
    runner.set(run_train_bench(tb));
  });
}

}  // namespace lmt::cli
