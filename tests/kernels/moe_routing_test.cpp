// MoE routing: the host bookkeeping (kernels/moe_routing.h) against hand-worked examples, and the
// router's deterministic tie-breaking on both backends.
#include <gtest/gtest.h>

#include <vector>

#include "lmt/kernels/moe_routing.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace lmt::kernels {
namespace {

TEST(MoeRoute, GroupsByExpertStableByToken) {
  // N = 4 tokens, K = 2, E = 3: slots (token: experts) 0: 2 0 | 1: 0 1 | 2: 2 1 | 3: 0 2
  const std::vector<int32_t> experts = {2, 0, 0, 1, 2, 1, 0, 2};
  MoeRouting r;
  ASSERT_TRUE(moe_route(experts.data(), 4, 2, 3, 0, r).ok());
  EXPECT_EQ(r.load, (std::vector<int64_t>{3, 2, 3}));
  EXPECT_EQ(r.offsets, (std::vector<int64_t>{0, 3, 5, 8}));
  // expert 0: slots 1 (t0), 2 (t1), 6 (t3); expert 1: slots 3 (t1), 5 (t2); expert 2: 0 (t0), 4 (t2), 7 (t3)
  EXPECT_EQ(r.row_token, (std::vector<int32_t>{0, 1, 3, 1, 2, 0, 2, 3}));
  EXPECT_EQ(r.slot_row, (std::vector<int32_t>{5, 0, 1, 3, 6, 4, 2, 7}));
  EXPECT_EQ(r.dropped, 0);
}

TEST(MoeRoute, CapacityDropsLaterTokens) {
  const std::vector<int32_t> experts = {2, 0, 0, 1, 2, 1, 0, 2};
  EXPECT_EQ(moe_capacity(1.0, 4, 2, 3), 3);   // ceil(8/3)
  EXPECT_EQ(moe_capacity(0.5, 4, 2, 3), 2);   // ceil(4/3)
  EXPECT_EQ(moe_capacity(0.0, 4, 2, 3), 0);   // dropless
  MoeRouting r;
  ASSERT_TRUE(moe_route(experts.data(), 4, 2, 3, 2, r).ok());
  EXPECT_EQ(r.load, (std::vector<int64_t>{3, 2, 3}));  // before capacity
  EXPECT_EQ(r.offsets, (std::vector<int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(r.dropped, 2);  // token 3's slots to experts 0 and 2
  EXPECT_EQ(r.slot_row, (std::vector<int32_t>{4, 0, 1, 2, 5, 3, -1, -1}));
  EXPECT_EQ(r.row_token, (std::vector<int32_t>{0, 1, 1, 2, 0, 2}));
}

TEST(MoeRoute, BadExpertIsAnError) {
  const std::vector<int32_t> experts = {0, 3};
  MoeRouting r;
  const Status s = moe_route(experts.data(), 1, 2, 3, 0, r);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("expert 3"), std::string::npos) << s.ToString();
}

// Equal logits (and equal biased scores) pick the lower expert index, on every backend, every time.
TEST(MoeRouter, TiesGoToTheLowerIndex) {
  for (const char* name : {"cpu", "ref"}) {
    Backend& be = backend(name);
    const int64_t N = 3, E = 6, K = 3;
    Tensor logits({N, E}, DType::kF32), bias({E}, DType::kF32);
    const float rows[N][E] = {{0, 0, 0, 0, 0, 0}, {1, 2, 2, 1, 2, 0}, {5, 1, 1, 5, 1, 1}};
    for (int64_t n = 0; n < N; ++n)
      for (int64_t e = 0; e < E; ++e) logits.as<float>()[n * E + e] = rows[n][e];
    Tensor w({N, K}, DType::kF32), ex({N, K}, DType::kI32), p({N, E}, DType::kF32), lse({N}, DType::kF32);
    be.moe_router_forward(w, ex, p, lse, logits, TensorView(), true);
    const std::vector<int32_t> want = {0, 1, 2, /**/ 1, 2, 4, /**/ 0, 3, 1};
    EXPECT_EQ(std::vector<int32_t>(ex.as<int32_t>(), ex.as<int32_t>() + N * K), want) << name;
    for (int rep = 0; rep < 3; ++rep) {  // deterministic across calls
      Tensor ex2({N, K}, DType::kI32);
      be.moe_router_forward(w, ex2, p, lse, logits, TensorView(), true);
      EXPECT_EQ(std::vector<int32_t>(ex2.as<int32_t>(), ex2.as<int32_t>() + N * K), want) << name;
    }
    // A bias changes the selection only: row 0 (uniform probs) with bias favouring 5 then 4.
    be.fill(bias, 0.0);
    bias.as<float>()[5] = 0.5f;
    bias.as<float>()[4] = 0.25f;
    be.moe_router_forward(w, ex, p, lse, logits, bias, false);
    EXPECT_EQ(ex.as<int32_t>()[0], 5) << name;
    EXPECT_EQ(ex.as<int32_t>()[1], 4) << name;
    EXPECT_EQ(ex.as<int32_t>()[2], 0) << name;
    EXPECT_FLOAT_EQ(w.as<float>()[0], 1.0f / 6.0f) << name << ": weights come from the unbiased probs";
  }
}

}  // namespace
}  // namespace lmt::kernels
