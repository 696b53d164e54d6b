// SpikeDetector: flags a loss that sits more than `zscore` standard deviations above the mean of
// the last `window` accepted losses. Skipped or rolled-back steps are not added to the window, so a
// burst of spikes cannot normalise itself. Its state goes into checkpoints (exact resume).
#pragma once

#include <cstdint>
#include <deque>

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

}  // namespace lmt::train
