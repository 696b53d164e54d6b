#include "lmt/report/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "lmt/base/format.h"
#include "lmt/io/atomic_file.h"
#include "lmt/report/escape.h"

namespace lmt::report {
namespace fs = std::filesystem;

namespace {

Series with(Series s, std::string name, std::string color, Style style) {
  s.name = std::move(name);
  s.color = std::move(color);
  s.style = style;
  return s;
}

Series smoothed(const Series& raw, std::string name, std::string color) {
  Series s = raw;
  s.y = trailing_mean(raw.y, smoothing_window(raw.y.size()));
  return with(std::move(s), std::move(name), std::move(color), Style::kLine);
}

// The eval_<task>_acc keys of every run, sorted.
std::vector<std::string> accuracy_keys(const std::vector<RunData>& runs) {
  std::set<std::string> keys;
  for (const auto& r : runs)
    for (const auto& e : r.evals)
      for (const auto& [k, v] : e.items())
        if (k.rfind("eval_", 0) == 0 && k.size() > 9 && k.compare(k.size() - 4, 4, "_acc") == 0 && v.is_number())
          keys.insert(k);
  return {keys.begin(), keys.end()};
}

// Step records that were skipped or flagged as spikes.
std::vector<nlohmann::json> unstable_steps(const RunData& r) {
  std::vector<nlohmann::json> out;
  for (const auto& s : r.steps)
    if (s.contains("skipped") || s.contains("spike_z")) out.push_back(s);
  return out;
}

std::string num(const nlohmann::json& j, const char* key, const char* fmt = "%.4g") {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return "–";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, j[key].get<double>());
  return buf;
}

std::string short_of(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return "–";
  return short_number(j[key].get<double>());
}

std::string text_of(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return "–";
  const auto& v = j[key];
  return html_escape(v.is_string() ? v.get<std::string>() : v.dump());
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The run's wall-clock span: first to last record time.
double wall_seconds(const RunData& r) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto* group : {&r.headers, &r.steps, &r.vals, &r.evals, &r.events})
    for (const auto& j : *group)
      if (j.contains("time") && j["time"].is_number()) {
        lo = std::min(lo, j["time"].get<double>());
        hi = std::max(hi, j["time"].get<double>());
      }
  return hi >= lo ? hi - lo : NAN;
}

std::string summary_table(const std::vector<RunData>& runs) {
  std::string h = "<table class=\"summary\"><tr><th>run</th><th>steps</th><th>tokens</th><th>loss (last)</th>"
                  "<th>loss (smoothed)</th><th>best val loss</th><th>tok/s (median)</th><th>MFU (median)</th>"
                  "<th>wall time</th><th>model</th><th>resumes</th><th>lmtrain</th></tr>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    const nlohmann::json last = r.steps.empty() ? nlohmann::json::object() : r.steps.back();
    const Series loss = extract(r.steps, "step", "loss");
    std::string smooth = "–", best = "–";
    if (!loss.y.empty()) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.4g", trailing_mean(loss.y, smoothing_window(loss.y.size())).back());
      smooth = buf;
    }
    const Series val = extract(r.vals, "step", "val_loss");
    if (!val.y.empty()) {
      const size_t at = std::min_element(val.y.begin(), val.y.end()) - val.y.begin();
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.4g (step %.0f)", val.y[at], val.x[at]);
      best = buf;
    }
    char tps[32], mfu[32];
    std::snprintf(tps, sizeof tps, "%s", short_number(median(extract(r.steps, "step", "tokens_per_s").y)).c_str());
    std::snprintf(mfu, sizeof mfu, "%.2f%%", 100 * median(extract(r.steps, "step", "mfu").y));
    const nlohmann::json& hd = r.header;
    std::string steps = num(last, "step", "%.0f");
    if (hd.is_object() && hd.contains("max_steps")) steps += " / " + num(hd, "max_steps", "%.0f");
    std::string model = "–";
    if (hd.is_object() && hd.contains("model") && hd["model"].is_object())
      model = text_of(hd["model"], "name") + " (" + short_of(hd["model"], "parameters") + " params)";
    std::string version = text_of(hd, "lmtrain_version");
    if (hd.is_object() && hd.contains("git_commit") && hd["git_commit"].is_string() && !hd["git_commit"].get<std::string>().empty())
      version += " <code>" + html_escape(hd["git_commit"].get<std::string>().substr(0, 12)) + "</code>";
    h += "<tr><td><span class=\"swatch\" style=\"background:" + run_color(i) + "\"></span>" + html_escape(r.label) +
         "</td><td>" + steps + "</td><td>" + short_of(last, "tokens") +
         "</td><td>" + num(last, "loss") + "</td><td>" + smooth + "</td><td>" + best + "</td><td>" + tps + "</td><td>" + mfu +
         "</td><td>" + html_escape(duration_text(wall_seconds(r))) + "</td><td>" + model + "</td><td>" +
         std::to_string(r.headers.empty() ? 0 : r.headers.size() - 1) + "</td><td>" + version + "</td></tr>\n";
  }
  return h + "</table>\n";
}

std::string events_table(const std::vector<RunData>& runs) {
  std::string rows;
  for (const RunData& r : runs) {
    for (const auto& s : unstable_steps(r))
      rows += "<tr><td>" + html_escape(r.label) + "</td><td>" + num(s, "step", "%.0f") + "</td><td>" +
              (s.contains("skipped") ? "skipped: " + text_of(s, "skipped") : std::string("loss spike")) + "</td><td>loss " +
              num(s, "loss") + (s.contains("spike_z") ? ", z = " + num(s, "spike_z", "%.1f") : "") + "</td></tr>\n";
    for (const auto& e : r.events) {
      nlohmann::json detail = e;
      for (const char* k : {"type", "event", "step", "time"}) detail.erase(k);
      rows += "<tr><td>" + html_escape(r.label) + "</td><td>" + num(e, "step", "%.0f") + "</td><td>" + text_of(e, "event") +
              "</td><td>" + html_escape(detail.empty() ? "" : detail.dump()) + "</td></tr>\n";
    }
  }
  if (rows.empty()) return "";
  return "<h2>Events</h2>\n<table class=\"events\"><tr><th>run</th><th>step</th><th>event</th><th>detail</th></tr>\n" + rows +
         "</table>\n";
}

std::string kv_rows(const nlohmann::json& j) {
  std::string s;
  if (!j.is_object()) return s;
  for (const auto& [k, v] : j.items())
    s += "<tr><th>" + html_escape(k) + "</th><td>" + html_escape(v.is_string() ? v.get<std::string>() : v.dump()) + "</td></tr>";
  return s;
}

std::string run_details(const RunData& r, size_t i, const std::string& out_dir) {
  const nlohmann::json& hd = r.header;
  std::string s = "<section class=\"run\"><h2><span class=\"swatch\" style=\"background:" + run_color(i) + "\"></span>Run " +
                  html_escape(r.label) + "</h2>\n<p>Directory: <code>" + html_escape(r.dir) + "</code></p>\n";
  if (!r.warnings.empty()) {
    s += "<ul class=\"warnings\">";
    for (const auto& w : r.warnings) s += "<li>warning: " + html_escape(w) + "</li>";
    s += "</ul>\n";
  }
  if (hd.is_object()) {
    s += "<h3>Machine</h3><table class=\"kv\">" + kv_rows(hd.value("machine", nlohmann::json::object())) +
         "</table>\n<h3>Peaks and world</h3><table class=\"kv\">" + kv_rows(hd.value("peaks", nlohmann::json::object())) +
         kv_rows(hd.value("world", nlohmann::json::object())) + "</table>\n";
  } else {
    s += "<p>No header record (metrics.jsonl from before lmtrain wrote one).</p>\n";
  }
  s += "<h3>Checkpoints</h3>";
  if (r.checkpoints.empty()) {
    s += "<p>none</p>\n";
  } else {
    s += "<ul class=\"checkpoints\">";
    std::error_code ec;
    const fs::path base = fs::weakly_canonical(fs::absolute(out_dir.empty() ? "." : out_dir), ec);
    for (const auto& c : r.checkpoints) {
      const fs::path abs = fs::weakly_canonical(fs::absolute(c), ec);
      std::string rel = fs::relative(abs, base, ec).generic_string();
      if (ec || rel.empty()) rel = abs.generic_string();
      s += "<li><a href=\"" + html_escape(url_path_escape(rel)) + "/\">" + html_escape(fs::path(c).filename().string()) +
           "</a></li>";
    }
    s += "</ul>\n";
  }
  if (hd.is_object() && hd.contains("config_toml") && hd["config_toml"].is_string())
    s += "<details><summary>Config (resolved recipe)</summary><pre class=\"config\">" +
         html_escape(hd["config_toml"].get<std::string>()) + "</pre></details>\n";
  return s + "</section>\n";
}

constexpr const char* kStyle = R"(<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1360px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; } h3 { font-size: 15px; }
table { border-collapse: collapse; margin: 8px 0; } td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; }
svg.plot { border: 1px solid #eee; background: #fff; font-size: 11px; }
svg.plot .ptitle { font-size: 13px; font-weight: 600; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 6px; vertical-align: middle; }
pre.config { background: #f6f6f6; padding: 8px; overflow-x: auto; }
.warnings { color: #a40; }
</style>
)";

// Checks every plot's points against data-points; reports through document.title.
constexpr const char* kCheck = R"(<script>
(function () {
  var errors = [];
  window.addEventListener('error', function (e) { errors.push('script error: ' + e.message); });
  var plots = document.querySelectorAll('svg.plot');
  if (plots.length === 0) errors.push('no plots');
  plots.forEach(function (svg) {
    var n = 0;
    svg.querySelectorAll('path.series').forEach(function (p) {
      n += (p.getAttribute('d').match(/[ML]/g) || []).length;
    });
    n += svg.querySelectorAll('circle.pt').length;
    var want = parseInt(svg.getAttribute('data-points'), 10);
    if (n === 0 || n !== want) errors.push(svg.id + ': ' + n + ' points drawn, ' + want + ' expected');
  });
  document.title = errors.length === 0 ? 'ok' : 'error: ' + errors.join('; ');
})();
</script>
)";

}  // namespace

std::string run_color(size_t i) {
  static const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
  return kPalette[i % 8];
}

std::vector<Plot> report_plots(const std::vector<RunData>& runs) {
  const bool many = runs.size() > 1;
  auto name = [&](const RunData& r, const std::string& what) { return many ? r.label + " " + what : what; };
  Plot loss{"loss", "Loss", "tokens", "loss (nats/token)", {}};
  Plot lr{"lr", "Learning rate", "step", "lr", {}};
  Plot gnorm{"grad_norm", "Gradient norm (before clipping)", "step", "global L2 norm", {}};
  Plot tps{"tokens_per_s", "Throughput", "step", "tokens/s", {}};
  Plot mfu{"mfu", "Model FLOPs utilisation", "step", "MFU (%)", {}};
  Plot mem{"memory", "Memory", "step", "MiB", {}};
  Plot acc{"eval", "Eval accuracy", "tokens", "accuracy", {}};
  Plot events{"events", "Stability events (skipped or spike steps)", "step", "loss", {}};
  const auto acc_keys = accuracy_keys(runs);
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    const std::string c = run_color(i);
    const Series raw = extract(r.steps, "tokens", "loss");
    if (!raw.x.empty()) {
      loss.series.push_back(with(raw, name(r, "loss"), c, Style::kFaintLine));
      loss.series.push_back(smoothed(raw, name(r, "loss (smoothed)"), c));
    }
    Series val = extract(r.vals, "tokens", "val_loss");
    if (!val.x.empty()) loss.series.push_back(with(std::move(val), name(r, "val loss"), c, Style::kDashed));
    Series s = extract(r.steps, "step", "lr");
    if (!s.x.empty()) lr.series.push_back(with(std::move(s), name(r, "lr"), c, Style::kLine));
    s = extract(r.steps, "step", "grad_norm");
    if (!s.x.empty()) gnorm.series.push_back(with(std::move(s), name(r, "grad norm"), c, Style::kLine));
    s = extract(r.steps, "step", "tokens_per_s");
    if (!s.x.empty()) {
      tps.series.push_back(with(s, name(r, "tok/s"), c, Style::kFaintLine));
      tps.series.push_back(smoothed(s, name(r, "tok/s (smoothed)"), c));
    }
    s = extract(r.steps, "step", "mfu", 100.0);
    if (!s.x.empty()) mfu.series.push_back(with(std::move(s), name(r, "MFU"), c, Style::kLine));
    s = extract(r.steps, "step", "rss_bytes", 1.0 / (1 << 20));
    if (!s.x.empty()) mem.series.push_back(with(std::move(s), name(r, "RSS"), c, Style::kLine));
    s = extract(r.steps, "step", "arena_peak_bytes", 1.0 / (1 << 20));
    if (!s.x.empty()) mem.series.push_back(with(std::move(s), name(r, "arena peak"), c, Style::kDashed));
    for (size_t k = 0; k < acc_keys.size(); ++k) {
      s = extract(r.evals, "tokens", acc_keys[k]);
      const std::string task = acc_keys[k].substr(5, acc_keys[k].size() - 9);
      if (!s.x.empty()) acc.series.push_back(with(std::move(s), name(r, task), run_color(i * acc_keys.size() + k), Style::kDashed));
    }
    const auto unstable = unstable_steps(r);
    if (!unstable.empty()) {
      events.series.push_back(with(extract(r.steps, "step", "loss"), name(r, "loss"), c, Style::kFaintLine));
      events.series.push_back(with(extract(unstable, "step", "loss"), name(r, "skipped/spike"), c, Style::kDots));
    }
  }
  std::vector<Plot> out;
  for (Plot* p : {&loss, &lr, &gnorm, &tps, &mfu, &mem, &acc, &events})
    if (p->points() > 0) out.push_back(std::move(*p));
  return out;
}

std::string render_report(const std::vector<RunData>& runs, const std::string& out_dir) {
  std::string labels;
  for (const auto& r : runs) labels += (labels.empty() ? "" : ", ") + r.label;
  std::string page = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>lmtrain report: " +
                     html_escape(labels) + "</title>\n" + kStyle + "</head><body>\n<h1>lmtrain report: " + html_escape(labels) +
                     "</h1>\n<h2>Summary</h2>\n" + summary_table(runs);
  const auto plots = report_plots(runs);
  page += "<h2>Curves</h2>\n";
  if (plots.empty()) page += "<p>No step has been logged yet.</p>\n";
  page += "<div class=\"plots\">\n";
  for (const Plot& p : plots) page += render_svg(p);
  page += "</div>\n" + events_table(runs);
  for (size_t i = 0; i < runs.size(); ++i) page += run_details(runs[i], i, out_dir);
  page += "<p class=\"footer\">Smoothed curves: trailing mean over n/10 points (1 to 50). Times: Unix seconds in "
          "metrics.jsonl (docs/FORMATS.md).</p>\n";
  page += kCheck;
  return page + "</body></html>\n";
}

Status write_report(const std::vector<RunData>& runs, const std::string& out_path) {
  const std::string dir = fs::path(out_path).parent_path().string();
  return io::write_file_atomically(out_path, render_report(runs, dir));
}

}  // namespace lmt::report
