// `lmtrain tokenizer train --input PATHS... --vocab-size N --out tok.json [--text-field NAME]
//  [--special TOKEN...] [--threads N] [--force] [--progress] [--json]`: trains a byte-level BPE tokenizer
// (lmt/data/tokenizer/bpe_trainer.h) and writes it as a Hugging Face tokenizer.json.
//
// The output is written atomically (temp file, fsync, rename: lmt/io/atomic_file.h) and an existing
// file is replaced only with --force. Both the output directory and the overwrite rule are checked
// before training, so a typo costs a moment rather than the whole run. The progress bar goes to
// stderr when it is a terminal (or with --progress); the summary line goes to stdout.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "lmt/base/timer.h"
#include "lmt/data/tokenizer/bpe_trainer.h"
#include "lmt/io/atomic_file.h"

namespace lmt::cli {
namespace {

struct TokenizerTrainArgs {
  std::vector<std::string> inputs;
  int64_t vocab_size = 0;
  std::string out;
  std::string text_field = "text";
  std::vector<std::string> specials = {"<|endoftext|>"};
  int threads = 0;
  bool force = false;
  bool json = false;
  bool progress = false;
};

// One self-overwriting line on stderr, redrawn at most 10 times a second.
class ProgressBar {
 public:
  void update(const data::BpeTrainProgress& p) {
    const bool new_phase = p.phase != phase_ || !started_;
    const double now = now_seconds();
    const bool finished = p.done >= p.total;
    if (!new_phase && !finished && now - last_draw_ < 0.1) return;
    if (new_phase) {
      if (started_) std::fputc('\n', stderr);
      started_ = true;
      phase_ = p.phase;
      phase_start_ = now;
      first_done_ = p.done;
    }
    last_draw_ = now;
    draw(p, now);
  }
  void finish() {
    if (started_) std::fputc('\n', stderr);
    started_ = false;
  }

 private:
  void draw(const data::BpeTrainProgress& p, double now) {
    const bool counting = p.phase == data::BpeTrainProgress::Phase::kCounting;
    // Merging starts at the 256 byte tokens; the bar shows merges, not vocabulary entries.
    const double base = counting ? 0.0 : 256.0;
    const double total = static_cast<double>(p.total) - base, done = static_cast<double>(p.done) - base;
    const double frac = total > 0 ? std::min(1.0, done / total) : 1.0;
    constexpr int kWidth = 30;
    char bar[kWidth + 1];
    const int filled = static_cast<int>(frac * kWidth);
    for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
    bar[kWidth] = '\0';
    const double elapsed = now - phase_start_;
    const double progressed = static_cast<double>(p.done - first_done_);
    char eta[32] = "";
    if (progressed > 0 && frac < 1.0) {
      const double remaining = elapsed * (static_cast<double>(p.total) - static_cast<double>(p.done)) / progressed;
      std::snprintf(eta, sizeof eta, "ETA %.0fs", remaining);
    }
    if (counting) {
      std::fprintf(stderr, "\rcounting [%s] %3.0f%%  %.1f/%.1f MB  %.1f MB/s  %-10s", bar, 100 * frac, done / 1e6,
                   total / 1e6, elapsed > 0 ? progressed / 1e6 / elapsed : 0.0, eta);
    } else {
      std::fprintf(stderr, "\rmerging  [%s] %3.0f%%  %.0f/%.0f merges  %-10s", bar, 100 * frac, done, total, eta);
    }
    std::fflush(stderr);
  }

  bool started_ = false;
  data::BpeTrainProgress::Phase phase_ = data::BpeTrainProgress::Phase::kCounting;
  double phase_start_ = 0, last_draw_ = 0;
  uint64_t first_done_ = 0;
};

Status refuse_existing(const TokenizerTrainArgs& a) {
  std::error_code ec;
  if (!a.force && std::filesystem::exists(a.out, ec))
    return FailedPrecondition(a.out + ": already exists; not overwritten",
                              "pass --force to replace it, or choose another --out");
  return Status::Ok();
}

Status run_tokenizer_train(const TokenizerTrainArgs& a) {
  const JsonStdout out(a.json);  // --json: the summary below goes to stderr, one JSON object to stdout
  LMT_RETURN_IF_ERROR(check_thread_count(a.threads, "--threads"));
  LMT_RETURN_IF_ERROR(refuse_existing(a));
  // Creating the temporary file now proves the directory exists and is writable.
  LMT_ASSIGN_OR_RETURN(io::AtomicFileWriter writer, io::AtomicFileWriter::create(a.out));

  data::BpeTrainerOptions options;
  options.inputs = a.inputs;
  options.vocab_size = a.vocab_size;
  options.text_field = a.text_field;
  options.special_tokens = a.specials;
  options.threads = a.threads;
  ProgressBar bar;
  const bool show = a.progress || isatty(STDERR_FILENO) == 1;
  Timer timer;
  StatusOr<data::TrainedBpe> trained =
      data::train_bpe(options, [&](const data::BpeTrainProgress& p) { if (show) bar.update(p); });
  bar.finish();
  if (!trained.ok()) return trained.status();
  const data::TrainedBpe& bpe = *trained;

  const std::string json = data::bpe_tokenizer_json(bpe);
  LMT_RETURN_IF_ERROR(writer.append(json.data(), json.size()));
  LMT_RETURN_IF_ERROR(refuse_existing(a));  // it may have appeared while we trained
  LMT_RETURN_IF_ERROR(writer.commit());

  const data::BpeTrainStats& s = bpe.stats;
  std::printf("wrote %s: %lld tokens (256 bytes + %zu merged + %zu special) from %.1f MB in %lld documents "
              "(%lld pieces, %lld distinct); counting %.1f s, merging %.1f s, total %.1f s\n",
              a.out.c_str(), static_cast<long long>(bpe.vocab_size()), bpe.tokens.size() - 256,
              bpe.special_tokens.size(), static_cast<double>(s.bytes) / 1e6, static_cast<long long>(s.documents),
              static_cast<long long>(s.pieces), static_cast<long long>(s.distinct_pieces), s.count_seconds,
              s.merge_seconds, timer.seconds());
  if (bpe.vocab_size() < a.vocab_size)
    std::printf("note: the corpus has no more pairs to merge: %lld tokens instead of the %lld asked for\n",
                static_cast<long long>(bpe.vocab_size()), static_cast<long long>(a.vocab_size));
  if (a.json)
    out.emit({{"out", a.out}, {"vocab_size", bpe.vocab_size()}, {"requested_vocab_size", a.vocab_size},
              {"merges", bpe.tokens.size() - 256}, {"special_tokens", bpe.special_tokens.size()},
              {"bytes", s.bytes}, {"documents", s.documents}, {"pieces", s.pieces}, {"distinct_pieces", s.distinct_pieces},
              {"count_seconds", s.count_seconds}, {"merge_seconds", s.merge_seconds}, {"seconds", timer.seconds()}});
  return Status::Ok();
}

}  // namespace

void add_tokenizer_train_command(CLI::App* tokenizer, Runner& runner) {
  static TokenizerTrainArgs a;
  CLI::App* t = tokenizer->add_subcommand("train", "train a byte-level BPE tokenizer, written as a Hugging Face tokenizer.json");
  t->add_option("--input", a.inputs, "text files (one document each), .jsonl files (one document per line) or directories")
      ->required();
  t->add_option("--vocab-size", a.vocab_size, "tokens in all: 256 bytes + merges + special tokens")->required();
  t->add_option("--out", a.out, "the tokenizer.json to write")->required();
  t->add_option("--text-field", a.text_field, "JSONL field that holds the document text")->capture_default_str();
  t->add_option("--special", a.specials, "special tokens, given the ids after the merges")->capture_default_str();
  t->add_option("--threads", a.threads, "counting threads (0: one per hardware thread; at most 4 x the hardware threads, at least 64, at most 1024)")->capture_default_str();
  t->add_flag("--force", a.force, "replace --out if it exists");
  t->add_flag("--progress", a.progress, "draw the progress bar even when stderr is not a terminal");
  t->add_flag("--json", a.json, "print the summary as one compact JSON object (the text summary goes to stderr)");
  t->callback([&runner] { runner.set(run_tokenizer_train(a)); });
}

}  // namespace lmt::cli
