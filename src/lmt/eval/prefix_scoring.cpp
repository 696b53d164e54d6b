// Shared-prefix scoring over a KV-cached decoder (see prefix_scoring.h).
#include "lmt/eval/prefix_scoring.h"

#include <algorithm>
#include <cmath>

#include "lmt/base/trace.h"
#include "lmt/eval/decode.h"

namespace lmt::eval {
namespace {

// Batching of items (see score_shared_prefix): at most kItems items per pass, a pass of at most
// max(longest row, kChunkTokens) tokens, and a KV cache of at most kCacheBytes.
constexpr int64_t kItems = 8, kChunkTokens = 256, kCacheBytes = int64_t{256} << 20;

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
    // Items run kItems at a time on the decoder's rows (one row per item), so a weight is read once
    // per pass for all of them: pass 1 prefills their prefixes, then their choices' segments run in
    // passes of at most `chunk` tokens. The chunk holds the longest row, so any one prefix or choice
    // fits a pass; the KV cache (rows × longest) is kept under kCacheBytes.
    const model::ModelConfig& mc = model.config();
    const int64_t row_bytes = 2 * 4 * mc.n_layers * mc.kv_dim() * longest;
    const int64_t items_per_pass = std::clamp<int64_t>(kCacheBytes / std::max<int64_t>(row_bytes, 1), 1, kItems);
    Decoder decoder(model, longest, std::max(longest, kChunkTokens), options.decode_weights, items_per_pass);
    const int64_t chunk = decoder.chunk();  // >= longest
    const int64_t V = decoder.vocab_size();
    std::vector<float> logits;
    std::vector<int32_t> tokens;
    std::vector<Decoder::Segment> segments;
    std::vector<int64_t> members;
    std::vector<const Group*> batch;
    auto flush = [&](bool advance) {  // one pass over `segments`; scores the choices in `members`
      int64_t rows_out = 0;
      for (const Decoder::Segment& sg : segments) rows_out += sg.size - sg.from;
      logits.resize(static_cast<size_t>(std::max<int64_t>(rows_out, 1) * V));
      decoder.forward_segments(tokens, segments, logits.data(), advance);
      tokens.clear();
    };
    for (size_t gi = 0; gi < plan.size();) {
      if (options.on_batch) options.on_batch();
      // The next items that fit: at most items_per_pass, their prefixes within one chunk.
      batch.clear();
      int64_t prefix_tokens = 0;
      for (; gi < plan.size() && static_cast<int64_t>(batch.size()) < items_per_pass; ++gi) {
        const Group& gr = plan[gi];
        if (!gr.fits) continue;
        if (!batch.empty() && prefix_tokens + gr.prefix > chunk) break;
        batch.push_back(&gr);
        prefix_tokens += gr.prefix;
      }
      if (batch.empty()) continue;
      decoder.reset();
      // Pass 1: the prefixes (row k = batch item k), logits after each prefix's last token.
      segments.clear();
      std::vector<int64_t> prefix_row(batch.size(), -1);
      for (size_t k = 0; k < batch.size(); ++k) {
        const int64_t P = batch[k]->prefix;
        if (P == 0) continue;
        prefix_row[k] = static_cast<int64_t>(segments.size());
        segments.push_back({static_cast<int64_t>(k), 0, P, P - 1});
        tokens.insert(tokens.end(), rows[batch[k]->first].begin(), rows[batch[k]->first].begin() + P);
      }
      std::vector<float> prefix_logits;
      if (!segments.empty()) {
        flush(/*advance=*/true);
        prefix_logits.assign(logits.begin(), logits.begin() + static_cast<int64_t>(segments.size()) * V);
      }
      // Each choice's tokens after the prefix but its last (positions P .. len - 2) are a segment on
      // its item's row; segments of all the batch's items run together, as many as fit a chunk.
      segments.clear();
      members.clear();
      auto score = [&] {
        if (segments.empty()) return;
        flush(/*advance=*/false);
        const float* l = logits.data();
        for (size_t k = 0; k < members.size(); ++k) {
          const std::vector<int32_t>& row = rows[members[k]];
          const int64_t P = batch[segments[k].row]->prefix;
          for (int64_t r = segments[k].from; r < segments[k].size; ++r, l += V)
            out[members[k]].logprob += log_prob(l, V, row[P + r + 1]);
        }
        segments.clear();
        members.clear();
      };
      for (size_t k = 0; k < batch.size(); ++k) {
        const Group& gr = *batch[k];
        const int64_t P = gr.prefix;
        for (int64_t i = gr.first; i < gr.first + gr.size; ++i) {
          const std::vector<int32_t>& row = rows[i];
          const int64_t len = static_cast<int64_t>(row.size());
          const int64_t first_pred = static_cast<int64_t>(requests[i].context.size()) - 1;  // predicts continuation[0]
          out[i].tokens = static_cast<int64_t>(requests[i].continuation.size());
          out[i].logprob = first_pred == P - 1 ? log_prob(prefix_logits.data() + prefix_row[k] * V, V, row[P]) : 0.0;
          const int64_t m = len - 1 - P;
          if (m == 0) continue;  // its one prediction came from the prefix
          if (static_cast<int64_t>(tokens.size()) + m > chunk) score();
          members.push_back(i);
          segments.push_back({static_cast<int64_t>(k), P, m, std::max(first_pred, P) - P});
          tokens.insert(tokens.end(), row.begin() + P, row.end() - 1);
        }
      }
      score();
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
