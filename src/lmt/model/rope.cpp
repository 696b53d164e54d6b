// RoPE frequencies with Hugging Face's scaling types (see rope.h for the formulas).
#include "lmt/model/rope.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <string>

namespace lmt::model {
namespace {

using kernels::RopeFreqs;
constexpr double kPi = std::numbers::pi;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// HF's get_mscale.
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

RopeFreqs yarn(const ModelConfig& c, double theta, int64_t dim) {
  const RopeScaling& s = c.rope_scaling;
  RopeFreqs f;
  if (s.attention_factor > 0) {
    f.attention_scaling = s.attention_factor;
  } else if (s.mscale != 0 && s.mscale_all_dim != 0) {
    f.attention_scaling = yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
  } else {
    f.attention_scaling = yarn_mscale(s.factor, 1.0);
  }
  const double orig = static_cast<double>(s.original_max_position_embeddings), d = static_cast<double>(dim);
  auto correction_dim = [&](double rotations) {
    return d * std::log(orig / (rotations * 2 * kPi)) / (2 * std::log(theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, d - 1);
  if (low == high) high += 0.001;  // HF: prevent a singularity
  f.inv_freq.resize(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double pos_freq = std::pow(theta, 2.0 * static_cast<double>(i) / d);
    const double extrapolation = 1.0 / pos_freq, interpolation = 1.0 / (s.factor * pos_freq);
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_factor = 1.0 - ramp;
    f.inv_freq[i] = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return f;
}

RopeFreqs llama3(const ModelConfig& c, double theta, int64_t dim) {
  const RopeScaling& s = c.rope_scaling;
  RopeFreqs f = RopeFreqs::from_theta(theta, dim);
  const double orig = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = orig / s.low_freq_factor, high_freq_wavelen = orig / s.high_freq_factor;
  for (double& inv : f.inv_freq) {
    const double wavelen = 2 * kPi / inv;
    if (wavelen > low_freq_wavelen) {
      inv /= s.factor;
    } else if (!(wavelen < high_freq_wavelen)) {  // medium frequencies: smooth interpolation
      const double smooth = (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      inv = (1 - smooth) * inv / s.factor + smooth * inv;
    }
  }
  return f;
}

}  // namespace

StatusOr<RopeScalingType> rope_scaling_type_from_name(std::string_view name) {
  if (name == "none" || name == "default") return RopeScalingType::kNone;
  if (name == "linear") return RopeScalingType::kLinear;
  if (name == "dynamic") return RopeScalingType::kDynamic;
  if (name == "yarn") return RopeScalingType::kYarn;
  if (name == "llama3") return RopeScalingType::kLlama3;
  return InvalidArgument("unsupported RoPE scaling type \"" + std::string(name) + "\"",
                         "supported: \"none\" (HF \"default\"), \"linear\", \"dynamic\", \"yarn\", \"llama3\"");
}

Status validate_rope_scaling(const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScalingType::kNone) return Status::Ok();
  const std::string type(rope_scaling_name(s.type));
  auto bad = [&](const std::string& key, const std::string& what, const std::string& hint) {
    return InvalidArgument("rope_scaling." + key + " " + what + " (rope_scaling.type = \"" + type + "\")", hint);
  };
  if (c.positions != PositionKind::kRope)
    return bad("type", "is set but positions is \"" + std::string(position_name(c.positions)) + "\"",
               "RoPE scaling needs positions = \"rope\"; or set rope_scaling.type = \"none\"");
  if (!std::isfinite(s.factor) || s.factor < 1.0 || s.factor > 1e6)
    return bad("factor", "= " + num(s.factor) + " must be in [1, 1e6]", "e.g. 8 (Llama 3.1), 32 (Llama 3.2), 4 (YaRN)");
  if (s.type == RopeScalingType::kLinear) return Status::Ok();
  if (s.original_max_position_embeddings < 1 || s.original_max_position_embeddings > ModelLimits::kMaxSeqLen)
    return bad("original_max_position_embeddings", "= " + std::to_string(s.original_max_position_embeddings) +
                                                       " must be in [1, 2^24]",
               "the context length the model was pre-trained with, e.g. 8192");
  switch (s.type) {
    case RopeScalingType::kDynamic:
      if (c.rotary_dim() <= 2)
        return bad("type", "needs a rotary dim above 2, got " + std::to_string(c.rotary_dim()),
                   "raise head_dim or rotary_fraction");
      break;
    case RopeScalingType::kYarn:
      if (!std::isfinite(s.beta_slow) || !(s.beta_slow > 0) || !std::isfinite(s.beta_fast) || s.beta_fast < s.beta_slow)
        return bad("beta_fast", "= " + num(s.beta_fast) + " and beta_slow = " + num(s.beta_slow) +
                                    " must satisfy beta_fast >= beta_slow > 0",
                   "HF's defaults: beta_fast = 32, beta_slow = 1");
      if (!std::isfinite(s.attention_factor) || s.attention_factor < 0 || s.attention_factor > 1e3)
        return bad("attention_factor", "= " + num(s.attention_factor) + " must be in [0, 1e3] (0: derived from factor)",
                   "e.g. 0");
      if (!std::isfinite(s.mscale) || s.mscale < 0 || !std::isfinite(s.mscale_all_dim) || s.mscale_all_dim < 0)
        return bad("mscale", "= " + num(s.mscale) + " and mscale_all_dim = " + num(s.mscale_all_dim) +
                                 " must be finite and >= 0 (0: absent)",
                   "e.g. mscale = 1, mscale_all_dim = 0");
      break;
    case RopeScalingType::kLlama3:
      if (!std::isfinite(s.low_freq_factor) || !(s.low_freq_factor > 0) || !std::isfinite(s.high_freq_factor) ||
          !(s.high_freq_factor > s.low_freq_factor))
        return bad("high_freq_factor", "= " + num(s.high_freq_factor) + " and low_freq_factor = " +
                                           num(s.low_freq_factor) + " must satisfy high > low > 0",
                   "Llama 3.1/3.2: low_freq_factor = 1, high_freq_factor = 4");
      break;
    default: break;
  }
  return Status::Ok();
}

kernels::RopeFreqs rope_frequencies(const ModelConfig& c, int64_t seq_len) {
  const double theta = static_cast<double>(c.rope_theta);
  const int64_t dim = c.rotary_dim();
  const RopeScaling& s = c.rope_scaling;
  switch (s.type) {
    case RopeScalingType::kNone: break;
    case RopeScalingType::kLinear: {
      RopeFreqs f = RopeFreqs::from_theta(theta, dim);
      for (double& inv : f.inv_freq) inv /= s.factor;
      return f;
    }
    case RopeScalingType::kDynamic: {
      const double orig = static_cast<double>(s.original_max_position_embeddings);
      const double L = std::max(static_cast<double>(seq_len), orig), d = static_cast<double>(dim);
      const double base = theta * std::pow(s.factor * L / orig - (s.factor - 1), d / (d - 2));
      return RopeFreqs::from_theta(base, dim);
    }
    case RopeScalingType::kYarn: return yarn(c, theta, dim);
    case RopeScalingType::kLlama3: return llama3(c, theta, dim);
  }
  return RopeFreqs::from_theta(theta, dim);
}

int64_t rope_seq_len(const TensorView& positions) {
  const int32_t* p = positions.as<int32_t>();
  int32_t hi = 0;
  for (int64_t i = 0; i < positions.numel(); ++i) hi = std::max(hi, p[i]);
  return static_cast<int64_t>(hi) + 1;
}

}  // namespace lmt::model
