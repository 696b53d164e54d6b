// `lmtrain tokenizer train --input PATHS... --vocab-size N --out tok.json [--text-field NAME]
//  [--special TOKEN...] [--threads N] [--force] [--progress] [--json]`: trains a byte-level BPE tokenizer
// (lmt/data/tokenizer/bpe_trainer.h) and writes it as a Hugging Face tokenizer.json.
//
// The output is written atomically (temp file, fsync, rename: lmt/io/atomic_file.h) and an existing
// file is replaced only with --force. Both the output directory and the overwrite rule are checked
// before training, so a typo costs a moment rather than the whole run. Progress (lmt/progress) goes
// to stderr: a bar when it is a terminal (or with --progress), else a plain line every 10 s per
// phase; nothing above log level INFO. The summary line goes to stdout.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "lmt/base/timer.h"
#include "lmt/data/tokenizer/bpe_trainer.h"
#include "lmt/io/atomic_file.h"
#include "lmt/progress/progress.h"

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

// One lmt/progress display per phase: counting (MB read, MB/s, ETA), then merging (merges done of
// those asked for, ETA).
class PhaseProgress {
 public:
  // Constructed as training starts: counting's clock starts now.
  explicit PhaseProgress(progress::Mode mode) : mode_(mode) { start(data::BpeTrainProgress::Phase::kCounting); }
  void update(const data::BpeTrainProgress& p) {
    const bool counting = p.phase == data::BpeTrainProgress::Phase::kCounting;
    if (counting && phase_ != p.phase) return;  // counting's final report, repeated after it ended
    if (p.phase != phase_) start(p.phase);
    // Merging starts at the 256 byte tokens; the bar shows merges, not vocabulary entries.
    const int64_t base = counting ? 0 : 256;
    bar_->set_total(static_cast<int64_t>(p.total) - base);
    const int64_t done = static_cast<int64_t>(p.done) - base;
    bar_->update(done);
    // Merging begins as counting ends: its clock starts now, not at its first report.
    if (counting && p.done >= p.total) start(data::BpeTrainProgress::Phase::kMerging);
  }
  void finish() { bar_.reset(); }

 private:
  void start(data::BpeTrainProgress::Phase phase) {
    bar_.reset();  // ends the previous phase's line
    phase_ = phase;
    const bool counting = phase == data::BpeTrainProgress::Phase::kCounting;
    bar_ = std::make_unique<progress::Progress>(progress::Options{
        .label = counting ? "counting" : "merging",
        .style = counting ? progress::CountStyle::kBytes : progress::CountStyle::kCount, .mode = mode_,
        .rate_unit = counting ? "MB/s" : "merges/s", .rate_scale = counting ? 1e-6 : 1.0});
  }

  progress::Mode mode_;
  data::BpeTrainProgress::Phase phase_ = data::BpeTrainProgress::Phase::kCounting;
  std::unique_ptr<progress::Progress> bar_;
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
  PhaseProgress bar(a.progress ? progress::Mode::kBar : progress::Mode::kAuto);
  Timer timer;
  StatusOr<data::TrainedBpe> trained = data::train_bpe(options, [&](const data::BpeTrainProgress& p) { bar.update(p); });
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
  t->add_flag("--progress", a.progress, "draw the progress bar even when stderr is not a terminal (else plain lines every 10 s)");
  t->add_flag("--json", a.json, "print the summary as one compact JSON object (the text summary goes to stderr)");
  t->callback([&runner] { runner.set(run_tokenizer_train(a)); });
}

}  // namespace lmt::cli
