// Device: where a tensor's memory lives, as a small value type (kind + index).
//
// "cpu" is host memory (the only kind this build can allocate); "cuda:N" is the memory of CUDA
// device N, which a CUDA allocator (a later target) hands out. Kernels and copies check that their
// tensors live on a device they can reach; nothing else should assume host memory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lmt/base/status.h"

namespace lmt {

class Device {
 public:
  enum class Kind : uint8_t { kHost, kCuda };

  constexpr Device() = default;  // the host
  static constexpr Device host() { return Device(); }
  static constexpr Device cuda(int index) { return Device(Kind::kCuda, index); }

  constexpr Kind kind() const { return kind_; }
  constexpr int index() const { return index_; }  // 0 for the host
  constexpr bool is_host() const { return kind_ == Kind::kHost; }

  constexpr bool operator==(const Device& o) const { return kind_ == o.kind_ && index_ == o.index_; }
  constexpr bool operator!=(const Device& o) const { return !(*this == o); }

  // "cpu" or "cuda:N"; parse() accepts exactly what to_string() writes, plus "cuda" for "cuda:0".
  std::string to_string() const;
  static StatusOr<Device> parse(std::string_view text);

 private:
  constexpr Device(Kind kind, int index) : kind_(kind), index_(static_cast<int16_t>(index)) {}
  Kind kind_ = Kind::kHost;
  int16_t index_ = 0;
};

}  // namespace lmt
