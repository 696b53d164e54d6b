#include "lmt/metrics/peak_cache.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "lmt/io/atomic_file.h"

namespace lmt::metrics {
namespace {

constexpr const char* kFormat = "lmtrain-peaks";
constexpr int kVersion = 1;

std::string isa_flags(const CpuInfo& info) {
  std::string s;
  auto add = [&s](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : " ") + std::string(name);
  };
  add(info.avx512f, "avx512f");
  add(info.avx512_bf16, "avx512_bf16");
  add(info.amx_bf16, "amx_bf16");
  // The AVX2 fallback of the fp32 measurement (hardware.cpp) when there is no AVX-512.
  add(!info.avx512f && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), "avx2 fma");
  return s.empty() ? "none" : s;
}

bool finite_non_negative(const nlohmann::json& v) {
  return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0;
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The parsed file, or a reason it is unusable ("" with a null json: absent).
struct Loaded {
  nlohmann::json doc;  // null: absent or unusable
  std::string problem;
};

Loaded load(const std::string& path) {
  Loaded out;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return out;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    out.problem = "cannot be read (" + std::string(std::strerror(errno)) + ")";
    return out;
  }
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    out.problem = "is not a JSON object";
    return out;
  }
  const bool ours = doc.contains("format") && doc["format"].is_string() && doc["format"].get<std::string>() == kFormat &&
                    doc.contains("version") && doc["version"].is_number_integer() && doc["version"].get<int64_t>() == kVersion;
  if (!ours) {
    out.problem = "is not a version-" + std::to_string(kVersion) + " \"" + kFormat + "\" file";
    return out;
  }
  if (!doc.contains("machines") || !doc["machines"].is_object()) {
    out.problem = "has no \"machines\" object";
    return out;
  }
  out.doc = std::move(doc);
  return out;
}

}  // namespace

std::string peak_cache_key(const CpuInfo& info) {
  return (info.vendor.empty() ? "unknown" : info.vendor) + " " + (info.brand.empty() ? "unknown CPU" : info.brand) +
         " | family " + std::to_string(info.family) + " model " + std::to_string(info.model) + " | " + isa_flags(info) + " | " + std::to_string(info.threads) + " threads";
}

std::string peak_cache_path() {
  if (const char* v = std::getenv("LMT_PEAK_CACHE"); v != nullptr && *v != '\0')
    return std::string(v) == "off" ? std::string() : std::string(v);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x == '/') return std::string(x) + "/lmtrain/peaks.json";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return std::string(h) + "/.cache/lmtrain/peaks.json";
  return {};
}

std::optional<Peaks> read_cached_peaks(const std::string& path, const std::string& key, std::string* warning) {
  auto warn = [&](const std::string& what) {
    if (warning != nullptr) *warning = "peak cache " + path + " " + what + "; ignoring it (the peaks are measured again)";
  };
  Loaded f = load(path);
  if (!f.problem.empty()) {
    warn(f.problem);
    return std::nullopt;
  }
  if (f.doc.is_null()) return std::nullopt;
  const nlohmann::json& machines = f.doc["machines"];
  const auto it = machines.find(key);
  if (it == machines.end()) return std::nullopt;
  const nlohmann::json& e = *it;
  if (!e.is_object() || !e.contains("fp32_gflops") || !finite_non_negative(e["fp32_gflops"]) || !e.contains("bf16_gflops") ||
      !finite_non_negative(e["bf16_gflops"]) || !e.contains("bf16_unit") || !e["bf16_unit"].is_string()) {
    warn("has a malformed entry for \"" + key + "\"");
    return std::nullopt;
  }
  Peaks p;
  p.fp32_gflops = e["fp32_gflops"].get<double>();
  p.bf16_gflops = e["bf16_gflops"].get<double>();
  p.bf16_unit = e["bf16_unit"].get<std::string>();
  return with_fastest_bf16(std::move(p));  // an entry stored before the rule
}

Status write_cached_peaks(const std::string& path, const CpuInfo& info, const Peaks& peaks, int trials) {
  namespace fs = std::filesystem;
  Loaded f = load(path);
  nlohmann::json doc = f.doc.is_null() ? nlohmann::json{{"format", kFormat}, {"version", kVersion}, {"machines", nlohmann::json::object()}}
                                       : std::move(f.doc);
  doc["machines"][peak_cache_key(info)] = {{"cpu", info.brand},
                                           {"vendor", info.vendor},
                                           {"family", info.family},
                                           {"model", info.model},
                                           {"isa", isa_flags(info)},
                                           {"threads", info.threads},
                                           {"fp32_gflops", peaks.fp32_gflops},
                                           {"bf16_gflops", peaks.bf16_gflops},
                                           {"bf16_unit", peaks.bf16_unit},
                                           {"trials", trials},
                                           {"measured_at", utc_now()}};
  const std::string hint = "set LMT_PEAK_CACHE to a writable file, or LMT_PEAK_CACHE=off";
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    if (ec) return IoError("cannot create the peak cache directory " + parent.string() + ": " + ec.message(), hint);
  }
  // A temporary unique per process and call: ranks of one node may store at once.
  const std::string text = doc.dump(2) + "\n";
  Status s = io::write_file_atomically(path, text, io::TmpName::kUnique);
  if (!s.ok()) return IoError("cannot write the peak cache: " + s.message(), hint);
  return Status::Ok();
}

}  // namespace lmt::metrics
