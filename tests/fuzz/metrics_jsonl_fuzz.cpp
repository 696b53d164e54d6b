// metrics_jsonl_fuzz: a run's metrics.jsonl as `lmtrain report` reads it (report/run_data.h
// parse_metrics), then the whole HTML page rendered from what was accepted (html_report.h): fields
// of any JSON type where numbers or strings are expected must never throw or crash.
//
// Input: metrics.jsonl text. Accepted runs must render a page that ends with </html>.
// Seeds: a valid file with every record type, written here.
//   build-fuzz/bin/metrics_jsonl_fuzz -max_total_time=60 -max_len=8192 CORPUS_DIR
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_util.h"
#include "lmt/report/html_report.h"
#include "lmt/report/run_data.h"

namespace {

void write_seeds(const std::string& dir) {
  lmt::fuzz::write_file(dir + "/valid.jsonl",
                        "{\"type\":\"header\",\"lmtrain_version\":\"0.1.0\",\"git_commit\":\"abc\",\"config_toml\":\"[a]\\nb = 1\\n\","
                        "\"machine\":{\"threads\":2},\"peaks\":{\"source\":\"cache\"},\"world\":{\"dp\":1},"
                        "\"model\":{\"name\":\"tiny\",\"parameters\":4000000},\"max_steps\":3,\"time\":1.5}\n"
                        "{\"type\":\"step\",\"step\":1,\"tokens\":64,\"loss\":4,\"lr\":0.001,\"grad_norm\":2,\"tokens_per_s\":100,"
                        "\"mfu\":0.01,\"rss_bytes\":1048576,\"arena_peak_bytes\":1024,\"skipped\":\"spike\",\"spike_z\":7,\"time\":2}\n"
                        "{\"type\":\"val\",\"step\":1,\"tokens\":64,\"val_loss\":3.5,\"time\":3}\n"
                        "{\"type\":\"eval\",\"step\":1,\"tokens\":64,\"eval_piqa_acc\":0.5,\"time\":4}\n"
                        "{\"type\":\"event\",\"event\":\"stopped\",\"step\":1,\"signal\":\"SIGTERM\",\"time\":5}\n");
}

}  // namespace

LMT_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lmt::report::RunData run;
  run.dir = "run";
  run.label = "run";
  if (!lmt::report::parse_metrics(std::string(lmt::fuzz::as_view(data, size)), "run/metrics.jsonl", &run).ok()) return 0;
  const std::string page = lmt::report::render_report({run}, ".");
  if (page.size() < 8 || page.compare(page.size() - 8, 8, "</html>\n") != 0) std::abort();
  return 0;
}
