#include "lmt/train/stability.h"

#include <cmath>

namespace lmt::train {

bool SpikeDetector::is_spike(double loss, double* z_out) const {
  if (window_ <= 0 || static_cast<int64_t>(recent_.size()) * 2 < window_ || recent_.size() < 2) return false;
  double mean = 0, var = 0;
  for (double x : recent_) mean += x;
  mean /= static_cast<double>(recent_.size());
  for (double x : recent_) var += (x - mean) * (x - mean);
  const double sd = std::sqrt(var / static_cast<double>(recent_.size() - 1));
  const double z = (loss - mean) / std::max(sd, 1e-3 * std::abs(mean) + 1e-12);
  if (z_out) *z_out = z;
  return z > zscore_;
}

void SpikeDetector::accept(double loss) {
  recent_.push_back(loss);
  while (static_cast<int64_t>(recent_.size()) > window_) recent_.pop_front();
}

nlohmann::json SpikeDetector::state() const { return nlohmann::json(std::vector<double>(recent_.begin(), recent_.end())); }

Status SpikeDetector::restore(const nlohmann::json& state) {
  if (!state.is_array()) return DataLoss("trainer state: 'spike_window' is not an array", "the checkpoint is damaged");
  recent_.clear();
  for (const auto& v : state) {
    if (!v.is_number()) return DataLoss("trainer state: 'spike_window' holds a non-number", "the checkpoint is damaged");
    recent_.push_back(v.get<double>());
  }
  return Status::Ok();
}

}  // namespace lmt::train
