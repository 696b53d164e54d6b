#include "lmt/eval/scoring.h"

#include <algorithm>
#include <numeric>

#include "lmt/base/timer.h"
#include "lmt/base/trace.h"
#include "lmt/eval/prefix_scoring.h"

namespace lmt::eval {
namespace {

constexpr int32_t kIgnore = -100;
constexpr int64_t kRowAlign = 32;  // batch T granularity: few re-prepares, little padding

int64_t utf8_chars(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// argmax with ties to the lowest index (numpy's argmax).
template <typename F>
size_t argmax(size_t n, F value) {
  size_t best = 0;
  for (size_t i = 1; i < n; ++i)
    if (value(i) > value(best)) best = i;
  return best;
}

}  // namespace

const char* scoring_name(Scoring s) { return s == Scoring::kFull ? "full" : "shared-prefix"; }

StatusOr<Scoring> parse_scoring(const std::string& name) {
  if (name == "full") return Scoring::kFull;
  if (name == "shared-prefix") return Scoring::kSharedPrefix;
  return InvalidArgument("--scoring: unknown scoring path '" + name + "'",
                         "use shared-prefix (the context once, logits only where scored) or full (every choice as its own row)");
}

StatusOr<int64_t> check_requests(const model::Transformer& model, const std::vector<ScoreRequest>& requests,
                                 const ScoreOptions& options) {
  const model::ModelConfig& cfg = model.config();
  const int64_t cap = options.max_seq > 0 ? std::min(options.max_seq, cfg.max_seq_len) : cfg.max_seq_len;
  const int64_t B = options.batch;
  if (B <= 0) return InvalidArgument("eval batch size must be positive, got " + std::to_string(B), "pass --micro-batch 8");
  if (options.compute != DType::kF32 && options.compute != DType::kBF16)
    return InvalidArgument("eval compute dtype must be fp32 or bf16");
  const int64_t n = static_cast<int64_t>(requests.size());
  for (int64_t i = 0; i < n; ++i) {
    const ScoreRequest& r = requests[i];
    const std::string which = "scoring request " + std::to_string(i);
    if (r.context.empty() || r.continuation.empty())
      return InvalidArgument(which + " has an empty " + (r.context.empty() ? "context" : "continuation"),
                             "a continuation is scored given at least one context id (use BOS/EOS for an empty context)");
    if (static_cast<int64_t>(r.continuation.size()) > cap)
      return InvalidArgument(which + ": continuation of " + std::to_string(r.continuation.size()) + " tokens exceeds T = " + std::to_string(cap),
                             "raise --max-seq-len (up to the model's max_seq_len) or shorten the choice");
    for (const auto* part : {&r.context, &r.continuation})
      for (int32_t id : *part)
        if (id < 0 || id >= cfg.vocab_size)
          return InvalidArgument(which + ": token id " + std::to_string(id) + " is outside the model's vocabulary [0, " +
                                     std::to_string(cfg.vocab_size) + ")", "the tokenizer does not match the model");
  }
  return cap;
}

StatusOr<std::vector<ContinuationScore>> score_requests(model::Transformer& model, const std::vector<ScoreRequest>& requests,
                                                        const ScoreOptions& options) {
  LMT_TRACE_SCOPE("eval_score");
  const model::ModelConfig& cfg = model.config();
  LMT_ASSIGN_OR_RETURN(const int64_t cap, check_requests(model, requests, options));
  const int64_t B = options.batch;
  const int64_t n = static_cast<int64_t>(requests.size());
  std::vector<int64_t> row_len(n);
  for (int64_t i = 0; i < n; ++i)
    row_len[i] = std::min<int64_t>(static_cast<int64_t>(requests[i].context.size() + requests[i].continuation.size()) - 1, cap);
  // Longest first, so T only shrinks and the model is re-prepared at most once per T bucket.
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return row_len[a] > row_len[b]; });

  model::RunOptions run;
  run.compute = model.master() == DType::kF64 ? DType::kF64 : options.compute;
  if (n > 0) {  // the first batch has the longest rows: if it fits, every batch does
    const int64_t T0 = std::min(cap, (row_len[order[0]] + kRowAlign - 1) / kRowAlign * kRowAlign);
    LMT_RETURN_IF_ERROR(model::activation_memory_check(
        cfg, B, T0, run, 0, "scoring batches of " + std::to_string(B) + " rows x " + std::to_string(T0) + " tokens",
        "lower --micro-batch (rows per forward pass) or --max-seq-len"));
  }
  std::vector<ContinuationScore> out(n);
  std::vector<int32_t> tokens, targets;
  Tensor losses_host;  // host copy of the model's per-token losses, reused while T stays
  for (int64_t start = 0; start < n; start += B) {
    if (options.on_batch) options.on_batch();
    const int64_t rows = std::min(B, n - start);
    const int64_t T = std::min(cap, (row_len[order[start]] + kRowAlign - 1) / kRowAlign * kRowAlign);
    const auto& plan = model.plan();
    if (plan.B != B || plan.T != T || plan.options.compute != run.compute) model.prepare(B, T, run);
    tokens.assign(B * T, 0);
    targets.assign(B * T, kIgnore);
    for (int64_t r = 0; r < rows; ++r) {
      const ScoreRequest& q = requests[order[start + r]];
      std::vector<int32_t> full(q.context);
      full.insert(full.end(), q.continuation.begin(), q.continuation.end());
      const int64_t keep = std::min<int64_t>(static_cast<int64_t>(full.size()), T + 1);  // left-truncate
      const int32_t* row = full.data() + (full.size() - keep);
      const int64_t first_target = keep - 1 - static_cast<int64_t>(q.continuation.size());  // input pos predicting cont[0]
      for (int64_t t = 0; t + 1 < keep; ++t) {
        tokens[r * T + t] = row[t];
        if (t >= first_target) targets[r * T + t] = row[t + 1];
      }
      out[order[start + r]].tokens = static_cast<int64_t>(q.continuation.size());
      out[order[start + r]].context_dropped = static_cast<int64_t>(full.size()) - keep;
    }
    model.forward(tokens.data(), targets.data(), nullptr, /*train=*/false);
    // The per-token losses live where the model computes; the copy op brings them to the host.
    if (losses_host.shape() != model.token_losses().shape() || losses_host.dtype() != model.token_losses().dtype())
      losses_host = Tensor(model.token_losses().shape(), model.token_losses().dtype());
    model.backend().copy(losses_host, model.token_losses());
    const TensorView losses = losses_host.view();
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;  // losses are 0 where targets are ignored
      for (int64_t t = 0; t < T; ++t) {
        if (targets[r * T + t] == kIgnore) continue;
        sum += losses.dtype() == DType::kF64 ? losses.as<double>()[r * T + t] : losses.as<float>()[r * T + t];
      }
      out[order[start + r]].logprob = -sum;
    }
  }
  return out;
}

StatusOr<std::vector<ContinuationScore>> score_continuations(model::Transformer& model, std::span<const int32_t> context,
                                                             const std::vector<std::vector<int32_t>>& continuations,
                                                             const ScoreOptions& options) {
  std::vector<ScoreRequest> requests;
  for (const auto& c : continuations) requests.push_back({std::vector<int32_t>(context.begin(), context.end()), c});
  if (options.scoring == Scoring::kSharedPrefix) {
    const std::vector<int64_t> groups = {static_cast<int64_t>(requests.size())};
    return score_shared_prefix(model, requests, groups, options);
  }
  return score_requests(model, requests, options);
}

StatusOr<EncodedItem> encode_item(const data::Tokenizer& tokenizer, const McItem& item) {
  EncodedItem e;
  e.gold = item.gold;
  for (size_t i = 0; i < item.choices.size(); ++i) {
    std::string context = item.context_of(i), continuation = item.choices[i];
    const size_t end = context.find_last_not_of(' ') + 1;  // npos + 1 == 0 for all-space contexts
    continuation = context.substr(end) + continuation;
    context.resize(end);
    ScoreRequest r;
    if (context.empty()) {
      const auto eos = tokenizer.eos_id();
      if (!eos) return InvalidArgument("line " + std::to_string(item.line) + ": empty context and the tokenizer has no EOS id to stand for it");
      r.context = {*eos};
      r.continuation = tokenizer.encode(continuation);
    } else {
      r.context = tokenizer.encode(context);
      std::vector<int32_t> whole = tokenizer.encode(context + continuation);
      if (whole.size() > r.context.size()) r.continuation.assign(whole.begin() + static_cast<std::ptrdiff_t>(r.context.size()), whole.end());
    }
    if (r.continuation.empty())
      return InvalidArgument("line " + std::to_string(item.line) + ": choice " + std::to_string(i) + " encodes to no tokens",
                             "every choice needs some text");
    // The harness divides by len(choice) without its target delimiter (one leading space here).
    const std::string& choice = item.choices[i];
    e.chars.push_back(utf8_chars(choice) - (choice.starts_with(' ') ? 1 : 0));
    e.requests.push_back(std::move(r));
  }
  return e;
}

ItemPredictions predictions_of(const ItemScores& s) {
  const size_t k = s.logprob.size();
  ItemPredictions p;
  p.acc = static_cast<int>(argmax(k, [&](size_t i) { return s.logprob[i]; }));
  p.norm_token = static_cast<int>(argmax(k, [&](size_t i) { return s.logprob[i] / static_cast<double>(std::max<int64_t>(s.tokens[i], 1)); }));
  p.norm_char = static_cast<int>(argmax(k, [&](size_t i) { return s.logprob[i] / static_cast<double>(std::max<int64_t>(s.chars[i], 1)); }));
  return p;
}

TaskResult accuracy_of(const std::string& task, std::vector<ItemScores> scores) {
  TaskResult res;
  res.task = task;
  res.items = static_cast<int64_t>(scores.size());
  int64_t hit = 0, hit_tok = 0, hit_char = 0;
  for (const ItemScores& s : scores) {
    const ItemPredictions p = predictions_of(s);
    hit += p.acc == s.gold;
    hit_tok += p.norm_token == s.gold;
    hit_char += p.norm_char == s.gold;
  }
  const double d = static_cast<double>(std::max<int64_t>(res.items, 1));
  res.acc = static_cast<double>(hit) / d;
  res.acc_norm_token = static_cast<double>(hit_tok) / d;
  res.acc_norm_char = static_cast<double>(hit_char) / d;
  res.scores = std::move(scores);
  return res;
}

StatusOr<TaskResult> evaluate_encoded(model::Transformer& model, const std::vector<EncodedItem>& items,
                                      const ScoreOptions& options, const std::string& task) {
  Timer timer;
  std::vector<ScoreRequest> requests;
  std::vector<int64_t> groups;  // one group per item: its choices share a context (or most of one)
  for (const auto& it : items) {
    requests.insert(requests.end(), it.requests.begin(), it.requests.end());
    groups.push_back(static_cast<int64_t>(it.requests.size()));
  }
  LMT_ASSIGN_OR_RETURN(std::vector<ContinuationScore> scored,
                       options.scoring == Scoring::kSharedPrefix ? score_shared_prefix(model, requests, groups, options)
                                                                 : score_requests(model, requests, options));
  std::vector<ItemScores> scores;
  size_t k = 0;
  int64_t truncated = 0;
  for (const auto& it : items) {
    ItemScores s;
    s.gold = it.gold;
    s.chars = it.chars;
    for (size_t c = 0; c < it.requests.size(); ++c, ++k) {
      s.logprob.push_back(scored[k].logprob);
      s.tokens.push_back(scored[k].tokens);
      truncated += scored[k].context_dropped > 0;
    }
    scores.push_back(std::move(s));
  }
  TaskResult res = accuracy_of(task, std::move(scores));
  res.rows = static_cast<int64_t>(requests.size());
  res.truncated_rows = truncated;
  res.seconds = timer.seconds();
  res.items_per_s = res.seconds > 0 ? static_cast<double>(res.items) / res.seconds : 0;
  return res;
}

StatusOr<TaskResult> evaluate_multiple_choice(model::Transformer& model, const data::Tokenizer& tokenizer,
                                              std::span<const McItem> items, int64_t limit,
                                              const ScoreOptions& options, const std::string& task) {
  Timer timer;  // items/s includes tokenisation
  const size_t n = limit > 0 ? std::min(items.size(), static_cast<size_t>(limit)) : items.size();
  std::vector<EncodedItem> encoded;
  encoded.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto e = encode_item(tokenizer, items[i]);
    if (!e.ok()) return e.status().WithContext(task.empty() ? "eval" : task);
    encoded.push_back(std::move(*e));
  }
  LMT_ASSIGN_OR_RETURN(TaskResult res, evaluate_encoded(model, encoded, options, task));
  res.seconds = timer.seconds();
  res.items_per_s = res.seconds > 0 ? static_cast<double>(res.items) / res.seconds : 0;
  return res;
}

}  // namespace lmt::eval
