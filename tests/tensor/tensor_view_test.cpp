#include "lmt/tensor/tensor_view.h"

#include <gtest/gtest.h>

#include "lmt/tensor/tensor.h"

namespace lmt {
namespace {

TEST(TensorView, ShapeNumelAndToString) {
  Tensor t({2, 3, 4}, DType::kBF16);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.bytes(), 48u);
  EXPECT_EQ(t.view().to_string(), "bf16[2,3,4]");
  EXPECT_EQ(TensorView().to_string(), "absent");
  EXPECT_FALSE(TensorView().present());
  EXPECT_EQ(t.view().dim(-1), 4);
}

TEST(TensorView, SliceRowsAndReshapeShareMemory) {
  Tensor t({4, 3}, DType::kF32);
  for (int i = 0; i < 12; ++i) t.as<float>()[i] = static_cast<float>(i);
  TensorView rows = t.view().slice_rows(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  EXPECT_EQ(rows.as<float>()[0], 3.0f);
  TensorView flat = t.view().reshape({12});
  EXPECT_EQ(flat.as<float>()[11], 11.0f);
}

TEST(TensorViewDeathTest, WrongTypedAccessAndBadReshapeStop) {
  Tensor t({2, 2}, DType::kF32);
  EXPECT_DEATH((void)t.view().as<double>(), "view of f32\\[2,2\\] read as f64");
  EXPECT_DEATH((void)t.view().reshape({5}), "reshape of f32\\[2,2\\] to \\[5\\]");
}

}  // namespace
}  // namespace lmt
