// The figures: NVIDIA datasheets, dense (non-sparse) tensor-core throughput. Datasheets print the 2:4
// sparse figure with an asterisk; every number below is that figure halved, i.e. the dense one.
//   V100 SXM2 32GB  : fp32 15.7, fp16 tensor 125 (no bf16, no tf32)          (V100 datasheet)
//   A100 SXM 40/80GB: fp32 19.5, tf32 156, bf16 312                           (A100 datasheet)
//   RTX A6000 48GB  : fp32 38.7, tf32 77.4, bf16 154.8 (309.7 sparse)         (RTX A6000 datasheet)
//   H100 SXM5 80GB  : fp32 67, tf32 494.7, bf16 989.4, fp8 1978.9             (H100 datasheet)
//   H100 PCIe 80GB  : fp32 51, tf32 378, bf16 756, fp8 1513                   (H100 datasheet)
//   H200 SXM 141GB  : compute as H100 SXM (same GH100 die and clocks), 141 GB HBM3e
//   B200 (HGX) 180GB: fp32 75, tf32 1100, bf16 2250, fp8 4500 (4.5/9 PF fp8 dense/sparse)
// Capacities: the datasheet "GB" is taken as GiB (HBM stacks are binary-sized; nvidia-smi reports
// 40960/81920 MiB on A100s, ~81559 MiB on H100); the small driver reservation is inside the 1 GiB
// runtime allowance.
#include "lmt/metrics/device_peaks.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "lmt/metrics/hardware.h"
#include "lmt/metrics/peaks.h"

namespace lmt::metrics {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kT = 1e12;

DeviceSpec gpu(const char* name, const char* description, double mem_gib, double fp32_t, double tf32_t,
               double bf16_t, double fp8_t, const char* note = "") {
  DeviceSpec d;
  d.name = name;
  d.description = description;
  d.memory_bytes = mem_gib * kGiB;
  d.fp32_flops = fp32_t * kT;
  d.tf32_flops = tf32_t * kT;
  d.bf16_flops = bf16_t * kT;
  d.fp8_flops = fp8_t * kT;
  d.runtime_overhead_bytes = 1.0 * kGiB;
  d.note = note;
  return d;
}

const std::vector<DeviceSpec>& gpu_table() {
  static const std::vector<DeviceSpec> table = {
      gpu("v100", "NVIDIA V100 SXM2 32GB", 32, 15.7, 0, 125, 0,
          "V100 has no bf16 or tf32: the bf16 figure is its fp16 tensor-core peak (train in fp16 with loss "
          "scaling)"),
      gpu("a100-40gb", "NVIDIA A100 SXM4 40GB", 40, 19.5, 156, 312, 0),
      gpu("a100-80gb", "NVIDIA A100 SXM4 80GB", 80, 19.5, 156, 312, 0),
      gpu("a6000", "NVIDIA RTX A6000 48GB", 48, 38.7, 77.4, 154.8, 0),
      gpu("h100-sxm", "NVIDIA H100 SXM5 80GB", 80, 67, 494.7, 989.4, 1978.9),
      gpu("h100-pcie", "NVIDIA H100 PCIe 80GB", 80, 51, 378, 756, 1513),
      gpu("h200", "NVIDIA H200 SXM 141GB", 141, 67, 494.7, 989.4, 1978.9),
      gpu("b200", "NVIDIA B200 (HGX) 180GB", 180, 75, 1100, 2250, 4500),
  };
  return table;
}

DeviceSpec this_cpu() {
  const CpuInfo& info = cpu_info();
  const Peaks& peaks = measured_peaks();
  DeviceSpec d;
  d.name = "cpu";
  d.description = (info.brand.empty() ? std::string("unknown CPU") : info.brand) + ", " +
                  std::to_string(info.threads) + " threads (measured peaks)";
  d.is_cpu = true;
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  d.memory_bytes = pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size) : 0;
  d.fp32_flops = peak_flops(DType::kF32);
  d.bf16_flops = peak_flops(DType::kBF16);
  d.runtime_overhead_bytes = 0;
  d.note = "bf16 unit: " + peaks.bf16_unit;
  return d;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

StatusOr<Precision> parse_precision(const std::string& name) {
  const std::string n = lower(name);
  if (n == "fp32" || n == "f32") return Precision::kFp32;
  if (n == "tf32") return Precision::kTf32;
  if (n == "bf16") return Precision::kBf16;
  if (n == "fp8") return Precision::kFp8;
  return InvalidArgument("unknown precision '" + name + "'", "valid precisions: bf16, fp8, fp32, tf32");
}

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kTf32: return "tf32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp8: return "fp8";
  }
  return "?";
}

std::vector<std::string> device_names() {
  std::vector<std::string> names;
  for (const auto& d : gpu_table()) names.push_back(d.name);
  names.push_back("cpu");
  return names;
}

StatusOr<DeviceSpec> device_spec(const std::string& name) {
  const std::string n = lower(name);
  if (n == "cpu") return this_cpu();
  for (const auto& d : gpu_table())
    if (d.name == n) return d;
  return NotFound("unknown hardware '" + name + "'", "valid hardware: " + joined(device_names()));
}

StatusOr<double> dense_peak_flops(const DeviceSpec& d, Precision p) {
  double peak = 0;
  switch (p) {
    case Precision::kFp32: peak = d.fp32_flops; break;
    case Precision::kTf32: peak = d.tf32_flops; break;
    case Precision::kBf16: peak = d.bf16_flops; break;
    case Precision::kFp8: peak = d.fp8_flops; break;
  }
  if (peak > 0) return peak;
  std::vector<std::string> have;
  for (Precision q : {Precision::kBf16, Precision::kFp8, Precision::kFp32, Precision::kTf32}) {
    const double v = q == Precision::kFp32 ? d.fp32_flops
                     : q == Precision::kTf32 ? d.tf32_flops
                     : q == Precision::kBf16 ? d.bf16_flops
                                             : d.fp8_flops;
    if (v > 0) have.emplace_back(precision_name(q));
  }
  return InvalidArgument(std::string(d.name) + " has no " + std::string(precision_name(p)) + " unit (no known peak)",
                         have.empty() ? "this device's peaks could not be measured"
                                      : "precisions " + d.name + " supports: " + joined(have));
}

StatusOr<DeviceSpec> device_spec_for_gpu(std::string_view driver_name) {
  std::string n(driver_name);
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  const char* key = nullptr;
  if (has("h200")) key = "h200";
  else if (has("h100") && (has("pcie") || has("nvl"))) key = "h100-pcie";
  else if (has("h100")) key = "h100-sxm";
  else if (has("b200")) key = "b200";
  else if (has("a100") && (has("80g") || has("80 g"))) key = "a100-80gb";
  else if (has("a100")) key = "a100-40gb";
  else if (has("a6000")) key = "a6000";
  else if (has("v100")) key = "v100";
  if (key == nullptr)
    return NotFound("GPU '" + std::string(driver_name) + "' is not in the accelerator table (metrics/device_peaks.cpp)",
                    "pass its dense bf16 peak with --peak-flops GFLOPS, or add it to the table");
  return device_spec(key);
}

}  // namespace lmt::metrics
