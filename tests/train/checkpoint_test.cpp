// Checkpoint directories: atomic commit, round trip, corruption detection, resume selection, pruning.
#include "lmt/train/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lmt/base/rng.h"
#include "lmt/io/checkpoint_dir.h"
#include "lmt/io/safetensors.h"

namespace lmt::train {
namespace {
namespace fs = std::filesystem;
using io::find_latest_checkpoint;
using io::prune_checkpoints;
using io::SafetensorsFile;
using io::verify_checkpoint;

model::ModelConfig tiny_gpt2() {
  model::ModelConfig c = *model::preset("gpt2-124m");
  c.vocab_size = 37;  // padded to 64
  c.max_seq_len = 16;
  c.n_layers = 2;
  c.d_model = 16;
  c.n_heads = c.n_kv_heads = 4;
  c.head_dim = 4;
  c.ffn_hidden = 64;
  return c;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lmt_ckpt_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    params_.resize(layout_.total_numel());
    model::init_params(layout_, params_.data(), 5);
    m_.assign(layout_.total_numel(), 0.0f);
    Rng r(3);
    for (float& x : m_) x = static_cast<float>(r.normal());
  }
  void TearDown() override { fs::remove_all(dir_); }

  CheckpointData data(int64_t step) {
    CheckpointData d;
    d.layout = &layout_;
    d.params = params_.data();
    d.optimizer_state = {{"adam.m", TensorView(m_.data(), Shape{static_cast<int64_t>(m_.size())}, DType::kF32)}};
    d.trainer_state = {{"step", step}, {"tokens", step * 100}};
    d.config_toml = "[train]\nmax_steps = 10\n";
    return d;
  }

  model::ParamLayout layout_{tiny_gpt2()};
  std::vector<float> params_, m_;
  fs::path dir_;
};

TEST_F(CheckpointTest, RoundTripRestoresParamsStateAndTrainerState) {
  ASSERT_TRUE(save_checkpoint(dir_.string(), 7, data(7)).ok());
  const std::string step_dir = (dir_ / "step_00000007").string();
  for (const char* f : {"model.safetensors", "model.json", "optimizer.safetensors", "trainer_state.json", "config.toml",
                        "manifest.json"})
    EXPECT_TRUE(fs::exists(step_dir + "/" + f)) << f;
  std::vector<float> params(layout_.total_numel(), -1.0f), m(m_.size(), 0.0f);
  // Padding rows of the embedding are not stored: the loader leaves them as the buffer had them.
  for (const auto& p : layout_.params())
    if (p.role == model::ParamRole::kEmbedding)
      for (int64_t i = p.hf_shape.numel(); i < p.numel; ++i) params[p.offset + i] = 0.0f;
  auto state = load_checkpoint(step_dir, layout_, params.data(),
                               {{"adam.m", TensorView(m.data(), Shape{static_cast<int64_t>(m.size())}, DType::kF32)}});
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ((*state)["tokens"], 700);
  for (const auto& p : layout_.params())
    for (int64_t i = 0; i < p.numel; ++i) ASSERT_EQ(params[p.offset + i], params_[p.offset + i]) << p.name << " " << i;
  EXPECT_EQ(m, m_);
  // The HF export has HF shapes: GPT-2's c_attn is Conv1D [C, 3C], the embedding unpadded.
  auto f = SafetensorsFile::open(step_dir + "/model.safetensors");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->find("transformer.h.0.attn.c_attn.weight")->shape, (std::vector<int64_t>{16, 48}));
  EXPECT_EQ(f->find("transformer.wte.weight")->shape, (std::vector<int64_t>{37, 16}));
  EXPECT_EQ(f->find("lm_head.weight"), nullptr);  // tied
}

TEST_F(CheckpointTest, CorruptionIsDetectedAndResumeTakesTheNewestValid) {
  ASSERT_TRUE(save_checkpoint(dir_.string(), 1, data(1)).ok());
  ASSERT_TRUE(save_checkpoint(dir_.string(), 2, data(2)).ok());
  const std::string newest = (dir_ / "step_00000002").string();
  {  // flip one byte in the middle of the newest model file
    std::fstream f(newest + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2000);
    f.put('\x7f');
  }
  Status v = verify_checkpoint(newest);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.message().find("model.safetensors does not match its manifest"), std::string::npos) << v.message();
  // An interrupted save leaves a .tmp directory; it is ignored.
  fs::create_directories(dir_ / "step_00000003.tmp");
  std::vector<std::string> skipped;
  auto latest = find_latest_checkpoint(dir_.string(), &skipped);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, (dir_ / "step_00000001").string());
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("step_00000002"), std::string::npos);
  // A missing manifest (crash before the last write) is incomplete, never loaded.
  fs::remove(dir_ / "step_00000001" / "manifest.json");
  EXPECT_FALSE(find_latest_checkpoint(dir_.string(), nullptr).ok());
}

TEST_F(CheckpointTest, PruneKeepsTheNewestAndNothingIsOverwritten) {
  for (int64_t s : {10, 20, 30, 40}) ASSERT_TRUE(save_checkpoint(dir_.string(), s, data(s)).ok());
  Status again = save_checkpoint(dir_.string(), 40, data(40));
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(prune_checkpoints(dir_.string(), 2).ok());
  EXPECT_FALSE(fs::exists(dir_ / "step_00000010"));
  EXPECT_FALSE(fs::exists(dir_ / "step_00000020"));
  EXPECT_TRUE(fs::exists(dir_ / "step_00000030"));
  EXPECT_TRUE(fs::exists(dir_ / "step_00000040"));
}

TEST_F(CheckpointTest, AFailedSaveLeavesNoCheckpointAndNoTmpAndTheOthersUntouched) {
  ASSERT_TRUE(save_checkpoint(dir_.string(), 1, data(1)).ok());
  CheckpointData bad = data(2);
  bad.optimizer_state.push_back({"", bad.optimizer_state[0].second});  // rejected by the safetensors writer
  Status s = save_checkpoint(dir_.string(), 2, bad);  // fails after model.safetensors and model.json
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("optimizer.safetensors"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(dir_ / "step_00000002"));
  EXPECT_FALSE(fs::exists(dir_ / "step_00000002.tmp")) << "a failed save removes its staging directory";
  EXPECT_TRUE(io::incomplete_checkpoints(dir_.string()).empty());
  EXPECT_TRUE(verify_checkpoint((dir_ / "step_00000001").string()).ok());
  // The same step saves fine afterwards.
  ASSERT_TRUE(save_checkpoint(dir_.string(), 2, data(2)).ok());
  EXPECT_EQ(*find_latest_checkpoint(dir_.string(), nullptr), (dir_ / "step_00000002").string());
}

TEST_F(CheckpointTest, OptimizerStateOfAnotherOptimizerIsAnErrorNamingIt) {
  ASSERT_TRUE(save_checkpoint(dir_.string(), 1, data(1)).ok());
  std::vector<float> params(layout_.total_numel()), mom(m_.size());
  auto r = load_checkpoint((dir_ / "step_00000001").string(), layout_, params.data(),
                           {{"muon.momentum", TensorView(mom.data(), Shape{static_cast<int64_t>(mom.size())}, DType::kF32)}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'muon.momentum'"), std::string::npos);
}

}  // namespace
}  // namespace lmt::train
