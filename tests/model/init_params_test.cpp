// init_params (model/params.h) fills the random tensors from one stream of normal draws, split into
// chunks that run on all cores from generators jumped ahead (Rng::advance). The values must be those
// of one sequential pass over the stream, whatever the thread count: the pass written out below is
// the specification (it is what init_params was before it went parallel).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "model_test_util.h"
#include "lmt/base/rng.h"
#include "lmt/model/params.h"

namespace lmt::model {
namespace {

std::vector<float> sequential_init(const ParamLayout& layout, uint64_t seed) {
  std::vector<float> w(static_cast<size_t>(layout.total_numel()), 0.0f);
  const int64_t V = layout.config().vocab_size, C = layout.config().d_model;
  Rng rng(seed);
  for (const ParamInfo& p : layout.params()) {
    float* x = w.data() + p.offset;
    if (p.role == ParamRole::kNorm) {
      for (int64_t i = 0; i < p.numel; ++i) x[i] = 1.0f;
    } else if (p.role != ParamRole::kBias) {
      const int64_t n = (p.role == ParamRole::kEmbedding || p.role == ParamRole::kLmHead) ? V * C : p.numel;
      for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(rng.normal() * p.init_std);
    }
  }
  return w;
}

TEST(InitParams, ParallelChunksEqualOneSequentialPass) {
  // GPT-2's vocabulary on a narrow model: about 3.3M random values, so four chunks of 2^20 with
  // tensor boundaries inside chunks, an untied head, biases, norms and vocabulary padding rows.
  ModelConfig c = testing::tiny_test_config();
  c.vocab_size = 50257;
  c.d_model = 32;
  c.head_dim = 8;
  c.tied_embeddings = false;
  const ParamLayout layout(c);
  std::vector<float> got(static_cast<size_t>(layout.total_numel()), -1.0f);
  init_params(layout, got.data(), 1234);
  const std::vector<float> want = sequential_init(layout, 1234);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_GT(got.size(), size_t{3} << 20);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0) << "element " << i << ": " << got[i] << " vs "
                                                                 << want[i];
}

}  // namespace
}  // namespace lmt::model
