// `lmtrain data clean --input PATH... --out DIR [--config clean.toml] [--threads N]
//  [--decontaminate EVALFILE...] [--json]` (docs/DATA_CLEAN.md).
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "lmt/clean/pipeline.h"
#include "lmt/progress/progress.h"

namespace lmt::cli {
namespace {

struct CleanArgs {
  std::vector<std::string> inputs;
  std::string out;
  std::string config;
  std::vector<std::string> overrides;  // --set
  int64_t workers = 0;
  std::vector<std::string> decontaminate;
  std::string text_field;
  bool json = false;
};

Status run_clean(const CleanArgs& a) {
  LMT_RETURN_IF_ERROR(check_flag("--threads", a.workers, 0, 1024, "0 uses one worker per hardware thread"));
  LMT_ASSIGN_OR_RETURN(clean::CleanOptions options, clean::load_clean_options(a.config, a.overrides));
  if (!a.text_field.empty()) options.text_field = a.text_field;
  clean::CleanRequest req;
  req.inputs = a.inputs;
  req.out = a.out;
  req.options = options;
  req.workers = a.workers > 0 ? a.workers : std::max<int64_t>(1, std::thread::hardware_concurrency());
  req.decontaminate = a.decontaminate;
  // Progress (lmt/progress) on stderr, one display per stage: documents done (of the total when the
  // stage knows it), docs/s, ETA.
  std::unique_ptr<progress::Progress> bar;
  std::string stage;
  req.progress = [&bar, &stage](const clean::CleanProgress& p) {
    if (!bar || p.stage != stage) {
      stage = p.stage;
      bar.reset();  // ends the previous stage's line
      bar = std::make_unique<progress::Progress>(progress::Options{
          .label = "clean " + p.stage, .total = p.docs_total, .rate_unit = "docs/s"});
    }
    bar->update(p.docs_done);
  };
  StatusOr<clean::CleanResult> cleaned = clean::run_clean(req);
  bar.reset();
  LMT_ASSIGN_OR_RETURN(clean::CleanResult r, std::move(cleaned));
  const nlohmann::json& rep = r.report;
  if (a.json) {
    nlohmann::json j = {{"out", a.out},
                        {"documents_in", rep["documents_in"]},
                        {"documents_out", rep["documents_out"]},
                        {"bytes_in", rep["bytes_in"]},
                        {"bytes_out", rep["bytes_out"]},
                        {"shards", r.shards},
                        {"removed", rep["removed"]},
                        {"resumed_stages", r.resumed_stages},
                        {"timing", rep["timing"]},
                        {"report", a.out + "/clean_report.json"}};
    std::printf("%s\n", j.dump().c_str());
    return Status::Ok();
  }
  std::printf("cleaned %lld of %lld documents (%lld of %lld bytes) into %s (%zu shards)\n",
              static_cast<long long>(rep["documents_out"].get<int64_t>()), static_cast<long long>(rep["documents_in"].get<int64_t>()),
              static_cast<long long>(rep["bytes_out"].get<int64_t>()), static_cast<long long>(rep["bytes_in"].get<int64_t>()),
              a.out.c_str(), r.shards.size());
  for (const auto& [reason, c] : rep["removed"].items())
    std::printf("  removed %-48s %8lld docs %12lld bytes\n", reason.c_str(), static_cast<long long>(c["documents"].get<int64_t>()),
                static_cast<long long>(c["bytes"].get<int64_t>()));
  const nlohmann::json& timing = rep["timing"];
  std::printf("time: %.2f s, peak RSS %.0f MB;", timing["total_seconds"].get<double>(), timing["peak_rss_bytes"].get<double>() / 1e6);
  for (const auto& t : timing["stages"])
    if (t.contains("seconds"))
      std::printf(" %s %.2f s (%.1f MB/s)", t["stage"].get<std::string>().c_str(), t["seconds"].get<double>(), t["mb_per_s"].get<double>());
  std::printf("\n");
  if (!r.resumed_stages.empty()) {
    std::printf("resumed: skipped the finished stages");
    for (const auto& s : r.resumed_stages) std::printf(" %s", s.c_str());
    std::printf("\n");
  }
  std::printf("report: %s/clean_report.json, removed samples: %s/removed_sample.jsonl\n", a.out.c_str(), a.out.c_str());
  return Status::Ok();
}

}  // namespace

void add_data_clean_command(CLI::App* data, Runner& runner) {
  static CleanArgs a;
  CLI::App* c = data->add_subcommand("clean", "filter, deduplicate and decontaminate raw text into cleaned JSONL");
  c->add_option("--input", a.inputs, "JSONL files, text files, directories")->required();
  c->add_option("--out", a.out, "the output directory to create")->required();
  c->add_option("--config", a.config, "clean.toml: normalisation, filters, dedup settings");
  c->add_option("--set", a.overrides, "override a clean.toml key, e.g. --set gopher_quality.min_doc_words=20 (repeatable)");
  c->add_option("--threads", a.workers, "worker threads (0: one per hardware thread)")->capture_default_str();
  add_deprecated_option(c, "--workers", "--threads", a.workers);
  c->add_option("--decontaminate", a.decontaminate, "evaluation files whose items must not appear in the output");
  c->add_option("--text-field", a.text_field, "JSONL field holding the document (default: input.text_field of the config, \"text\")");
  c->add_flag("--json", a.json, "print the summary as one JSON object");
  c->callback([&runner] { runner.set(run_clean(a)); });
}

}  // namespace lmt::cli
