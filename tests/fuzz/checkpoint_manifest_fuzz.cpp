// checkpoint_manifest_fuzz: a checkpoint's manifest.json (io/checkpoint_dir.h: verify_checkpoint), which
// decides whether a checkpoint is complete and intact before `--resume` or `lmtrain eval` trusts it.
//
// Input: manifest.json, written into a real checkpoint directory that save_checkpoint() made once
// (a 2-layer GPT-2-family model of a few thousand parameters, one optimizer tensor). verify must
// accept it or give a Status. Checked beyond that: when it accepts, load_checkpoint() of the same
// directory succeeds (the files themselves were never changed).
// Seeds: the manifest save_checkpoint() wrote, and variants of it, built here.
//   build-fuzz/bin/checkpoint_manifest_fuzz -max_total_time=60 -max_len=4096 CORPUS_DIR
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "lmt/train/checkpoint.h"

namespace {

struct Fixture {
  lmt::model::ModelConfig config;
  lmt::model::ParamLayout layout;
  std::vector<float> params, moment;
  std::string step_dir;

  std::vector<std::pair<std::string, lmt::TensorView>> optimizer_state() {
    return {{"adam.m", lmt::TensorView(moment.data(), lmt::Shape{static_cast<int64_t>(moment.size())}, lmt::DType::kF32)}};
  }
};

lmt::model::ModelConfig small_config() {
  lmt::model::ModelConfig c = *lmt::model::preset("gpt2-124m");
  c.vocab_size = 37;
  c.max_seq_len = 16;
  c.n_layers = 2;
  c.d_model = 16;
  c.n_heads = c.n_kv_heads = 4;
  c.head_dim = 4;
  c.ffn_hidden = 64;
  return c;
}

// save_checkpoint() into root/checkpoints/step_00000007.
Fixture& make_fixture(const std::string& root, Fixture& f) {
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
  f.params.resize(static_cast<size_t>(f.layout.total_numel()));
  lmt::model::init_params(f.layout, f.params.data(), 5);
  f.moment.assign(f.params.size(), 0.25f);
  lmt::train::CheckpointData d;
  d.layout = &f.layout;
  d.params = f.params.data();
  d.optimizer_state = f.optimizer_state();
  d.trainer_state = {{"step", 7}, {"tokens", 700}};
  d.config_toml = "[train]\nmax_steps = 10\n";
  if (auto s = lmt::train::save_checkpoint(root + "/checkpoints", 7, d); !s.ok()) lmt::fuzz::fail("fixture: " + s.ToString());
  f.step_dir = root + "/checkpoints/" + lmt::io::checkpoint_name(7);
  return f;
}

Fixture& fixture() {
  static Fixture f{small_config(), lmt::model::ParamLayout(small_config()), {}, {}, {}};
  static Fixture& made = make_fixture(lmt::fuzz::scratch_dir() + "/run", f);
  return made;
}

void write_seeds(const std::string& dir) {
  Fixture f{small_config(), lmt::model::ParamLayout(small_config()), {}, {}, {}};
  make_fixture(lmt::fuzz::scratch_dir() + "/seed_run", f);
  const std::string manifest = lmt::fuzz::read_file(f.step_dir + "/manifest.json");
  lmt::fuzz::write_file(dir + "/manifest.json", manifest);
  nlohmann::json j = nlohmann::json::parse(manifest);
  lmt::fuzz::write_file(dir + "/manifest_compact.json", j.dump());
  j["files"]["model.json"]["bytes"] = 1;
  lmt::fuzz::write_file(dir + "/manifest_wrong_size.json", j.dump(1));
}

}  // namespace

LMT_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = fixture();
  lmt::fuzz::write_file(f.step_dir + "/manifest.json", lmt::fuzz::as_view(data, size));
  if (!lmt::io::verify_checkpoint(f.step_dir).ok()) return 0;
  std::vector<float> params(f.params.size());
  auto state = lmt::train::load_checkpoint(f.step_dir, f.layout, params.data(), f.optimizer_state());
  if (!state.ok()) lmt::fuzz::fail("verified, then not loaded: " + state.status().ToString());
  return 0;
}
