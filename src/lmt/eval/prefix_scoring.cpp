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
  // Rows (context ++ continuation) and their shared prefix, per group; a group with a row longer
  // than T + 1 goes to the full path (which left-truncates it).
  struct Group {
    int64_t first = 0, size = 0, prefix = 0;
    bool fits = true;
  };
  std::vector<Group> plan;
  std::vector<std::vector<int32_t>> rows(n);
  std::vector<int64_t> fallback;
  int64_t longest = 1;  // the decoder's capacity: the longest scored row (inputs, not the last id)
  for (int64_t first = 0; int64_t g : groups) {
    Group gr{first, g, 0, true};
    size_t prefix = SIZE_MAX;
    for (int64_t i = first; i < first + g; ++i) {
      const ScoreRequest& q = requests[i];
      rows[i] = q.context;
      rows[i].insert(rows[i].end(), q.continuation.begin(), q.continuation.end());
      gr.fits = gr.fits && static_cast<int64_t>(rows[i].size()) - 1 <= cap;
      prefix = std::min(prefix, q.context.size());
      prefix = static_cast<size_t>(std::mismatch(rows[first].begin(), rows[first].begin() + prefix, rows[i].begin()).first - rows[first].begin());
    }
    gr.prefix = static_cast<int64_t>(prefix);
    for (int64_t i = first; i < first + g; ++i) {
      if (!gr.fits) fallback.push_back(i);
      else longest = std::max<int64_t>(longest, static_cast<int64_t>(rows[i].size()) - 1);
    }
    plan.push_back(gr);
    first += g;
  }

  if (static_cast<int64_t>(fallback.size()) < n) {
    // One chunk holds the longest row, so a prefix or any one choice runs as one GEMM per weight.
    Decoder decoder(model, longest, /*prefill_chunk=*/longest, options.decode_weights);
    const int64_t V = decoder.vocab_size();
    std::vector<float> prefix_logits(V), logits;
    std::vector<int32_t> tokens;
    std::vector<int64_t> members, sizes, from;
    for (const Group& gr : plan) {
      if (!gr.fits) continue;
      const int64_t P = gr.prefix;
      decoder.reset();
      if (P > 0) {
        const std::span<const float> last = decoder.forward(std::span<const int32_t>(rows[gr.first].data(), P));
        std::copy(last.begin(), last.end(), prefix_logits.begin());
      }
      // Each choice's tokens after the prefix but its last (positions P .. len - 2) are a segment;
      // segments run together, as many as fit one chunk.
      for (int64_t i = gr.first, end = gr.first + gr.size; i < end;) {
        members.clear();
        sizes.clear();
        from.clear();
        tokens.clear();
        int64_t rows_out = 0;
        for (; i < end; ++i) {
          const std::vector<int32_t>& row = rows[i];
          const int64_t len = static_cast<int64_t>(row.size());
          const int64_t first_pred = static_cast<int64_t>(requests[i].context.size()) - 1;  // predicts continuation[0]
          out[i].tokens = static_cast<int64_t>(requests[i].continuation.size());
          out[i].logprob = first_pred == P - 1 ? log_prob(prefix_logits.data(), V, row[P]) : 0.0;
          const int64_t m = len - 1 - P;
          if (m == 0) continue;  // its one prediction came from the prefix
          if (!members.empty() && static_cast<int64_t>(tokens.size()) + m > decoder.chunk() - P) break;
          members.push_back(i);
          sizes.push_back(m);
          from.push_back(std::max(first_pred, P) - P);
          rows_out += m - from.back();
          tokens.insert(tokens.end(), row.begin() + P, row.end() - 1);
        }
        if (members.empty()) continue;
        logits.resize(static_cast<size_t>(rows_out * V));
        decoder.forward_segments(tokens, sizes, from, logits.data());
        const float* l = logits.data();
        for (size_t k = 0; k < members.size(); ++k) {
          const std::vector<int32_t>& row = rows[members[k]];
          for (int64_t r = from[k]; r < sizes[k]; ++r, l += V) out[members[k]].logprob += log_prob(l, V, row[P + r + 1]);
        }
      }
    }
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
