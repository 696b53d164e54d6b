// `lmtrain report RUN [RUN...] [--out FILE]`: one self-contained HTML file with the runs' curves,
// summary, config, machine and checkpoint links (src/lmt/report/html_report.h). Several runs
// overlay their curves. Default --out: the first RUN's report.html.
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "lmt/report/html_report.h"
#include "lmt/report/run_data.h"

namespace lmt::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> runs;
  std::string out;
  bool json = false;
};

Status run_report(const ReportArgs& a) {
  if (a.runs.empty()) return UsageError("no run directory given", "e.g. lmtrain report runs/demo");
  LMT_ASSIGN_OR_RETURN(std::vector<report::RunData> runs, report::read_runs(a.runs));
  for (const auto& r : runs)
    for (const auto& w : r.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  const std::string out = a.out.empty() ? (std::filesystem::path(a.runs.front()) / "report.html").string() : a.out;
  if (std::filesystem::is_directory(out))
    return InvalidArgument("--out " + out + " is a directory", "name the HTML file to write, e.g. --out " + out + "/report.html");
  LMT_RETURN_IF_ERROR(report::write_report(runs, out));
  if (a.json) std::printf("%s\n", nlohmann::json{{"report", out}, {"runs", a.runs}}.dump().c_str());
  else std::printf("report: %s\n", out.c_str());
  return Status::Ok();
}

}  // namespace

void add_report_command(CLI::App& app, Runner& runner) {
  static ReportArgs args;
  CLI::App* r = app.add_subcommand("report", "write an HTML report (plots, summary, config) of one or more runs");
  r->add_option("runs", args.runs, "run directories (written by lmtrain train); several overlay their curves")->required();
  r->add_option("--out", args.out, "HTML file to write (default: RUN/report.html of the first run)");
  r->add_flag("--json", args.json, "print one compact JSON object: {\"report\": path, \"runs\": [...]}");
  r->callback([&runner] { runner.set(run_report(args)); });
}

}  // namespace lmt::cli
