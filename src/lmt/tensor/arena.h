// Arena: one up-front allocation from which activation tensors are carved by bumping an offset.
//
// Every allocation is rounded up to 64 bytes. `mark()` / `release(mark)` free everything allocated
// after the mark (stack discipline), so a forward pass can keep what backward needs and drop its
// temporaries. `peak()` is the high-water mark in bytes.
//
// A measuring arena (Arena::Measuring()) has no memory: it hands out null-data views but tracks
// offsets and the peak exactly as a real one would, so a planner can run the same allocation
// sequence to learn the exact bytes a configuration needs before anything is allocated.
// The memory comes from an Allocator (default: host_allocator()), which must outlive the arena;
// every view it hands out carries the allocator's device. Carving never touches the memory.
// Not thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "lmt/tensor/allocator.h"
#include "lmt/tensor/tensor_view.h"

namespace lmt {

class Arena {
 public:
  static constexpr size_t kAlignment = 64;

  // Allocates capacity_bytes (rounded up to 64) from `allocator` now.
  explicit Arena(size_t capacity_bytes, Allocator& allocator = host_allocator());
  static Arena Measuring();
  Arena(Arena&&) noexcept = default;
  Arena& operator=(Arena&&) noexcept = default;

  // Carves a tensor; stops with a message naming `name` if the arena is full.
  TensorView allocate(Shape shape, DType dtype, const char* name = "");

  size_t mark() const { return used_; }
  void release(size_t mark);
  void reset() { release(0); }

  bool measuring() const { return base_ == nullptr; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  size_t capacity() const { return capacity_; }
  Device device() const { return device_; }
  static size_t round_up(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

 private:
  Arena() = default;
  struct Free {
    Free() : allocator(nullptr), bytes(0) {}
    Free(Allocator* a, size_t b) : allocator(a), bytes(b) {}
    void operator()(char* p) const;
    Allocator* allocator;
    size_t bytes;
  };
  std::unique_ptr<char, Free> base_;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t peak_ = 0;
  Device device_;
};

}  // namespace lmt
