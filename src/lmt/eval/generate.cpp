// Sampling, the generation loop and UTF-8 streaming (see generate.h).
#include "lmt/eval/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "lmt/base/timer.h"

namespace lmt::eval {

Status validate(const SamplingOptions& o) {
  if (!(o.temperature >= 0.0f) || !std::isfinite(o.temperature))
    return InvalidArgument("--temperature " + std::to_string(o.temperature) + " must be >= 0",
                           "0 is greedy decoding; 0.7-1.0 are usual for sampling");
  if (o.top_k < 0)
    return InvalidArgument("--top-k " + std::to_string(o.top_k) + " must be >= 0", "0 disables the top-k filter");
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f))
    return InvalidArgument("--top-p " + std::to_string(o.top_p) + " must be in (0, 1]",
                           "1 disables the nucleus filter; 0.9 or 0.95 are usual");
  return Status::Ok();
}

int32_t argmax(std::span<const float> logits) {
  LMT_CHECK(!logits.empty()) << "argmax of no logits";
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

std::vector<double> sampling_probs(std::span<const float> logits, const SamplingOptions& o) {
  const int64_t V = static_cast<int64_t>(logits.size());
  std::vector<double> p(V, 0.0);
  if (o.temperature == 0.0f) {
    p[argmax(logits)] = 1.0;
    return p;
  }
  // Softmax in f64 of logits / temperature (a tiny temperature would overflow f32).
  const double inv_t = 1.0 / o.temperature;
  const double mx = *std::max_element(logits.begin(), logits.end()) * inv_t;
  for (int64_t i = 0; i < V; ++i) p[i] = std::exp(logits[i] * inv_t - mx);
  const bool top_k = o.top_k > 0 && o.top_k < V, top_p = o.top_p < 1.0f;
  if (top_k || top_p) {
    // Ids by decreasing probability (ties: lower id first), only as far as the filters look.
    std::vector<int32_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    auto before = [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); };
    const int64_t k = top_k ? o.top_k : V;
    if (top_p)
      std::sort(order.begin(), order.end(), before);
    else
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
    double mass_k = 0;
    for (int64_t i = 0; i < k; ++i) mass_k += p[order[i]];
    int64_t keep = k;
    if (top_p) {  // the smallest prefix of the top-k set whose (renormalised) mass reaches top_p
      double cum = 0;
      for (keep = 0; keep < k;) {
        cum += p[order[keep++]] / mass_k;
        if (cum >= o.top_p) break;
      }
    }
    std::vector<double> kept(V, 0.0);
    for (int64_t i = 0; i < keep; ++i) kept[order[i]] = p[order[i]];
    p.swap(kept);
  }
  const double sum = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& x : p) x /= sum;
  return p;
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (opts_.temperature == 0.0f) return argmax(logits);
  const std::vector<double> p = sampling_probs(logits, opts_);
  const double u = rng_.uniform();
  double cum = 0;
  int32_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0) continue;
    last = static_cast<int32_t>(i);
    cum += p[i];
    if (u < cum) return last;
  }
  return last;  // u within rounding of 1
}

StatusOr<GenerateResult> generate(Decoder& decoder, std::span<const int32_t> prompt, const GenerateOptions& o,
                                  const std::function<void(int32_t)>& on_token) {
  LMT_RETURN_IF_ERROR(validate(o.sampling));
  if (prompt.empty()) return InvalidArgument("the prompt is empty", "give at least one token (e.g. the BOS id)");
  if (o.max_tokens < 0) return InvalidArgument("--max-tokens must be >= 0", "pass the number of new tokens");
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n > decoder.max_len())
    return OutOfRange("the prompt has " + std::to_string(n) + " tokens, more than the context of " +
                          std::to_string(decoder.max_len()),
                      "shorten the prompt (the model's max_seq_len is " +
                          std::to_string(decoder.config().max_seq_len) + ")");
  for (int32_t id : prompt)
    if (id < 0 || id >= decoder.vocab_size())
      return InvalidArgument("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                 std::to_string(decoder.vocab_size()) + ")",
                             "pass ids produced by this model's tokenizer");

  GenerateResult r;
  r.prompt_tokens = n;
  r.stop_reason = "max_tokens";
  Sampler sampler(o.sampling);
  decoder.reset();
  Timer prefill;
  std::span<const float> logits = decoder.forward(prompt);
  r.prefill_seconds = prefill.seconds();
  double sample_seconds = 0;  // sampling belongs to decoding, the callback (printing) does not
  for (int64_t i = 0; i < o.max_tokens; ++i) {
    Timer t;
    const int32_t id = sampler.sample(logits);
    sample_seconds += t.seconds();
    r.tokens.push_back(id);
    if (on_token) on_token(id);
    if (o.eos_id && id == *o.eos_id) {
      r.stop_reason = "eos";
      break;
    }
    if (i + 1 == o.max_tokens) break;
    if (decoder.length() == decoder.max_len()) {
      r.stop_reason = "context";
      break;
    }
    Timer step;
    logits = decoder.forward(std::span<const int32_t>(&id, 1));
    r.decode_seconds += step.seconds();
    ++r.decode_steps;
  }
  r.decode_seconds += sample_seconds;
  return r;
}

StatusOr<BatchGenerateResult> generate_batch(Decoder& decoder, const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& o,
                                             const std::function<void(int64_t, int32_t)>& on_token) {
  LMT_RETURN_IF_ERROR(validate(o.sampling));
  const int64_t R = static_cast<int64_t>(prompts.size());
  if (R != decoder.rows())
    return InvalidArgument(std::to_string(R) + " prompts for a decoder of " + std::to_string(decoder.rows()) + " rows",
                           "build the decoder with one row per prompt");
  if (o.max_tokens < 0) return InvalidArgument("--max-tokens must be >= 0", "pass the number of new tokens");
  for (const std::vector<int32_t>& p : prompts) {
    if (p.empty()) return InvalidArgument("a prompt is empty", "give at least one token (e.g. the BOS id)");
    if (static_cast<int64_t>(p.size()) > decoder.max_len())
      return OutOfRange("a prompt has " + std::to_string(p.size()) + " tokens, more than the context of " +
                            std::to_string(decoder.max_len()),
                        "shorten the prompt (the model's max_seq_len is " + std::to_string(decoder.config().max_seq_len) + ")");
    for (int32_t id : p)
      if (id < 0 || id >= decoder.vocab_size())
        return InvalidArgument("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                   std::to_string(decoder.vocab_size()) + ")",
                               "pass ids produced by this model's tokenizer");
  }
  const int64_t V = decoder.vocab_size();
  BatchGenerateResult out;
  out.rows.resize(R);
  std::vector<Sampler> samplers;
  std::vector<float> logits(static_cast<size_t>(R * V));
  decoder.reset();
  Timer prefill;
  for (int64_t r = 0; r < R; ++r) {
    SamplingOptions so = o.sampling;
    so.seed += static_cast<uint64_t>(r);
    samplers.emplace_back(so);
    out.rows[r].prompt_tokens = static_cast<int64_t>(prompts[r].size());
    out.rows[r].stop_reason = "max_tokens";
    const std::span<const float> last = decoder.forward(prompts[r], nullptr, r);
    std::copy(last.begin(), last.end(), logits.begin() + r * V);
  }
  out.prefill_seconds = prefill.seconds();
  for (GenerateResult& g : out.rows) g.prefill_seconds = out.prefill_seconds;
  std::vector<int32_t> next(R, -1);
  std::vector<bool> done(R, o.max_tokens == 0);
  Timer decode;
  for (;;) {
    int64_t active = 0;
    for (int64_t r = 0; r < R; ++r) {
      next[r] = -1;
      if (done[r]) continue;
      GenerateResult& g = out.rows[r];
      const int32_t id = samplers[r].sample(std::span<const float>(logits.data() + r * V, V));
      g.tokens.push_back(id);
      if (on_token) on_token(r, id);
      if (o.eos_id && id == *o.eos_id) g.stop_reason = "eos";
      else if (static_cast<int64_t>(g.tokens.size()) < o.max_tokens && decoder.length(r) == decoder.max_len())
        g.stop_reason = "context";
      else if (static_cast<int64_t>(g.tokens.size()) < o.max_tokens) {
        next[r] = id;
        ++active;
        continue;
      }
      done[r] = true;
    }
    if (active == 0) break;
    decoder.step(next, logits.data());
    ++out.steps;
    out.step_tokens += active;
    for (int64_t r = 0; r < R; ++r)
      if (next[r] >= 0) ++out.rows[r].decode_steps;
  }
  out.decode_seconds = decode.seconds();
  for (GenerateResult& g : out.rows) g.decode_seconds = out.decode_seconds;
  return out;
}

namespace {
// Bytes a UTF-8 sequence has given its lead byte; 0 for a continuation byte; 1 for ASCII and for
// bytes that cannot start a sequence (emitted as they are).
int utf8_length(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xC0) == 0x80) return 0;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}
}  // namespace

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  size_t cut = pending_.size();
  // Only the last lead byte (at most 3 bytes back) can start an incomplete sequence.
  for (size_t back = 1; back <= 4 && back <= pending_.size(); ++back) {
    const size_t i = pending_.size() - back;
    const int len = utf8_length(static_cast<unsigned char>(pending_[i]));
    if (len == 0) continue;
    if (static_cast<size_t>(len) > back) cut = i;
    break;
  }
  std::string out = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace lmt::eval
