// The schema of a training recipe: every key, its type, default and meaning. docs/CONFIG.md is
// generated from this table (`lmtrain train --print-keys`), so the two cannot disagree.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "lmt/base/edit_distance.h"
#include "lmt/config/config.h"

namespace lmt::config {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Ranges, written next to each key below.
Range any() { return Range{}; }                                      // finite
Range at_least(double lo) { return Range{lo, kInf, false, false}; }  // [lo, inf)
Range between(double lo, double hi) { return Range{lo, hi, false, false}; }          // [lo, hi]
Range above_to(double lo, double hi) { return Range{lo, hi, true, false}; }          // (lo, hi]
Range from_below(double lo, double hi) { return Range{lo, hi, false, true}; }        // [lo, hi)
Range open(double lo, double hi) { return Range{lo, hi, true, true}; }               // (lo, hi)

// Bounds shared by several keys. Step counts and intervals: 1e12 steps is far beyond any run, and
// keeps step arithmetic (ETA, tokens = steps x batch x seq) far from overflow.
constexpr double kMaxSteps = 1e12;
constexpr double kMaxTokens = 1e15;

KeyInfo key(std::string k, Value def, Range range, std::string doc) {
  Type t = std::visit([](const auto& v) -> Type {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<V, int64_t>) return Type::kInt;
    else if constexpr (std::is_same_v<V, double>) return Type::kFloat;
    else if constexpr (std::is_same_v<V, bool>) return Type::kBool;
    else if constexpr (std::is_same_v<V, std::string>) return Type::kString;
    else if constexpr (std::is_same_v<V, std::vector<double>>) return Type::kFloatList;
    else return Type::kStringList;
  }, def);
  return KeyInfo{std::move(k), t, std::move(def), Presence::kDefault, std::move(doc), range};
}
// Keys without a numeric range (strings, booleans, lists of strings).
KeyInfo key(std::string k, Value def, std::string doc) { return key(std::move(k), std::move(def), any(), std::move(doc)); }
KeyInfo required(std::string k, Type t, std::string doc) {
  return KeyInfo{std::move(k), t, Value{}, Presence::kRequired, std::move(doc), any()};
}
KeyInfo optional_model(std::string k, Type t, Range range, std::string doc) {
  return KeyInfo{std::move(k), t, Value{}, Presence::kOptional, std::move(doc), range};
}
KeyInfo optional_model(std::string k, Type t, std::string doc) { return optional_model(std::move(k), t, any(), std::move(doc)); }

std::vector<KeyInfo> build() {
  using I = int64_t;
  // The model.* bounds are the structural limits of model::ModelConfig::validate() (model/config.h,
  // ModelLimits); a test checks that the two agree.
  std::vector<KeyInfo> s = {
      // model
      key("model.preset", std::string("tiny"), "architecture preset (`lmtrain model info --preset NAME`); the model.* keys below override its fields"),
      optional_model("model.vocab_size", Type::kInt, between(1, 1 << 24), "vocabulary size; defaults to the dataset's (its manifest) when the preset's differs"),
      optional_model("model.max_seq_len", Type::kInt, between(1, 1 << 24), "positions the model supports (learned table size, RoPE limit)"),
      optional_model("model.n_layers", Type::kInt, between(1, 1 << 14), "transformer blocks"),
      optional_model("model.d_model", Type::kInt, between(1, 1 << 20), "model width C"),
      optional_model("model.n_heads", Type::kInt, between(1, 1 << 16), "query heads"),
      optional_model("model.n_kv_heads", Type::kInt, between(1, 1 << 16), "key/value heads (divides n_heads; 1 = MQA)"),
      optional_model("model.head_dim", Type::kInt, between(1, 1 << 16), "dimension of one head"),
      optional_model("model.ffn_hidden", Type::kInt, between(1, 1 << 22), "FFN hidden width H"),
      optional_model("model.ffn", Type::kString, "\"glu\" (gated, SwiGLU with silu) or \"mlp\""),
      optional_model("model.activation", Type::kString, "\"silu\", \"gelu_tanh\" or \"relu\""),
      optional_model("model.norm", Type::kString, "\"rmsnorm\", \"layernorm\" or \"layernorm_nobias\""),
      optional_model("model.positions", Type::kString, "\"rope\", \"learned\" or \"none\""),
      optional_model("model.rope_theta", Type::kFloat, above_to(0, 1e12), "RoPE base"),
      optional_model("model.rotary_fraction", Type::kFloat, above_to(0, 1), "fraction of each head that is rotated (partial RoPE)"),
      optional_model("model.rope_scaling.type", Type::kString, "RoPE scaling (Hugging Face rope_type): \"none\", \"linear\", \"dynamic\", \"yarn\" or \"llama3\" (docs/INTEROP.md (RoPE scaling))"),
      optional_model("model.rope_scaling.factor", Type::kFloat, between(1, 1e6), "RoPE scaling factor (linear, dynamic, yarn, llama3)"),
      optional_model("model.rope_scaling.original_max_position_embeddings", Type::kInt, between(1, 1 << 24), "pre-training context of the scaled RoPE (yarn, llama3; dynamic: HF's max_position_embeddings, where scaling starts)"),
      optional_model("model.rope_scaling.low_freq_factor", Type::kFloat, above_to(0, 1e6), "llama3: wavelengths above original/low_freq_factor are divided by factor"),
      optional_model("model.rope_scaling.high_freq_factor", Type::kFloat, above_to(0, 1e6), "llama3: wavelengths below original/high_freq_factor are kept (> low_freq_factor)"),
      optional_model("model.rope_scaling.beta_fast", Type::kFloat, above_to(0, 1e6), "yarn: rotations bounding the extrapolated dims (HF default 32)"),
      optional_model("model.rope_scaling.beta_slow", Type::kFloat, above_to(0, 1e6), "yarn: rotations bounding the interpolated dims (HF default 1)"),
      optional_model("model.rope_scaling.attention_factor", Type::kFloat, between(0, 1e3), "yarn: scale of cos/sin (0: derived from factor and mscale, as HF)"),
      optional_model("model.rope_scaling.mscale", Type::kFloat, between(0, 1e6), "yarn: mscale (0: absent)"),
      optional_model("model.rope_scaling.mscale_all_dim", Type::kFloat, between(0, 1e6), "yarn: mscale_all_dim (0: absent)"),
      optional_model("model.rope_scaling.truncate", Type::kBool, "yarn: floor/ceil the correction range (HF default true)"),
      optional_model("model.nope_every", Type::kInt, between(0, 1 << 14), "every N-th layer uses no positions (0: never)"),
      optional_model("model.qk_norm", Type::kBool, "RMSNorm on q and k per head"),
      optional_model("model.qk_norm_full", Type::kBool, "with model.qk_norm: RMSNorm over the whole q [n_heads·head_dim] and k [n_kv_heads·head_dim] rows instead of per head (OLMoE)"),
      optional_model("model.moe.num_experts", Type::kInt, between(0, 1 << 16), "routed experts E per MoE layer (0: a dense model; docs/MOE.md)"),
      optional_model("model.moe.top_k", Type::kInt, between(1, 1 << 16), "experts each token is routed to (1..num_experts)"),
      optional_model("model.moe.expert_ffn", Type::kInt, between(1, 1 << 22), "hidden width of each expert (an FFN of model.ffn's kind)"),
      optional_model("model.moe.shared_experts", Type::kInt, between(0, 1 << 16), "always-on experts of hidden expert_ffn beside the routed ones"),
      optional_model("model.moe.every", Type::kInt, between(1, 1 << 14), "layer l is an MoE layer when l % every == every - 1 (HF decoder_sparse_step); others keep the dense FFN"),
      optional_model("model.moe.router", Type::kString, "softmax over the experts, top_k chosen: \"softmax_topk\" (weights = their probabilities, OLMoE) or \"softmax_topk_renorm\" (divided by their sum, Qwen3-MoE)"),
      optional_model("model.moe.balance", Type::kString, "load balancing: \"aux_loss\" (Switch/Qwen auxiliary loss), \"bias_update\" (DeepSeek-V3 aux-loss-free) or \"none\""),
      optional_model("model.moe.aux_loss_coef", Type::kFloat, between(0, 1000), "coefficient of the auxiliary balance loss (balance = aux_loss)"),
      optional_model("model.moe.bias_update_rate", Type::kFloat, between(0, 1000), "step of the per-expert routing bias (balance = bias_update)"),
      optional_model("model.moe.router_z_loss", Type::kFloat, between(0, 1000), "coefficient of mean(logsumexp(router logits)²) (0: off)"),
      optional_model("model.moe.capacity_factor", Type::kFloat, between(0, 1 << 16), "0: dropless; else each expert takes ceil(factor·tokens·top_k/num_experts) tokens, in [1/top_k, num_experts/top_k]"),
      optional_model("model.tied_embeddings", Type::kBool, "share the token embedding with the LM head"),
      key("model.init_from", std::string(""),
          "start from these weights instead of a random init: a Hugging Face directory (config.json + model.safetensors), an "
          "lmtrain run or RUN/checkpoints/step_XXXXXXXX; the optimizer starts fresh; the model.* keys must give the same "
          "shapes (docs/INTEROP.md)"),
      optional_model("model.init_std", Type::kFloat, above_to(0, 10), "standard deviation of weight initialisation"),
      // train
      key("train.max_steps", I{1000}, between(1, kMaxSteps), "optimizer steps to run"),
      key("train.micro_batch", I{4}, between(1, 1 << 20), "sequences per micro-batch (per process); with the model and train.seq_len it must fit in this machine's memory"),
      key("train.seq_len", I{256}, between(1, 1 << 24), "tokens per sequence (at most model.max_seq_len)"),
      key("train.grad_accum", I{1}, between(1, 1 << 20), "micro-batches per optimizer step (the target, after batch-size warmup)"),
      key("train.batch_warmup_tokens", I{0}, between(0, kMaxTokens), "ramp grad_accum linearly from 1 to its target over this many tokens (0: off)"),
      key("train.seed", I{1337}, at_least(0), "seed of initialisation and data order"),
      key("train.dtype", std::string("bf16"), "\"bf16\" (bf16 compute, fp32 master weights and optimizer state) or \"fp32\""),
      key("train.attention", std::string("auto"), "\"auto\", \"flash\" or \"naive\""),
      key("train.doc_masking", true, "attention stays within each packed document (document ids from the data)"),
      key("train.recompute", false, "activation checkpointing per block (less memory, ~1/3 more compute)"),
      key("train.z_loss", 0.0, between(0, 1), "z-loss coefficient (adds z·logsumexp² per token)"),
      key("train.grad_clip", 1.0, between(0, 1e6), "clip the global gradient norm to this (0: off)"),
      key("train.log_every", I{1}, between(1, kMaxSteps), "progress: a line on stderr every N steps (and after step 1 and the last) when it is not a terminal; loss, tok/s, MFU averaged over the last N steps (metrics.jsonl gets every step, raw)"),
      key("train.zero", I{0}, between(0, 3), "data-parallel ZeRO stage: 0 (replicated), 1 (optimizer state sharded), 2 (and gradients) or 3 (and parameters, gathered block by block)"),
      key("train.stall_timeout_s", 1800.0, between(0, 1e7), "seconds without progress (a micro-batch, a validation batch or a checkpoint begun) after which a rank ends the run with exit status 4: a collective waiting for a hung peer, a GPU fault or a stalled file system would otherwise wait forever (docs/RELIABILITY.md); 0: never"),
      key("train.save_on_signal", true, "on SIGTERM or SIGINT, finish the step, save a checkpoint and exit with status 3 (docs/RELIABILITY.md); false: the signal ends the process at once"),
      // parallel: the layout of the ranks (docs/DIST.md). dp · tp · pp must equal the world size.
      key("parallel.dp", I{0}, between(0, 1 << 20), "data-parallel degree; 0: auto, the world size / (parallel.tp · parallel.pp); dp · tp · pp must equal the world size (the ranks under mpirun)"),
      key("parallel.tp", I{1}, between(1, 1024), "tensor-parallel degree (Megatron-style column/row-parallel blocks, vocabulary-parallel embedding and LM head; must divide model.n_heads, the KV heads, ffn_hidden and the padded vocabulary; docs/DIST.md)"),
      key("parallel.pp_layers", std::vector<double>{}, between(1, 1 << 20), "blocks of each pipeline stage, first to last (whole numbers summing to model.n_layers, one per stage; e.g. [9, 3]); empty: balanced by FLOPs, the LM head's work counted on the last stage (docs/DIST.md)"),
      key("parallel.pp", I{1}, between(1, 1024), "pipeline-parallel stages (1F1B over train.grad_accum micro-batches, layers balanced by FLOPs; at most model.n_layers; docs/DIST.md)"),
      key("parallel.ep", I{1}, between(1, 1 << 16), "expert-parallel degree, carved out of data parallelism: groups of ep consecutive data-parallel ranks split each MoE layer's routed experts and exchange tokens all-to-all; must divide the data-parallel size and model.moe.num_experts (docs/MOE.md)"),
      key("parallel.sp", false, "sequence parallelism inside each tensor-parallel group: norms and the residual stream on sequence shards (needs parallel.tp > 1 and train.seq_len divisible by it; docs/DIST.md)"),
      optional_model("parallel.zero", Type::kInt, between(0, 3), "alias of train.zero (the ZeRO stage); set one of the two, or both to the same value"),
      // dist
      key("dist.shared_memory", true, "ranks on one node keep params and gradients in shared memory and reduce them by reading each other's buffers (false: MPI messages)"),
      key("dist.zero3_vocab_rows", I{0}, between(-1, 1LL << 40), "train.zero = 3: the token embedding and LM head stream through the ranks in chunks of this many vocabulary rows, and no rank holds either whole nor its gradient (the head's logits are computed twice for all chunks but the last); 0: automatic (several ranks: chunks of one block's size; one process: whole, equal to ZeRO 0 bit for bit); -1: gathered whole (faster LM head, more memory; docs/DIST.md)"),
      key("dist.bucket_mb", 25.0, between(0, 1e6), "message passing (several nodes, or dist.shared_memory = false): all-reduce gradients in buckets of about this many MiB as backward finishes blocks (0: one all-reduce after backward)"),
      // runtime: what the run computes on, not what it computes
      key("runtime.backend", std::string("cpu"), "kernel backend by name: \"cpu\" (fast) or \"ref\" (the test oracle: plain fp64 loops, slow); `--backend` sets it"),
      key("runtime.wait_policy", std::string("auto"), "how OpenMP threads wait (docs/PERFORMANCE.md, \"OpenMP under contention\"): \"auto\" (spin about 0.1 ms, then sleep: no speed lost on an idle machine, robust when other processes share the cores), \"spin\" (the OpenMP runtime's default, a few ms) or \"passive\" (sleep at once); unset in a recipe, LMT_WAIT_POLICY decides; the user's OMP_WAIT_POLICY or GOMP_SPINCOUNT always win"),
      key("runtime.peak_gflops", 0.0, between(0, 1e9), "dense peak of one device in GFLOP/s that MFU divides by (also `--peak-flops`); 0: this machine's, measured once and cached per machine (`lmtrain bench peak`, docs/PERFORMANCE.md)"),
      // optim
      key("optim.name", std::string("adamw"), "\"adamw\", or \"muon\" (Muon for hidden matrices, AdamW for the rest)"),
      key("optim.lr", 6e-4, above_to(0, 100), "peak learning rate (AdamW)"),
      key("optim.beta1", 0.9, from_below(0, 1), "AdamW β1"),
      key("optim.beta2", 0.95, from_below(0, 1), "AdamW β2"),
      key("optim.eps", 1e-8, above_to(0, 1), "AdamW ε"),
      key("optim.weight_decay", 0.1, between(0, 100), "decoupled weight decay on 2-D matrices (norms and biases never decay); optim.lr · optim.weight_decay must be below 1"),
      key("optim.decay_embeddings", false, "apply weight decay to embeddings and the LM head too"),
      key("optim.muon_lr", 0.02, above_to(0, 100), "Muon learning rate"),
      key("optim.muon_momentum", 0.95, from_below(0, 1), "Muon momentum"),
      key("optim.muon_nesterov", true, "Nesterov momentum in Muon"),
      key("optim.muon_ns_steps", I{5}, between(1, 100), "Newton–Schulz iterations in Muon"),
      key("optim.muon_weight_decay", 0.0, between(0, 100), "decoupled weight decay for Muon matrices"),
      key("optim.muon_ns_dtype", std::string("bf16"),
          "Newton–Schulz GEMM operands in Muon: \"bf16\" (f32 accumulation, as the reference's bf16 iteration; "
          "fast; f32 without Gram restarts where the backend has no native bf16 GEMMs, e.g. AVX2-only CPUs) or "
          "\"fp32\""),
      key("optim.muon_ns_method", std::string("gram"), "Newton–Schulz in Muon: \"gram\" (the same polynomial iterated on the Gram matrix, with restarts; fewer FLOPs for rectangular matrices) or \"standard\" (the reference's iteration)"),
      // schedule
      key("schedule.kind", std::string("cosine"), "\"cosine\", \"wsd\", \"multistep\" or \"constant\""),
      key("schedule.warmup_steps", I{100}, between(0, kMaxSteps), "linear warmup steps"),
      key("schedule.min_ratio", 0.1, between(0, 1), "final learning rate as a fraction of the peak (cosine, wsd)"),
      key("schedule.decay_fraction", 0.2, above_to(0, 1), "wsd: fraction of the run spent decaying"),
      key("schedule.drops", std::vector<double>{0.5, 0.75}, open(0, 1), "multistep: fractions of the run where lr is multiplied by gamma (increasing; the range is each element's)"),
      key("schedule.gamma", 0.1, above_to(0, 1), "multistep: factor at each drop"),
      // data
      required("data.path", Type::kString, "prepared dataset directory (`lmtrain data prepare`)"),
      key("data.mixture", std::vector<std::string>{}, "more datasets mixed in, as \"DIR:WEIGHT\" with a positive WEIGHT (data.path gets data.weight)"),
      key("data.weight", 1.0, above_to(0, 1e6), "weight of data.path in a mixture"),
      key("data.reset_positions", false, "positions restart at 0 at each packed document, so a learned position table sees each document as if it began its row (with RoPE and train.doc_masking only rounding changes: RoPE is relative); false: position = index within the row (docs/FORMATS.md)"),
      // checkpoint
      key("checkpoint.every", I{0}, between(0, kMaxSteps), "save a checkpoint every N steps (0: only at the end)"),
      key("checkpoint.keep", I{3}, between(0, 1e6), "keep the newest N checkpoints (0: keep all)"),
      key("checkpoint.async", true, "save in a background thread while training continues"),
      // eval
      key("eval.every", I{0}, between(0, kMaxSteps), "validation loss every N steps (0: only at the end)"),
      key("eval.batches", I{16}, between(0, 1e9), "validation batches per evaluation (0: the whole validation split)"),
      key("eval.tasks", std::vector<std::string>{}, "multiple-choice tasks as \"TASK:FILE[:LIMIT]\" (TASK: arc_easy, arc_challenge, openbookqa, piqa, hellaswag, winogrande)"),
      key("eval.tasks_every", I{0}, between(0, kMaxSteps), "run eval.tasks every N steps (0: only at the end)"),
      // metrics
      key("metrics.layer_grad_norm_every", I{0}, between(0, kMaxSteps), "per-layer gradient norms in metrics.jsonl every N steps (0: off)"),
      // stability
      key("stability.skip_nonfinite", true, "skip an update whose loss or gradients are NaN/Inf (logged)"),
      key("stability.max_bad_steps", I{5}, between(1, 1e6), "stop the run after this many bad steps in a row"),
      key("stability.spike_window", I{50}, between(1, 1e5), "steps in the loss-spike window"),
      key("stability.spike_zscore", 6.0, above_to(0, 1e6), "a loss more than this many standard deviations above the window mean is a spike"),
      key("stability.loss_margin", 3.0, above_to(0, 1e6), "a loss above ln(vocab) + this many nats is divergence, from step 1 on: the update is skipped like a non-finite one (docs/RELIABILITY.md)"),
      key("stability.max_rollbacks", I{3}, between(1, 1e6), "stop the run after more than this many rollbacks within stability.spike_window steps (rolling back does not help)"),
      key("stability.spike_action", std::string("log"), "\"log\", \"skip\" (skip that update) or \"rollback\" (reload the last checkpoint, skip the data window)"),
      // profile
      key("profile.steps", std::string(""), "\"A:B\" writes RUN/trace.json (Chrome trace) of steps A..B-1"),
  };
  return s;
}

bool is_numeric(Type t) { return t == Type::kInt || t == Type::kFloat || t == Type::kFloatList; }

// A bound as written in the docs: 1e12 rather than 1e+12, 16777216 rather than 1.67772e+07.
std::string number_text(double v) {
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e17) {
    std::snprintf(buf, sizeof buf, "%g", v);
    if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.17g", v);
  }
  std::string s = buf;
  const size_t e = s.find("e+");
  if (e != std::string::npos) {
    size_t digits = e + 2;
    while (digits + 1 < s.size() && s[digits] == '0') ++digits;
    s = s.substr(0, e + 1) + s.substr(digits);
  }
  return s;
}

}  // namespace

const std::vector<KeyInfo>& schema() {
  static const std::vector<KeyInfo> s = build();
  return s;
}

const KeyInfo* find_key(const std::string& k) {
  for (const auto& i : schema())
    if (i.key == k) return &i;
  return nullptr;
}

std::string type_name(Type t) {
  switch (t) {
    case Type::kInt: return "integer";
    case Type::kFloat: return "number";
    case Type::kBool: return "boolean";
    case Type::kString: return "string";
    case Type::kFloatList: return "list of numbers";
    case Type::kStringList: return "list of strings";
  }
  return "?";
}

std::string closest_key(const std::string& k) {
  // A typo of a schema key lies in its first 64 bytes; a longer argument (a 1 MB `--set` key) would
  // make the quadratic distance take seconds for nothing.
  const std::string head = k.substr(0, kEditDistancePrefix);
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& i : schema()) {
    size_t d = edit_distance(head, i.key);
    if (d < best_d) best_d = d, best = i.key;
  }
  return best;
}

bool Range::contains(double v) const {
  if (!std::isfinite(v)) return false;
  if (min_open ? !(v > min) : !(v >= min)) return false;
  if (max_open ? !(v < max) : !(v <= max)) return false;
  return true;
}

std::string Range::text() const {
  const bool has_min = min != -kInf, has_max = max != kInf;
  if (has_min && has_max)
    return std::string(min_open ? "(" : "[") + number_text(min) + ", " + number_text(max) + (max_open ? ")" : "]");
  if (has_min) return std::string(min_open ? "> " : ">= ") + number_text(min);
  if (has_max) return std::string(max_open ? "< " : "<= ") + number_text(max);
  return "finite";
}

std::string schema_markdown() {
  std::string out;
  std::string section;
  for (const auto& i : schema()) {
    const std::string sec = i.key.substr(0, i.key.find('.'));
    if (sec != section) {
      section = sec;
      out += "\n### [" + sec + "]\n\n| key | type | default | range | meaning |\n|---|---|---|---|---|\n";
    }
    const std::string def = i.presence == Presence::kRequired   ? "(required)"
                            : i.presence == Presence::kOptional ? (i.key.rfind("model.", 0) == 0 ? "(from the preset)" : "(unset)")
                                                                : value_to_string(i.default_value);
    const std::string range = is_numeric(i.type) ? i.range.text() : "";
    out += "| `" + i.key + "` | " + type_name(i.type) + " | `" + def + "` | " + range + " | " + i.doc + " |\n";
  }
  return out;
}

}  // namespace lmt::config
