// Stability guards of the trainer (docs/RELIABILITY.md, "Divergence").
//
// SpikeDetector: flags a loss that sits more than `zscore` standard deviations above the mean of
// the last `window` accepted losses. Skipped or rolled-back steps are not added to the window, so a
// burst of spikes cannot normalise itself. Its state goes into checkpoints (exact resume).
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include <nlohmann/json.hpp>

#include "lmt/base/status.h"

namespace lmt::train {

class SpikeDetector {
 public:
  SpikeDetector(int64_t window, double zscore) : window_(window), zscore_(zscore) {}
  // True when the window is at least half full and loss is a spike. Does not record it.
  bool is_spike(double loss, double* z_out = nullptr) const;
  void accept(double loss);
  nlohmann::json state() const;
  Status restore(const nlohmann::json& state);

 private:
  int64_t window_;
  double zscore_;
  std::deque<double> recent_;
};

// DivergenceGuard: absolute guards that need no history, so they hold from step 1 on, before the
// spike window fills:
//   - a loss above `loss_ceiling` (ln(vocab) + stability.loss_margin): worse than a uniform guess
//     over the vocabulary by that many nats, which no healthy run reaches, even at initialisation;
//   - a gradient norm more than kNormFactor times the median of the last kNormWindow accepted norms
//     (once kMinHistory are known): an explosion.
// Its norm history goes into checkpoints too (exact resume).
class DivergenceGuard {
 public:
  static constexpr double kNormFactor = 100;
  static constexpr size_t kNormWindow = 32, kMinHistory = 8;
  explicit DivergenceGuard(double loss_ceiling) : ceiling_(loss_ceiling) {}
  // "" for a healthy step, else why it diverged (for messages). Finite inputs expected.
  std::string check(double loss, double grad_norm) const;
  void accept(double grad_norm);
  double loss_ceiling() const { return ceiling_; }
  nlohmann::json state() const;
  Status restore(const nlohmann::json& state);  // null (an older checkpoint): empty history

 private:
  double ceiling_;
  std::deque<double> norms_;
};

}  // namespace lmt::train
