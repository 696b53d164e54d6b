#include "lmt/train/stability.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

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

std::string DivergenceGuard::check(double loss, double grad_norm) const {
  char buf[160];
  if (loss > ceiling_) {
    std::snprintf(buf, sizeof buf, "loss %.4g is above ln(vocab) + stability.loss_margin = %.4g: the run diverged", loss,
                  ceiling_);
    return buf;
  }
  if (norms_.size() >= kMinHistory) {
    std::vector<double> sorted(norms_.begin(), norms_.end());
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
    const double median = sorted[sorted.size() / 2];
    if (grad_norm > kNormFactor * median && grad_norm > 1e-6) {
      std::snprintf(buf, sizeof buf, "gradient norm %.4g is %.0fx the recent median %.4g: the gradients exploded",
                    grad_norm, grad_norm / median, median);
      return buf;
    }
  }
  return "";
}

void DivergenceGuard::accept(double grad_norm) {
  norms_.push_back(grad_norm);
  while (norms_.size() > kNormWindow) norms_.pop_front();
}

nlohmann::json DivergenceGuard::state() const { return nlohmann::json(std::vector<double>(norms_.begin(), norms_.end())); }

Status DivergenceGuard::restore(const nlohmann::json& state) {
  norms_.clear();
  if (state.is_null()) return Status::Ok();
  if (!state.is_array() || state.size() > kNormWindow)
    return DataLoss("trainer state: 'grad_norm_window' is not an array of at most " + std::to_string(kNormWindow) +
                        " numbers", "the checkpoint is damaged");
  for (const auto& v : state) {
    if (!v.is_number()) return DataLoss("trainer state: 'grad_norm_window' holds a non-number", "the checkpoint is damaged");
    norms_.push_back(v.get<double>());
  }
  return Status::Ok();
}

}  // namespace lmt::train
