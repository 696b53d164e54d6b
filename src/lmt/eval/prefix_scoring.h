// Shared-prefix scoring (Scoring::kSharedPrefix): the choices of a multiple-choice item share their
// context, so the context runs through the model once and only the choices' own tokens run per choice.
//
// Per group of requests (one item's choices): the rows are context ++ continuation, as in the full
// path (scoring.h). P = the longest common prefix of the group's rows, capped at the shortest
// context (so every scored position is at or after the prefix's last token). Items run up to 8 at
// a time, one KV-cache row of a Decoder (eval/decode.h) each: one pass runs all their prefixes
// (Decoder::forward_segments over several rows: one GEMM per weight for all of them; attention is
// one attention_prefill call per prefix and layer), each prefix's last logits predicting the first
// token after it. Then each row's remaining tokens but the last (positions P, P+1, ...) form a
// segment on its item's cache row; the segments of all the items run together in passes of at most
// max(longest row, 256) tokens (each segment attending over its prefix and itself only), and the
// LM head runs once per pass over just the positions that predict a continuation token;
// log-softmax is taken there in double. The KV cache is kept under 256 MiB (fewer items per pass
// for long rows).
// The per-choice result is the same quantity as the full path's (log p(continuation | context)),
// equal to it within 1e-4 absolute on the real tasks (tests/eval/prefix_scoring_test.cpp): the two
// differ only in the attention kernel (decode vs training forward) and the order of float sums.
//
// Work per item: P + Σ (row_i - P) trunk tokens instead of Σ row_i, and Σ continuation_i LM-head
// rows instead of Σ row_i rounded up to the batch's T; the weights are read once per pass for all
// its items. options.batch is used only by rows that fall back to the full path.
//
// Fallback: a group with a row longer than T + 1 (the full path would left-truncate its context)
// is scored by score_requests (the full path) with the same options, so truncation stays exactly
// as before.
//
// Limits: computes in f32 from an f32 master (the GEMM weights in options.decode_weights). options.compute == kBF16 or an f64 master give
// kUnimplemented (use Scoring::kFull). Does not touch the model's activation plan.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/eval/scoring.h"
#include "lmt/model/transformer.h"

namespace lmt::eval {

// `groups` holds the sizes of consecutive groups of `requests` (each >= 1, summing to
// requests.size()). Results in request order. Errors: check_requests', kInvalidArgument for
// groups that do not cover the requests, kUnimplemented as above.
StatusOr<std::vector<ContinuationScore>> score_shared_prefix(model::Transformer& model, const std::vector<ScoreRequest>& requests,
                                                             std::span<const int64_t> groups, const ScoreOptions& options);

}  // namespace lmt::eval
