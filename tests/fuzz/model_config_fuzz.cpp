// model_config_fuzz: model config files as `lmtrain plan --preset FILE` and checkpoints read them:
// lmtrain's own model.json (model/config_json.h) and Hugging Face config.json (model/hf_checkpoint.h),
// told apart by plan::load_model() (plan/model_source.h); and a run's metrics.jsonl
// (plan::mfu_from_metrics, `lmtrain plan --mfu-from`).
//
// Input: the first byte chooses. Even: the rest is a config.json, written to a scratch file and
// loaded with load_model(). It must give a validated ModelConfig or a Status. Checked beyond that:
// param_count() and padded_vocab() of an accepted config are positive (the planner's first use of
// it), and its model.json form (model_config_to_json) is accepted by model_config_from_json() and
// gives the same JSON again. Odd: the rest is a metrics.jsonl for mfu_from_metrics().
// Seeds: the shared stories260K config.json (tests/fuzz/seeds/model_config_fuzz), model.json of
// every preset, HF configs of each family, and a metrics file, built here.
//   build-fuzz/bin/model_config_fuzz -max_total_time=60 -max_len=4096 CORPUS_DIR
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "lmt/model/config_json.h"
#include "lmt/plan/model_source.h"

namespace {

void write_seeds(const std::string& dir) {
  for (const std::string& name : lmt::model::preset_names()) {
    auto c = lmt::model::preset(name);
    if (!c.ok()) lmt::fuzz::fail("preset " + name);
    lmt::fuzz::write_file(dir + "/" + name + ".json", std::string(1, '\0') + lmt::model::model_config_to_json(*c).dump(1));
  }
  lmt::fuzz::write_file(dir + "/hf_qwen3.json",
                        std::string(1, '\0') +
                            R"({"model_type": "qwen3", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
 "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": false})");
  // RoPE scaling in both HF spellings (rope_parameters of transformers 5, legacy rope_scaling).
  lmt::fuzz::write_file(dir + "/hf_llama_yarn.json",
                        std::string(1, '\0') +
                            R"({"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
 "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 4096,
 "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 1024,
 "beta_fast": 16.0, "mscale": 0.707, "mscale_all_dim": 0.5, "truncate": false}})");
  lmt::fuzz::write_file(dir + "/hf_llama3_scaling.json",
                        std::string(1, '\0') +
                            R"({"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
 "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 131072, "rope_theta": 500000.0,
 "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
 "original_max_position_embeddings": 8192}})");
  lmt::fuzz::write_file(dir + "/hf_gpt2.json",
                        std::string(1, '\0') +
                            R"({"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12,
 "n_positions": 1024, "layer_norm_epsilon": 1e-5, "n_inner": null})");
  lmt::fuzz::write_file(dir + "/metrics.jsonl",
                        "\x01{\"step\": 1, \"loss\": 9.1, \"mfu\": 0.31}\n\n{\"step\": 2, \"mfu\": 0.42}\n"
                        "{\"event\": \"eval\", \"val_loss\": 3.2}\n{\"step\": 3, \"mfu\": 4e-1}\n");
}

}  // namespace

LMT_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest = lmt::fuzz::as_view(data + 1, size - 1);
  if (data[0] % 2 == 1) {
    (void)lmt::plan::mfu_from_metrics(lmt::fuzz::write_scratch("run/metrics.jsonl", rest));
    return 0;
  }
  auto c = lmt::plan::load_model(lmt::fuzz::write_scratch("model/config.json", rest));
  if (!c.ok()) return 0;
  if (c->param_count() <= 0 || c->padded_vocab() <= 0) lmt::fuzz::fail("an accepted config has no parameters");
  const nlohmann::json j = lmt::model::model_config_to_json(*c);
  auto again = lmt::model::model_config_from_json(j, "<model.json>");
  if (!again.ok()) lmt::fuzz::fail("model.json of an accepted config is refused: " + again.status().ToString());
  if (lmt::model::model_config_to_json(*again) != j) lmt::fuzz::fail("model.json does not round-trip: " + j.dump());
  return 0;
}
