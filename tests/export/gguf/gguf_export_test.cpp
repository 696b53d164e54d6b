// export_gguf on small models built here: the architecture chosen, its metadata, the q/k row
// permutation (rotate-half -> llama.cpp's interleaved pairs, also with partial RoPE), the refusals of
// layouts llama.cpp cannot represent, and the tokenizer mapping. The file is parsed by a reader
// written here from the GGUF v3 spec; tests/interop/test_gguf_llamacpp.py checks the same export
// with gguf-py and llama.cpp themselves.
#include "lmt/export/gguf_export.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "common/files.h"
#include "common/shared_data.h"
#include "lmt/export/gguf_vocab.h"
#include "lmt/model/params.h"

namespace lmt::exporter {
namespace {

const std::string kTok512 = std::string(LMT_SHARED_DATA) + "/models/stories260K/tok512.bin";
const std::string kQwen3 = std::string(LMT_SHARED_DATA) + "/tokenizers/qwen3/tokenizer.json";

// A minimal GGUF reader: scalar metadata as numbers/strings, array lengths, tensor infos, data.
struct Parsed {
  std::map<std::string, double> num;
  std::map<std::string, std::string> str;
  std::map<std::string, uint64_t> array_len;
  struct Info {
    std::vector<uint64_t> ne;
    uint32_t type;
    uint64_t offset;
  };
  std::map<std::string, Info> tensors;
  std::string bytes;
  size_t data_start = 0;
  std::vector<float> f32(const std::string& name) const {
    const Info& t = tensors.at(name);
    size_t n = 1;
    for (uint64_t d : t.ne) n *= d;
    std::vector<float> v(n);
    std::memcpy(v.data(), bytes.data() + data_start + t.offset, n * 4);
    return v;
  }
};

Parsed parse(const std::string& path) {
  Parsed p;
  p.bytes = test::read_bytes(path);
  size_t at = 0;
  auto get = [&](auto* v) {
    std::memcpy(v, p.bytes.data() + at, sizeof(*v));
    at += sizeof(*v);
  };
  auto get_str = [&] {
    uint64_t n;
    get(&n);
    std::string s = p.bytes.substr(at, n);
    at += n;
    return s;
  };
  auto skip_value = [&](uint32_t type) {
    const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8)
      get_str();
    else
      at += sizes[type];
  };
  uint32_t magic, version;
  uint64_t n_tensors, n_kv;
  get(&magic), get(&version), get(&n_tensors), get(&n_kv);
  EXPECT_EQ(magic, 0x46554747u);
  EXPECT_EQ(version, 3u);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key = get_str();
    uint32_t type;
    get(&type);
    if (type == 9) {
      uint32_t et;
      uint64_t n;
      get(&et), get(&n);
      p.array_len[key] = n;
      for (uint64_t j = 0; j < n; ++j) skip_value(et);
    } else if (type == 8) {
      p.str[key] = get_str();
    } else if (type == 4) {
      uint32_t v;
      get(&v);
      p.num[key] = v;
    } else if (type == 6) {
      float v;
      get(&v);
      p.num[key] = v;
    } else if (type == 7) {
      uint8_t v;
      get(&v);
      p.num[key] = v;
    } else {
      ADD_FAILURE() << key << " has unexpected type " << type;
      skip_value(type);
    }
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const std::string name = get_str();
    uint32_t nd;
    get(&nd);
    Parsed::Info t;
    t.ne.resize(nd);
    for (auto& d : t.ne) get(&d);
    get(&t.type), get(&t.offset);
    EXPECT_EQ(t.offset % 32, 0u) << name;
    p.tensors[name] = t;
  }
  p.data_start = (at + 31) / 32 * 32;
  return p;
}

model::ModelConfig small_llama() {
  model::ModelConfig c;
  c.name = "small";
  c.vocab_size = 512;
  c.max_seq_len = 64;
  c.n_layers = 1;
  c.d_model = 16;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 4;  // NH·HD = 8 != C: key_length/value_length are written
  c.ffn_hidden = 32;
  return c;
}

class GgufExportTest : public test::ScratchDirTest {
 protected:
  void SetUp() override {
    test::ScratchDirTest::SetUp();
    LMT_SKIP_WITHOUT_SHARED("models/stories260K/tok512.bin");  // every export writes its vocabulary
  }
  // Exports `c` with every row r of q (and of k) holding the value r (k: 100 + r).
  Status run(const model::ModelConfig& c, ExportDType dtype = ExportDType::kF32, const std::string& tok = kTok512) {
    layout_ = std::make_unique<model::ParamLayout>(c);
    params_.assign(static_cast<size_t>(layout_->total_numel()), 0.5f);
    if (const model::ParamInfo* q = layout_->find("model.layers.0.self_attn.q_proj.weight")) {
      const model::ParamInfo* k = layout_->find("model.layers.0.self_attn.k_proj.weight");
      for (int64_t r = 0; r < q->shape[0]; ++r)
        for (int64_t j = 0; j < q->shape[1]; ++j) params_[q->offset + r * q->shape[1] + j] = static_cast<float>(r);
      for (int64_t r = 0; r < k->shape[0]; ++r)
        for (int64_t j = 0; j < k->shape[1]; ++j) params_[k->offset + r * k->shape[1] + j] = 100.0f + r;
    }
    ExportModel m{c, layout_.get(), params_.data(), tok, "test"};
    return export_gguf(m, path("m.gguf"), dtype);
  }
  // Row values of an exported [rows, cols] f32 tensor (each row is constant here).
  static std::vector<float> rows(const Parsed& p, const std::string& name) {
    const auto& t = p.tensors.at(name);
    std::vector<float> all = p.f32(name), out;
    for (uint64_t r = 0; r < t.ne[1]; ++r) out.push_back(all[r * t.ne[0]]);
    return out;
  }
  std::unique_ptr<model::ParamLayout> layout_;
  std::vector<float> params_;
};

TEST_F(GgufExportTest, LlamaMetadataAndRopePairPermutation) {
  ASSERT_TRUE(run(small_llama()).ok());
  const Parsed p = parse(path("m.gguf"));
  EXPECT_EQ(p.str.at("general.architecture"), "llama");
  EXPECT_EQ(p.num.at("llama.block_count"), 1);
  EXPECT_EQ(p.num.at("llama.embedding_length"), 16);
  EXPECT_EQ(p.num.at("llama.attention.head_count"), 2);
  EXPECT_EQ(p.num.at("llama.attention.head_count_kv"), 1);
  EXPECT_EQ(p.num.at("llama.attention.key_length"), 4);
  EXPECT_EQ(p.num.at("llama.attention.value_length"), 4);
  EXPECT_EQ(p.num.at("llama.rope.dimension_count"), 4);
  EXPECT_EQ(p.num.at("llama.context_length"), 64);
  EXPECT_EQ(p.num.at("general.file_type"), 0);
  EXPECT_EQ(p.str.at("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(p.array_len.at("tokenizer.ggml.tokens"), 512u);
  EXPECT_EQ(p.array_len.at("tokenizer.ggml.scores"), 512u);
  // Per head of 4 rows, rotate-half pairs (0,2), (1,3) become adjacent: rows 0, 2, 1, 3.
  EXPECT_EQ(rows(p, "blk.0.attn_q.weight"), (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7}));
  EXPECT_EQ(rows(p, "blk.0.attn_k.weight"), (std::vector<float>{100, 102, 101, 103}));
  EXPECT_EQ(p.tensors.at("blk.0.attn_q.weight").ne, (std::vector<uint64_t>{16, 8}));
  EXPECT_EQ(p.tensors.at("token_embd.weight").ne, (std::vector<uint64_t>{16, 512}));  // unpadded rows
  EXPECT_EQ(p.tensors.count("output.weight"), 0u);                                    // tied
}

TEST_F(GgufExportTest, PartialRopePermutesOnlyTheRotatedRows) {
  model::ModelConfig c = small_llama();
  c.n_heads = 1;
  c.head_dim = 8;
  c.rotary_fraction = 0.5f;  // 4 rotated dims per head
  ASSERT_TRUE(run(c).ok());
  const Parsed p = parse(path("m.gguf"));
  EXPECT_EQ(p.num.at("llama.rope.dimension_count"), 4);
  EXPECT_EQ(rows(p, "blk.0.attn_q.weight"), (std::vector<float>{0, 2, 1, 3, 4, 5, 6, 7}));
}

TEST_F(GgufExportTest, QkNormIsQwen3WithoutPermutation) {
  model::ModelConfig c = small_llama();
  c.qk_norm = true;
  c.tied_embeddings = false;
  ASSERT_TRUE(run(c).ok());
  const Parsed p = parse(path("m.gguf"));
  EXPECT_EQ(p.str.at("general.architecture"), "qwen3");
  EXPECT_EQ(rows(p, "blk.0.attn_q.weight"), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));  // NEOX RoPE
  EXPECT_EQ(p.tensors.at("blk.0.attn_q_norm.weight").ne, (std::vector<uint64_t>{4}));
  EXPECT_EQ(p.tensors.at("output.weight").ne, (std::vector<uint64_t>{16, 512}));
}

TEST_F(GgufExportTest, Q8_0FallsBackToF16ForRowsThatAreNotWholeBlocks) {
  model::ModelConfig c = small_llama();
  c.d_model = 32;
  c.ffn_hidden = 40;  // ffn_down rows of 40 values
  ASSERT_TRUE(run(c, ExportDType::kQ8_0).ok());
  const Parsed p = parse(path("m.gguf"));
  EXPECT_EQ(p.num.at("general.file_type"), 7);
  EXPECT_EQ(p.tensors.at("blk.0.ffn_gate.weight").type, 8u);   // q8_0
  EXPECT_EQ(p.tensors.at("blk.0.ffn_down.weight").type, 1u);   // f16
  EXPECT_EQ(p.tensors.at("blk.0.attn_norm.weight").type, 0u);  // norms stay f32
  EXPECT_EQ(p.tensors.at("token_embd.weight").type, 8u);
}

TEST_F(GgufExportTest, RefusesLayoutsLlamaCppCannotRepresent) {
  struct Case {
    const char* feature;
    void (*edit)(model::ModelConfig*);
  };
  const Case cases[] = {
      {"NoPE every 2 layers", [](model::ModelConfig* c) { c->n_layers = 2, c->nope_every = 2; }},
      {"LayerNorm", [](model::ModelConfig* c) { c->norm = model::NormKind::kLayerNorm; }},
      {"learned positions", [](model::ModelConfig* c) { c->positions = model::PositionKind::kLearned; }},
      {"without positions", [](model::ModelConfig* c) { c->positions = model::PositionKind::kNone; }},
      {"two-matrix MLP", [](model::ModelConfig* c) { c->ffn = model::FfnKind::kMlp; }},
      {"not SiLU", [](model::ModelConfig* c) { c->activation = kernels::Activation::kGeluTanh; }},
      {"QK-norm together with biases", [](model::ModelConfig* c) { c->qk_norm = c->attn_bias = true; }},
  };
  for (const Case& k : cases) {
    model::ModelConfig c = small_llama();
    k.edit(&c);
    const Status s = run(c);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << k.feature;
    EXPECT_NE(s.message().find(k.feature), std::string::npos) << s.ToString();
    EXPECT_TRUE(entries().empty()) << k.feature;
  }
}

// small_llama with 3 experts of 8 (top 2) in every layer.
model::ModelConfig small_moe() {
  model::ModelConfig c = small_llama();
  c.moe.num_experts = 3;
  c.moe.top_k = 2;
  c.moe.expert_ffn = 8;
  return c;
}

// Gives every row of every expert matrix a value naming it: 1000·(1 + e) + 100·matrix + row
// (matrix 0 gate, 1 up, 2 down), and the router row e the value 7 + e.
void mark_experts(const model::ParamLayout& layout, int64_t E, std::vector<float>* params) {
  const char* names[] = {"gate_proj", "up_proj", "down_proj"};
  for (int64_t e = 0; e < E; ++e)
    for (int m = 0; m < 3; ++m) {
      const model::ParamInfo* w =
          layout.find("model.layers.0.mlp.experts." + std::to_string(e) + "." + names[m] + ".weight");
      ASSERT_NE(w, nullptr);
      for (int64_t r = 0; r < w->shape[0]; ++r)
        for (int64_t j = 0; j < w->shape[1]; ++j)
          (*params)[w->offset + r * w->shape[1] + j] = static_cast<float>(1000 * (1 + e) + 100 * m + r);
    }
  const model::ParamInfo* router = layout.find("model.layers.0.mlp.gate.weight");
  ASSERT_NE(router, nullptr);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t j = 0; j < router->shape[1]; ++j) (*params)[router->offset + e * router->shape[1] + j] = 7.0f + e;
}

TEST_F(GgufExportTest, MoeIsLlamaWithStackedExpertsAndAnF32Router) {
  const model::ModelConfig c = small_moe();
  layout_ = std::make_unique<model::ParamLayout>(c);
  params_.assign(static_cast<size_t>(layout_->total_numel()), 0.5f);
  mark_experts(*layout_, 3, &params_);
  for (ExportDType dtype : {ExportDType::kF32, ExportDType::kQ8_0}) {
    std::filesystem::remove(path("m.gguf"));
    ExportModel m{c, layout_.get(), params_.data(), kTok512, "test"};
    ASSERT_TRUE(export_gguf(m, path("m.gguf"), dtype).ok());
    const Parsed p = parse(path("m.gguf"));
    EXPECT_EQ(p.str.at("general.architecture"), "llama");  // Mixtral's layout
    EXPECT_EQ(p.num.at("llama.expert_count"), 3);
    EXPECT_EQ(p.num.at("llama.expert_used_count"), 2);
    EXPECT_EQ(p.num.at("llama.feed_forward_length"), 8);  // llama.cpp sizes llama's experts by it
    EXPECT_EQ(p.tensors.at("blk.0.ffn_gate_inp.weight").ne, (std::vector<uint64_t>{16, 3}));
    EXPECT_EQ(p.tensors.at("blk.0.ffn_gate_inp.weight").type, 0u);  // f32 even in a q8_0 file
    EXPECT_EQ(p.tensors.at("blk.0.ffn_gate_exps.weight").ne, (std::vector<uint64_t>{16, 8, 3}));
    EXPECT_EQ(p.tensors.at("blk.0.ffn_up_exps.weight").ne, (std::vector<uint64_t>{16, 8, 3}));
    EXPECT_EQ(p.tensors.at("blk.0.ffn_down_exps.weight").ne, (std::vector<uint64_t>{8, 16, 3}));
    EXPECT_EQ(p.tensors.count("blk.0.ffn_gate.weight"), 0u);
    if (dtype != ExportDType::kF32) continue;
    const auto stacked = [&](const std::string& name, int m, int64_t rows_per_expert) {
      const auto& t = p.tensors.at(name);
      std::vector<float> all = p.f32(name), got, want;
      for (uint64_t r = 0; r < t.ne[1] * t.ne[2]; ++r) got.push_back(all[r * t.ne[0]]);
      for (int64_t e = 0; e < 3; ++e)
        for (int64_t r = 0; r < rows_per_expert; ++r) want.push_back(static_cast<float>(1000 * (1 + e) + 100 * m + r));
      EXPECT_EQ(got, want) << name;
    };
    stacked("blk.0.ffn_gate_exps.weight", 0, 8);
    stacked("blk.0.ffn_up_exps.weight", 1, 8);
    stacked("blk.0.ffn_down_exps.weight", 2, 16);
    EXPECT_EQ(rows(p, "blk.0.ffn_gate_inp.weight"), (std::vector<float>{7, 8, 9}));
  }
}

TEST_F(GgufExportTest, MoeWithQkNormIsQwen3MoeOrOlmoe) {
  model::ModelConfig c = small_moe();
  c.qk_norm = true;  // per head, renormalised top-k: Qwen3-MoE
  ASSERT_TRUE(run(c).ok());
  Parsed p = parse(path("m.gguf"));
  EXPECT_EQ(p.str.at("general.architecture"), "qwen3moe");
  EXPECT_EQ(p.num.at("qwen3moe.expert_feed_forward_length"), 8);
  EXPECT_EQ(p.num.at("qwen3moe.feed_forward_length"), 32);  // the dense FFN's, as HF's intermediate_size
  EXPECT_EQ(p.num.at("qwen3moe.expert_count"), 3);
  EXPECT_EQ(rows(p, "blk.0.attn_q.weight"), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));  // NEOX RoPE
  EXPECT_EQ(p.tensors.at("blk.0.attn_q_norm.weight").ne, (std::vector<uint64_t>{4}));

  std::filesystem::remove(path("m.gguf"));
  c.qk_norm_full = true;  // full width, top-k used as it is: OLMoE
  c.moe.renormalize = false;
  c.n_kv_heads = 2;
  ASSERT_TRUE(run(c).ok());
  p = parse(path("m.gguf"));
  EXPECT_EQ(p.str.at("general.architecture"), "olmoe");
  EXPECT_EQ(p.num.at("olmoe.feed_forward_length"), 8);
  EXPECT_EQ(p.num.at("olmoe.expert_used_count"), 2);
  EXPECT_EQ(p.tensors.at("blk.0.attn_q_norm.weight").ne, (std::vector<uint64_t>{8}));
  EXPECT_EQ(p.tensors.at("blk.0.attn_k_norm.weight").ne, (std::vector<uint64_t>{8}));
}

TEST_F(GgufExportTest, RefusesMoeLayoutsLlamaCppCannotRepresent) {
  struct Case {
    const char* feature;
    void (*edit)(model::ModelConfig*);
  };
  const Case cases[] = {
      {"dense layers between the MoE layers", [](model::ModelConfig* c) { c->n_layers = 2, c->moe.every = 2; }},
      {"shared experts", [](model::ModelConfig* c) { c->moe.shared_experts = 1; }},
      {"selection bias", [](model::ModelConfig* c) { c->moe.balance = model::MoeBalance::kBiasUpdate; }},
      {"no q/k norms and top-k weights not renormalised", [](model::ModelConfig* c) { c->moe.renormalize = false; }},
      {"per-head q/k norms and top-k weights not renormalised",
       [](model::ModelConfig* c) { c->qk_norm = true, c->moe.renormalize = false; }},
      {"full-width q/k norms and renormalised", [](model::ModelConfig* c) { c->qk_norm = c->qk_norm_full = true; }},
      {"full-width q/k norms and grouped-query attention",
       [](model::ModelConfig* c) { c->qk_norm = c->qk_norm_full = true, c->moe.renormalize = false; }},
      {"attention biases", [](model::ModelConfig* c) { c->attn_bias = true; }},
  };
  for (const Case& k : cases) {
    model::ModelConfig c = small_moe();
    k.edit(&c);
    ASSERT_TRUE(c.validate().ok()) << k.feature << ": " << c.validate().ToString();
    const Status s = run(c);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << k.feature;
    EXPECT_NE(s.message().find(k.feature), std::string::npos) << s.ToString();
    EXPECT_NE(s.hint().find("model."), std::string::npos) << s.ToString();
    EXPECT_TRUE(entries().empty()) << k.feature;
  }
}

TEST_F(GgufExportTest, TokenizerErrorsWriteNothing) {
  model::ModelConfig c = small_llama();
  c.vocab_size = 300;  // tok512.bin has 512 tokens
  Status s = run(c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("512"), std::string::npos) << s.ToString();
  s = run(small_llama(), ExportDType::kF32, "");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  s = run(small_llama(), ExportDType::kF32, path("nope.json"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_TRUE(entries().empty());
}

TEST(GgufVocab, Llama2cTokenizer) {
  LMT_SKIP_WITHOUT_SHARED("models/stories260K/tok512.bin");
  StatusOr<gguf::GgufVocab> v = gguf::load_gguf_vocab(kTok512, 512);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->model, "llama");
  EXPECT_EQ(v->tokens[0], "<unk>");
  EXPECT_EQ(v->tokens[1], "<s>");
  EXPECT_EQ(v->tokens[2], "</s>");
  EXPECT_EQ(v->tokens[3 + 0x0a], "<0x0A>");
  EXPECT_EQ(v->tokens[259], "\xe2\x96\x81t");  // " t" in llama2.c's file, "▁t" in SentencePiece's
  EXPECT_EQ(v->types[0], 2);
  EXPECT_EQ(v->types[1], 3);
  EXPECT_EQ(v->types[3], 6);
  EXPECT_EQ(v->types[259], 1);
  EXPECT_FLOAT_EQ(v->scores[260], -1.0f);
  EXPECT_EQ(v->bos, 1);
  EXPECT_EQ(v->eos, 2);
  EXPECT_EQ(v->unk, 0);
  // llama2.c stores no token count: the file must hold exactly the model's.
  EXPECT_EQ(gguf::load_gguf_vocab(kTok512, 520).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(gguf::load_gguf_vocab(kTok512, 500).status().code(), StatusCode::kInvalidArgument);
}

TEST(GgufVocab, Qwen3TokenizerJson) {
  LMT_SKIP_WITHOUT_SHARED("tokenizers/qwen3/tokenizer.json");
  StatusOr<gguf::GgufVocab> v = gguf::load_gguf_vocab(kQwen3, 151936);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->model, "gpt2");
  EXPECT_EQ(v->pre, "qwen2");
  EXPECT_EQ(v->tokens.size(), 151936u);
  EXPECT_EQ(v->merges.size(), 151387u);
  EXPECT_EQ(v->tokens[151643], "<|endoftext|>");
  EXPECT_EQ(v->types[151643], 3);
  EXPECT_EQ(v->tokens[220], "\xc4\xa0");  // " " in GPT-2's byte-to-unicode alphabet ("Ġ")
  EXPECT_EQ(v->types[220], 1);
  EXPECT_EQ(v->tokens[151669], "[PAD151669]");
  // tokenizer_config.json next to it: eos <|im_end|>, pad <|endoftext|>, no bos (bos = eos).
  EXPECT_EQ(v->eos, 151645);
  EXPECT_EQ(v->pad, 151643);
  EXPECT_EQ(v->bos, 151645);
  EXPECT_FALSE(v->add_bos);
}

TEST(GgufVocab, Gpt2Files) {
  LMT_SKIP_WITHOUT_SHARED("tokenizers/gpt2");
  StatusOr<gguf::GgufVocab> v = gguf::load_gguf_vocab(std::string(LMT_SHARED_DATA) + "/tokenizers/gpt2", 50304);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->model, "gpt2");
  EXPECT_EQ(v->pre, "gpt-2");
  EXPECT_EQ(v->tokens.size(), 50304u);  // padded like GPT-2's 50257 -> 50304 embedding
  EXPECT_EQ(v->merges.size(), 50000u);
  EXPECT_EQ(v->merges[0], "\xc4\xa0 t");  // "Ġ t": the first line after "#version"
  EXPECT_EQ(v->tokens[50256], "<|endoftext|>");
  EXPECT_EQ(v->types[50256], 3);
  EXPECT_EQ(v->types[50257], 5);
  EXPECT_EQ(v->bos, 50256);
  EXPECT_EQ(v->eos, 50256);
}

class GgufVocabFiles : public test::ScratchDirTest {};

TEST_F(GgufVocabFiles, MalformedTokenizersAreErrorsNotCrashes) {
  const std::string byte_level = R"("pre_tokenizer": {"type": "ByteLevel", "use_regex": true})";
  const std::string bad[] = {
      "{",
      "[]",
      R"({"model": {"type": "WordPiece"}})",
      R"({"model": {"type": "BPE"}, )" + byte_level + "}",
      R"({"model": {"type": "BPE", "vocab": [], "merges": []}, )" + byte_level + "}",
      R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}, )" + byte_level + "}",
      R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}, )" + byte_level + "}",
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [7]}, )" + byte_level + "}",
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "added_tokens": [{"id": "x"}], )" + byte_level +
          "}",
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Metaspace"}})",
      R"({"model": {"type": "BPE", "vocab": {"a": 99}, "merges": []}, )" + byte_level + "}",  // id >= rows
      // Ids that are not integers: converting 4e301 to int64 was undefined behaviour (found by
      // gguf_vocab_fuzz; seeds/gguf_vocab_fuzz/crash-float-token-id).
      R"({"model": {"type": "BPE", "vocab": {"a": 4e301}, "merges": []}, )" + byte_level + "}",
      R"({"model": {"type": "BPE", "vocab": {"a": 1.5}, "merges": []}, )" + byte_level + "}",
      R"({"model": {"type": "BPE", "vocab": {"a": 18446744073709551615}, "merges": []}, )" + byte_level + "}",
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "added_tokens": [{"id": 1e300}], )" + byte_level +
          "}",
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "added_tokens": [7], )" + byte_level + "}",
  };
  for (const std::string& text : bad) {
    test::write_bytes(path("tokenizer.json"), text);
    StatusOr<gguf::GgufVocab> v = gguf::load_gguf_vocab(path("tokenizer.json"), 16);
    EXPECT_FALSE(v.ok()) << text;
    if (!v.ok()) {
      EXPECT_NE(v.status().message().find("tokenizer.json"), std::string::npos) << v.status().ToString();
    }
  }
  // The smallest valid one, for contrast.
  test::write_bytes(
      path("tokenizer.json"),
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, )" + byte_level + "}");
  StatusOr<gguf::GgufVocab> v = gguf::load_gguf_vocab(path("tokenizer.json"), 4);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->pre, "gpt-2");
  EXPECT_EQ(v->tokens, (std::vector<std::string>{"a", "b", "ab", "[PAD3]"}));
  EXPECT_EQ(v->merges, std::vector<std::string>{"a b"});
  // A truncated llama2.c file.
  test::write_bytes(path("t.bin"), test::read_bytes(kTok512).substr(0, 100));
  EXPECT_EQ(gguf::load_gguf_vocab(path("t.bin"), 512).status().code(), StatusCode::kDataLoss);
}

TEST(GgufVocab, PreTokenizerNames) {
  EXPECT_EQ(gguf::pre_tokenizer_name(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"),
            "gpt-2");
  EXPECT_EQ(
      gguf::pre_tokenizer_name(
          R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
      "llama-bpe");
  EXPECT_EQ(gguf::pre_tokenizer_name(R"(\w+)"), "");
}

}  // namespace
}  // namespace lmt::exporter
