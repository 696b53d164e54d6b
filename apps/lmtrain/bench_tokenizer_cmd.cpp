// `lmtrain bench tokenizer --tokenizer T --input FILE [--threads N] [--iters K] [--json]`: encode
// throughput in MB/s (10^6 bytes of input text per second) per thread.
//
// The input is a JSONL file (one document per line in its `text` field) or a plain file (one
// document). After one untimed warm-up pass, the documents are encoded `--iters` times and the
// median pass is reported. With --threads N the documents are dealt into N groups of about equal
// bytes, each encoded by its own thread with the one shared tokenizer; mb_per_s is then the mean
// of the threads' own rates and aggregate_mb_per_s counts all bytes over the wall time.
#include <algorithm>
#include <cstdio>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "lmt/base/timer.h"
#include "lmt/data/tokenizer/tokenizer.h"
#include "lmt/metrics/hardware.h"
#include "text_inputs.h"

namespace lmt::cli {
namespace {

struct TokenizerBenchArgs {
  std::string tokenizer, encoding, input;
  int threads = 1, iters = 3;
  bool json = false;
};

struct Pass {
  double wall = 0, per_thread_mb_per_s = 0;
  int64_t tokens = 0;
};

// Documents -> `n` groups of similar total size (largest first into the lightest group).
std::vector<std::vector<const std::string*>> deal(const std::vector<std::string>& docs, int n) {
  std::vector<const std::string*> order;
  for (const std::string& d : docs) order.push_back(&d);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->size() > b->size(); });
  std::vector<std::vector<const std::string*>> groups(n);
  std::vector<size_t> load(n, 0);
  for (const std::string* d : order) {
    const size_t g = std::min_element(load.begin(), load.end()) - load.begin();
    groups[g].push_back(d);
    load[g] += d->size();
  }
  return groups;
}

Pass run_pass(const data::Tokenizer& tok, const std::vector<std::vector<const std::string*>>& groups) {
  const size_t n = groups.size();
  std::vector<double> secs(n, 0);
  std::vector<int64_t> tokens(n, 0), bytes(n, 0);
  auto work = [&](size_t g) {
    Timer t;
    for (const std::string* d : groups[g]) {
      tokens[g] += static_cast<int64_t>(tok.encode(*d).size());
      bytes[g] += static_cast<int64_t>(d->size());
    }
    secs[g] = t.seconds();
  };
  Timer wall;
  if (n == 1) {
    work(0);
  } else {
    std::vector<std::thread> pool;
    for (size_t g = 0; g < n; ++g) pool.emplace_back(work, g);
    for (auto& th : pool) th.join();
  }
  Pass p;
  p.wall = wall.seconds();
  for (size_t g = 0; g < n; ++g) {
    p.tokens += tokens[g];
    if (secs[g] > 0) p.per_thread_mb_per_s += static_cast<double>(bytes[g]) / 1e6 / secs[g] / static_cast<double>(n);
  }
  return p;
}

Status run_tokenizer_bench(const TokenizerBenchArgs& a) {
  LMT_RETURN_IF_ERROR(check_thread_count(a.threads, "--threads", 1));
  LMT_RETURN_IF_ERROR(check_flag("--iters", a.iters, 1, 1000000, "timed passes over the input"));
  Timer load;
  LMT_ASSIGN_OR_RETURN(auto tok, data::load_tokenizer(a.tokenizer, a.encoding));
  const double load_seconds = load.seconds();
  LMT_ASSIGN_OR_RETURN(std::vector<std::string> docs, read_documents(a.input));
  int64_t bytes = 0;
  for (const std::string& d : docs) bytes += static_cast<int64_t>(d.size());
  if (bytes == 0) return InvalidArgument(a.input + ": no text to encode");

  const auto groups = deal(docs, a.threads);
  run_pass(*tok, groups);  // warm-up: page in the tables, fill the thread-local scratch
  std::vector<Pass> passes;
  for (int i = 0; i < a.iters; ++i) passes.push_back(run_pass(*tok, groups));
  std::sort(passes.begin(), passes.end(), [](const Pass& x, const Pass& y) { return x.wall < y.wall; });
  const Pass& med = passes[passes.size() / 2];
  const double aggregate = static_cast<double>(bytes) / 1e6 / med.wall;
  const double per_thread = a.threads == 1 ? aggregate : med.per_thread_mb_per_s;
  if (a.json) {
    nlohmann::json j = {{"bench", "tokenizer"}, {"tokenizer", a.tokenizer}, {"input", a.input},
                        {"documents", docs.size()}, {"threads", a.threads}, {"iters", a.iters},
                        {"mb_per_s", per_thread}, {"aggregate_mb_per_s", aggregate}, {"tokens", med.tokens},
                        {"bytes", bytes}, {"seconds", med.wall}, {"load_seconds", load_seconds},
                        {"machine", metrics::machine_summary()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("machine: %s\n", metrics::machine_summary().c_str());
    std::printf("tokenizer %s (loaded in %.2f s) on %s: %lld bytes in %zu documents -> %lld tokens "
                "(%.2f bytes/token)\n",
                a.tokenizer.c_str(), load_seconds, a.input.c_str(), static_cast<long long>(bytes), docs.size(),
                static_cast<long long>(med.tokens), static_cast<double>(bytes) / static_cast<double>(std::max<int64_t>(1, med.tokens)));
    std::printf("encode: %.2f MB/s per thread with %d thread%s (median of %d: %.3f s; all threads %.2f MB/s)\n",
                per_thread, a.threads, a.threads == 1 ? "" : "s", a.iters, med.wall, aggregate);
  }
  return Status::Ok();
}

}  // namespace

void add_tokenizer_bench(CLI::App* bench, Runner& runner) {
  static TokenizerBenchArgs a;
  CLI::App* t = bench->add_subcommand("tokenizer", "tokenizer encode throughput (MB/s per thread)");
  t->add_option("--tokenizer", a.tokenizer, "tokenizer.json, a .tiktoken file, or a GPT-2 directory")->required();
  t->add_option("--encoding", a.encoding, "for a .tiktoken file (default: from the file name)");
  t->add_option("--input", a.input, "JSONL with a \"text\" field per line, or a plain text file")->required();
  t->add_option("--threads", a.threads, "encoding threads (documents dealt among them)")->capture_default_str();
  t->add_option("--iters", a.iters, "timed passes over the input (the median is reported)")->capture_default_str();
  t->add_flag("--json", a.json, "print one JSON object (mb_per_s, tokens, bytes, seconds, ...)");
  t->callback([&runner] { runner.set(run_tokenizer_bench(a)); });
}

}  // namespace lmt::cli
