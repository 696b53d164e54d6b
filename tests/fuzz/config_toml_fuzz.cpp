// config_toml_fuzz: the TOML training recipe and `--set` overrides (config/config.h).
//
// Input: a recipe (TOML text) up to the first NUL byte; after it, one `section.key=value` override
// per line. The recipe goes through Config::from_toml_string() (defaults when it is rejected), then
// each line (the first 4) through apply_override(), as `lmtrain train --config F --set ...` does. Every error must
// be a Status. Checked beyond that: the resolved recipe (to_toml(), which every checkpoint stores as
// config.toml and `lmtrain eval` reads back) parses again, with the same keys set.
// Seeds: the runner passes configs/*.toml; built here: the defaults, and overrides of each type.
//   build-fuzz/bin/config_toml_fuzz -max_total_time=60 -max_len=4096 CORPUS_DIR
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "lmt/config/config.h"

namespace {

void write_seeds(const std::string& dir) {
  lmt::fuzz::write_file(dir + "/defaults.toml", lmt::config::Config::defaults().to_toml());
  const std::string toml = "[optim]\nlr = 1e-3\n\n[train]\nmax_steps = 5\n" + std::string(1, '\0');
  lmt::fuzz::write_file(dir + "/overrides_valid",
                        toml + "optim.lr=3e-4\ntrain.max_steps=10\nmodel.preset=gpt2-124m\ndata.path=runs/x y\n");
  lmt::fuzz::write_file(dir + "/overrides_typed", toml + "model.n_layers=2\nmodel.tied_embeddings=true\noptim.lr=\"a\"\n");
  lmt::fuzz::write_file(dir + "/overrides_bad", std::string(1, '\0') + "nope.key=1\n=3\noptim.lr\n");
}

}  // namespace

LMT_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [toml, overrides] = lmt::fuzz::split_once(lmt::fuzz::as_view(data, size), '\0');
  auto parsed = lmt::config::Config::from_toml_string(std::string(toml), "<fuzz>.toml");
  lmt::config::Config c = parsed.ok() ? *std::move(parsed) : lmt::config::Config::defaults();
  // At most 4 overrides: each unknown key costs a "did you mean" search over the whole schema,
  // which at hundreds per input would make the target crawl (a command line has a few).
  int lines = 0;
  for (size_t at = 0; at < overrides.size() && lines < 4; ++lines) {
    size_t end = overrides.find('\n', at);
    if (end == std::string_view::npos) end = overrides.size();
    (void)c.apply_override(std::string(overrides.substr(at, end - at)));
    at = end + 1;
  }
  (void)c.check_complete("<fuzz>");
  const std::string resolved = c.to_toml();
  auto again = lmt::config::Config::from_toml_string(resolved, "<resolved>");
  if (!again.ok()) lmt::fuzz::fail("the resolved recipe does not parse again: " + again.status().ToString() + "\n" + resolved);
  if (again->values().size() != c.values().size()) lmt::fuzz::fail("the resolved recipe lost keys:\n" + resolved);
  return 0;
}
