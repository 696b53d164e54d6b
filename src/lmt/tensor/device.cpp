#include "lmt/tensor/device.h"

#include <charconv>

namespace lmt {

std::string Device::to_string() const {
  if (is_host()) return "cpu";
  return "cuda:" + std::to_string(index_);
}

StatusOr<Device> Device::parse(std::string_view text) {
  if (text == "cpu") return Device::host();
  if (text == "cuda") return Device::cuda(0);
  constexpr std::string_view kCuda = "cuda:";
  if (text.substr(0, kCuda.size()) == kCuda) {
    std::string_view digits = text.substr(kCuda.size());
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() && index >= 0 &&
        index <= 32767)
      return Device::cuda(index);
  }
  return InvalidArgument("unknown device '" + std::string(text) + "'",
                         "a device is \"cpu\" or \"cuda:N\" with N a device index (e.g. \"cuda:0\")");
}

}  // namespace lmt
