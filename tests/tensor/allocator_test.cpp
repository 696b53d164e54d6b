// Tensor and Arena get every byte through their Allocator, and carry its device.
#include "lmt/tensor/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>

#include "lmt/tensor/arena.h"
#include "lmt/tensor/tensor.h"

namespace lmt {
namespace {

// Host memory that records every call, and claims to be `device` (never dereferenced as such here
// except through zero_fill, which it implements on the host).
class CountingAllocator final : public Allocator {
 public:
  explicit CountingAllocator(Device device = Device::host()) : device_(device) {}
  Device device() const override { return device_; }
  void* allocate(size_t bytes, size_t alignment) override {
    void* p = host_allocator().allocate(bytes, alignment);
    std::memset(p, 0xAB, bytes);  // garbage, so a missing zero_fill shows
    live_[p] = bytes;
    ++allocations;
    bytes_allocated += bytes;
    last_alignment = alignment;
    return p;
  }
  void deallocate(void* p, size_t bytes, size_t alignment) override {
    auto it = live_.find(p);
    ASSERT_NE(it, live_.end()) << "deallocate of a pointer this allocator never gave";
    EXPECT_EQ(it->second, bytes) << "deallocate with other bytes than allocate";
    live_.erase(it);
    ++deallocations;
    host_allocator().deallocate(p, bytes, alignment);
  }
  void zero_fill(void* p, size_t bytes) override {
    ++zero_fills;
    host_allocator().zero_fill(p, bytes);
  }
  size_t live() const { return live_.size(); }

  int allocations = 0, deallocations = 0, zero_fills = 0;
  size_t bytes_allocated = 0, last_alignment = 0;

 private:
  Device device_;
  std::map<void*, size_t> live_;
};

TEST(Allocator, HostAllocatorIsAlignedAndOnTheHost) {
  Allocator& h = host_allocator();
  EXPECT_TRUE(h.device().is_host());
  for (size_t bytes : {0, 1, 63, 64, 65, 4096}) {
    void* p = h.allocate(bytes, 64);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    h.zero_fill(p, bytes);
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(static_cast<unsigned char*>(p)[i], 0) << i;
    h.deallocate(p, bytes, 64);
  }
}

TEST(Allocator, TensorAllocatesZeroFillsAndFreesThroughItsAllocator) {
  CountingAllocator alloc(Device::host());
  {
    Tensor t({5, 3}, DType::kF32, alloc);
    EXPECT_EQ(alloc.allocations, 1);
    EXPECT_EQ(alloc.bytes_allocated, 60u);
    EXPECT_EQ(alloc.last_alignment, 64u);
    EXPECT_EQ(alloc.zero_fills, 1);
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.as<float>()[i], 0.0f) << i;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.view().data()) % 64, 0u);
    Tensor moved = std::move(t);
    EXPECT_EQ(alloc.deallocations, 0);
  }
  EXPECT_EQ(alloc.deallocations, 1);
  EXPECT_EQ(alloc.live(), 0u);
}

TEST(Allocator, TensorAndArenaViewsCarryTheAllocatorsDevice) {
  CountingAllocator on_device(Device::cuda(3));
  Tensor t({4}, DType::kBF16, on_device);
  EXPECT_EQ(t.device(), Device::cuda(3));
  EXPECT_EQ(t.view().device(), Device::cuda(3));
  Arena a(1000, on_device);
  EXPECT_EQ(a.device(), Device::cuda(3));
  EXPECT_EQ(a.allocate({10}, DType::kF32, "x").device(), Device::cuda(3));
  EXPECT_TRUE(Tensor({4}, DType::kF32).device().is_host());
  EXPECT_TRUE(Arena(64).allocate({4}, DType::kF32).device().is_host());
}

TEST(Allocator, ArenaAllocatesOnceThroughItsAllocatorAndFreesOnDestruction) {
  CountingAllocator alloc;
  {
    Arena a(1000, alloc);  // rounded up to 1024
    EXPECT_EQ(alloc.allocations, 1);
    EXPECT_EQ(alloc.bytes_allocated, 1024u);
    EXPECT_EQ(a.capacity(), 1024u);
    TensorView x = a.allocate({10}, DType::kF32, "x");
    TensorView y = a.allocate({10}, DType::kF32, "y");
    EXPECT_EQ(static_cast<char*>(y.data()) - static_cast<char*>(x.data()), 64);
    EXPECT_EQ(alloc.allocations, 1) << "carving must not allocate";
    Arena moved = std::move(a);
    EXPECT_EQ(alloc.deallocations, 0);
  }
  EXPECT_EQ(alloc.deallocations, 1);
  EXPECT_EQ(alloc.live(), 0u);
}

}  // namespace
}  // namespace lmt
