// The schema of a training recipe: every key, its type, default and meaning. docs/CONFIG.md is
// generated from this table (`lmtrain train --print-keys`), so the two cannot disagree.
#include <algorithm>

#include "lmt/config/config.h"

namespace lmt::config {
namespace {

KeyInfo key(std::string k, Value def, std::string doc) {
  Type t = std::visit([](const auto& v) -> Type {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<V, int64_t>) return Type::kInt;
    else if constexpr (std::is_same_v<V, double>) return Type::kFloat;
    else if constexpr (std::is_same_v<V, bool>) return Type::kBool;
    else if constexpr (std::is_same_v<V, std::string>) return Type::kString;
    else if constexpr (std::is_same_v<V, std::vector<double>>) return Type::kFloatList;
    else return Type::kStringList;
  }, def);
  return KeyInfo{std::move(k), t, std::move(def), Presence::kDefault, std::move(doc)};
}
KeyInfo required(std::string k, Type t, std::string doc) { return KeyInfo{std::move(k), t, Value{}, Presence::kRequired, std::move(doc)}; }
KeyInfo optional_model(std::string k, Type t, std::string doc) {
  return KeyInfo{std::move(k), t, Value{}, Presence::kOptional, std::move(doc)};
}

std::vector<KeyInfo> build() {
  using I = int64_t;
  std::vector<KeyInfo> s = {
      // model
      key("model.preset", std::string("tiny"), "architecture preset (`lmtrain model info --preset NAME`); the model.* keys below override its fields"),
      optional_model("model.vocab_size", Type::kInt, "vocabulary size; defaults to the dataset's (its manifest) when the preset's differs"),
      optional_model("model.max_seq_len", Type::kInt, "positions the model supports (learned table size, RoPE limit)"),
      optional_model("model.n_layers", Type::kInt, "transformer blocks"),
      optional_model("model.d_model", Type::kInt, "model width C"),
      optional_model("model.n_heads", Type::kInt, "query heads"),
      optional_model("model.n_kv_heads", Type::kInt, "key/value heads (divides n_heads; 1 = MQA)"),
      optional_model("model.head_dim", Type::kInt, "dimension of one head"),
      optional_model("model.ffn_hidden", Type::kInt, "FFN hidden width H"),
      optional_model("model.ffn", Type::kString, "\"glu\" (gated, SwiGLU with silu) or \"mlp\""),
      optional_model("model.activation", Type::kString, "\"silu\", \"gelu_tanh\" or \"relu\""),
      optional_model("model.norm", Type::kString, "\"rmsnorm\", \"layernorm\" or \"layernorm_nobias\""),
      optional_model("model.positions", Type::kString, "\"rope\", \"learned\" or \"none\""),
      optional_model("model.rope_theta", Type::kFloat, "RoPE base"),
      optional_model("model.rotary_fraction", Type::kFloat, "fraction of each head that is rotated (partial RoPE)"),
      optional_model("model.nope_every", Type::kInt, "every N-th layer uses no positions (0: never)"),
      optional_model("model.qk_norm", Type::kBool, "RMSNorm on q and k per head"),
      optional_model("model.tied_embeddings", Type::kBool, "share the token embedding with the LM head"),
      optional_model("model.init_std", Type::kFloat, "standard deviation of weight initialisation"),
      // train
      key("train.max_steps", I{1000}, "optimizer steps to run"),
      key("train.micro_batch", I{4}, "sequences per micro-batch (per process)"),
      key("train.seq_len", I{256}, "tokens per sequence"),
      key("train.grad_accum", I{1}, "micro-batches per optimizer step (the target, after batch-size warmup)"),
      key("train.batch_warmup_tokens", I{0}, "ramp grad_accum linearly from 1 to its target over this many tokens (0: off)"),
      key("train.seed", I{1337}, "seed of initialisation and data order"),
      key("train.dtype", std::string("bf16"), "\"bf16\" (bf16 compute, fp32 master weights and optimizer state) or \"fp32\""),
      key("train.attention", std::string("auto"), "\"auto\", \"flash\" or \"naive\""),
      key("train.doc_masking", true, "attention stays within each packed document (document ids from the data)"),
      key("train.recompute", false, "activation checkpointing per block (less memory, ~1/3 more compute)"),
      key("train.z_loss", 0.0, "z-loss coefficient (adds z·logsumexp² per token)"),
      key("train.grad_clip", 1.0, "clip the global gradient norm to this (0: off)"),
      key("train.log_every", I{1}, "console progress line every N steps (metrics.jsonl gets every step)"),
      key("train.zero", I{0}, "data-parallel ZeRO stage: 0 (replicated), 1 (optimizer state sharded) or 2 (and gradients)"),
      // dist
      key("dist.shared_memory", true, "ranks on one node keep params and gradients in shared memory and reduce them by reading each other's buffers (false: MPI messages)"),
      key("dist.bucket_mb", 25.0, "message passing (several nodes, or dist.shared_memory = false): all-reduce gradients in buckets of about this many MiB as backward finishes blocks (0: one all-reduce after backward)"),
      // optim
      key("optim.name", std::string("adamw"), "\"adamw\", or \"muon\" (Muon for hidden matrices, AdamW for the rest)"),
      key("optim.lr", 6e-4, "peak learning rate (AdamW)"),
      key("optim.beta1", 0.9, "AdamW β1"),
      key("optim.beta2", 0.95, "AdamW β2"),
      key("optim.eps", 1e-8, "AdamW ε"),
      key("optim.weight_decay", 0.1, "decoupled weight decay on 2-D matrices (norms and biases never decay)"),
      key("optim.decay_embeddings", false, "apply weight decay to embeddings and the LM head too"),
      key("optim.muon_lr", 0.02, "Muon learning rate"),
      key("optim.muon_momentum", 0.95, "Muon momentum"),
      key("optim.muon_nesterov", true, "Nesterov momentum in Muon"),
      key("optim.muon_ns_steps", I{5}, "Newton–Schulz iterations in Muon"),
      key("optim.muon_weight_decay", 0.0, "decoupled weight decay for Muon matrices"),
      // schedule
      key("schedule.kind", std::string("cosine"), "\"cosine\", \"wsd\", \"multistep\" or \"constant\""),
      key("schedule.warmup_steps", I{100}, "linear warmup steps"),
      key("schedule.min_ratio", 0.1, "final learning rate as a fraction of the peak (cosine, wsd)"),
      key("schedule.decay_fraction", 0.2, "wsd: fraction of the run spent decaying"),
      key("schedule.drops", std::vector<double>{0.5, 0.75}, "multistep: fractions of the run where lr is multiplied by gamma"),
      key("schedule.gamma", 0.1, "multistep: factor at each drop"),
      // data
      required("data.path", Type::kString, "prepared dataset directory (`lmtrain data prepare`)"),
      key("data.mixture", std::vector<std::string>{}, "more datasets mixed in, as \"DIR:WEIGHT\" (data.path gets data.weight)"),
      key("data.weight", 1.0, "weight of data.path in a mixture"),
      // checkpoint
      key("checkpoint.every", I{0}, "save a checkpoint every N steps (0: only at the end)"),
      key("checkpoint.keep", I{3}, "keep the newest N checkpoints"),
      key("checkpoint.async", true, "save in a background thread while training continues"),
      // eval
      key("eval.every", I{0}, "validation loss every N steps (0: only at the end)"),
      key("eval.batches", I{16}, "validation batches per evaluation (0: the whole validation split)"),
      key("eval.tasks", std::vector<std::string>{}, "multiple-choice tasks as \"TASK:FILE[:LIMIT]\" (TASK: arc_easy, arc_challenge, openbookqa, piqa, hellaswag, winogrande)"),
      key("eval.tasks_every", I{0}, "run eval.tasks every N steps (0: only at the end)"),
      // metrics
      key("metrics.layer_grad_norm_every", I{0}, "per-layer gradient norms in metrics.jsonl every N steps (0: off)"),
      // stability
      key("stability.skip_nonfinite", true, "skip an update whose loss or gradients are NaN/Inf (logged)"),
      key("stability.max_bad_steps", I{5}, "stop the run after this many bad steps in a row"),
      key("stability.spike_window", I{50}, "steps in the loss-spike window"),
      key("stability.spike_zscore", 6.0, "a loss more than this many standard deviations above the window mean is a spike"),
      key("stability.spike_action", std::string("log"), "\"log\", \"skip\" (skip that update) or \"rollback\" (reload the last checkpoint, skip the data window)"),
      // profile
      key("profile.steps", std::string(""), "\"A:B\" writes RUN/trace.json (Chrome trace) of steps A..B-1"),
  };
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
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& i : schema()) {
    size_t d = distance(k, i.key);
    if (d < best_d) best_d = d, best = i.key;
  }
  return best;
}

std::string schema_markdown() {
  std::string out;
  std::string section;
  for (const auto& i : schema()) {
    const std::string sec = i.key.substr(0, i.key.find('.'));
    if (sec != section) {
      section = sec;
      out += "\n### [" + sec + "]\n\n| key | type | default | meaning |\n|---|---|---|---|\n";
    }
    const std::string def = i.presence == Presence::kRequired   ? "(required)"
                            : i.presence == Presence::kOptional ? "(from the preset)"
                                                                : value_to_string(i.default_value);
    out += "| `" + i.key + "` | " + type_name(i.type) + " | `" + def + "` | " + i.doc + " |\n";
  }
  return out;
}

}  // namespace lmt::config
