#include "lmt/train/recipe.h"

#include <cmath>
#include <cstdio>

#include "lmt/base/limits.h"
#include "lmt/data/manifest.h"
#include "lmt/kernels/registry.h"
#include "lmt/model/config_json.h"
#include "lmt/tensor/compute_dtype.h"

namespace lmt::train {
namespace {

// An error about `key`, named with where its value came from (the recipe file or the --set flag).
Status bad(const config::Config& c, const std::string& key, const std::string& what, const std::string& hint) {
  return InvalidArgument(c.where(key) + ": " + key + " " + what, hint);
}

// Where the keys starting with `prefix` came from: every file or flag that set one of them, or the
// recipe's defaults. For errors about several keys of a section at once.
std::string where_section(const config::Config& c, const std::string& prefix) {
  std::string out;
  for (const auto& k : config::schema()) {
    if (k.key.rfind(prefix, 0) != 0 || !c.has(k.key)) continue;
    const std::string w = c.where(k.key);
    if (w.size() > 10 && w.compare(w.size() - 10, 10, " (default)") == 0) continue;
    if (out.find(w) == std::string::npos) out += (out.empty() ? "" : ", ") + w;
  }
  return out.empty() ? c.where(prefix + "?") : out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// Preset, then every model.* key the recipe sets (same names as the model config JSON).
StatusOr<model::ModelConfig> build_model(const config::Config& c, int64_t data_vocab) {
  LMT_ASSIGN_OR_RETURN(model::ModelConfig preset, model::preset(c.get_string("model.preset")));
  nlohmann::json j = model::model_config_to_json(preset);
  for (const auto& [key, value] : c.values()) {
    if (key.rfind("model.", 0) != 0 || key == "model.preset" || key == "model.init_from") continue;
    std::visit([&](const auto& v) { j[key.substr(6)] = v; }, value);
  }
  if (!c.has("model.vocab_size")) j["vocab_size"] = data_vocab;
  const std::string where = where_section(c, "model.") + " [model]";
  LMT_ASSIGN_OR_RETURN(model::ModelConfig m, model::model_config_from_json(j, where));
  return m;
}

StatusOr<data::DataSource> parse_mixture_entry(const std::string& entry, const config::Config& c) {
  const size_t colon = entry.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return bad(c, "data.mixture", "entry '" + entry + "' is not \"DIR:WEIGHT\"", "e.g. data.mixture = [\"data/code:0.3\"]");
  char* end = nullptr;
  const std::string w = entry.substr(colon + 1);
  const double weight = std::strtod(w.c_str(), &end);
  if (end == w.c_str() || *end != '\0' || !(weight > 0) || !std::isfinite(weight))
    return bad(c, "data.mixture", "entry '" + entry + "' has no positive weight", "e.g. \"data/code:0.3\"");
  return data::DataSource{entry.substr(0, colon), weight};
}

// The whole run must fit in the memory it runs in (this machine's, or a GPU's): parameters, gradients, optimizer state, the bf16
// mirror and the activation arena of one micro-batch (model/activations.h measures it exactly).
Status check_memory(const Recipe& r, const config::Config& c) {
  // fp32 master weights and gradients, AdamW's two moments (Muon's momentum is smaller), the mirror.
  const double bytes_per_param = 4 + 4 + 8 + (r.run.compute == DType::kBF16 ? 2 : 0);
  const std::string what = "training (" + c.where("train.micro_batch") + ": train.micro_batch = " +
                           std::to_string(r.micro_batch) + ", " + c.where("train.seq_len") +
                           ": train.seq_len = " + std::to_string(r.seq_len) + ", " +
                           std::to_string(static_cast<long long>(r.model.param_count())) + " parameters)";
  const std::string hint =
      "lower train.micro_batch (raise train.grad_accum to keep the batch), lower train.seq_len, set train.recompute = true, "
      "or choose a smaller model; `lmtrain plan` estimates the memory a configuration needs";
  // The memory the run lives in: a device backend's (its free memory), else this machine's. A name
  // that is unknown or cannot run here is reported where the trainer looks it up.
  MemoryTarget target;
  if (StatusOr<kernels::Backend*> be = kernels::find_backend(r.backend); be.ok()) target = (*be)->memory_target();
  LMT_RETURN_IF_ERROR(model::model_memory_check(r.model, bytes_per_param, 0, "training", target));
  return model::activation_memory_check(r.model, r.micro_batch, r.seq_len, r.run,
                                        r.model.param_count_estimate() * bytes_per_param, what, hint, target);
}

}  // namespace

StatusOr<Recipe> recipe_from_config(const config::Config& c, const std::string& source) {
  LMT_RETURN_IF_ERROR(c.check_complete(source));
  // The OpenMP runtime reads OMP_NUM_THREADS itself; an absurd value crashes the first parallel
  // region of a training step, so it is refused here, before anything starts.
  LMT_RETURN_IF_ERROR(check_omp_num_threads());
  Recipe r;
  // A mistyped runtime.backend fails at once, before anything is read.
  r.backend = config::runtime_backend(c);
  if (auto be = kernels::find_backend(r.backend); !be.ok())
    return be.status().WithContext(c.where("runtime.backend") + ": runtime.backend");
  // Data first: the model's vocabulary defaults to the dataset's.
  data::DataStage stage;
  stage.sources.push_back({c.get_string("data.path"), c.get_float("data.weight")});
  for (const auto& e : c.get_string_list("data.mixture")) {
    LMT_ASSIGN_OR_RETURN(data::DataSource s, parse_mixture_entry(e, c));
    stage.sources.push_back(s);
  }
  auto manifest = data::read_manifest(stage.sources[0].path);
  if (!manifest.ok())
    return manifest.status().WithContext(c.where("data.path") + ": data.path");
  LMT_ASSIGN_OR_RETURN(r.model, build_model(c, manifest->vocab_size));
  r.init_from = c.get_string("model.init_from");
  if (r.model.vocab_size < manifest->vocab_size)
    return bad(c, "model.vocab_size", "= " + std::to_string(r.model.vocab_size) + " is smaller than the dataset's " +
                                          std::to_string(manifest->vocab_size),
               "remove model.vocab_size to take the dataset's");

  r.max_steps = c.get_int("train.max_steps");
  r.micro_batch = c.get_int("train.micro_batch");
  r.seq_len = c.get_int("train.seq_len");
  r.grad_accum = c.get_int("train.grad_accum");
  r.batch_warmup_tokens = c.get_int("train.batch_warmup_tokens");
  r.log_every = c.get_int("train.log_every");
  r.seed = static_cast<uint64_t>(c.get_int("train.seed"));
  r.doc_masking = c.get_bool("train.doc_masking");
  r.reset_positions = c.get_bool("data.reset_positions");
  r.grad_clip = static_cast<float>(c.get_float("train.grad_clip"));
  // Each key's own range is checked when it is set (config/schema.cpp); what is left here are the
  // limits that involve several keys.
  if (r.seq_len > r.model.max_seq_len)
    return bad(c, "train.seq_len", "= " + std::to_string(r.seq_len) + " exceeds the model's max_seq_len " +
                                       std::to_string(r.model.max_seq_len),
               "lower train.seq_len or raise model.max_seq_len");
  // Token counters (tokens per step, tokens so far) stay far from int64 overflow, on any world size.
  const double step_tokens = static_cast<double>(r.micro_batch) * static_cast<double>(r.seq_len) * static_cast<double>(r.grad_accum);
  if (step_tokens > 1e12)
    return InvalidArgument(where_section(c, "train.") + ": train.micro_batch · train.seq_len · train.grad_accum = " +
                               num(step_tokens) + " tokens per step is more than the limit of 1e12",
                           "lower train.grad_accum or train.micro_batch");
  if (step_tokens * static_cast<double>(r.max_steps) > 1e15)
    return bad(c, "train.max_steps", "= " + std::to_string(r.max_steps) + " steps of " + num(step_tokens) + " tokens is " +
                                         num(step_tokens * static_cast<double>(r.max_steps)) +
                                         " tokens, more than the limit of 1e15",
               "lower train.max_steps");

  StatusOr<DType> compute = parse_compute_dtype(c.get_string("train.dtype"), "train.dtype");
  if (!compute.ok()) return compute.status().WithContext(c.where("train.dtype"));
  r.run.compute = *compute;
  const std::string att = c.get_string("train.attention");
  if (att == "auto") r.run.attention = model::AttentionChoice::kAuto;
  else if (att == "flash") r.run.attention = model::AttentionChoice::kFlash;
  else if (att == "naive") r.run.attention = model::AttentionChoice::kNaive;
  else return bad(c, "train.attention", "= \"" + att + "\" is unknown", "use \"auto\", \"flash\" or \"naive\"");
  r.run.recompute = c.get_bool("train.recompute");
  r.run.z_loss = static_cast<float>(c.get_float("train.z_loss"));

  r.optim.name = c.get_string("optim.name");
  r.optim.lr = static_cast<float>(c.get_float("optim.lr"));
  r.optim.beta1 = static_cast<float>(c.get_float("optim.beta1"));
  r.optim.beta2 = static_cast<float>(c.get_float("optim.beta2"));
  r.optim.eps = static_cast<float>(c.get_float("optim.eps"));
  r.optim.weight_decay = static_cast<float>(c.get_float("optim.weight_decay"));
  r.optim.decay_embeddings = c.get_bool("optim.decay_embeddings");
  r.optim.muon_lr = static_cast<float>(c.get_float("optim.muon_lr"));
  r.optim.muon_momentum = static_cast<float>(c.get_float("optim.muon_momentum"));
  r.optim.muon_nesterov = c.get_bool("optim.muon_nesterov");
  r.optim.muon_ns_steps = static_cast<int>(c.get_int("optim.muon_ns_steps"));
  r.optim.muon_weight_decay = static_cast<float>(c.get_float("optim.muon_weight_decay"));
  r.optim.muon_ns_dtype = c.get_string("optim.muon_ns_dtype");
  r.optim.muon_ns_method = c.get_string("optim.muon_ns_method");
  Status os = optim::validate(r.optim);
  if (!os.ok()) return os.WithContext(where_section(c, "optim."));

  r.schedule.kind = c.get_string("schedule.kind");
  r.schedule.warmup_steps = c.get_int("schedule.warmup_steps");
  r.schedule.min_ratio = static_cast<float>(c.get_float("schedule.min_ratio"));
  r.schedule.decay_fraction = static_cast<float>(c.get_float("schedule.decay_fraction"));
  for (double d : c.get_float_list("schedule.drops")) r.schedule.drops.push_back(static_cast<float>(d));
  r.schedule.gamma = static_cast<float>(c.get_float("schedule.gamma"));
  Status ss = optim::validate(r.schedule);
  if (!ss.ok()) return ss.WithContext(where_section(c, "schedule."));

  r.train_data.stages = {stage};
  r.train_data.split = "train";
  r.train_data.batch = r.micro_batch;
  r.train_data.seq = r.seq_len;
  r.train_data.seed = r.seed;
  r.val_data = r.train_data;
  r.val_data.stages = {data::DataStage{0, {stage.sources[0]}}};  // validation: the primary dataset
  r.val_data.split = "val";
  r.val_data.shuffle = false;
  r.val_data.loop = false;
  r.val_data.prefetch = false;

  r.zero = static_cast<int>(c.get_int("train.zero"));  // its range: the schema's
  if (c.has("parallel.zero")) {  // the alias: same key, another name (docs/DIST.md)
    const int64_t z = c.get_int("parallel.zero");
    const std::string tz = c.where("train.zero");
    const bool train_zero_set = !(tz.size() > 10 && tz.compare(tz.size() - 10, 10, " (default)") == 0);
    if (train_zero_set && z != r.zero)
      return bad(c, "parallel.zero", "= " + std::to_string(z) + " contradicts train.zero = " + std::to_string(r.zero) +
                                         " (" + tz + "); they are one setting",
                 "set only one of parallel.zero and train.zero");
    // Whatever train.zero accepts, the alias accepts (the schema range of train.zero decides).
    Status zs = config::check_value(*config::find_key("train.zero"), config::Value{z}, c.where("parallel.zero") + " (parallel.zero)");
    if (!zs.ok()) return zs;
    r.zero = static_cast<int>(z);
  }
  r.parallel.dp = c.get_int("parallel.dp");
  r.parallel.tp = c.get_int("parallel.tp");
  r.parallel.pp = c.get_int("parallel.pp");
  r.parallel.ep = c.get_int("parallel.ep");
  r.run.ep = static_cast<int>(r.parallel.ep);  // the MoE activations are planned for the ep group
  r.parallel.sp = c.get_bool("parallel.sp");
  for (double n : c.get_float_list("parallel.pp_layers")) {
    if (n != static_cast<double>(static_cast<int64_t>(n)))
      return InvalidArgument(c.where("parallel.pp_layers") + ": parallel.pp_layers holds " + std::to_string(n) +
                                 ", not a whole number of blocks",
                             "list whole block counts, e.g. [9, 3]");
    r.parallel.pp_layers.push_back(static_cast<int64_t>(n));
  }
  LMT_RETURN_IF_ERROR(check_parallel_layout(r.parallel, r.model, r.seq_len, where_section(c, "parallel.")));
  // Sequence parallelism: each tensor-parallel rank holds seq_len / tp rows of every sequence's
  // residual stream (the activations are planned for it).
  r.run.sequence_shards = r.parallel.sp ? static_cast<int>(r.parallel.tp) : 1;
  const double bucket_mb = c.get_float("dist.bucket_mb");  // [0, 1e6] (schema)
  r.bucket_bytes = static_cast<int64_t>(bucket_mb * 1024 * 1024);
  r.shared_memory = c.get_bool("dist.shared_memory");
  r.zero3_vocab_rows = c.get_int("dist.zero3_vocab_rows");
  r.peak_gflops = c.get_float("runtime.peak_gflops");
  {
    auto wp = runtime::parse_wait_policy(c.get_string("runtime.wait_policy"), "runtime.wait_policy");
    if (!wp.ok()) return wp.status().WithContext(c.where("runtime.wait_policy"));
    r.wait_policy = *wp;
  }
  r.checkpoint_every = c.get_int("checkpoint.every");
  r.checkpoint_keep = c.get_int("checkpoint.keep");
  r.checkpoint_async = c.get_bool("checkpoint.async");
  r.stall_timeout_s = c.get_float("train.stall_timeout_s");
  r.save_on_signal = c.get_bool("train.save_on_signal");
  r.eval_every = c.get_int("eval.every");
  r.eval_batches = c.get_int("eval.batches");
  r.eval_tasks_every = c.get_int("eval.tasks_every");
  for (const auto& entry : c.get_string_list("eval.tasks")) {
    const size_t a = entry.find(':');
    const size_t b = a == std::string::npos ? a : entry.find(':', a + 1);
    eval::TaskSpec t;
    t.task = entry.substr(0, a);
    t.path = a == std::string::npos ? "" : entry.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
    char* end = nullptr;
    if (b != std::string::npos) t.limit = std::strtoll(entry.c_str() + b + 1, &end, 10);
    if (a == std::string::npos || t.path.empty() || (b != std::string::npos && (*end != '\0' || t.limit < 0)))
      return bad(c, "eval.tasks", "entry '" + entry + "' is not \"TASK:FILE[:LIMIT]\"",
                 "e.g. eval.tasks = [\"piqa:data/piqa/valid.jsonl:200\"]");
    r.eval_tasks.push_back(t);
  }
  r.layer_grad_norm_every = c.get_int("metrics.layer_grad_norm_every");
  r.skip_nonfinite = c.get_bool("stability.skip_nonfinite");
  r.max_bad_steps = c.get_int("stability.max_bad_steps");
  r.loss_margin = c.get_float("stability.loss_margin");
  r.max_rollbacks = c.get_int("stability.max_rollbacks");
  r.spike_window = c.get_int("stability.spike_window");
  r.spike_zscore = c.get_float("stability.spike_zscore");
  const std::string action = c.get_string("stability.spike_action");
  if (action == "log") r.spike_action = SpikeAction::kLog;
  else if (action == "skip") r.spike_action = SpikeAction::kSkip;
  else if (action == "rollback") r.spike_action = SpikeAction::kRollback;
  else return bad(c, "stability.spike_action", "= \"" + action + "\" is unknown", "use \"log\", \"skip\" or \"rollback\"");

  const std::string prof = c.get_string("profile.steps");
  if (!prof.empty()) {
    const size_t colon = prof.find(':');
    char* e1 = nullptr;
    char* e2 = nullptr;
    r.profile_begin = colon == std::string::npos ? -1 : std::strtoll(prof.c_str(), &e1, 10);
    r.profile_end = colon == std::string::npos ? -1 : std::strtoll(prof.c_str() + colon + 1, &e2, 10);
    if (colon == std::string::npos || *e1 != ':' || *e2 != '\0' || r.profile_begin < 1 || r.profile_end <= r.profile_begin)
      return bad(c, "profile.steps", "= \"" + prof + "\" is not \"A:B\" with 1 <= A < B", "e.g. profile.steps = \"10:20\"");
  }
  LMT_RETURN_IF_ERROR(check_memory(r, c));
  return r;
}

}  // namespace lmt::train
