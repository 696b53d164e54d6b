// Checkpoints carry their tokenizer (io::kCheckpointTokenizerDir), older ones keep loading, and
// model.init_from (train/init_from.h) names the tensor and both shapes on a mismatch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "lmt/data/tokenizer/tokenizer.h"
#include "lmt/eval/model_dir.h"
#include "lmt/io/checkpoint_dir.h"
#include "lmt/kernels/registry.h"
#include "lmt/io/safetensors.h"
#include "lmt/model/hf_checkpoint.h"
#include "lmt/train/checkpoint.h"
#include "lmt/train/init_from.h"

namespace lmt::train {
namespace {
namespace fs = std::filesystem;

const std::string kShared = LMT_SHARED_DATA;

model::ModelConfig tiny_llama() {
  model::ModelConfig c = *model::preset("tiny");
  c.vocab_size = 64;
  c.max_seq_len = 16;
  c.n_layers = 1;
  c.d_model = 16;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.ffn_hidden = 24;
  return c;
}

class CheckpointTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lmt_ckpt_tok_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    params_.resize(layout_.total_numel());
    model::init_params(layout_, params_.data(), 5);
  }
  void TearDown() override { fs::remove_all(dir_); }
  CheckpointData data(const std::string& tokenizer) {
    CheckpointData d;
    d.layout = &layout_;
    d.params = params_.data();
    d.trainer_state = {{"step", 1}};
    d.config_toml = "[train]\nmax_steps = 1\n";
    d.tokenizer_path = tokenizer;
    return d;
  }
  model::ParamLayout layout_{tiny_llama()};
  std::vector<float> params_;
  fs::path dir_;
};

TEST_F(CheckpointTokenizerTest, TheTokenizerIsCopiedListedInTheManifestAndVerified) {
  const std::string src = kShared + "/tokenizers/qwen3/tokenizer.json";
  if (!fs::exists(src)) GTEST_SKIP() << src << " not found";
  ASSERT_TRUE(save_checkpoint((dir_ / "checkpoints").string(), 1, data(src)).ok());
  const std::string step = (dir_ / "checkpoints" / "step_00000001").string();
  EXPECT_EQ(io::checkpoint_tokenizer_path(step), step + "/tokenizer/tokenizer.json");
  EXPECT_EQ(fs::file_size(step + "/tokenizer/tokenizer.json"), fs::file_size(src));
  std::ifstream m(step + "/manifest.json");
  const std::string manifest((std::istreambuf_iterator<char>(m)), std::istreambuf_iterator<char>());
  EXPECT_NE(manifest.find("\"tokenizer/tokenizer.json\""), std::string::npos);
  ASSERT_TRUE(io::verify_checkpoint(step).ok());
  // The copy loads and encodes as the original does.
  auto a = data::load_tokenizer(src), b = data::load_tokenizer(io::checkpoint_tokenizer_path(step));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->encode("Hello, world"), (*b)->encode("Hello, world"));
  // A modified copy fails verification, naming the file.
  { std::ofstream(step + "/tokenizer/tokenizer.json", std::ios::app) << " "; }
  Status s = io::verify_checkpoint(step);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tokenizer/tokenizer.json"), std::string::npos) << s.ToString();
}

TEST_F(CheckpointTokenizerTest, GptTwoDirectoriesKeepBothFilesAndTheDirectoryIsThePath) {
  const std::string src = kShared + "/tokenizers/gpt2";
  if (!fs::exists(src + "/encoder.json")) GTEST_SKIP() << src << " not found";
  ASSERT_TRUE(save_checkpoint(dir_.string(), 1, data(src)).ok());
  const std::string step = (dir_ / "step_00000001").string();
  EXPECT_EQ(io::checkpoint_tokenizer_path(step), step + "/tokenizer");
  EXPECT_TRUE(fs::exists(step + "/tokenizer/vocab.bpe"));
  EXPECT_TRUE(io::verify_checkpoint(step).ok());
  EXPECT_TRUE(data::load_tokenizer(io::checkpoint_tokenizer_path(step)).ok());
}

TEST_F(CheckpointTokenizerTest, OldCheckpointsWithoutACopyVerifyAndFallBackToTheDatasetManifest) {
  ASSERT_TRUE(save_checkpoint(dir_.string(), 1, data("")).ok());
  const std::string step = (dir_ / "step_00000001").string();
  EXPECT_FALSE(fs::exists(step + "/tokenizer"));
  EXPECT_EQ(io::checkpoint_tokenizer_path(step), "");
  EXPECT_TRUE(io::verify_checkpoint(step).ok());
  auto loaded = eval::load_model_dir(step, kernels::backend("ref"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->tokenizer_path, "");  // config.toml names no data.path: nothing known, as before
}

TEST_F(CheckpointTokenizerTest, AManifestListingAForeignFileIsDamage) {
  ASSERT_TRUE(save_checkpoint(dir_.string(), 1, data("")).ok());
  const std::string step = (dir_ / "step_00000001").string();
  std::ifstream in(step + "/manifest.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "\"files\": {";
  text.insert(text.find(key) + key.size(), "\"../../etc/passwd\": {\"bytes\": 1, \"xxh64\": \"0\"},");
  in.close();
  std::ofstream(step + "/manifest.json", std::ios::trunc) << text;
  Status s = io::verify_checkpoint(step);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no checkpoint file"), std::string::npos) << s.ToString();
}

TEST(InitFrom, LoadsStories260KAndNamesTheTensorAndBothShapesOnAMismatch) {
  const std::string hf = kShared + "/models/stories260K/hf";
  if (!fs::exists(hf + "/config.json")) GTEST_SKIP() << hf << " not found";
  auto cfg = model::config_from_hf(hf + "/config.json");
  ASSERT_TRUE(cfg.ok());
  model::ParamLayout layout(*cfg);
  std::vector<float> params(layout.total_numel(), 0.0f);
  ASSERT_TRUE(init_params_from(hf, layout, params.data()).ok());
  // The same bytes as the file holds (hand-checked element: the first embedding value).
  auto file = io::SafetensorsFile::open(hf + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  std::vector<float> emb(static_cast<size_t>(512 * 64));
  ASSERT_TRUE(file->read_f32("model.embed_tokens.weight", emb.data(), 512 * 64).ok());
  EXPECT_EQ(std::vector<float>(params.begin(), params.begin() + 512 * 64), emb);

  model::ModelConfig wrong = *cfg;
  wrong.ffn_hidden = 160;
  model::ParamLayout wrong_layout(wrong);
  std::vector<float> p2(wrong_layout.total_numel(), 0.0f);
  Status s = init_params_from(hf, wrong_layout, p2.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.init_from"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("[172,64]"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("[160,64]"), std::string::npos) << s.ToString();
  EXPECT_FALSE(s.hint().empty());
  EXPECT_EQ(init_params_from(kShared + "/nonexistent", layout, params.data()).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace lmt::train
