// `lmtrain data prepare --tokenizer T --input PATHS... --out DIR [--text-field text] [--val-fraction F]
//  [--split-seed S] [--shard-tokens N] [--threads N] [--eos TOKEN] [--encoding E] [--progress] [--json]`
// tokenises text into train/val shards + manifest.json (lmt/data/prepare.h);
// `lmtrain data info DIR [--verify] [--json]` summarises a prepared dataset.
//
// Progress (lmt/progress: MB done/total, MB/s, documents, ETA) goes to stderr: a bar when it is a
// terminal or with --progress, else a plain line every 10 s; nothing above log level INFO. The
// summary goes to stdout (one JSON object with --json).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "lmt/data/dataset.h"
#include "lmt/data/prepare.h"
#include "lmt/data/tokenizer/tokenizer.h"
#include "lmt/progress/progress.h"

namespace lmt::cli {
namespace {

struct PrepareArgs {
  std::string tokenizer, encoding, eos;
  std::vector<std::string> inputs;
  std::string out;
  std::string text_field = "text";
  double val_fraction = 0.005;
  uint64_t split_seed = 0;
  int64_t shard_tokens = 100'000'000;
  int workers = 0;
  bool progress = false, json = false;
};

struct InfoArgs {
  std::string dir;
  bool verify = false, json = false;
};

nlohmann::json split_summary(const data::SplitInfo& s) {
  return {{"documents", s.documents}, {"tokens", s.tokens}, {"shards", s.shards.size()}};
}

Status run_prepare(const PrepareArgs& a) {
  LMT_RETURN_IF_ERROR(check_thread_count(a.workers, "--threads"));
  LMT_RETURN_IF_ERROR(check_flag("--shard-tokens", a.shard_tokens, 1, int64_t{1} << 40, "tokens per shard file, e.g. 100000000"));
  LMT_RETURN_IF_ERROR(check_omp_num_threads());
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<data::Tokenizer> tok, data::load_tokenizer(a.tokenizer, a.encoding));
  data::PrepareOptions o;
  o.inputs = a.inputs;
  o.out = a.out;
  o.text_field = a.text_field;
  o.val_fraction = a.val_fraction;
  o.split_seed = a.split_seed;
  o.shard_tokens = a.shard_tokens;
  o.workers = a.workers;
  o.tokenizer_path = a.tokenizer;
  if (!a.eos.empty()) {
    o.eos_id = tok->token_id(a.eos);
    if (!o.eos_id)
      return InvalidArgument("--eos '" + a.eos + "' is not a token of " + a.tokenizer,
                             "give the exact text of a special token, e.g. --eos '<|endoftext|>'");
  }
  progress::Progress bar({.label = "prepare", .style = progress::CountStyle::kBytes,
                          .mode = a.progress ? progress::Mode::kBar : progress::Mode::kAuto, .rate_unit = "MB/s",
                          .rate_scale = 1e-6});
  auto r = data::prepare_dataset(o, *tok, [&bar](const data::PrepareProgress& p) {
    bar.set_total(static_cast<int64_t>(p.bytes_total));
    bar.update(static_cast<int64_t>(p.bytes_done), {{"docs", progress::count_text(p.documents)}});
  });
  bar.finish();
  if (!r.ok()) return r.status();
  const data::Manifest& m = r->manifest;
  const double mb = r->input_bytes / 1e6, mb_per_s = r->seconds > 0 ? mb / r->seconds : 0;
  const int workers = o.workers > 0 ? o.workers : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (a.json) {
    nlohmann::json j = {{"out", a.out},         {"documents", r->documents},  {"empty_documents", r->empty_documents},
                        {"train", split_summary(m.train)}, {"val", split_summary(m.val)},
                        {"input_bytes", r->input_bytes}, {"seconds", r->seconds}, {"mb_per_s", mb_per_s},
                        {"workers", workers},   {"vocab_size", m.vocab_size}, {"eos_id", m.eos_id},
                        {"token_dtype", m.token_bytes == 2 ? "uint16" : "uint32"}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("prepared %s: %lld documents (%lld empty skipped); train %lld tokens in %zu shard(s), val %lld tokens "
                "in %zu shard(s), %s; %.2f MB in %.2f s = %.2f MB/s with %d worker(s)\n",
                a.out.c_str(), static_cast<long long>(r->documents), static_cast<long long>(r->empty_documents),
                static_cast<long long>(m.train.tokens), m.train.shards.size(), static_cast<long long>(m.val.tokens),
                m.val.shards.size(), m.token_bytes == 2 ? "uint16" : "uint32", mb, r->seconds, mb_per_s, workers);
    if (o.val_fraction > 0 && m.val.documents == 0)
      std::printf("note: no document fell into the val split; raise --val-fraction to get one\n");
  }
  return Status::Ok();
}

// Document lengths of a split from its doc index (documents may continue across shards).
std::vector<int64_t> document_lengths(const data::Dataset& d) {
  std::vector<int64_t> starts;
  int64_t offset = 0;
  for (const data::ShardReader& s : d.shards()) {
    for (uint64_t local : s.doc_starts()) starts.push_back(offset + static_cast<int64_t>(local));
    offset += s.token_count();
  }
  std::vector<int64_t> lengths;
  for (size_t i = 0; i < starts.size(); ++i) lengths.push_back((i + 1 < starts.size() ? starts[i + 1] : offset) - starts[i]);
  return lengths;
}

Status run_info(const InfoArgs& a) {
  if (a.dir.empty()) return UsageError("--dataset is required", "e.g. lmtrain data info --dataset data/demo");
  LMT_ASSIGN_OR_RETURN(data::Manifest m, data::read_manifest(a.dir));
  nlohmann::json splits = nlohmann::json::object();
  for (const char* name : {"train", "val"}) {
    const data::SplitInfo& s = *m.split(name);
    nlohmann::json j = split_summary(s);
    if (s.tokens > 0) {
      LMT_ASSIGN_OR_RETURN(auto d, data::Dataset::open(a.dir, name, a.verify ? data::Verify::kFull : data::Verify::kHeader));
      std::vector<int64_t> len = document_lengths(*d);  // tokens per document, EOS included
      std::sort(len.begin(), len.end());
      j["document_tokens"] = {{"min", len.front()}, {"median", len[len.size() / 2]}, {"max", len.back()},
                              {"mean", static_cast<double>(s.tokens) / static_cast<double>(len.size())}};
    }
    splits[name] = j;
  }
  const nlohmann::json& prep = m.preparation;
  if (a.json) {
    nlohmann::json j = {{"dir", a.dir}, {"tokenizer", {{"path", m.tokenizer_path}, {"fingerprint", m.tokenizer_fingerprint}}},
                        {"vocab_size", m.vocab_size}, {"eos_id", m.eos_id},
                        {"token_dtype", m.token_bytes == 2 ? "uint16" : "uint32"}, {"shard_tokens", m.shard_tokens},
                        {"splits", splits}, {"verified", a.verify}, {"preparation", prep}};
    std::printf("%s\n", j.dump().c_str());
    return Status::Ok();
  }
  std::printf("dataset %s\n", a.dir.c_str());
  std::printf("  tokenizer  %s (fingerprint %.16s…), vocab %lld, eos %d, tokens stored as %s\n",
              m.tokenizer_path.c_str(), m.tokenizer_fingerprint.c_str(), static_cast<long long>(m.vocab_size),
              m.eos_id, m.token_bytes == 2 ? "uint16" : "uint32");
  for (const char* name : {"train", "val"}) {
    const nlohmann::json& s = splits[name];
    std::printf("  %-5s      %lld tokens, %lld documents, %zu shard(s)", name, s["tokens"].get<long long>(),
                s["documents"].get<long long>(), s["shards"].get<size_t>());
    if (s.contains("document_tokens"))
      std::printf("; tokens per document min %lld / median %lld / mean %.0f / max %lld",
                  s["document_tokens"]["min"].get<long long>(), s["document_tokens"]["median"].get<long long>(),
                  s["document_tokens"]["mean"].get<double>(), s["document_tokens"]["max"].get<long long>());
    std::printf("\n");
  }
  if (prep.contains("sources") && prep["sources"].is_array()) {
    std::printf("  sources    %zu file(s)", prep["sources"].size());
    if (prep.contains("empty_documents")) std::printf(", %s empty documents skipped", prep["empty_documents"].dump().c_str());
    if (prep.contains("val_fraction")) std::printf(", val fraction %s", prep["val_fraction"].dump().c_str());
    std::printf("\n");
    size_t shown = 0;
    for (const auto& src : prep["sources"]) {
      if (++shown > 10) {
        std::printf("             … %zu more\n", prep["sources"].size() - 10);
        break;
      }
      std::printf("             %s (%s, %s bytes, %s documents)\n", src.value("path", "?").c_str(),
                  src.value("format", "?").c_str(), src["bytes"].dump().c_str(), src["documents"].dump().c_str());
    }
  }
  std::printf("  verified   %s\n", a.verify ? "every shard: checksums, token ids and document index"
                                           : "headers and sizes only (--verify checks every byte)");
  return Status::Ok();
}

}  // namespace

void add_data_command(CLI::App& app, Runner& runner) {
  static PrepareArgs pa;
  static InfoArgs ia;
  CLI::App* data = app.add_subcommand("data", "prepare token shards and inspect datasets");
  data->require_subcommand(1);

  CLI::App* p = data->add_subcommand("prepare", "tokenise text files into train/val shards with a manifest");
  p->add_option("--tokenizer", pa.tokenizer, "tokenizer.json, *.tiktoken, or a GPT-2 directory")->required();
  p->add_option("--encoding", pa.encoding, "pattern/special tokens of a .tiktoken file (default: from its name)");
  p->add_option("--input", pa.inputs, "text files (one document each), JSONL files, directories")->required();
  p->add_option("--out", pa.out, "the dataset directory to create (must not exist or be empty)")->required();
  p->add_option("--text-field", pa.text_field, "JSONL field holding the document")->capture_default_str();
  p->add_option("--val-fraction", pa.val_fraction, "expected fraction of documents in the val split")
      ->capture_default_str();
  p->add_option("--split-seed", pa.split_seed, "seed of the train/val document hash")->capture_default_str();
  p->add_option("--shard-tokens", pa.shard_tokens, "tokens per shard file")->capture_default_str();
  p->add_option("--threads", pa.workers, "tokenising threads (0: one per hardware thread; at most 4 x the hardware threads, at least 64, at most 1024)")->capture_default_str();
  add_deprecated_option(p, "--workers", "--threads", pa.workers);
  p->add_option("--eos", pa.eos, "the end-of-document token's text (default: the tokenizer's)");
  p->add_flag("--progress", pa.progress, "draw the progress bar even when stderr is not a terminal (else plain lines every 10 s)");
  p->add_flag("--json", pa.json, "print the summary as one JSON object");
  p->callback([&runner] { runner.set(run_prepare(pa)); });

  CLI::App* i = data->add_subcommand("info", "summarise a prepared dataset");
  i->add_option("--dataset", ia.dir, "the prepared dataset directory (required)");
  // The positional DIR of earlier versions still works, unlisted, with a deprecation warning
  // (docs/CLI.md): it arrives as the one extra argument.
  i->allow_extras();
  i->add_flag("--verify", ia.verify, "hash and range-check every shard byte");
  i->add_flag("--json", ia.json, "print one JSON object");
  i->callback([&runner, i] {
    const std::vector<std::string> extra = i->remaining();
    if (!extra.empty()) {
      if (extra.size() > 1 || extra[0].rfind("-", 0) == 0 || !ia.dir.empty())
        return runner.set(UsageError("unexpected argument '" + extra[0] + "'", "lmtrain data info --dataset DIR [--verify] [--json]"));
      std::fprintf(stderr, "lmtrain: warning: data info DIR is deprecated, use --dataset DIR\n");
      ia.dir = extra[0];
    }
    runner.set(run_info(ia));
  });

  add_data_clean_command(data, runner);

  // `lmtrain bench data` hangs under `bench`, which main() registers first.
  auto named_bench = [](const CLI::App* sub) { return sub->get_name() == "bench"; };
  std::vector<CLI::App*> bench = app.get_subcommands(named_bench);
  LMT_CHECK(bench.size() == 1) << "add_bench_command() must run before add_data_command()";
  add_data_bench(bench.front(), runner);
}

}  // namespace lmt::cli
