// trainer_state_fuzz: a checkpoint's trainer_state.json apart from its data cursor (which
// loader_cursor_fuzz covers): train/trainer_state.h TrainerState::parse, then the stability
// windows' restore() (SpikeDetector, DivergenceGuard), as a resume runs them.
//
// Input: trainer_state.json. It is parsed (nlohmann, without exceptions) and handed to parse();
// an accepted state must satisfy parse()'s promises (counts non-negative, updates and bad_in_a_row
// at most step, a finite non-negative run time, a loader object) and survive to_json() and parse()
// again unchanged. Seeds: a valid state written here.
//   build-fuzz/bin/trainer_state_fuzz -max_total_time=60 -max_len=4096 CORPUS_DIR
#include <cmath>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "lmt/train/stability.h"
#include "lmt/train/trainer_state.h"

namespace {

void write_seeds(const std::string& dir) {
  lmt::train::TrainerState s;
  s.step = 40;
  s.updates = 39;
  s.tokens = 40 * 2048;
  s.bad_in_a_row = 1;
  s.run_seconds = 12.5;
  s.seed = 7;
  s.spike_window = {3.1, 3.0, 2.95};
  s.grad_norm_window = {0.5, 0.4};
  s.loader = {{"format", "lmtrain-loader"}, {"version", 1}};
  lmt::fuzz::write_file(dir + "/valid.json", s.to_json().dump(2));
}

}  // namespace

LMT_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto j = nlohmann::json::parse(lmt::fuzz::as_view(data, size), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto s = lmt::train::TrainerState::parse(j, "trainer_state.json");
  if (!s.ok()) return 0;
  if (s->step < 0 || s->updates < 0 || s->tokens < 0 || s->bad_in_a_row < 0 || s->updates > s->step ||
      s->bad_in_a_row > s->step || !std::isfinite(s->run_seconds) || s->run_seconds < 0 || !s->loader.is_object())
    lmt::fuzz::fail("parse() accepted a state that breaks its promises: " + j.dump());
  auto again = lmt::train::TrainerState::parse(s->to_json(), "again");
  if (!again.ok() || again->to_json() != s->to_json()) lmt::fuzz::fail("to_json() does not parse back the same");
  lmt::train::SpikeDetector spikes(50, 6.0);
  (void)spikes.restore(s->spike_window);
  lmt::train::DivergenceGuard guard(10.0);
  (void)guard.restore(s->grad_norm_window);
  (void)guard.check(1.0, 1.0);
  return 0;
}
