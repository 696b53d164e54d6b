// Shared-prefix scoring over a KV-cached decoder (see prefix_scoring.h).
#include "lmt/eval/prefix_scoring.h"

#include <algorithm>
#include <cmath>

#include "lmt/base/trace.h"
#include "lmt/eval/decode.h"

namespace lmt::eval {
namespace {

// log softmax(logits)[target], accumulated in double.
double log_prob(const float* logits, int64_t V, int32_t target) {
  float mx = logits[0];
  for (int64_t v = 1; v < V; ++v) mx = std::max(mx, logits[v]);
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(logits[v]) - mx);
  return static_cast<double>(logits[target]) - mx - std::log(sum);
}

}  // namespace

StatusOr<std::vector<ContinuationScore>> score_shared_prefix(model::Transformer& model, const std::vector<ScoreRequest>& requests,
                                                             std::span<const int64_t> groups, const ScoreOptions& options) {
  LMT_TRACE_SCOPE("eval_score_shared_prefix");
  LMT_ASSIGN_OR_RETURN(const int64_t cap, check_requests(model, requests, options));
  if (options.compute != DType::kF32 || model.master() != DType::kF32)
    return Unimplemented(std::string("shared-prefix scoring computes in fp32 from an fp32 master; this run asks for ") +
                             (model.master() != DType::kF32 ? "an f64 master" : "bf16 GEMMs"),
                         "use --scoring full (every choice as its own row) for --dtype bf16");
  int64_t covered = 0;
  for (int64_t g : groups) {
    if (g < 1) return InvalidArgument("shared-prefix scoring: a group of " + std::to_string(g) + " requests (each group needs one at least)");
    covered += g;
  }
  if (covered != static_cast<int64_t>(requests.size()))
    return InvalidArgument("shared-prefix scoring: the groups cover " + std::to_string(covered) + " requests, not " +
                           std::to_string(requests.size()));

  const int64_t n = static_cast<int64_t>(requests.size());
  std::vector<ContinuationScore> out(n);
  std::vector<int64_t> fallback;  // requests of groups the full path scores (their rows need truncation)
  Decoder decoder(model, cap, /*prefill_chunk=*/cap);
  const int64_t V = decoder.vocab_size();
  std::vector<float> prefix_logits(V), logits;
  std::vector<std::vector<int32_t>> rows;
  int64_t first = 0;
  for (int64_t g : groups) {
    const int64_t end = first + g;
    rows.clear();
    bool fits = true;
    size_t prefix = SIZE_MAX;
    for (int64_t i = first; i < end; ++i) {
      const ScoreRequest& q = requests[i];
      std::vector<int32_t> row(q.context);
      row.insert(row.end(), q.continuation.begin(), q.continuation.end());
      fits = fits && static_cast<int64_t>(row.size()) - 1 <= cap;
      prefix = std::min(prefix, q.context.size());
      if (!rows.empty()) prefix = static_cast<size_t>(std::mismatch(rows[0].begin(), rows[0].begin() + prefix, row.begin()).first - rows[0].begin());
      rows.push_back(std::move(row));
    }
    if (!fits) {
      for (int64_t i = first; i < end; ++i) fallback.push_back(i);
      first = end;
      continue;
    }
    const int64_t P = static_cast<int64_t>(prefix);
    decoder.reset();
    if (P > 0) {
      const std::span<const float> last = decoder.forward(std::span<const int32_t>(rows[0].data(), P));
      std::copy(last.begin(), last.end(), prefix_logits.begin());
    }
    for (int64_t i = first; i < end; ++i) {
      const std::vector<int32_t>& row = rows[i - first];
      const int64_t len = static_cast<int64_t>(row.size());
      const int64_t first_pred = static_cast<int64_t>(requests[i].context.size()) - 1;  // predicts continuation[0]
      double sum = 0;
      if (first_pred == P - 1) sum += log_prob(prefix_logits.data(), V, row[P]);
      // Positions [P, len - 1) run against the prefix; those from max(first_pred, P) predict.
      if (len - 1 > P) {
        const int64_t m = len - 1 - P, from = std::max(first_pred, P) - P;
        logits.resize(static_cast<size_t>((m - from) * V));
        decoder.truncate(P);
        decoder.forward(std::span<const int32_t>(row.data() + P, m), logits.data(), from);
        for (int64_t r = from; r < m; ++r) sum += log_prob(logits.data() + (r - from) * V, V, row[P + r + 1]);
      }
      out[i].logprob = sum;
      out[i].tokens = static_cast<int64_t>(requests[i].continuation.size());
    }
    first = end;
  }
  if (!fallback.empty()) {
    std::vector<ScoreRequest> rest;
    for (int64_t i : fallback) rest.push_back(requests[i]);
    ScoreOptions full = options;
    full.scoring = Scoring::kFull;
    LMT_ASSIGN_OR_RETURN(std::vector<ContinuationScore> scored, score_requests(model, rest, full));
    for (size_t k = 0; k < fallback.size(); ++k) out[fallback[k]] = scored[k];
  }
  return out;
}

}  // namespace lmt::eval
