// Text generation: sampling from next-token logits, the decode loop over a Decoder, and UTF-8-safe
// streaming of decoded bytes.
//
// Sampling (the order Hugging Face's logits processors use): temperature 0 is greedy argmax (ties
// go to the lowest id); otherwise p ∝ exp(logit / temperature), then top-k keeps the k most
// probable ids (0: all), then top-p (nucleus) keeps the smallest set of most probable ids whose
// mass is >= p (1: all), renormalises, and draws with the seeded Rng. Deterministic in the seed.
//
// Threading: a Sampler is used by one thread at a time; the free functions are pure.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lmt/base/rng.h"
#include "lmt/base/status.h"
#include "lmt/eval/decode.h"

namespace lmt::eval {

struct SamplingOptions {
  float temperature = 1.0f;  // 0: greedy
  int64_t top_k = 0;         // 0: no top-k filter
  float top_p = 1.0f;        // in (0, 1]; 1: no nucleus filter
  uint64_t seed = 0;
};

// Checks the ranges above; the error names the option (as the CLI spells it) and the fix.
Status validate(const SamplingOptions& o);

// The distribution a draw uses, over all V ids (0 for filtered ids; sums to 1). Greedy gives a
// one-hot at the argmax. Exposed for tests and for inspecting a step.
std::vector<double> sampling_probs(std::span<const float> logits, const SamplingOptions& o);

// Lowest id of the maximal logit.
int32_t argmax(std::span<const float> logits);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& o) : opts_(o), rng_(o.seed) {}
  int32_t sample(std::span<const float> logits);

 private:
  SamplingOptions opts_;
  Rng rng_;
};

struct GenerateOptions {
  int64_t max_tokens = 256;       // new tokens at most (the EOS, if drawn, counts)
  SamplingOptions sampling;
  std::optional<int32_t> eos_id;  // stop after drawing it (it is reported and kept); none: never
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // the new tokens (not the prompt)
  std::string stop_reason;      // "eos", "max_tokens" or "context" (the decoder's cache is full)
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;   // the prompt's forward pass (the first new token's logits)
  int64_t decode_steps = 0;     // single-token forward passes after the prefill
  double decode_seconds = 0;
};

// Resets `decoder`, prefills `prompt` (non-empty; must fit the decoder), then samples up to
// max_tokens new tokens, calling on_token(id) for each as soon as it is drawn (may be empty).
// Stops early at eos_id or when the decoder's cache is full.
StatusOr<GenerateResult> generate(Decoder& decoder, std::span<const int32_t> prompt, const GenerateOptions& o,
                                  const std::function<void(int32_t)>& on_token);

// Batched generation: prompts.size() sequences on a decoder with that many rows. Each prompt is
// prefilled on its row (decoder.forward), then every step draws one token per unfinished row and
// runs them all through one decoder.step(); a finished row (EOS, max_tokens, full cache) sits the
// remaining steps out. Row r samples with seed o.sampling.seed + r. With the decoder's bf16 weights
// row r gives exactly generate() of prompts[r] with that seed; with f32 weights the GEMMs at
// M = rows round differently, so the sampled ids may differ once logits tie within that rounding.
// on_token(row, id) as each id is drawn (may be empty). Results per row: decode_seconds and
// decode_steps are the shared steps' (each step counted once per row that took part in it).
struct BatchGenerateResult {
  std::vector<GenerateResult> rows;
  double prefill_seconds = 0;  // all prompts
  int64_t steps = 0;           // decoder.step() calls
  int64_t step_tokens = 0;     // tokens they decoded (Σ active rows)
  double decode_seconds = 0;   // the steps and the sampling
};
StatusOr<BatchGenerateResult> generate_batch(Decoder& decoder, const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& o,
                                             const std::function<void(int64_t, int32_t)>& on_token);

// Streams bytes that arrive in arbitrary pieces (a token may end inside a UTF-8 sequence) and
// hands back only complete UTF-8 sequences; an incomplete tail waits for the next push(). Bytes
// that can never become valid (a stray continuation byte, an invalid lead) pass through unchanged
// so nothing is lost; flush() returns whatever is left at the end.
class Utf8Stream {
 public:
  std::string push(std::string_view bytes);
  std::string flush();

 private:
  std::string pending_;
};

}  // namespace lmt::eval
