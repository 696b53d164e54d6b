// `lmtrain generate`: sample a continuation from a checkpoint (run dir, checkpoint dir or Hugging
// Face dir) or from a randomly initialised preset (for benchmarking), with a KV cache.
//
// Output: the prompt, then the continuation streamed token by token on stdout (only complete UTF-8
// sequences are written, so a character split across tokens is never printed half). Without a
// tokenizer (--prompt-ids and none known), ids are printed instead, space-separated, prompt first.
// --json prints one JSON object at the end instead. A final line on stderr gives prefill and
// decode speeds separately.
// --sequences N decodes the prompt N times side by side (row r samples with seed + r; one decoder step
// per token for all rows, eval::generate_batch) and prints each row's text (or ids) when done, one
// line per row; --json then has a "rows" array. --decode-dtype bf16 reads the GEMM weights in bf16
// (eval/decode_weights.h); the default fp32 is exact (what the peer-library checks compare).
#include <omp.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend_flag.h"
#include "commands.h"
#include "lmt/base/timer.h"
#include "lmt/eval/decode.h"
#include "lmt/eval/generate.h"
#include "lmt/eval/model_dir.h"
#include "lmt/kernels/backend.h"
#include "lmt/model/config.h"
#include "lmt/tensor/compute_dtype.h"

namespace lmt::cli {
namespace {

struct GenerateArgs {
  std::string checkpoint, preset, prompt, prompt_ids, tokenizer, backend = "cpu", decode_dtype = "fp32";
  int64_t max_tokens = 256;
  int64_t batch = 1;
  float temperature = 1.0f;
  int64_t top_k = 0;
  float top_p = 0.9f;
  uint64_t seed = 0;
  int threads = 0;  // 0: OpenMP's default
  bool json = false;
};

StatusOr<std::vector<int32_t>> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ',' || s[i] == ' ')) ++i;
    if (i == s.size()) break;
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(s.substr(i), &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || v < 0 || v > INT32_MAX)
      return InvalidArgument("--prompt-ids '" + s + "': '" + s.substr(i, 12) + "' is not a token id",
                             "pass non-negative integers separated by commas, e.g. --prompt-ids 1,403,407");
    ids.push_back(static_cast<int32_t>(v));
    i += used;
  }
  if (ids.empty()) return InvalidArgument("--prompt-ids is empty", "pass at least one id, e.g. the BOS id");
  return ids;
}

StatusOr<eval::LoadedModel> load(const GenerateArgs& a, kernels::Backend& be) {
  if (a.checkpoint.empty() == a.preset.empty())
    return UsageError("pass exactly one of --checkpoint DIR and --preset NAME",
                           "--checkpoint takes a run dir, a checkpoint dir or a Hugging Face dir; --preset makes a "
                           "randomly initialised model (for benchmarking)");
  if (!a.checkpoint.empty()) return eval::load_model_dir(a.checkpoint, be);
  LMT_ASSIGN_OR_RETURN(model::ModelConfig c, model::preset(a.preset));
  LMT_RETURN_IF_ERROR(model::model_memory_check(c, 8, 0, "--preset " + a.preset));
  eval::LoadedModel m;
  m.model = std::make_unique<model::Transformer>(c, be);
  m.model->init(a.seed);
  m.source = "preset " + a.preset + " (random weights)";
  return m;
}

// --sequences N: the prompt N times, rows seeded seed + r, printed when all are done.
Status run_batch(const GenerateArgs& a, const eval::LoadedModel& loaded, data::Tokenizer* tok,
                 const std::vector<int32_t>& prompt, const eval::GenerateOptions& o, eval::Decoder& decoder,
                 double load_seconds) {
  const std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(a.batch), prompt);
  LMT_ASSIGN_OR_RETURN(eval::BatchGenerateResult r, eval::generate_batch(decoder, prompts, o, {}));
  const int64_t n = static_cast<int64_t>(prompt.size());
  auto text = [&](const std::vector<int32_t>& ids) {
    std::vector<int32_t> t = ids;
    if (!t.empty() && o.eos_id && t.back() == *o.eos_id) t.pop_back();
    if (tok) return tok->decode(t);
    std::string s;
    for (int32_t id : ids) s += " " + std::to_string(id);
    return s;
  };
  const double prefill_tps = r.prefill_seconds > 0 ? a.batch * n / r.prefill_seconds : 0.0;
  const double decode_tps = r.decode_seconds > 0 ? r.step_tokens / r.decode_seconds : 0.0;
  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const eval::GenerateResult& g : r.rows) {
      nlohmann::json row = {{"ids", g.tokens}, {"stop_reason", g.stop_reason}, {"generated_tokens", g.tokens.size()}};
      if (tok) row["text"] = text(g.tokens);
      rows.push_back(row);
    }
    nlohmann::json j = {{"source", loaded.source},
                        {"model_params", loaded.model->config().param_count()},
                        {"threads", omp_get_max_threads()},
                        {"sequences", a.batch},
                        {"decode_dtype", compute_dtype_name(decoder.weights().dtype())},
                        {"prompt_ids", prompt},
                        {"prompt_tokens", n},
                        {"rows", rows},
                        {"load_seconds", load_seconds},
                        {"prefill_seconds", r.prefill_seconds},
                        {"prefill_tokens_per_s", prefill_tps},
                        {"decode_steps", r.steps},
                        {"decode_tokens", r.step_tokens},
                        {"decode_seconds", r.decode_seconds},
                        {"decode_tokens_per_s", decode_tps}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    const std::string head = !a.prompt.empty() ? a.prompt : tok ? tok->decode(prompt) : text(prompt).substr(1);
    for (int64_t row = 0; row < a.batch; ++row)
      std::printf("[%lld] %s%s\n", static_cast<long long>(row), head.c_str(), text(r.rows[row].tokens).c_str());
    std::fflush(stdout);
  }
  std::fprintf(stderr,
               "generate: %lld sequences; prefill %lld tokens in %.3f s (%.1f tokens/s); decode %lld tokens in %lld steps, "
               "%.3f s (%.1f tokens/s, sampling included); %d threads\n",
               static_cast<long long>(a.batch), static_cast<long long>(a.batch * n), r.prefill_seconds, prefill_tps,
               static_cast<long long>(r.step_tokens), static_cast<long long>(r.steps), r.decode_seconds, decode_tps,
               omp_get_max_threads());
  return Status::Ok();
}

Status run_generate(const GenerateArgs& a) {
  if (a.prompt.empty() == a.prompt_ids.empty())
    return UsageError("pass exactly one of --prompt TEXT and --prompt-ids LIST",
                           "--prompt needs a tokenizer; --prompt-ids 1,2,3 works without one");
  eval::GenerateOptions o;
  o.max_tokens = a.max_tokens;
  o.sampling = {a.temperature, a.top_k, a.top_p, a.seed};
  LMT_RETURN_IF_ERROR(eval::validate(o.sampling));
  LMT_RETURN_IF_ERROR(check_flag("--max-tokens", a.max_tokens, 0, model::ModelLimits::kMaxSeqLen,
                                 "the number of new tokens to draw (the model's max_seq_len bounds prompt + tokens)"));

  LMT_RETURN_IF_ERROR(check_flag("--sequences", a.batch, 1, 256, "the number of sequences decoded side by side"));
  LMT_ASSIGN_OR_RETURN(const DType weights, parse_compute_dtype(a.decode_dtype, "--decode-dtype"));
  LMT_RETURN_IF_ERROR(check_thread_count(a.threads, "--threads"));
  LMT_RETURN_IF_ERROR(check_omp_num_threads());
  if (a.threads > 0) omp_set_num_threads(a.threads);
  LMT_ASSIGN_OR_RETURN(kernels::Backend* be, backend_from_flag(a.backend));
  Timer load_timer;
  LMT_ASSIGN_OR_RETURN(eval::LoadedModel loaded, load(a, *be));
  const double load_seconds = load_timer.seconds();

  // A tokenizer is required for text prompts and optional for ids (then ids are printed).
  std::unique_ptr<data::Tokenizer> tok;
  if (!a.prompt.empty() || !a.tokenizer.empty() || !loaded.tokenizer_path.empty()) {
    LMT_ASSIGN_OR_RETURN(tok, eval::load_model_tokenizer(loaded, a.tokenizer));
  }
  std::vector<int32_t> prompt;
  if (!a.prompt.empty()) {
    prompt = tok->encode(a.prompt);
    if (prompt.empty()) return InvalidArgument("--prompt encodes to no tokens", "pass a non-empty prompt");
  } else {
    LMT_ASSIGN_OR_RETURN(prompt, parse_ids(a.prompt_ids));
  }
  if (tok && tok->eos_id()) o.eos_id = *tok->eos_id();

  const model::ModelConfig& c = loaded.model->config();
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int64_t max_len = std::max<int64_t>(1, std::min(c.max_seq_len, n + a.max_tokens));
  // The KV cache: keys and values of every layer for max_len positions, f32.
  LMT_RETURN_IF_ERROR(check_fits_in_memory(
      2.0 * 4 * static_cast<double>(c.n_layers) * static_cast<double>(max_len) * static_cast<double>(c.kv_dim()) *
              static_cast<double>(a.batch) +
          8.0 * c.param_count_estimate(),
      "the KV cache for " + std::to_string(max_len) + " positions × " + std::to_string(a.batch) + " rows",
      "lower --max-tokens or --sequences, or use a shorter prompt"));
  eval::Decoder decoder(*loaded.model, max_len, /*prefill_chunk=*/64, weights, a.batch);
  if (a.batch > 1) return run_batch(a, loaded, tok.get(), prompt, o, decoder, load_seconds);

  // Streaming: the prompt first, then each token as it is drawn.
  eval::Utf8Stream utf8;
  auto emit = [](const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  if (!a.json) {
    if (!a.prompt.empty()) {
      emit(a.prompt);
    } else if (tok) {
      emit(utf8.push(tok->decode(prompt)));
    } else {
      std::string s;
      for (int64_t i = 0; i < n; ++i) s += (i ? " " : "") + std::to_string(prompt[i]);
      emit(s);
    }
  }
  auto on_token = [&](int32_t id) {
    if (a.json) return;
    if (!tok) {
      emit(" " + std::to_string(id));
    } else if (!(o.eos_id && id == *o.eos_id)) {
      emit(utf8.push(tok->decode(std::span<const int32_t>(&id, 1))));
    }
  };
  LMT_ASSIGN_OR_RETURN(eval::GenerateResult r, eval::generate(decoder, prompt, o, on_token));
  if (!a.json) emit(utf8.flush() + "\n");

  const double prefill_tps = r.prefill_seconds > 0 ? n / r.prefill_seconds : 0.0;
  const double decode_tps = r.decode_seconds > 0 ? r.decode_steps / r.decode_seconds : 0.0;
  if (a.json) {
    nlohmann::json j = {{"source", loaded.source},
                        {"model_params", c.param_count()},
                        {"threads", omp_get_max_threads()},
                        {"decode_dtype", compute_dtype_name(weights)},
                        {"prompt_ids", prompt},
                        {"ids", r.tokens},
                        {"stop_reason", r.stop_reason},
                        {"prompt_tokens", n},
                        {"generated_tokens", r.tokens.size()},
                        {"load_seconds", load_seconds},
                        {"prefill_seconds", r.prefill_seconds},
                        {"prefill_tokens_per_s", prefill_tps},
                        {"decode_steps", r.decode_steps},
                        {"decode_seconds", r.decode_seconds},
                        {"decode_tokens_per_s", decode_tps}};
    if (tok) {
      std::vector<int32_t> text_ids = r.tokens;
      if (!text_ids.empty() && o.eos_id && text_ids.back() == *o.eos_id) text_ids.pop_back();
      j["text"] = tok->decode(text_ids);
    }
    // Decoded bytes need not be valid UTF-8 (a sequence cut by max_tokens): replace, don't throw.
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");  // end the streamed text's line before the statistics on stderr
    std::fflush(stdout);
  }
  std::fprintf(stderr,
               "generate: prefill %lld tokens in %.3f s (%.1f tokens/s); decode %lld tokens in %.3f s "
               "(%.1f tokens/s, sampling included); stop: %s; %d threads\n",
               static_cast<long long>(n), r.prefill_seconds, prefill_tps, static_cast<long long>(r.decode_steps),
               r.decode_seconds, decode_tps, r.stop_reason.c_str(), omp_get_max_threads());
  return Status::Ok();
}

}  // namespace

void add_generate_command(CLI::App& app, Runner& runner) {
  static GenerateArgs a;
  CLI::App* g = app.add_subcommand("generate", "sample text from a checkpoint with a KV cache");
  g->add_option("--checkpoint", a.checkpoint, "run dir, RUN/checkpoints/step_XXXXXXXX, or a Hugging Face dir");
  g->add_option("--preset", a.preset, "a randomly initialised model preset instead (benchmarking)");
  g->add_option("--prompt", a.prompt, "prompt text (needs a tokenizer)");
  g->add_option("--prompt-ids", a.prompt_ids, "prompt token ids, e.g. 1,403,407");
  g->add_option("--max-tokens", a.max_tokens, "new tokens at most (default 256)");
  g->add_option("--temperature", a.temperature, "0: greedy; default 1.0");
  g->add_option("--top-k", a.top_k, "keep the k most probable tokens; 0: off (default)");
  g->add_option("--top-p", a.top_p, "nucleus: the smallest set with mass >= p; 1: off (default 0.9)");
  g->add_option("--seed", a.seed, "sampling seed (and the preset's init seed); default 0");
  g->add_option("--tokenizer", a.tokenizer, "tokenizer.json, *.tiktoken or a GPT-2 dir (default: the model's)");
  add_backend_flag(g, a.backend);
  g->add_option("--threads", a.threads,
                 "OpenMP threads; 0: all cores (default); at most 4 x the hardware threads (at least 64, at most 1024)");
  g->add_option("--sequences", a.batch, "decode the prompt N times side by side, row r with seed + r (default 1)");
  g->add_option("--decode-dtype", a.decode_dtype,
                "GEMM weight dtype: fp32 (default; exact) or bf16 (half the weight bytes per token; f32 activations)");
  g->add_flag("--json", a.json, "print one JSON object (ids, text, speeds) instead of streaming");
  g->callback([&runner] { runner.set(run_generate(a)); });
}

}  // namespace lmt::cli
