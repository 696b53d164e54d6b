#include "lmt/tensor/device.h"

#include <gtest/gtest.h>

#include "lmt/tensor/tensor_view.h"

namespace lmt {
namespace {

TEST(Device, FormatsAndParsesHostAndCuda) {
  EXPECT_EQ(Device::host().to_string(), "cpu");
  EXPECT_EQ(Device::cuda(0).to_string(), "cuda:0");
  EXPECT_EQ(Device::cuda(13).to_string(), "cuda:13");
  for (Device d : {Device::host(), Device::cuda(0), Device::cuda(7), Device::cuda(32767)}) {
    StatusOr<Device> back = Device::parse(d.to_string());
    ASSERT_TRUE(back.ok()) << d.to_string() << ": " << back.status().ToString();
    EXPECT_EQ(*back, d) << d.to_string();
  }
  StatusOr<Device> bare = Device::parse("cuda");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(*bare, Device::cuda(0));
}

TEST(Device, RejectsMalformedNamesWithAHint) {
  for (const char* bad : {"", "gpu", "CPU", "cuda:", "cuda:-1", "cuda:1x", "cuda:99999", "cuda0", "cpu:0"}) {
    StatusOr<Device> d = Device::parse(bad);
    ASSERT_FALSE(d.ok()) << "'" << bad << "' parsed as " << d->to_string();
    EXPECT_NE(d.status().message().find(std::string("'") + bad + "'"), std::string::npos) << d.status().ToString();
    EXPECT_NE(d.status().hint().find("cuda:N"), std::string::npos) << d.status().ToString();
  }
}

TEST(Device, ComparesKindAndIndex) {
  EXPECT_EQ(Device(), Device::host());
  EXPECT_TRUE(Device().is_host());
  EXPECT_FALSE(Device::cuda(0).is_host());
  EXPECT_NE(Device::cuda(0), Device::cuda(1));
  EXPECT_NE(Device::cuda(0), Device::host());
  EXPECT_EQ(Device::cuda(2).index(), 2);
  EXPECT_EQ(Device::cuda(2).kind(), Device::Kind::kCuda);
}

TEST(Device, ViewsKeepTheirDeviceThroughReshapeAndSlice) {
  alignas(64) float buf[12] = {};
  TensorView v(buf, Shape{3, 4}, DType::kF32, Device::cuda(1));
  EXPECT_EQ(v.device(), Device::cuda(1));
  EXPECT_EQ(v.reshape(Shape{12}).device(), Device::cuda(1));
  EXPECT_EQ(v.slice_rows(1, 2).device(), Device::cuda(1));
  EXPECT_EQ(v.to_string(), "f32[3,4]@cuda:1");
  EXPECT_EQ(TensorView(buf, Shape{3, 4}, DType::kF32).to_string(), "f32[3,4]");
  EXPECT_TRUE(TensorView(buf, Shape{3, 4}, DType::kF32).device().is_host());
}

}  // namespace
}  // namespace lmt
