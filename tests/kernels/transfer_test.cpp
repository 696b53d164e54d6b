// Transfers between the host and a backend's memory (kernels/backend.h): copy_async, fence() and
// staging_allocator(), against plain copies of the same data.
// - Host sources may change as soon as copy_async returns: every upload here reuses one host buffer,
//   rewritten right after each call, and the device must hold what each call saw (more uploads than
//   the cuda backend's pinned upload slots, and one past their size limit).
// - A host destination from staging_allocator() holds the data once a later fence is waited for,
//   also from another thread (the checkpoint writer's case), with ops queued in between.
// - A snapshot (snapshot_async) runs beside later ops until join_snapshots(); ops after the join
//   may write its source.
// - Copies between two host views work on every backend (a device backend's copy kernel never sees
//   them).
// The cpu and ref backends run them here (their transfers are immediate); cuda_transfer_test
// (ctest label gpu) is this source with LMT_TRANSFER_TEST_BACKEND "cuda": queued copies on the
// GPU's stream through page-locked memory. It skips, with the reason, where no GPU is visible.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace lmt::kernels {
namespace {

#ifdef LMT_TRANSFER_TEST_BACKEND
const std::vector<std::string> kBackends = {LMT_TRANSFER_TEST_BACKEND};
#else
const std::vector<std::string> kBackends = {"cpu", "ref"};
#endif

class Transfer : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto found = find_backend(GetParam());
    if (!found.ok()) GTEST_SKIP() << found.status().ToString();
    be_ = *found;
  }
  Backend& be() { return *be_; }

 private:
  Backend* be_ = nullptr;
};

// The value of element i of upload k.
int32_t value(int k, int64_t i) { return static_cast<int32_t>(k * 1000003 + i * 7 + 1); }

TEST_P(Transfer, UploadsMayReuseTheirHostSourceAtOnce) {
  constexpr int kUploads = 20;  // more than the cuda backend's 8 upload slots
  constexpr int64_t n = 4096;
  std::vector<Tensor> dev;
  Tensor src({n}, DType::kI32);
  for (int k = 0; k < kUploads; ++k) {
    for (int64_t i = 0; i < n; ++i) src.as<int32_t>()[i] = value(k, i);
    dev.emplace_back(Shape{n}, DType::kI32, be().allocator());
    be().copy_async(dev.back().view(), src.view());
    for (int64_t i = 0; i < n; ++i) src.as<int32_t>()[i] = -1;  // the caller's buffer, changed at once
  }
  for (int k = 0; k < kUploads; ++k) {
    Tensor back({n}, DType::kI32);
    be().copy(back.view(), dev[static_cast<size_t>(k)].view());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back.as<int32_t>()[i], value(k, i)) << "upload " << k << " element " << i;
  }
}

TEST_P(Transfer, AnUploadPastTheSlotsIsCopiedBeforeReturning) {
  const int64_t n = (int64_t{16} << 20) / 4 + 1024;  // past cuda's 16 MiB upload slots
  Tensor src({n}, DType::kF32), back({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) src.as<float>()[i] = static_cast<float>(i % 9973);
  Tensor dev({n}, DType::kF32, be().allocator());
  be().copy_async(dev.view(), src.view());
  src.as<float>()[n - 1] = -1.0f;
  be().copy(back.view(), dev.view());
  EXPECT_EQ(back.as<float>()[n - 1], static_cast<float>((n - 1) % 9973));
  EXPECT_EQ(back.as<float>()[12345], static_cast<float>(12345 % 9973));
}

// The checkpoint's pattern: snapshot into staging memory, take a fence, queue more work that
// changes the original, and let another thread wait for the fence and read the snapshot.
TEST_P(Transfer, AStagedSnapshotHoldsTheDataOnceItsFenceIsWaitedFor) {
  constexpr int64_t n = 100000;
  Tensor host({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) host.as<float>()[i] = 0.5f * static_cast<float>(i);
  Tensor dev({n}, DType::kF32, be().allocator());
  be().copy(dev.view(), host.view());
  Tensor snap({n}, DType::kF32, be().staging_allocator());
  EXPECT_TRUE(snap.device().is_host());
  be().copy_async(snap.view(), dev.view());
  const Fence done = be().fence();
  be().scale(dev.view(), 3.0f);  // queued after the snapshot: must not reach it
  be().fill(dev.view(), -2.0);
  std::vector<float> seen(n);
  std::thread writer([&] {
    done.wait();
    for (int64_t i = 0; i < n; ++i) seen[static_cast<size_t>(i)] = snap.as<float>()[i];
  });
  writer.join();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 0.5f * static_cast<float>(i)) << i;
  done.wait();  // again: still fine
  Tensor after({n}, DType::kF32);
  be().copy(after.view(), dev.view());
  EXPECT_EQ(after.as<float>()[7], -2.0f);
}

// A snapshot (snapshot_async) runs beside the ops issued after it, which leave its source alone;
// ops issued after join_snapshots() may write the source; another thread reads the copy once the
// fence taken after the snapshot is waited for (the join issued first, as the contract asks).
TEST_P(Transfer, ASnapshotRunsBesideLaterOpsUntilJoined) {
  constexpr int64_t n = 1 << 22;  // 16 MB: long enough on a GPU for the ops beside it to overlap it
  Tensor host({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) host.as<float>()[i] = 0.25f * static_cast<float>(i % 100003);
  Tensor dev({n}, DType::kF32, be().allocator()), other({n}, DType::kF32, be().allocator());
  be().copy(dev.view(), host.view());
  Tensor snap({n}, DType::kF32, be().staging_allocator());
  be().snapshot_async(snap.view(), dev.view());
  const Fence done = be().fence();
  be().fill(other.view(), 1.0);  // beside the snapshot: not its source
  be().scale(other.view(), 2.0f);
  be().join_snapshots();
  be().fill(dev.view(), -2.0);  // after the join: waits for the snapshot
  std::vector<float> seen(n);
  std::thread writer([&] {
    done.wait();
    for (int64_t i = 0; i < n; ++i) seen[static_cast<size_t>(i)] = snap.as<float>()[i];
  });
  writer.join();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], host.as<float>()[i]) << i;
  Tensor back({n}, DType::kF32);
  be().copy(back.view(), dev.view());
  EXPECT_EQ(back.as<float>()[n - 1], -2.0f);
  be().copy(back.view(), other.view());
  EXPECT_EQ(back.as<float>()[n - 1], 2.0f);
  be().join_snapshots();  // nothing left to join: no effect
}

TEST_P(Transfer, HostToHostCopiesWorkOnEveryBackend) {
  Tensor a({1000}, DType::kF32), b({1000}, DType::kF32), c({1000}, DType::kF32, be().staging_allocator());
  for (int64_t i = 0; i < 1000; ++i) a.as<float>()[i] = static_cast<float>(i) - 3.5f;
  be().copy(b.view(), a.view());
  be().copy_async(c.view(), b.view());
  be().fence().wait();
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(c.as<float>()[i], static_cast<float>(i) - 3.5f);
  for (int64_t i = 0; i < 1000; ++i) a.as<float>()[i] = 2.0f * static_cast<float>(i);
  be().snapshot_async(b.view(), a.view());  // at once: no join needed
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(b.as<float>()[i], 2.0f * static_cast<float>(i));
}

INSTANTIATE_TEST_SUITE_P(Backends, Transfer, ::testing::ValuesIn(kBackends),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace lmt::kernels
