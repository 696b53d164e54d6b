// The per-machine peak cache (metrics/peak_cache.h) and the one peak lookup (metrics/peaks.h): a
// stored measurement is what the next lookup returns, without measuring; an entry of another
// machine key is never used; a damaged file is ignored with a warning and replaced.
#include "lmt/metrics/peaks.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/scoped_env.h"
#include "lmt/metrics/device_peaks.h"
#include "lmt/metrics/peak_cache.h"

namespace lmt::metrics {
namespace {

class PeakCache : public test::ScratchDirTest {};

constexpr int kQuiet = 0;  // no other task running: a measurement may be stored

// Distinctive figures no measurement produces.
Peaks distinctive() {
  Peaks p;
  p.fp32_gflops = 12345.25;
  p.bf16_gflops = 67890.5;
  p.bf16_unit = "avx512_bf16";
  return p;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, false);
}

using lmt::test::ScopedEnv;

// A bf16 unit slower than the fp32 FMAs is not where bf16 runs: bf16 operands widened to f32 are
// exact and go faster on the FMAs, so MFU divides by the fp32 peak (an Intel Xeon without AMX,
// family 6 model 207: vdpbf16ps 173 GFLOP/s against 354 for the fp32 FMAs on 2 cores).
TEST(Peaks, ABf16UnitSlowerThanTheFp32FmasIsNotTheBf16Peak) {
  auto peaks = [](double fp32, double bf16, const char* unit) {
    Peaks p;
    p.fp32_gflops = fp32;
    p.bf16_gflops = bf16;
    p.bf16_unit = unit;
    return with_fastest_bf16(p);
  };
  const Peaks intel = peaks(354, 173, "avx512_bf16");
  EXPECT_EQ(intel.bf16_unit, "fp32");
  EXPECT_EQ(intel.bf16_gflops, 354);
  EXPECT_EQ(intel.slow_bf16_unit, "avx512_bf16");
  EXPECT_EQ(intel.slow_bf16_gflops, 173);
  for (const Peaks& kept : {peaks(470, 950, "avx512_bf16"), peaks(400, 6300, "amx"), peaks(100, 85, "avx512_bf16")}) {
    EXPECT_NE(kept.bf16_unit, "fp32") << "a unit at least 80% as fast as the fp32 FMAs stays";
    EXPECT_TRUE(kept.slow_bf16_unit.empty());
  }
  EXPECT_EQ(peaks(100, 79, "amx").bf16_unit, "fp32");
  const Peaks none = peaks(207, 207, "fp32");  // AVX2: no bf16 unit at all
  EXPECT_EQ(none.bf16_gflops, 207);
  EXPECT_TRUE(none.slow_bf16_unit.empty());
  // Whether bf16 then runs widened: only where the CPU has a bf16 unit that the peaks leave unused.
  CpuInfo with_unit, without_unit;
  with_unit.avx512_bf16 = true;
  EXPECT_TRUE(bf16_unit_unused(with_unit, intel));
  EXPECT_FALSE(bf16_unit_unused(with_unit, peaks(470, 950, "avx512_bf16")));
  EXPECT_FALSE(bf16_unit_unused(without_unit, none));
}

// A cache entry stored before the rule (the slow unit's figure as the bf16 peak) is read by it.
TEST_F(PeakCache, AnOldEntryWithASlowBf16UnitIsReadAsFp32) {
  const std::string file = path("peaks.json");
  Peaks old;
  old.fp32_gflops = 354;
  old.bf16_gflops = 173;
  old.bf16_unit = "avx512_bf16";
  ASSERT_TRUE(write_cached_peaks(file, cpu_info(), old, 20).ok());
  const MachinePeaks m = resolve_peaks(cpu_info(), file, 5, kQuiet);
  EXPECT_EQ(m.source, PeakSource::kCache);
  EXPECT_EQ(m.peaks.bf16_unit, "fp32");
  EXPECT_EQ(m.peaks.bf16_gflops, 354);
}

TEST_F(PeakCache, StoredPeaksAreWhatTheNextLookupReturnsWithoutMeasuring) {
  const std::string file = path("sub/dir/peaks.json");  // the directory is created
  ASSERT_TRUE(write_cached_peaks(file, cpu_info(), distinctive(), 7).ok());
  const MachinePeaks m = resolve_peaks(cpu_info(), file, 5, kQuiet);
  EXPECT_EQ(m.source, PeakSource::kCache);
  EXPECT_EQ(m.peaks.fp32_gflops, 12345.25);
  EXPECT_EQ(m.peaks.bf16_gflops, 67890.5);
  EXPECT_EQ(m.peaks.bf16_unit, "avx512_bf16");
  EXPECT_TRUE(m.warning.empty()) << m.warning;
  // The entry names the machine, and the store left no temporary file behind.
  const nlohmann::json doc = read_json(file);
  const nlohmann::json& e = doc["machines"][peak_cache_key(cpu_info())];
  EXPECT_EQ(e["threads"].get<int>(), cpu_info().threads);
  EXPECT_EQ(e["cpu"].get<std::string>(), cpu_info().brand);
  EXPECT_EQ(e["trials"].get<int>(), 7);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(path("sub/dir")), std::filesystem::directory_iterator()), 1);
}

// The process-wide lookup (what the trainer and the benches divide by) goes through the cache that
// LMT_PEAK_CACHE names: the distinctive figures come back, so nothing was measured. It is the only
// test here that resolves the process-wide peaks (resolved once per process).
TEST_F(PeakCache, PeakFlopsReadsTheCacheNamedByLmtPeakCache) {
  const std::string file = path("peaks.json");
  ASSERT_TRUE(write_cached_peaks(file, cpu_info(), distinctive(), 5).ok());
  ScopedEnv env("LMT_PEAK_CACHE", file.c_str());
  EXPECT_EQ(peak_cache_path(), file);
  EXPECT_EQ(peak_flops(DType::kF32), 12345.25e9);
  EXPECT_EQ(peak_flops(DType::kBF16), 67890.5e9);
  EXPECT_EQ(machine_peaks().source, PeakSource::kCache);
  EXPECT_EQ(measured_peaks().fp32_gflops, 12345.25);
  // An override wins over the machine's figure.
  EXPECT_EQ(peak_flops(DType::kBF16, {.override_gflops = 1500}), 1500e9);
}

TEST_F(PeakCache, MissMeasuresAndStoresThenTheSecondLookupHits) {
  const std::string file = path("peaks.json");
  const MachinePeaks first = resolve_peaks(cpu_info(), file, /*trials=*/1, kQuiet);
  EXPECT_EQ(first.source, PeakSource::kMeasured);
  EXPECT_TRUE(first.warning.empty()) << first.warning;
  EXPECT_GT(first.peaks.bf16_gflops, 0);  // every CPU here has AVX2+FMA at least
  EXPECT_GT(first.peaks.fp32_gflops, 0);
  const MachinePeaks second = resolve_peaks(cpu_info(), file, 1, kQuiet);
  EXPECT_EQ(second.source, PeakSource::kCache);
  EXPECT_EQ(second.peaks.fp32_gflops, first.peaks.fp32_gflops);
  EXPECT_EQ(second.peaks.bf16_gflops, first.peaks.bf16_gflops);
  EXPECT_EQ(second.peaks.bf16_unit, first.peaks.bf16_unit);
}

// Another thread count (or CPU) is another key: its entry is not used, and storing this machine's
// entry keeps it.
TEST_F(PeakCache, EntryOfAnotherThreadCountOrCpuIsNotUsed) {
  const std::string file = path("peaks.json");
  CpuInfo other_threads = cpu_info();
  other_threads.threads += 1;
  CpuInfo other_cpu = cpu_info();
  other_cpu.brand += " (another model)";
  ASSERT_NE(peak_cache_key(other_threads), peak_cache_key(cpu_info()));
  ASSERT_NE(peak_cache_key(other_cpu), peak_cache_key(cpu_info()));
  ASSERT_TRUE(write_cached_peaks(file, other_threads, distinctive(), 5).ok());
  ASSERT_TRUE(write_cached_peaks(file, other_cpu, distinctive(), 5).ok());
  std::string warning;
  EXPECT_FALSE(read_cached_peaks(file, peak_cache_key(cpu_info()), &warning).has_value());
  EXPECT_TRUE(warning.empty()) << warning;
  const MachinePeaks m = resolve_peaks(cpu_info(), file, 1, kQuiet);
  EXPECT_EQ(m.source, PeakSource::kMeasured);
  EXPECT_NE(m.peaks.fp32_gflops, 12345.25);
  // All three entries are in the file now; the other machines' are intact.
  const nlohmann::json doc = read_json(file);
  EXPECT_EQ(doc["machines"].size(), 3u);
  auto again = read_cached_peaks(file, peak_cache_key(other_threads), nullptr);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->fp32_gflops, 12345.25);
}

// Damaged files: never a crash or an error, a warning naming the file, a measurement, and the file
// is replaced by a valid one.
TEST_F(PeakCache, DamagedFileIsIgnoredWithAWarningAndReplaced) {
  const std::string file = path("peaks.json");
  const std::string key = peak_cache_key(cpu_info());
  const std::vector<std::string> damaged = {
      "{\"format\": \"lmtrain-peaks\", \"version\": 1, \"machines\": {",  // torn
      std::string("\0\0\0garbage", 10),
      "[1, 2, 3]",
      "{\"format\": \"lmtrain-peaks\", \"version\": 99, \"machines\": {}}",
      "{\"format\": \"lmtrain-peaks\", \"version\": 1, \"machines\": {\"" + key + "\": {\"fp32_gflops\": -5, "
      "\"bf16_gflops\": 1, \"bf16_unit\": \"fp32\"}}}",
      "{\"format\": \"lmtrain-peaks\", \"version\": 1, \"machines\": {\"" + key + "\": \"oops\"}}",
  };
  for (const std::string& bytes : damaged) {
    SCOPED_TRACE(bytes);
    test::write_bytes(file, bytes);
    const MachinePeaks m = resolve_peaks(cpu_info(), file, 1, kQuiet);
    EXPECT_EQ(m.source, PeakSource::kMeasured);
    EXPECT_NE(m.warning.find("peak cache " + file), std::string::npos) << m.warning;
    EXPECT_NE(m.warning.find("ignoring it"), std::string::npos) << m.warning;
    EXPECT_GT(m.peaks.fp32_gflops, 0);
    std::string warning;
    auto stored = read_cached_peaks(file, key, &warning);
    ASSERT_TRUE(stored.has_value()) << warning;
    EXPECT_EQ(stored->fp32_gflops, m.peaks.fp32_gflops);
    EXPECT_TRUE(warning.empty()) << warning;
  }
}

// An unwritable cache is a warning; the peaks are still measured and returned.
TEST_F(PeakCache, UnwritableCacheIsAWarningNotAnError) {
  test::write_bytes(path("not_a_dir"), "x");
  const std::string file = path("not_a_dir/peaks.json");
  const MachinePeaks m = resolve_peaks(cpu_info(), file, 1, kQuiet);
  EXPECT_EQ(m.source, PeakSource::kMeasured);
  EXPECT_GT(m.peaks.fp32_gflops, 0);
  EXPECT_NE(m.warning.find("not_a_dir"), std::string::npos) << m.warning;
  EXPECT_FALSE(write_cached_peaks(file, cpu_info(), m.peaks, 1).ok());
}

TEST(PeakCachePath, EnvironmentChoosesTheFile) {
  {
    ScopedEnv env("LMT_PEAK_CACHE", "off");
    EXPECT_EQ(peak_cache_path(), "");
  }
  {
    ScopedEnv env("LMT_PEAK_CACHE", "/tmp/x/peaks.json");
    EXPECT_EQ(peak_cache_path(), "/tmp/x/peaks.json");
  }
  ScopedEnv no_override("LMT_PEAK_CACHE", nullptr);
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/var/cache/me");
    EXPECT_EQ(peak_cache_path(), "/var/cache/me/lmtrain/peaks.json");
  }
  ScopedEnv no_xdg("XDG_CACHE_HOME", nullptr);
  ScopedEnv home("HOME", "/home/someone");
  EXPECT_EQ(peak_cache_path(), "/home/someone/.cache/lmtrain/peaks.json");
}

// A measurement taken while other tasks run is used but not stored, with a warning that says why and
// what to run; a quiet one is stored.
TEST_F(PeakCache, MeasurementOnABusyMachineIsNotStored) {
  const std::string file = path("peaks.json");
  const MachinePeaks busy = resolve_peaks(cpu_info(), file, 1, /*others_running=*/2);
  EXPECT_EQ(busy.source, PeakSource::kMeasured);
  EXPECT_GT(busy.peaks.fp32_gflops, 0);
  EXPECT_NE(busy.warning.find("2 other task(s)"), std::string::npos) << busy.warning;
  EXPECT_NE(busy.warning.find("lmtrain bench peak"), std::string::npos) << busy.warning;
  EXPECT_FALSE(std::filesystem::exists(file));
  const MachinePeaks quiet = resolve_peaks(cpu_info(), file, 1, kQuiet);
  EXPECT_TRUE(quiet.warning.empty()) << quiet.warning;
  EXPECT_EQ(resolve_peaks(cpu_info(), file, 1, /*others_running=*/2).source, PeakSource::kCache);
}

TEST(PeakCacheKey, NamesTheCpuItsIsaAndThreads) {
  CpuInfo info;
  info.vendor = "GenuineIntel";
  info.brand = "Intel(R) Xeon(R) Platinum 8480+";
  info.family = 6;
  info.model = 143;
  info.threads = 8;
  info.avx512f = info.avx512_bf16 = info.amx_bf16 = true;
  EXPECT_EQ(peak_cache_key(info),
            "GenuineIntel Intel(R) Xeon(R) Platinum 8480+ | family 6 model 143 | avx512f avx512_bf16 amx_bf16 | 8 threads");
  info.amx_bf16 = false;  // e.g. the OS no longer grants AMX: another key
  EXPECT_EQ(peak_cache_key(info),
            "GenuineIntel Intel(R) Xeon(R) Platinum 8480+ | family 6 model 143 | avx512f avx512_bf16 | 8 threads");
}

// The same brand string on two CPU generations (VMs report "AMD EPYC" for Zen 4 and Zen 5, whose
// AVX-512 peaks differ 2x) are two keys, so one machine's cached peak is never used on the other.
TEST(PeakCacheKey, SameBrandOtherGenerationIsAnotherKey) {
  CpuInfo zen4;
  zen4.vendor = "AuthenticAMD";
  zen4.brand = "AMD EPYC";
  zen4.family = 25;
  zen4.model = 17;
  zen4.threads = 2;
  zen4.avx512f = zen4.avx512_bf16 = true;
  CpuInfo zen5 = zen4;
  zen5.family = 26;
  zen5.model = 2;
  EXPECT_NE(peak_cache_key(zen4), peak_cache_key(zen5));
  EXPECT_EQ(peak_cache_key(zen4), "AuthenticAMD AMD EPYC | family 25 model 17 | avx512f avx512_bf16 | 2 threads");
}

// This machine's family is what /proc/cpuinfo (the kernel's own CPUID decoding) says.
TEST(CpuInfo, FamilyAndModelMatchProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  if (!in) GTEST_SKIP() << "no /proc/cpuinfo";
  std::string line;
  int family = -1, model = -1;
  while (std::getline(in, line) && (family < 0 || model < 0)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    if (key == "cpu family") family = std::stoi(line.substr(colon + 1));
    if (key == "model") model = std::stoi(line.substr(colon + 1));
  }
  if (family < 0 || model < 0) GTEST_SKIP() << "/proc/cpuinfo names no cpu family/model";
  EXPECT_EQ(cpu_info().family, family);
  EXPECT_EQ(cpu_info().model, model);
}

TEST(PeakOverride, MustBeAPositiveFiniteGflopsFigure) {
  EXPECT_TRUE(check_peak_gflops(450, "--peak-flops").ok());
  for (double bad : {0.0, -1.0, std::nan(""), 1e12}) {
    Status s = check_peak_gflops(bad, "--peak-flops");
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("--peak-flops"), std::string::npos) << s.message();
    EXPECT_FALSE(s.hint().empty());
  }
}

// The peak of a backend's device: a GPU's is its table entry's dense figure for the compute dtype
// (what `lmtrain plan --hardware h100-sxm` divides by); the host's is peak_flops(); the override wins.
TEST(DevicePeakFlops, GpuFromTheTableHostMeasuredOverrideWins) {
  auto bf16 = device_peak_flops("NVIDIA H100 80GB HBM3", DType::kBF16);
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  EXPECT_DOUBLE_EQ(*bf16, *dense_peak_flops(*device_spec("h100-sxm"), Precision::kBf16));
  auto fp32 = device_peak_flops("NVIDIA H100 80GB HBM3", DType::kF32);
  ASSERT_TRUE(fp32.ok());
  EXPECT_DOUBLE_EQ(*fp32, 67e12);
  auto host = device_peak_flops("", DType::kBF16, {.override_gflops = 123});
  ASSERT_TRUE(host.ok());
  EXPECT_DOUBLE_EQ(*host, 123e9);
  auto pinned = device_peak_flops("NVIDIA H100 80GB HBM3", DType::kBF16, {.override_gflops = 500000});
  ASSERT_TRUE(pinned.ok());
  EXPECT_DOUBLE_EQ(*pinned, 500000e9);
  EXPECT_FALSE(device_peak_flops("Some Future GPU", DType::kBF16).ok());
}

}  // namespace
}  // namespace lmt::metrics
