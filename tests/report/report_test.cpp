// lmt_report: metrics.jsonl parsed into typed records and series; SVG vertices at the hand-computed
// pixel positions of the data; run text escaped in the HTML; several runs overlaid; and `lmtrain
// report` as a user runs it (errors name the file and line, nothing half-written).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/lmtrain_cli.h"
#include "lmt/report/escape.h"
#include "lmt/report/html_report.h"
#include "lmt/report/run_data.h"
#include "lmt/report/series.h"
#include "lmt/report/svg_plot.h"

namespace lmt::report {
namespace {
namespace fs = std::filesystem;

// The (x, y) vertices of every <path class="series"> with data-series="name" in `svg`.
std::vector<std::pair<double, double>> vertices(const std::string& svg, const std::string& name) {
  std::vector<std::pair<double, double>> out;
  const std::regex path("<path class=\"series\" data-series=\"" + name + "\" d=\"([^\"]*)\"");
  std::smatch m;
  if (!std::regex_search(svg, m, path)) return out;
  const std::string d = m[1];
  const std::regex pt("[ML]([-0-9.]+),([-0-9.]+)");
  for (auto it = std::sregex_iterator(d.begin(), d.end(), pt); it != std::sregex_iterator(); ++it)
    out.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
  return out;
}

const char* kMetrics =
    R"({"type":"header","lmtrain_version":"0.1.0","git_commit":"abc","config_toml":"[train]\nmax_steps = 3\n","max_steps":3,"time":100.0})"
    "\n"
    R"({"type":"step","step":1,"tokens":64,"loss":4.0,"lr":0.001,"grad_norm":2.0,"tokens_per_s":1000,"mfu":0.01,"rss_bytes":1048576,"arena_peak_bytes":2097152,"time":101.0})"
    "\n"
    R"({"type":"step","step":2,"tokens":128,"loss":3.0,"lr":0.002,"grad_norm":1.5,"tokens_per_s":2000,"mfu":0.02,"rss_bytes":2097152,"arena_peak_bytes":2097152,"skipped":"spike","spike_z":7.5,"time":102.0})"
    "\n"
    R"({"type":"val","step":2,"tokens":128,"val_loss":3.5,"val_ppl":33.1,"time":102.5})"
    "\n"
    R"({"type":"step","step":3,"tokens":192,"loss":null,"lr":0.003,"grad_norm":1.0,"time":103.0})"
    "\n"
    R"({"type":"eval","step":3,"tokens":192,"eval_piqa_acc":0.5,"eval_piqa_items":4,"time":104.0})"
    "\n"
    R"({"type":"event","event":"stopped","step":3,"signal":"SIGTERM","time":104.5})"
    "\n"
    R"({"type":"future_kind","step":3,"loss":99})"
    "\n";

class ReportTest : public test::ScratchDirTest {
 protected:
  std::string make_run(const std::string& name, const std::string& metrics) {
    const std::string dir = path(name);
    fs::create_directories(dir);
    test::write_bytes(dir + "/metrics.jsonl", metrics);
    return dir;
  }
};

TEST_F(ReportTest, EveryRecordTypeIsParsedIntoItsSeries) {
  auto run = read_run(make_run("r", kMetrics));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->label, "r");
  EXPECT_EQ(run->headers.size(), 1u);
  EXPECT_EQ(run->header["git_commit"], "abc");
  EXPECT_EQ(run->steps.size(), 3u);  // the future_kind record is ignored, not a step
  EXPECT_EQ(run->vals.size(), 1u);
  EXPECT_EQ(run->evals.size(), 1u);
  EXPECT_EQ(run->events.size(), 1u);
  EXPECT_TRUE(run->warnings.empty());
  const Series loss = extract(run->steps, "tokens", "loss");  // step 3's null loss is skipped
  EXPECT_EQ(loss.x, (std::vector<double>{64, 128}));
  EXPECT_EQ(loss.y, (std::vector<double>{4.0, 3.0}));
  const Series mib = extract(run->steps, "step", "rss_bytes", 1.0 / (1 << 20));
  EXPECT_EQ(mib.y, (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(extract(run->steps, "step", "lr").y, (std::vector<double>{0.001, 0.002, 0.003}));
  EXPECT_EQ(trailing_mean({1, 2, 3, 4, 5}, 2), (std::vector<double>{1, 1.5, 2.5, 3.5, 4.5}));
  EXPECT_EQ(trailing_mean({2, 4, 9}, 5), (std::vector<double>{2, 3, 5}));
  EXPECT_EQ(smoothing_window(5), 1u);
  EXPECT_EQ(smoothing_window(300), 30u);
  EXPECT_EQ(smoothing_window(100000), 50u);

  // The report's plots hold exactly these points.
  const auto plots = report_plots({*run});
  std::map<std::string, int> points;
  for (const auto& p : plots) points[p.id] = p.points();
  // loss: 2 raw + 2 smoothed + 1 val; events: 2 loss + 1 skipped step; eval: 1 accuracy.
  EXPECT_EQ(points, (std::map<std::string, int>{{"loss", 5}, {"lr", 3}, {"grad_norm", 3}, {"tokens_per_s", 4},
                                                {"mfu", 2}, {"memory", 4}, {"eval", 1}, {"events", 3}}));
}

TEST_F(ReportTest, FilesWithoutTypesAreReadByShape) {
  auto run = read_run(make_run("old", "{\"step\":1,\"tokens\":8,\"loss\":2.5}\n{\"step\":1,\"tokens\":8,\"val_loss\":2.7}\n"
                                      "{\"event\":\"rollback\",\"step\":1}\n{\"step\":1,\"tokens\":8,\"eval_hs_acc\":0.3}\n"));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->steps.size(), 1u);
  EXPECT_EQ(run->vals.size(), 1u);
  EXPECT_EQ(run->events.size(), 1u);
  EXPECT_EQ(run->evals.size(), 1u);
  EXPECT_TRUE(run->header.is_null());
}

TEST_F(ReportTest, AMalformedLineIsAnErrorNamingTheFileAndLine) {
  const std::string dir = make_run("bad", "{\"type\":\"step\",\"step\":1,\"loss\":1}\n\n{\"type\":\"step\",\"st\n"
                                          "{\"type\":\"step\",\"step\":3,\"loss\":1}\n");
  auto run = read_run(dir);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(run.status().message().find(dir + "/metrics.jsonl:3: not a JSON object"), std::string::npos)
      << run.status().ToString();
  // A JSON array is not a record either.
  EXPECT_FALSE(read_run(make_run("array", "[1,2]\n")).ok());
}

TEST_F(ReportTest, ATornLastLineIsSkippedWithAWarning) {
  const std::string dir = make_run("torn", "{\"type\":\"step\",\"step\":1,\"tokens\":4,\"loss\":1}\n{\"type\":\"step\",\"ste");
  auto run = read_run(dir);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->steps.size(), 1u);
  ASSERT_EQ(run->warnings.size(), 1u);
  EXPECT_NE(run->warnings[0].find(dir + "/metrics.jsonl:2: skipped a torn last line"), std::string::npos) << run->warnings[0];
}

TEST_F(ReportTest, AMissingMetricsFileIsNotFoundNamingIt) {
  fs::create_directories(path("empty"));
  auto run = read_run(path("empty"));
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kNotFound);
  EXPECT_NE(run.status().message().find(path("empty") + "/metrics.jsonl"), std::string::npos);
}

// Layout: plot area x in [72, 624], y in [30, 254] (640 × 300, margins 72/16/30/46).
TEST_F(ReportTest, SvgVerticesAreTheDataScaledToThePlotArea) {
  Plot p{"t", "T", "x", "y", {}};
  p.series.push_back(Series{"s", "#123456", Style::kLine, {0, 5, 10}, {1, 2, 3}});
  p.series.push_back(Series{"u", "#654321", Style::kLine, {2.5}, {1.5}});
  const std::string svg = render_svg(p);
  EXPECT_NE(svg.find("data-points=\"4\""), std::string::npos);
  // x: 72 + x/10 · 552; y: 30 + (3 - y)/2 · 224.
  EXPECT_EQ(vertices(svg, "s"), (std::vector<std::pair<double, double>>{{72, 254}, {348, 142}, {624, 30}}));
  EXPECT_EQ(vertices(svg, "u"), (std::vector<std::pair<double, double>>{{210, 198}}));
  // A one-point line also gets a dot where its vertex is.
  EXPECT_NE(svg.find("cx=\"210.00\" cy=\"198.00\""), std::string::npos) << svg;
  EXPECT_NE(svg.find("stroke=\"#123456\""), std::string::npos);

  // One point alone: the range is widened by 5% around it, so it sits in the middle.
  Plot q{"q", "Q", "x", "y", {Series{"d", "#000", Style::kDots, {4}, {2}}}};
  const Range r = data_range(q);
  EXPECT_DOUBLE_EQ(r.x0, 3.8);
  EXPECT_DOUBLE_EQ(r.x1, 4.2);
  EXPECT_NE(render_svg(q).find("<circle class=\"pt\" data-series=\"d\" cx=\"348.00\" cy=\"142.00\""), std::string::npos);
}

TEST_F(ReportTest, ShortNumbers) {
  EXPECT_EQ(short_number(0.0003), "0.0003");
  EXPECT_EQ(short_number(9999), "9999");
  EXPECT_EQ(short_number(12345), "12.3k");
  EXPECT_EQ(short_number(3.95e6), "3.95M");
  EXPECT_EQ(short_number(999999.9), "1M");
  EXPECT_EQ(short_number(-2.5e9), "-2.5G");
  EXPECT_EQ(short_number(INFINITY), "inf");
}

TEST_F(ReportTest, RunTextIsEscapedInTheHtml) {
  const std::string nasty = "</pre><script>alert('x')</script> & \"co\"";
  nlohmann::json header = {{"type", "header"}, {"config_toml", "name = " + nasty}, {"machine", {{"cpu_brand", nasty}}}};
  const std::string dir = make_run("a<b&c", header.dump() + "\n{\"type\":\"step\",\"step\":1,\"tokens\":4,\"loss\":1}\n" +
                                                nlohmann::json{{"type", "event"}, {"event", nasty}, {"step", 1}}.dump() + "\n");
  auto run = read_run(dir);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const std::string html = render_report({*run}, path(""));
  const std::string escaped = "&lt;/pre&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;co&quot;";
  EXPECT_NE(html.find("name = " + escaped), std::string::npos);  // the config
  EXPECT_NE(html.find("<td>" + escaped + "</td>"), std::string::npos);  // the machine, the event
  EXPECT_NE(html.find("a&lt;b&amp;c"), std::string::npos);  // the label
  EXPECT_EQ(html.find("alert('x')"), std::string::npos);
  EXPECT_EQ(html.find("a<b"), std::string::npos);
  // The only script is the report's own self-check.
  size_t scripts = 0;
  for (size_t at = 0; (at = html.find("<script", at)) != std::string::npos; ++at) ++scripts;
  EXPECT_EQ(scripts, 1u);
  EXPECT_EQ(html_escape("<a href='x'>&\"</a>"), "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;");
  EXPECT_EQ(url_path_escape("runs/a #1?/ü"), "runs/a%20%231%3F/%C3%BC");
}

TEST_F(ReportTest, SeveralRunsOverlayTheirCurvesWithALegend) {
  const std::string a = make_run("x/run", "{\"type\":\"step\",\"step\":1,\"tokens\":10,\"loss\":5}\n"
                                          "{\"type\":\"step\",\"step\":2,\"tokens\":20,\"loss\":4}\n");
  const std::string b = make_run("y/run", "{\"type\":\"step\",\"step\":1,\"tokens\":10,\"loss\":6}\n"
                                          "{\"type\":\"step\",\"step\":2,\"tokens\":20,\"loss\":2}\n");
  auto runs = read_runs({a, b});
  ASSERT_TRUE(runs.ok()) << runs.status().ToString();
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ((*runs)[0].label, a);  // the same last component twice: full directories
  EXPECT_EQ((*runs)[1].label, b);
  const auto plots = report_plots(*runs);
  ASSERT_FALSE(plots.empty());
  ASSERT_EQ(plots[0].id, "loss");
  const std::string svg = render_svg(plots[0]);
  // One shared range: tokens [10, 20], loss [2, 6]. Run a's raw loss (10,5),(20,4); b's (10,6),(20,2).
  EXPECT_EQ(vertices(svg, a + " loss"), (std::vector<std::pair<double, double>>{{72, 86}, {624, 142}}));
  EXPECT_EQ(vertices(svg, b + " loss"), (std::vector<std::pair<double, double>>{{72, 30}, {624, 254}}));
  // Smoothed (window 1 for 2 points) equals the raw curve; each run keeps its own colour.
  EXPECT_EQ(vertices(svg, a + " loss \\(smoothed\\)"), vertices(svg, a + " loss"));
  EXPECT_NE(svg.find("data-series=\"" + a + " loss\" d=\"M72.00,86.00 L624.00,142.00\" fill=\"none\" stroke=\"" + run_color(0)),
            std::string::npos);
  EXPECT_NE(svg.find("data-series=\"" + b + " loss\" d=\"M72.00,30.00 L624.00,254.00\" fill=\"none\" stroke=\"" + run_color(1)),
            std::string::npos);
  EXPECT_NE(run_color(0), run_color(1));
  EXPECT_NE(svg.find(">" + a + " loss (smoothed)</text>"), std::string::npos);  // the legend
  EXPECT_NE(svg.find(">" + b + " loss (smoothed)</text>"), std::string::npos);
}

TEST_F(ReportTest, CheckpointLinksAreRelativeToTheReport) {
  const std::string dir = make_run("runs/r 1", kMetrics);
  fs::create_directories(dir + "/checkpoints/step_00000002");
  test::write_bytes(dir + "/checkpoints/step_00000002/manifest.json", "{}");
  fs::create_directories(dir + "/checkpoints/step_00000003.tmp");  // incomplete: not linked
  auto run = read_run(dir);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->checkpoints, (std::vector<std::string>{dir + "/checkpoints/step_00000002"}));
  const std::string html = render_report({*run}, path(""));
  EXPECT_NE(html.find("<a href=\"runs/r%201/checkpoints/step_00000002/\">step_00000002</a>"), std::string::npos);
  EXPECT_EQ(html.find("step_00000003"), std::string::npos);
}

TEST_F(ReportTest, TheCommandWritesTheReportAndNamesBadInput) {
  const std::string good = make_run("good", kMetrics);
  test::CliResult r = test::run_lmtrain("report " + good, true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("report: " + good + "/report.html"), std::string::npos) << r.out;
  const std::string page = test::read_bytes(good + "/report.html");
  EXPECT_NE(page.find("<svg class=\"plot\" id=\"loss\""), std::string::npos);

  // A malformed run: exit 1 naming file and line; the existing report is left as it was.
  const std::string bad = make_run("bad", "{\"type\":\"step\",\"step\":1}\n{oops}\n");
  r = test::run_lmtrain("report " + good + " " + bad + " --out " + good + "/report.html", true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(bad + "/metrics.jsonl:2: not a JSON object"), std::string::npos) << r.out;
  EXPECT_EQ(test::read_bytes(good + "/report.html"), page);

  r = test::run_lmtrain("report " + path("nowhere"), true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(path("nowhere") + "/metrics.jsonl does not exist"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("nowhere")));

  r = test::run_lmtrain("report", true);  // no run: a usage error
  EXPECT_EQ(r.code, 2) << r.out;
}

}  // namespace
}  // namespace lmt::report
