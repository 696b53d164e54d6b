// TrainerState: RUN/checkpoints/step_N/trainer_state.json, everything besides parameters and
// optimizer state that a resumed run needs to continue bit for bit.
//
// parse() validates every field (type and range) and names the first bad one with the file, so a
// damaged or hand-edited file is an error, never an exception or a silently wrong resume.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "lmt/base/status.h"

namespace lmt::train {

struct TrainerState {
  int64_t step = 0;          // optimizer steps completed (skipped ones included)
  int64_t updates = 0;       // updates applied, <= step
  int64_t tokens = 0;        // tokens consumed
  int64_t bad_in_a_row = 0;  // bad steps since the last good one
  double run_seconds = 0;    // training time so far (ETA)
  uint64_t seed = 0;
  nlohmann::json spike_window;      // SpikeDetector::state()
  nlohmann::json grad_norm_window;  // DivergenceGuard::state(); null in older checkpoints
  nlohmann::json loader;            // data::Loader::cursor()

  nlohmann::json to_json() const;
  // Errors: kDataLoss naming `where` (the file) and the field.
  static StatusOr<TrainerState> parse(const nlohmann::json& j, const std::string& where);
};

}  // namespace lmt::train
