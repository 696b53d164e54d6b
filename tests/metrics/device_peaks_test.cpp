// The accelerator table: dense datasheet peaks, names, and errors that list the valid names.
#include "lmt/metrics/device_peaks.h"

#include <gtest/gtest.h>

namespace lmt::metrics {
namespace {

double peak(const char* name, Precision p) {
  auto d = device_spec(name);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  auto f = dense_peak_flops(*d, p);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? *f : 0;
}

TEST(DevicePeaks, DenseDatasheetFigures) {
  EXPECT_DOUBLE_EQ(peak("a100-40gb", Precision::kBf16), 312e12);
  EXPECT_DOUBLE_EQ(peak("a100-80gb", Precision::kBf16), 312e12);
  EXPECT_DOUBLE_EQ(peak("h100-sxm", Precision::kBf16), 989.4e12);
  EXPECT_DOUBLE_EQ(peak("h100-sxm", Precision::kFp8), 1978.9e12);
  EXPECT_DOUBLE_EQ(peak("h100-pcie", Precision::kBf16), 756e12);
  EXPECT_DOUBLE_EQ(peak("h100-pcie", Precision::kFp8), 1513e12);
  EXPECT_DOUBLE_EQ(peak("h200", Precision::kBf16), peak("h100-sxm", Precision::kBf16));
  EXPECT_DOUBLE_EQ(peak("b200", Precision::kBf16), 2250e12);
  EXPECT_DOUBLE_EQ(peak("b200", Precision::kFp8), 4500e12);
  EXPECT_DOUBLE_EQ(peak("v100", Precision::kBf16), 125e12);  // its fp16 tensor peak
  EXPECT_DOUBLE_EQ(peak("a6000", Precision::kBf16), 154.8e12);
  EXPECT_DOUBLE_EQ(peak("A100-80GB", Precision::kFp32), 19.5e12);  // case-insensitive
}

TEST(DevicePeaks, MemoryCapacities) {
  EXPECT_DOUBLE_EQ(device_spec("a100-40gb")->memory_bytes, 40.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(device_spec("h200")->memory_bytes, 141.0 * (1 << 30));
  EXPECT_NE(device_spec("v100")->note.find("no bf16"), std::string::npos);
}

TEST(DevicePeaks, MissingUnitIsAnErrorNamingTheSupportedPrecisions) {
  auto f = dense_peak_flops(*device_spec("a100-80gb"), Precision::kFp8);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("fp8"), std::string::npos);
  EXPECT_NE(f.status().hint().find("bf16"), std::string::npos);
}

TEST(DevicePeaks, UnknownNameListsTheValidOnes) {
  auto d = device_spec("tpu-v5");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("'tpu-v5'"), std::string::npos);
  for (const auto& n : device_names()) EXPECT_NE(d.status().hint().find(n), std::string::npos) << n;
  EXPECT_EQ(device_names().back(), "cpu");
}

TEST(DevicePeaks, CpuEntryIsThisMachine) {
  auto d = device_spec("cpu");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->is_cpu);
  EXPECT_GT(d->memory_bytes, 0);
  EXPECT_GT(d->bf16_flops, 0);
  EXPECT_EQ(d->runtime_overhead_bytes, 0);
}

TEST(DevicePeaks, PrecisionNames) {
  EXPECT_EQ(*parse_precision("bf16"), Precision::kBf16);
  EXPECT_EQ(*parse_precision("FP8"), Precision::kFp8);
  EXPECT_EQ(precision_name(Precision::kTf32), "tf32");
  EXPECT_FALSE(parse_precision("int4").ok());
}

// The names drivers give (cudaDeviceProp::name, nvidia-smi) map to the table's entries, so MFU on a
// GPU divides by the same dense peak `lmtrain plan --hardware NAME` uses.
TEST(DevicePeaks, DriverNamesMapToTableEntries) {
  const std::pair<const char*, const char*> names[] = {
      {"NVIDIA H100 80GB HBM3", "h100-sxm"},   {"NVIDIA H100 PCIe", "h100-pcie"},
      {"NVIDIA H100 NVL", "h100-pcie"},        {"NVIDIA H200", "h200"},
      {"NVIDIA A100-SXM4-80GB", "a100-80gb"},  {"NVIDIA A100-SXM4-40GB", "a100-40gb"},
      {"NVIDIA A100-PCIE-40GB", "a100-40gb"},  {"NVIDIA B200", "b200"},
      {"Tesla V100-SXM2-16GB", "v100"},        {"NVIDIA RTX A6000", "a6000"}};
  for (const auto& [driver, key] : names) {
    auto d = device_spec_for_gpu(driver);
    ASSERT_TRUE(d.ok()) << driver << ": " << d.status().ToString();
    EXPECT_EQ(d->name, key) << driver;
  }
  auto unknown = device_spec_for_gpu("NVIDIA GeForce GTX 1080");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("GTX 1080"), std::string::npos);
  EXPECT_NE(unknown.status().hint().find("--peak-flops"), std::string::npos);
}

}  // namespace
}  // namespace lmt::metrics
