// parse_compute_dtype: the one parse of "bf16"/"fp32" behind every --dtype flag and train.dtype.
#include "lmt/tensor/compute_dtype.h"

#include <gtest/gtest.h>

namespace lmt {
namespace {

TEST(ComputeDtype, ParsesTheTwoNamesAndTheF32Spelling) {
  EXPECT_EQ(*parse_compute_dtype("bf16", "--dtype"), DType::kBF16);
  EXPECT_EQ(*parse_compute_dtype("fp32", "--dtype"), DType::kF32);
  EXPECT_EQ(*parse_compute_dtype("f32", "--dtype"), DType::kF32);
  EXPECT_EQ(compute_dtype_name(DType::kBF16), "bf16");
  EXPECT_EQ(compute_dtype_name(DType::kF32), "fp32");
  for (DType t : {DType::kBF16, DType::kF32}) EXPECT_EQ(*parse_compute_dtype(compute_dtype_name(t), "x"), t);
}

TEST(ComputeDtype, UnknownNameIsAnErrorNamingTheFlagAndTheValueWithAHint) {
  for (const char* bad : {"fp16", "BF16", "", "int7", "bf16 "}) {
    StatusOr<DType> r = parse_compute_dtype(bad, "train.dtype");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("train.dtype '") + bad + "'"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().hint().find("bf16"), std::string::npos);
    EXPECT_NE(r.status().hint().find("fp32"), std::string::npos);
  }
}

}  // namespace
}  // namespace lmt
