// train::world_for_backend (train/device_world.h) and the device-communicator registry
// (dist/device_communicator.h): which communicator a run's data parallelism gets on a host or a
// device backend, and what is refused. The NCCL communicator itself runs in nccl_communicator_test
// (label gpu).
#include "lmt/train/device_world.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/pretend_device.h"
#include "lmt/dist/device_communicator.h"

namespace lmt::train {
namespace {

// A world of `world` ranks whose collectives this test never calls: only its size and kind matter.
class SizedWorld final : public dist::Communicator {
 public:
  SizedWorld(int world, bool device) : world_(world), device_(device) {}
  int rank() const override { return 0; }
  int world() const override { return world_; }
  const char* name() const override { return device_ ? "sized-device" : "sized"; }
  bool device_buffers() const override { return device_; }
  Status all_reduce_sum(float*, int64_t) override { return unused(); }
  std::unique_ptr<dist::Request> all_reduce_sum_async(float*, int64_t) override {
    return dist::completed_request(unused());
  }
  Status all_reduce_sum(double*, int64_t) override { return unused(); }
  Status reduce_scatter_sum(const float*, float*, const std::vector<int64_t>&) override { return unused(); }
  std::unique_ptr<dist::Request> reduce_scatter_sum_async(const float*, float*, const std::vector<int64_t>&) override {
    return dist::completed_request(unused());
  }
  Status all_gather(float*, const std::vector<int64_t>&) override { return unused(); }
  std::unique_ptr<dist::Request> all_gather_async(float*, const std::vector<int64_t>&) override {
    return dist::completed_request(unused());
  }
  std::unique_ptr<dist::Request> all_gather_async(uint16_t*, const std::vector<int64_t>&) override {
    return dist::completed_request(unused());
  }
  Status broadcast(void*, int64_t, int) override { return unused(); }
  Status all_to_all_v(const void*, const std::vector<int64_t>&, void*, const std::vector<int64_t>&) override {
    return unused();
  }
  std::unique_ptr<dist::Request> send_async(const void*, int64_t, int) override {
    return dist::completed_request(unused());
  }
  std::unique_ptr<dist::Request> recv_async(void*, int64_t, int) override { return dist::completed_request(unused()); }
  Status recv(void*, int64_t, int) override { return unused(); }
  Status barrier() override { return unused(); }
  StatusOr<std::unique_ptr<dist::SymmetricBuffer>> allocate_symmetric(int64_t) override { return unused(); }
  StatusOr<std::unique_ptr<dist::Communicator>> split(int, int) override { return unused(); }
  void abort(int) override {}

 private:
  static Status unused() { return Internal("SizedWorld: not used by this test"); }
  int world_;
  bool device_;
};

// The factory of backend "pretend_nccl": a device world of the host's size.
StatusOr<std::unique_ptr<dist::Communicator>> pretend_factory(dist::Communicator& host) {
  return std::unique_ptr<dist::Communicator>(std::make_unique<SizedWorld>(host.world(), true));
}
const bool kRegistered = dist::register_device_communicator("pretend_nccl", &pretend_factory);

TEST(DeviceWorld, AHostBackendOrOneProcessKeepsTheWorld) {
  kernels::CpuBackend cpu;
  test::PretendDeviceBackend gpu("pretend_none", 3);
  SizedWorld two(2, false), one(1, false);
  std::unique_ptr<dist::Communicator> owned;
  auto host = world_for_backend(cpu, two, &owned);
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_EQ(*host, &two);
  auto alone = world_for_backend(gpu, one, &owned);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_EQ(*alone, &one);
  EXPECT_EQ(owned, nullptr);
}

TEST(DeviceWorld, ADeviceBackendOverSeveralProcessesGetsItsDeviceCommunicator) {
  ASSERT_TRUE(kRegistered);
  test::PretendDeviceBackend gpu("pretend_nccl", 3);
  SizedWorld two(2, false);
  std::unique_ptr<dist::Communicator> owned;
  auto made = world_for_backend(gpu, two, &owned);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  ASSERT_NE(owned, nullptr);
  EXPECT_EQ(*made, owned.get());
  EXPECT_TRUE((*made)->device_buffers());
  EXPECT_EQ((*made)->world(), 2);
  // A world that already reduces device memory is kept as it is.
  SizedWorld device_two(2, true);
  std::unique_ptr<dist::Communicator> none;
  auto kept = world_for_backend(gpu, device_two, &none);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(*kept, &device_two);
  EXPECT_EQ(none, nullptr);
}

TEST(DeviceWorld, ABuildWithoutADeviceCommunicatorRefusesNamingTheBackend) {
  test::PretendDeviceBackend gpu("pretend_none", 3);
  SizedWorld two(2, false);
  std::unique_ptr<dist::Communicator> owned;
  auto made = world_for_backend(gpu, two, &owned);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(made.status().message().find("'pretend_none' backend over 2 processes"), std::string::npos)
      << made.status().ToString();
  EXPECT_FALSE(made.status().hint().empty());
  EXPECT_EQ(owned, nullptr);
}

}  // namespace
}  // namespace lmt::train
