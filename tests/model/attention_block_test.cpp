// The attention sub-block's decode pass against its training forward: one code path for the
// projections, QK-norm and RoPE means the KV cache receives exactly the k, v the training forward
// computes for the same rows, and the output differs only by the attention kernel's rounding.
#include "lmt/model/attention_block.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "lmt/kernels/registry.h"
#include "lmt/model/params.h"
#include "model_test_util.h"

namespace lmt::model {
namespace {

class AttentionBlockDecode : public ::testing::TestWithParam<testing::Variant> {};

Tensor random_tensor(Shape shape, Rng& rng) {
  Tensor t(shape, DType::kF32);
  float* p = t.as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(rng.normal());
  return t;
}

// On the ref oracle (row-independent kernels), prefill chunks then single tokens through decode:
// the cache rows equal forward's k, v bit for bit and the residual output is forward's res_out.
TEST_P(AttentionBlockDecode, CacheHoldsForwardsKeysAndValuesAndOutputMatches) {
  const ModelConfig& c = GetParam().config;
  kernels::Backend& be = kernels::ref_backend();
  const int64_t T = c.max_seq_len, C = c.d_model, G = c.n_kv_heads, HD = c.head_dim;
  const int64_t layer = 0;
  ParamLayout layout(c);
  Tensor params({layout.total_numel()}, DType::kF32);
  init_params(layout, params.as<float>(), 13);
  const ModelViews w = layout.views(params.view().data(), DType::kF32);
  const AttentionWeights aw = AttentionWeights::of(w.blocks[layer], w.blocks[layer]);
  AttentionBlock block(be, c, layer);
  Rng rng(21);
  const Tensor res_in = random_tensor({T, C}, rng);
  Tensor positions({T}, DType::kI32);
  for (int64_t t = 0; t < T; ++t) positions.as<int32_t>()[t] = static_cast<int32_t>(t);

  // Training forward over one row of T tokens.
  Arena measuring = Arena::Measuring();
  AttentionBlock::plan(c, 1, T, DType::kF32, DType::kF32, measuring);
  Arena arena(measuring.peak());
  const AttentionActs acts = AttentionBlock::plan(c, 1, T, DType::kF32, DType::kF32, arena);
  Tensor res_out({T, C}, DType::kF32), f32_nc({T, C}, DType::kF32);
  const BlockPass pass{DType::kF32, kernels::AttentionBackend::kNaive, positions.view(), TensorView(), TensorView()};
  model::materialize(be, block.forward(res_out, res_in.view(), aw, acts, pass, f32_nc));

  // Decode the same rows: 5 at once, then one at a time.
  Tensor k_cache({1, T, G, HD}, DType::kF32), v_cache({1, T, G, HD}, DType::kF32);
  Tensor x({T, C}, DType::kF32);
  std::memcpy(x.view().data(), res_in.view().data(), res_in.bytes());
  Tensor mean({T}, DType::kF32), rstd({T}, DType::kF32), h({T, C}, DType::kF32), q({T, c.q_dim()}, DType::kF32),
      att({T, c.q_dim()}, DType::kF32), q_pre({T, c.q_dim()}, DType::kF32), k_pre({T, c.kv_dim()}, DType::kF32),
      q_rstd({T * c.n_heads}, DType::kF32), k_rstd({T * G}, DType::kF32), proj({T, C}, DType::kF32);
  for (int64_t begin = 0; begin < T;) {
    const int64_t n = begin == 0 ? 5 : 1;
    auto rows = [&](const Tensor& t, int64_t per_row = 1) { return t.view().slice_rows(0, n * per_row); };
    AttentionActs d;
    d.norm_mean = rows(mean);
    d.norm_rstd = rows(rstd);
    d.h = rows(h);
    if (c.qk_norm) {
      d.q_pre = rows(q_pre);
      d.k_pre = rows(k_pre);
      d.q_rstd = rows(q_rstd, c.n_heads);
      d.k_rstd = rows(k_rstd, G);
    }
    d.q = rows(q);
    d.att = d.att_c = rows(att);
    const TensorView xs = x.view().slice_rows(begin, begin + n);
    block.decode(xs, aw, d, k_cache, v_cache, begin, positions.view().slice_rows(begin, begin + n),
                 proj.view().slice_rows(0, n));
    begin += n;
  }

  EXPECT_EQ(std::memcmp(k_cache.view().data(), acts.k.data(), acts.k.bytes()), 0) << "k cache != forward's k";
  EXPECT_EQ(std::memcmp(v_cache.view().data(), acts.v.data(), acts.v.bytes()), 0) << "v cache != forward's v";
  const float* got = x.as<float>();
  const float* want = res_out.as<float>();
  for (int64_t i = 0; i < T * C; ++i) ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(TinyVariants, AttentionBlockDecode, ::testing::ValuesIn(testing::tiny_variants()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace lmt::model
