// Numbers for people: durations (ETA) and perplexities, readable for any input, including the
// absurd ones (an ETA of 10^12 steps, a loss of 700 nats). Header-only.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace lmt {

// "45s", "12m05s", "3h04m", "12d03h", and "over 100 years" beyond; "?" when not a finite
// non-negative number. Never overflows an integer.
inline std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  if (seconds >= 100 * 365.25 * 86400) return "over 100 years";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[48];
  if (s < 60) std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  else if (s < 86400)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600), static_cast<long long>(s % 3600 / 60));
  else std::snprintf(buf, sizeof buf, "%lldd%02lldh", static_cast<long long>(s / 86400), static_cast<long long>(s % 86400 / 3600));
  return buf;
}

// exp(loss) with 4 significant digits ("%.4g": 12.35, 4.027e+05), "inf" where it overflows a double,
// "nan" for a NaN loss. For console lines; JSON records keep the number itself.
inline std::string perplexity_text(double loss) {
  if (std::isnan(loss)) return "nan";
  const double ppl = std::exp(loss);
  if (!std::isfinite(ppl)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", ppl);
  return buf;
}

}  // namespace lmt
