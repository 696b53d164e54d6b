// Log-likelihood scoring of continuations and multiple-choice accuracy (the cloze formulation of
// lm-evaluation-harness: every choice is a continuation of its context; the highest score wins).
//
// Rows. A request (context ids, continuation ids) becomes one row: the last T+1 ids of
// context ++ continuation (the context is left-truncated when the row is too long; T is
// ScoreOptions::max_seq or the model's max_seq_len), inputs = the first len-1, targets = the next id
// on continuation positions and -100 elsewhere. The per-token NLL of the targets
// (Transformer::token_losses) summed and negated is log p(continuation | context).
//
// Batching. Requests are sorted by row length (longest first, ties by index) and packed B at a time;
// each batch runs at T = its longest row rounded up to 32 (the model is re-prepared only when that
// changes, which the sort makes rare). Padding sits after a row's end, which a causal model never
// attends to. Results come back in request order. Deterministic: the same requests and options give
// the same bits on every run; a row's score does not depend on its batch-mates, but B or T may change
// GEMM blocking, so different batch sizes agree to float rounding (about 1e-6 relative), not bits.
//
// Model state: these functions prepare() the model for their own shapes. The model is left prepared
// for the last batch; run_task_suite (suite.h) restores a training plan. Not thread-safe (one
// model, one caller); the model's backend parallelises each forward.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/data/tokenizer/tokenizer.h"
#include "lmt/eval/tasks.h"
#include "lmt/model/transformer.h"

namespace lmt::eval {

// How the choices of an item are scored (docs/EVAL.md, "Scoring paths"):
//   kFull          every choice is its own row through Transformer::forward (above), logits at
//                  every position: the reference path, and the only one for bf16 or an f64 master.
//   kSharedPrefix  the longest common prefix of an item's rows runs once through a KV cache
//                  (eval/decode.h), then each choice's remaining tokens run against it, and the LM
//                  head runs only where a continuation token is predicted (prefix_scoring.h).
//                  f32 from the f32 master; equal to kFull within 1e-4 per choice (test).
enum class Scoring { kFull, kSharedPrefix };
const char* scoring_name(Scoring s);                      // "full", "shared-prefix"
StatusOr<Scoring> parse_scoring(const std::string& name);  // the inverse; error names the flag

struct ScoreOptions {
  int64_t batch = 8;                // rows per forward (B); kFull only
  int64_t max_seq = 0;              // longest row T (0: the model's max_seq_len)
  DType compute = DType::kF32;      // kF32 (exact) or kBF16 (faster; bf16 GEMM inputs; kFull only)
  Scoring scoring = Scoring::kSharedPrefix;
  // kSharedPrefix only: the decoder's GEMM weight dtype (eval/decode_weights.h). kF32 (default):
  // exact, the same accuracies as kFull; kBF16: bf16 weights, f32 activations (log-likelihoods move
  // by the weights' bf16 rounding, so a near-tie between choices may flip).
  DType decode_weights = DType::kF32;
  // Called before each forward pass of scoring (a batch of rows, or of items with shared
  // prefixes): progress for a caller that watches for stalls (the trainer's eval.tasks).
  std::function<void()> on_batch;
};

struct ScoreRequest {
  std::vector<int32_t> context;       // at least one id
  std::vector<int32_t> continuation;  // at least one id, at most T
};

struct ContinuationScore {
  double logprob = 0;          // sum over continuation tokens of log p(token | everything before it)
  int64_t tokens = 0;          // continuation tokens scored
  int64_t context_dropped = 0; // context ids left-truncated to fit T
};

// The checks every scoring path makes (kInvalidArgument for a bad batch size or compute dtype, an
// empty context or continuation, an id outside the vocabulary, or a continuation longer than T;
// the message names the request index). Returns T: options.max_seq capped by the model's max_seq_len.
StatusOr<int64_t> check_requests(const model::Transformer& model, const std::vector<ScoreRequest>& requests,
                                 const ScoreOptions& options);

// Scores every request (errors: check_requests'). Always the full path: each request is its own
// row, whatever options.scoring says (score_continuations and evaluate_encoded, which know which
// requests share a context, honour it).
StatusOr<std::vector<ContinuationScore>> score_requests(model::Transformer& model, const std::vector<ScoreRequest>& requests,
                                                        const ScoreOptions& options = {});

// One context, several continuations (the id-level API the reference test uses); one group for
// options.scoring == kSharedPrefix.
StatusOr<std::vector<ContinuationScore>> score_continuations(model::Transformer& model, std::span<const int32_t> context,
                                                             const std::vector<std::vector<int32_t>>& continuations,
                                                             const ScoreOptions& options = {});

// One item tokenised: one request per choice, plus the choice's length in characters: Unicode code
// points (Python's len(str)) of the choice text without its leading separator, which is what the
// harness's acc_norm divides by (len(doc_to_choice(doc)[i]); its target_delimiter " " is not counted).
struct EncodedItem {
  std::vector<ScoreRequest> requests;
  std::vector<int64_t> chars;
  int gold = 0;
};

// Tokenises like the harness: trailing spaces of the context move to the continuation;
// continuation ids = encode(context + continuation) minus the ids of encode(context), so a BPE merge
// across the boundary cannot drop a token. An empty context is replaced by the EOS id (error when
// the tokenizer has none). No BOS is added: byte-level tokenizers have none, and lmtrain's training
// rows start documents without one.
StatusOr<EncodedItem> encode_item(const data::Tokenizer& tokenizer, const McItem& item);

// Per-item scores and the three accuracies (argmax; ties go to the lowest index, as numpy's argmax):
//   acc             sum log-prob
//   acc_norm_token  log-prob / continuation tokens
//   acc_norm_char   log-prob / choice characters (the harness's acc_norm; EncodedItem::chars)
struct ItemScores {
  std::vector<double> logprob;
  std::vector<int64_t> tokens, chars;
  int gold = 0;
};

// The chosen index under each normalisation (what accuracy_of compares with gold).
struct ItemPredictions {
  int acc = 0, norm_token = 0, norm_char = 0;
};
ItemPredictions predictions_of(const ItemScores& scores);

struct TaskResult {
  std::string task;
  int64_t items = 0;
  double acc = 0, acc_norm_token = 0, acc_norm_char = 0;
  double seconds = 0, items_per_s = 0;
  int64_t rows = 0, truncated_rows = 0;
  std::vector<ItemScores> scores;  // per item, in file order
};

// The accuracies of `scores` (items = scores.size(); timing fields left 0).
TaskResult accuracy_of(const std::string& task, std::vector<ItemScores> scores);

// Encodes and scores the first `limit` items (limit <= 0: all) and reports the accuracies. `items`
// may be a slice of a task file (eval_progress scores one in chunks, without copying).
StatusOr<TaskResult> evaluate_multiple_choice(model::Transformer& model, const data::Tokenizer& tokenizer,
                                              std::span<const McItem> items, int64_t limit,
                                              const ScoreOptions& options = {}, const std::string& task = "");

// Scores already encoded items (what the periodic evaluation reuses to tokenise only once).
StatusOr<TaskResult> evaluate_encoded(model::Transformer& model, const std::vector<EncodedItem>& items,
                                      const ScoreOptions& options, const std::string& task);

}  // namespace lmt::eval
