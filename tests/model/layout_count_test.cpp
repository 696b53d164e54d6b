// Two independent counts of every preset's parameters must agree: the closed-form
// ModelConfig::param_count() (config.cpp, the figure `model info`, FLOPs and `plan` use) and the
// parameter layout (params.cpp, the tensors that are allocated, trained, saved and exported),
// summed over the Hugging Face shapes (real vocabulary rows, tied head counted once). The MoE
// presets came from two branches written side by side (issue #18): this pins that they agree.
#include <gtest/gtest.h>

#include <string>

#include "lmt/model/config.h"
#include "lmt/model/params.h"

namespace lmt::model {
namespace {

int64_t layout_hf_count(const ModelConfig& c) {
  const ParamLayout layout(c);  // names, shapes and offsets only: nothing is allocated
  int64_t n = 0;
  for (const ParamInfo& p : layout.params()) n += p.hf_shape.numel();
  return n;
}

TEST(LayoutCount, EveryPresetsLayoutHoldsExactlyParamCount) {
  for (const std::string& name : preset_names()) {
    StatusOr<ModelConfig> c = preset(name);
    ASSERT_TRUE(c.ok()) << name;
    EXPECT_EQ(layout_hf_count(*c), c->param_count()) << name;
  }
}

// The MoE variants the presets do not cover: shared experts, MoE every other layer, MLP experts.
TEST(LayoutCount, MoeVariantsAgreeToo) {
  StatusOr<ModelConfig> base = preset("tiny-moe");
  ASSERT_TRUE(base.ok());
  ModelConfig shared = *base;
  shared.moe.shared_experts = 2;
  ModelConfig every2 = *base;
  every2.moe.every = 2;
  ModelConfig mlp = *base;
  mlp.ffn = FfnKind::kMlp;
  mlp.activation = kernels::Activation::kGeluTanh;
  for (const ModelConfig* c : {&shared, &every2, &mlp}) {
    ASSERT_TRUE(c->validate().ok()) << c->validate().ToString();
    EXPECT_EQ(layout_hf_count(*c), c->param_count());
  }
  EXPECT_LT(every2.param_count(), base->param_count());  // dense layers in between: fewer experts
}

}  // namespace
}  // namespace lmt::model
