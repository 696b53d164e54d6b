#include "op_cases.h"

#include <cmath>

#include "lmt/base/rng.h"

namespace lmt::testing {

using kernels::Activation;
using kernels::AttentionBackend;
using kernels::Backend;
using kernels::RopeFreqs;

TensorView Env::operator[](const std::string& name) const {
  auto it = tensors_.find(name);
  LMT_CHECK(it != tensors_.end()) << "test env has no tensor '" << name << "'";
  return it->second.view();
}

namespace {

void fill(const Tensor& t, const TensorSpec& s, Rng& rng) {
  const int64_t n = t.numel();
  if (t.dtype() == DType::kI32) {
    int32_t* p = t.as<int32_t>();
    switch (s.gen) {
      case Gen::kIds:
        for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(rng.below(s.hi));
        break;
      case Gen::kTargets:
        for (int64_t i = 0; i < n; ++i)
          p[i] = rng.uniform() < 0.1 ? -100 : static_cast<int32_t>(rng.below(s.hi));
        break;
      case Gen::kPositions:
        for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(i % s.hi);
        break;
      case Gen::kDocIds: {
        const int64_t T = s.shape.dim(-1);
        for (int64_t row = 0; row < n / T; ++row) {
          int32_t doc = 0;
          int64_t left = 0;
          for (int64_t t = 0; t < T; ++t) {
            if (left == 0) {  // a new document; one in four has length 1
              ++doc;
              left = rng.uniform() < 0.25 ? 1 : 1 + static_cast<int64_t>(rng.below(std::max<int64_t>(T / 2, 1)));
            }
            p[row * T + t] = doc;
            --left;
          }
        }
        break;
      }
      default: LMT_CHECK(false) << "int tensor " << s.name << " needs an integer generator";
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    double v = 0;
    if (s.gen == Gen::kNormal) v = rng.normal() * s.scale;
    else if (s.gen == Gen::kPositive) v = 0.5 + rng.uniform();
    if (t.dtype() == DType::kF64) t.as<double>()[i] = v;
    else if (t.dtype() == DType::kF32) t.as<float>()[i] = static_cast<float>(v);
    else t.as<bf16>()[i] = bf16(static_cast<float>(v));
  }
}

bool is_int(Gen g) { return g == Gen::kIds || g == Gen::kTargets || g == Gen::kPositions || g == Gen::kDocIds; }

TensorSpec in(std::string name, Shape s, double scale = 1.0) { return {std::move(name), s, Gen::kNormal, scale}; }
TensorSpec gemm(std::string name, Shape s, double scale = 1.0) {
  TensorSpec t{std::move(name), s, Gen::kNormal, scale};
  t.gemm_input = true;
  return t;
}
TensorSpec pos_w(std::string name, Shape s) { return {std::move(name), s, Gen::kPositive}; }
TensorSpec zero(std::string name, Shape s) { return {std::move(name), s, Gen::kZero}; }
TensorSpec ints(std::string name, Shape s, Gen g, int64_t hi) { return {std::move(name), s, g, 1.0, hi}; }

std::string shape_name(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::string s;
  for (auto [k, v] : dims) s += std::string(s.empty() ? "" : "_") + k + std::to_string(v);
  return s;
}

void add_matmul_cases(std::vector<OpCase>& out) {
  for (auto [M, K, N] : {std::tuple{1, 1, 1}, {7, 33, 65}, {64, 96, 48}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int accumulate = 0; accumulate < 2; ++accumulate)
          for (int b16 = 0; b16 < 2; ++b16) {
            OpCase c;
            c.name = "matmul/" + shape_name({{"M", M}, {"K", K}, {"N", N}}) + (ta ? "_ta" : "") +
                     (tb ? "_tb" : "") + (accumulate ? "_acc" : "") + (b16 ? "_bf16" : "");
            c.bf16 = b16;
            c.specs = {gemm("a", ta ? Shape{K, M} : Shape{M, K}), gemm("b", tb ? Shape{N, K} : Shape{K, N}),
                       accumulate ? in("c", {M, N}) : zero("c", {M, N})};
            c.outputs = {"c"};
            c.gradcheck = false;  // no backward: matmul is the building block of the others
            c.forward = [=](Backend& be, Env& e) { be.matmul(e["c"], e["a"], e["b"], ta, tb, accumulate); };
            out.push_back(c);
          }
}

void add_linear_cases(std::vector<OpCase>& out) {
  // OC = 1100: the cpu backend's weight gradient runs in blocks of 512 output rows (and a last one
  // of 76) with AVX-512; too large for the finite-difference check, which the small shapes cover.
  // On AVX2 dW with C <= 256 and OC >= 4·C runs transposed (dWᵀ = inpᵀ·dout, cpu/matmul.cpp): in one
  // chunk at OC = 1100, in two (4096 rows and 104) at OC = 4200.
  for (auto [N, C, OC] : {std::tuple{1, 1, 1}, {7, 33, 65}, {64, 96, 48}, {130, 64, 17}, {40, 24, 1100}, {16, 8, 4200}})
    for (int bias = 0; bias < 2; ++bias)
      for (int b16 = 0; b16 < 2; ++b16) {
        OpCase c;
        c.gradcheck = OC < 1000;
        c.name = "linear/" + shape_name({{"N", N}, {"C", C}, {"OC", OC}}) + (bias ? "_bias" : "") + (b16 ? "_bf16" : "");
        c.bf16 = b16;
        c.specs = {gemm("inp", {N, C}), gemm("weight", {OC, C}, 0.3), in("bias", {OC}), zero("out", {N, OC}),
                   gemm("dout", {N, OC}), zero("dinp", {N, C}), in("dweight", {OC, C}), in("dbias", {OC})};
        // dweight/dbias start non-zero: parameter gradients must accumulate.
        c.outputs = {"out"};
        c.grads = {{"inp", "dinp"}, {"weight", "dweight"}};
        if (bias) c.grads.push_back({"bias", "dbias"});
        c.forward = [=](Backend& be, Env& e) { be.linear_forward(e["out"], e["inp"], e["weight"], bias ? e["bias"] : TensorView()); };
        c.backward = [=](Backend& be, Env& e) {
          be.linear_backward(e["dinp"], e["dweight"], bias ? e["dbias"] : TensorView(), e["dout"], e["inp"], e["weight"]);
        };
        out.push_back(c);
      }
}

// Weight-only bf16 (decoding): f32 inp, bf16 weight, f32 out; forward only. N 1..9 covers every
// row tail of the cpu micro-tile (4 rows × 4 weight rows), OC 1/7/65 the weight-row tails, C 5/33
// the masked tail of a 16-wide step, 768 a real width.
void add_linear_bf16_weight_cases(std::vector<OpCase>& out) {
  for (auto [N, C, OC] : {std::tuple{1, 5, 1}, {2, 33, 7}, {3, 16, 65}, {8, 768, 64}, {9, 96, 48}, {70, 64, 17}})
    for (int bias = 0; bias < 2; ++bias) {
      OpCase c;
      c.name = "linear_bf16w/" + shape_name({{"N", N}, {"C", C}, {"OC", OC}}) + (bias ? "_bias" : "");
      TensorSpec w = in("weight", {OC, C}, 0.3);
      w.bf16_always = true;
      c.specs = {in("inp", {N, C}), w, in("bias", {OC}), zero("out", {N, OC})};
      c.outputs = {"out"};
      c.gradcheck = false;
      c.forward = [=](Backend& be, Env& e) { be.linear_forward(e["out"], e["inp"], e["weight"], bias ? e["bias"] : TensorView()); };
      out.push_back(c);
    }
}

void add_embedding_cases(std::vector<OpCase>& out) {
  for (auto [N, V, C] : {std::tuple{1, 1, 1}, {37, 11, 33}, {256, 50, 64}})
    for (int accumulate = 0; accumulate < 2; ++accumulate) {
      OpCase c;
      c.name = "embedding/" + shape_name({{"N", N}, {"V", V}, {"C", C}}) + (accumulate ? "_acc" : "");
      c.specs = {ints("ids", {N}, Gen::kIds, V), in("table", {V, C}), accumulate ? in("out", {N, C}) : zero("out", {N, C}),
                 in("dout", {N, C}), in("dtable", {V, C})};
      c.outputs = {"out"};
      c.grads = {{"table", "dtable"}};
      c.gradcheck = !accumulate;  // re-running an accumulating forward would not be a function
      c.forward = [=](Backend& be, Env& e) { be.embedding_forward(e["out"], e["ids"], e["table"], accumulate); };
      c.backward = [](Backend& be, Env& e) { be.embedding_backward(e["dtable"], e["dout"], e["ids"]); };
      out.push_back(c);
    }
}

void add_norm_cases(std::vector<OpCase>& out) {
  // C = 2048 and 2052 reach the cuda float4 row kernels' widest register caches (and 2052 the backward's
  // general path).
  for (auto [N, C] : {std::pair{1, 1}, {1, 7}, {5, 33}, {64, 768}, {130, 64}, {3, 2048}, {2, 2052}})
    for (int accumulate = 0; accumulate < 2; ++accumulate) {
      for (int bias = 0; bias < 2; ++bias) {
        OpCase c;
        c.name = "layernorm/" + shape_name({{"N", N}, {"C", C}}) + (bias ? "_bias" : "") + (accumulate ? "_acc" : "");
        c.specs = {in("inp", {N, C}, 2.0), pos_w("weight", {C}), in("bias", {C}), zero("out", {N, C}), zero("mean", {N}),
                   zero("rstd", {N}), in("dout", {N, C}), accumulate ? in("dinp", {N, C}) : zero("dinp", {N, C}),
                   in("dweight", {C}), in("dbias", {C})};
        c.outputs = {"out"};
        c.aux = {"mean", "rstd"};
        c.grads = {{"inp", "dinp"}, {"weight", "dweight"}};
        if (bias) c.grads.push_back({"bias", "dbias"});
        c.gradcheck = !accumulate && C > 1;  // C == 1 normalises to exactly 0: a flat function
        c.forward = [=](Backend& be, Env& e) {
          be.layernorm_forward(e["out"], e["mean"], e["rstd"], e["inp"], e["weight"], bias ? e["bias"] : TensorView(), 1e-5f);
        };
        c.backward = [=](Backend& be, Env& e) {
          be.layernorm_backward(e["dinp"], e["dweight"], bias ? e["dbias"] : TensorView(), e["dout"], e["inp"],
                                e["weight"], e["mean"], e["rstd"], accumulate);
        };
        out.push_back(c);
      }
      OpCase c;
      c.name = "rmsnorm/" + shape_name({{"N", N}, {"C", C}}) + (accumulate ? "_acc" : "");
      c.specs = {in("inp", {N, C}, 2.0), pos_w("weight", {C}), zero("out", {N, C}), zero("rstd", {N}), in("dout", {N, C}),
                 accumulate ? in("dinp", {N, C}) : zero("dinp", {N, C}), in("dweight", {C})};
      c.outputs = {"out"};
      c.aux = {"rstd"};
      c.grads = {{"inp", "dinp"}, {"weight", "dweight"}};
      c.gradcheck = !accumulate;
      c.forward = [](Backend& be, Env& e) { be.rmsnorm_forward(e["out"], e["rstd"], e["inp"], e["weight"], 1e-6f); };
      c.backward = [=](Backend& be, Env& e) {
        be.rmsnorm_backward(e["dinp"], e["dweight"], e["dout"], e["inp"], e["weight"], e["rstd"], accumulate);
      };
      out.push_back(c);
    }
}

// The residual add fused with the norm (forward only: backward is the plain norm's). In place: sum
// written over a.
void add_fused_norm_cases(std::vector<OpCase>& out) {
  for (auto [N, C] : {std::pair{1, 1}, {5, 33}, {64, 768}, {3, 2048}, {2, 2051}})
    for (int layernorm = 0; layernorm < 2; ++layernorm)
      for (int in_place = 0; in_place < 2; ++in_place) {
        OpCase c;
        c.name = std::string(layernorm ? "add_layernorm" : "add_rmsnorm") + "/" + shape_name({{"N", N}, {"C", C}}) +
                 (in_place ? "_in_place" : "");
        c.specs = {in("a", {N, C}, 2.0), in("b", {N, C}), zero("sum", {N, C}), pos_w("weight", {C}), in("bias", {C}),
                   zero("out", {N, C}), zero("mean", {N}), zero("rstd", {N})};
        c.outputs = {in_place ? "a" : "sum", "out"};
        c.aux = {"rstd"};
        if (layernorm) c.aux.push_back("mean");
        c.gradcheck = false;
        c.forward = [=](Backend& be, Env& e) {
          const TensorView sum = in_place ? e["a"] : e["sum"];
          if (layernorm)
            be.add_layernorm_forward(sum, e["out"], e["mean"], e["rstd"], e["a"], e["b"], e["weight"], e["bias"], 1e-5f);
          else
            be.add_rmsnorm_forward(sum, e["out"], e["rstd"], e["a"], e["b"], e["weight"], 1e-6f);
        };
        out.push_back(c);
      }
}

void add_activation_cases(std::vector<OpCase>& out) {
  for (Activation act : {Activation::kGeluTanh, Activation::kSilu, Activation::kRelu}) {
    const std::string a(kernels::activation_name(act));
    for (auto [N, H] : {std::pair{1, 1}, {3, 17}, {64, 3072 / 8}}) {
      OpCase c;
      c.name = "activation_" + a + "/" + shape_name({{"N", N}, {"H", H}});
      c.specs = {in("inp", {N, H}, 3.0), zero("out", {N, H}), in("dout", {N, H}), zero("dinp", {N, H})};
      c.outputs = {"out"};
      c.grads = {{"inp", "dinp"}};
      c.forward = [=](Backend& be, Env& e) { be.activation_forward(act, e["out"], e["inp"]); };
      c.backward = [=](Backend& be, Env& e) { be.activation_backward(act, e["dinp"], e["dout"], e["inp"]); };
      out.push_back(c);

      OpCase g;
      g.name = "glu_" + a + "/" + shape_name({{"N", N}, {"H", H}});
      g.specs = {in("inp", {N, 2 * H}, 3.0), zero("out", {N, H}), in("dout", {N, H}), zero("dinp", {N, 2 * H})};
      g.outputs = {"out"};
      g.grads = {{"inp", "dinp"}};
      g.forward = [=](Backend& be, Env& e) { be.glu_forward(act, e["out"], e["inp"]); };
      g.backward = [=](Backend& be, Env& e) { be.glu_backward(act, e["dinp"], e["dout"], e["inp"]); };
      out.push_back(g);
    }
  }
}

void add_rope_cases(std::vector<OpCase>& out) {
  // scaled: a non-uniform frequency table (the upper half of the pairs slowed down 8x, as Llama 3's
  // and YaRN's low frequencies are) with YaRN-style attention scaling of cos/sin. HD 264: 130 pairs,
  // more frequencies than the cuda backend passes as a kernel argument.
  struct R { int64_t T, NH, HD, rot; float theta; bool scaled; };
  for (R r : {R{1, 1, 2, 2, 10000.f, false}, R{9, 3, 16, 16, 10000.f, false}, R{33, 4, 64, 32, 500000.f, false},
              R{130, 2, 80, 20, 10000.f, false}, R{300, 2, 128, 128, 1e6f, false}, R{9, 3, 16, 16, 10000.f, true},
              R{70, 2, 48, 32, 500000.f, true}, R{5, 1, 264, 260, 10000.f, false}}) {
    RopeFreqs freqs = RopeFreqs::from_theta(r.theta, r.rot);
    if (r.scaled) {
      for (size_t i = freqs.inv_freq.size() / 2; i < freqs.inv_freq.size(); ++i) freqs.inv_freq[i] /= 8.0;
      freqs.attention_scaling = 1.2079441541679836;  // YaRN's 0.1·ln(8) + 1
    }
    for (int in_place = 0; in_place < 2; ++in_place) {
      OpCase c;
      const int64_t N = 2 * r.T;  // two sequences of length T, positions restart per sequence
      c.name = "rope/" + shape_name({{"N", N}, {"NH", r.NH}, {"HD", r.HD}, {"rot", r.rot}}) +
               (r.scaled ? "_scaled" : "") + (in_place ? "_inplace" : "");
      c.specs = {in("inp", {N, r.NH, r.HD}), ints("positions", {N}, Gen::kPositions, r.T), zero("out", {N, r.NH, r.HD}),
                 in("dout", {N, r.NH, r.HD}), zero("dinp", {N, r.NH, r.HD})};
      c.outputs = {"out"};
      c.grads = {{"inp", "dinp"}};
      c.gradcheck = !in_place;
      c.forward = [=](Backend& be, Env& e) {
        if (in_place) {  // out aliases inp: copy first, then rotate in place
          be.convert(e["out"], e["inp"]);
          be.rope_forward(e["out"], e["out"], e["positions"], freqs);
        } else {
          be.rope_forward(e["out"], e["inp"], e["positions"], freqs);
        }
      };
      c.backward = [=](Backend& be, Env& e) {
        if (in_place) {
          be.convert(e["dinp"], e["dout"]);
          be.rope_backward(e["dinp"], e["dinp"], e["positions"], freqs);
        } else {
          be.rope_backward(e["dinp"], e["dout"], e["positions"], freqs);
        }
      };
      out.push_back(c);
    }
  }
}

void add_attention_cases(std::vector<OpCase>& out) {
  struct A { int64_t B, T, NH, G, HD; bool docs; };
  const A shapes[] = {{1, 1, 1, 1, 8, false},  {2, 17, 4, 2, 16, true},  {1, 33, 8, 1, 12, false},
                      {1, 40, 8, 8, 64, true}, {1, 70, 8, 4, 80, false}, {2, 130, 4, 4, 64, true},
                      {1, 65, 8, 2, 32, true}};
  for (const A& a : shapes)
    for (AttentionBackend which : {AttentionBackend::kNaive, AttentionBackend::kFlash}) {
      OpCase c;
      c.name = "attention_" + std::string(kernels::attention_backend_name(which)) + "/" +
               shape_name({{"B", a.B}, {"T", a.T}, {"NH", a.NH}, {"G", a.G}, {"HD", a.HD}}) + (a.docs ? "_docs" : "");
      const Shape qs{a.B, a.T, a.NH, a.HD}, ks{a.B, a.T, a.G, a.HD};
      c.specs = {in("q", qs), in("k", ks), in("v", ks), ints("doc_ids", {a.B, a.T}, Gen::kDocIds, 0),
                 zero("out", qs), zero("lse", {a.B, a.NH, a.T}), in("dout", qs), zero("dq", qs), zero("dk", ks),
                 zero("dv", ks)};
      c.outputs = {"out"};
      c.aux = {"lse"};
      c.grads = {{"q", "dq"}, {"k", "dk"}, {"v", "dv"}};
      c.gradcheck = which == AttentionBackend::kNaive && a.T <= 40;  // ref ignores the backend choice
      const float scale = 1.0f / std::sqrt(static_cast<float>(a.HD));
      const bool docs = a.docs;
      c.forward = [=](Backend& be, Env& e) {
        be.attention_forward(which, e["out"], e["lse"], e["q"], e["k"], e["v"], docs ? e["doc_ids"] : TensorView(), scale);
      };
      c.backward = [=](Backend& be, Env& e) {
        be.attention_backward(which, e["dq"], e["dk"], e["dv"], e["dout"], e["q"], e["k"], e["v"], e["out"], e["lse"],
                              docs ? e["doc_ids"] : TensorView(), scale);
      };
      out.push_back(c);
    }
}

// Decoding over a KV cache: forward only (no gradcheck). Capacity S > length so the kernel must
// ignore the cache beyond `length`; length 1 is the first token; odd HD and G = 1 (MQA) included.
void add_attention_decode_cases(std::vector<OpCase>& out) {
  struct D { int64_t B, S, length, NH, G, HD; };
  for (D d : {D{1, 4, 1, 1, 1, 8}, D{1, 40, 33, 8, 4, 8}, D{2, 70, 65, 12, 12, 64}, D{1, 300, 257, 8, 2, 80},
              D{3, 20, 20, 6, 1, 12}}) {
    OpCase c;
    c.name = "attention_decode/" + shape_name({{"B", d.B}, {"S", d.S}, {"len", d.length}, {"NH", d.NH}, {"G", d.G},
                                               {"HD", d.HD}});
    const Shape qs{d.B, d.NH, d.HD}, ks{d.B, d.S, d.G, d.HD};
    c.specs = {in("q", qs), in("k_cache", ks), in("v_cache", ks), zero("out", qs)};
    c.outputs = {"out"};
    c.gradcheck = false;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d.HD));
    const int64_t length = d.length;
    c.forward = [=](Backend& be, Env& e) {
      be.attention_decode(e["out"], e["q"], e["k_cache"], e["v_cache"], length, scale);
    };
    out.push_back(c);
  }
}

// n new queries over a cache (prefill / a choice segment): S > start + n so the kernel must ignore
// the rows beyond the last new key; start 0 (a plain prompt), n 1 (== decode), GQA and MQA.
void add_attention_prefill_cases(std::vector<OpCase>& out) {
  struct P { int64_t S, start, n, NH, G, HD; };
  for (P d : {P{4, 0, 1, 1, 1, 8}, P{40, 0, 33, 8, 4, 8}, P{70, 20, 1, 12, 12, 64}, P{300, 200, 57, 8, 2, 80},
              P{24, 3, 20, 6, 1, 12}}) {
    OpCase c;
    c.name = "attention_prefill/" + shape_name({{"S", d.S}, {"start", d.start}, {"n", d.n}, {"NH", d.NH},
                                                {"G", d.G}, {"HD", d.HD}});
    const Shape qs{d.n, d.NH, d.HD}, ks{1, d.S, d.G, d.HD};
    c.specs = {in("q", qs), in("k_cache", ks), in("v_cache", ks), zero("out", qs)};
    c.outputs = {"out"};
    c.gradcheck = false;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d.HD));
    const int64_t start = d.start;
    c.forward = [=](Backend& be, Env& e) {
      be.attention_prefill(e["out"], e["q"], e["k_cache"], e["v_cache"], start, scale);
    };
    out.push_back(c);
  }
}

void add_lm_head_cases(std::vector<OpCase>& out) {
  struct L { int64_t N, C, V, Vp, chunk; float z; };
  // V = 1100: the weight gradient in vocabulary blocks (see linear); no finite differences at that size.
  for (L l : {L{1, 1, 2, 2, 256, 0.f}, L{37, 24, 101, 112, 16, 0.f}, L{37, 24, 101, 112, 64, 1e-3f}, L{130, 64, 500, 512, 256, 1e-4f},
              L{40, 16, 1100, 1152, 32, 0.f}})
    for (int b16 = 0; b16 < 2; ++b16) {
      OpCase c;
      c.gradcheck = l.V < 1000;
      c.name = "lm_head_xent/" + shape_name({{"N", l.N}, {"C", l.C}, {"V", l.V}, {"Vp", l.Vp}, {"chunk", l.chunk}}) +
               (l.z > 0 ? "_zloss" : "") + (b16 ? "_bf16" : "");
      c.bf16 = b16;
      // bf16 backward rounds dlogits to bf16 before the two GEMMs (as autocast does): ~3 decimal digits.
      c.tolerance_scale = b16 ? 40 : 1;
      c.specs = {gemm("x", {l.N, l.C}), gemm("weight", {l.Vp, l.C}, 0.5), ints("targets", {l.N}, Gen::kTargets, l.V),
                 zero("losses", {l.N}), zero("dx", {l.N, l.C}), in("dweight", {l.Vp, l.C})};
      c.aux = {"losses"};  // the loss itself is checked; its gradient is checked through dx, dweight
      c.grads = {{"x", "dx"}, {"weight", "dweight"}};
      kernels::CrossEntropyOptions o;
      o.vocab_size = l.V;
      o.z_loss = l.z;
      o.chunk_rows = l.chunk;
      o.grad_scale = 1.0f / static_cast<float>(l.N);
      c.forward = [=](Backend& be, Env& e) {
        be.lm_head_cross_entropy(e["losses"], e["x"], e["weight"], e["targets"], o, TensorView(), TensorView());
      };
      c.backward = [=](Backend& be, Env& e) {
        be.lm_head_cross_entropy(e["losses"], e["x"], e["weight"], e["targets"], o, e["dx"], e["dweight"]);
      };
      c.objective = [=](const Env& e) {  // what backward differentiates: grad_scale · Σ losses
        double s = 0;
        for (int64_t i = 0; i < l.N; ++i) s += e["losses"].as<double>()[i];
        return s * o.grad_scale;
      };
      out.push_back(c);
    }
}

void add_elementwise_cases(std::vector<OpCase>& out) {
  for (int64_t n : {1, 17, 1000, 4099}) {
    OpCase a;
    a.name = "add/n" + std::to_string(n);
    a.specs = {in("a", {n}), in("b", {n}), zero("out", {n})};
    a.outputs = {"out"};
    a.gradcheck = false;
    a.forward = [](Backend& be, Env& e) { be.add(e["out"], e["a"], e["b"]); };
    out.push_back(a);

    OpCase cv;
    cv.name = "convert_f32_bf16_f32/n" + std::to_string(n);
    TensorSpec y16 = zero("y16", {n});
    y16.bf16_always = true;
    cv.specs = {in("x", {n}, 10.0), y16, zero("y", {n})};
    cv.outputs = {"y"};
    cv.aux = {"y16"};
    cv.gradcheck = false;
    cv.forward = [](Backend& be, Env& e) {
      be.convert(e["y16"], e["x"]);
      be.convert(e["y"], e["y16"]);
    };
    out.push_back(cv);

    OpCase s;
    s.name = "scale_and_sum_squares/n" + std::to_string(n);
    s.specs = {in("x", {n}), zero("ss", {1})};
    s.outputs = {"x"};
    s.aux = {"ss"};
    s.gradcheck = false;
    s.forward = [](Backend& be, Env& e) {
      be.scale(e["x"], 0.75f);
      double v = be.sum_squares(e["x"]);
      be.fill(e["ss"], v);  // through the backend: the tensor may live on its device
    };
    out.push_back(s);

    for (int mirror = 0; mirror < 2; ++mirror) {
      OpCase w;
      w.name = "adamw/n" + std::to_string(n) + (mirror ? "_bf16_mirror" : "");
      TensorSpec mirror16 = zero("param_bf16", {n});
      mirror16.bf16_always = true;
      w.specs = {in("param", {n}), in("grad", {n}), in("m", {n}, 0.1), pos_w("v", {n}), mirror16};
      w.outputs = {"param", "m", "v"};
      if (mirror) w.aux = {"param_bf16"};
      w.gradcheck = false;
      w.forward = [=](Backend& be, Env& e) {
        kernels::AdamWParams p;
        p.lr = 1e-2f;
        p.weight_decay = 0.1f;
        p.step = 7;
        p.grad_scale = 0.5f;
        be.adamw_update(e["param"], e["grad"], e["m"], e["v"], mirror ? e["param_bf16"] : TensorView(), p);
      };
      out.push_back(w);
    }
  }
}

// Stores a scalar result in a one-element output tensor of the case's float dtype, through the
// backend (the tensor may live on its device: tests/kernels/cuda/cuda_op_test.cpp).
void store_scalar(Backend& be, const TensorView& t, double v) { be.fill(t, v); }

void add_memory_cases(std::vector<OpCase>& out) {
  for (int64_t n : {1, 17, 1000, 40961}) {
    OpCase f;
    f.name = "fill/n" + std::to_string(n);
    TensorSpec f16 = in("x16", {n});
    f16.bf16_always = true;
    f.specs = {in("x", {n}), f16, ints("ids", {n}, Gen::kIds, 50)};
    f.outputs = {"x"};
    f.aux = {"x16", "ids"};
    f.gradcheck = false;
    f.forward = [](Backend& be, Env& e) {
      be.fill(e["x"], -1.375);
      be.fill(e["x16"], 3.0078125);  // not a bf16 value: rounds
      be.fill(e["ids"], -100);
    };
    out.push_back(f);

    OpCase c;
    c.name = "copy/n" + std::to_string(n);
    TensorSpec src16 = in("src16", {n}), dst16 = zero("dst16", {n});
    src16.bf16_always = dst16.bf16_always = true;
    c.specs = {in("src", {n}), zero("dst", {n}), src16, dst16, ints("isrc", {n}, Gen::kIds, 1000),
               ints("idst", {n}, Gen::kIds, 1)};
    c.outputs = {"dst"};
    c.aux = {"dst16", "idst"};
    c.gradcheck = false;
    c.forward = [](Backend& be, Env& e) {
      be.copy(e["dst"], e["src"]);
      be.copy(e["dst16"], e["src16"]);
      be.copy(e["idst"], e["isrc"]);
    };
    out.push_back(c);

    OpCase r;
    r.name = "count_valid_targets_and_sum/n" + std::to_string(n);
    r.specs = {ints("targets", {n}, Gen::kTargets, 50), in("losses", {n}, 3.0), zero("count", {1}),
               zero("total", {1})};
    r.outputs = {"count", "total"};
    r.gradcheck = false;
    r.forward = [](Backend& be, Env& e) {
      store_scalar(be, e["count"], static_cast<double>(be.count_valid_targets(e["targets"], -100)));
      store_scalar(be, e["total"], be.sum(e["losses"]));
    };
    out.push_back(r);
  }
  for (auto [B, T] : {std::pair<int64_t, int64_t>{1, 1}, {2, 7}, {3, 64}}) {
    const int64_t N = B * T;
    OpCase p;
    p.name = "positions/" + shape_name({{"B", B}, {"T", T}});
    p.specs = {ints("given", {N}, Gen::kIds, T), ints("row_pos", {N}, Gen::kIds, 1),
               ints("doc_pos", {N}, Gen::kIds, 1)};
    p.outputs = {"row_pos", "doc_pos"};
    p.gradcheck = false;
    p.forward = [T](Backend& be, Env& e) {
      be.positions(e["row_pos"], TensorView(), T);
      be.positions(e["doc_pos"], e["given"], T);
    };
    out.push_back(p);
  }
}

}  // namespace

Env make_env(const OpCase& c, DType float_dtype, uint64_t seed) {
  Env env;
  for (size_t i = 0; i < c.specs.size(); ++i) {
    const TensorSpec& s = c.specs[i];
    DType t = is_int(s.gen) ? DType::kI32 : float_dtype;
    if (s.gemm_input && c.bf16 && float_dtype != DType::kF64) t = DType::kBF16;
    if (s.bf16_always) t = DType::kBF16;
    Tensor tensor(s.shape, t);
    Rng rng(seed * 1000003 + i);
    fill(tensor, s, rng);
    env.tensors().emplace(s.name, std::move(tensor));
  }
  return env;
}

// Mixture of experts (kernels/backend.h moe_* ops and the grouped GEMM).
double at(const TensorView& t, int64_t i) {
  return t.dtype() == DType::kF64 ? t.as<double>()[i] : static_cast<double>(t.as<float>()[i]);
}

void add_moe_cases(std::vector<OpCase>& out) {
  // Router: the objective adds the aux-loss term Σ_n,e dprobs[e]·p[n,e] and the z-loss term
  // (z/2)·Σ_n lse[n]² whose gradients moe_router_backward adds.
  // The last shapes are large enough for the cpu backend to split rows over threads (cpu/moe.cpp);
  // they skip the finite-difference check, which the small ones cover.
  for (auto [N, E, K] : {std::tuple{1, 1, 1}, {5, 8, 2}, {33, 16, 4}, {17, 6, 6}, {200, 8, 2}})
    for (int renorm = 0; renorm < 2; ++renorm)
      for (int extra = 0; extra < 2; ++extra)
        for (int with_bias = 0; with_bias < 2; ++with_bias) {
          OpCase c;
          c.name = "moe_router/" + shape_name({{"N", N}, {"E", E}, {"K", K}}) + (renorm ? "_renorm" : "") +
                   (extra ? "_aux_z" : "") + (with_bias ? "_bias" : "");
          const double z = extra ? 0.3 : 0.0;
          c.specs = {in("logits", {N, E}, 2.0), in("bias", {E}, 0.05), zero("weights", {N, K}),
                     ints("experts", {N, K}, Gen::kIds, 1), zero("probs", {N, E}), zero("lse", {N}),
                     in("dweights", {N, K}), in("dprobs", {E}), zero("dlogits", {N, E})};
          c.outputs = {"weights"};
          c.aux = {"probs", "lse"};
          c.grads = {{"logits", "dlogits"}};
          c.gradcheck = !with_bias && N < 100;  // the bias is f32 whatever the run's dtype; the f32 case covers it
          c.forward = [=](Backend& be, Env& e) {
            Tensor b32;
            if (with_bias) {  // the selection bias is always f32 (made where the backend computes)
              b32 = Tensor({E}, DType::kF32, be.allocator());
              be.convert(b32, e["bias"]);
            }
            be.moe_router_forward(e["weights"], e["experts"], e["probs"], e["lse"], e["logits"],
                                  with_bias ? b32.view() : TensorView(), renorm);
          };
          c.backward = [=](Backend& be, Env& e) {
            be.moe_router_backward(e["dlogits"], e["dweights"], e["probs"], e["lse"], e["experts"], renorm,
                                   extra ? e["dprobs"] : TensorView(), z);
          };
          c.objective = [=](const Env& e) {
            double s = 0;
            for (int64_t i = 0; i < N * K; ++i) s += at(e["weights"], i) * at(e["dweights"], i);
            if (extra)
              for (int64_t n = 0; n < N; ++n) {
                for (int64_t j = 0; j < E; ++j) s += at(e["dprobs"], j) * at(e["probs"], n * E + j);
                s += 0.5 * z * at(e["lse"], n) * at(e["lse"], n);
              }
            return s;
          };
          out.push_back(c);
        }

  // Gather (permutation into expert order) with its backward, the scatter-add.
  for (auto [N, R, F] : {std::tuple{1, 1, 1}, {9, 18, 33}, {40, 25, 64}, {300, 600, 96}}) {
    OpCase c;
    c.gradcheck = N < 100;
    c.name = "moe_gather_rows/" + shape_name({{"N", N}, {"R", R}, {"F", F}});
    c.specs = {in("inp", {N, F}), ints("rows", {R}, Gen::kIds, N), zero("out", {R, F}), in("dout", {R, F}),
               in("dinp", {N, F})};  // dinp starts non-zero: the scatter accumulates
    c.outputs = {"out"};
    c.grads = {{"inp", "dinp"}};
    c.forward = [](Backend& be, Env& e) { be.moe_gather_rows(e["out"], e["inp"], e["rows"]); };
    c.backward = [](Backend& be, Env& e) { be.moe_scatter_add_rows(e["dinp"], e["dout"], e["rows"]); };
    out.push_back(c);
  }

  // Combine: slots name each of the R rows once (a permutation), and slot 3 is dropped (-1).
  for (auto [N, K, F] : {std::tuple{2, 1, 1}, {7, 2, 33}, {16, 4, 64}, {128, 2, 80}}) {
    const int64_t R = N * K;
    OpCase c;
    c.gradcheck = N < 100;
    c.name = "moe_combine/" + shape_name({{"N", N}, {"K", K}, {"F", F}});
    c.specs = {in("y", {R, F}), in("weights", {N, K}), ints("slots", {N, K}, Gen::kIds, 1), zero("out", {N, F}),
               in("dout", {N, F}), zero("dy", {R, F}), zero("dweights", {N, K})};
    c.outputs = {"out"};
    c.grads = {{"y", "dy"}, {"weights", "dweights"}};
    auto set_slots = [=](Backend& be, const TensorView& s) {  // made on the host, copied where s lives
      Tensor host(s.shape(), DType::kI32);
      for (int64_t i = 0; i < R; ++i) host.as<int32_t>()[i] = i == 3 ? -1 : static_cast<int32_t>((i * 5 + 1) % R);
      be.copy(s, host);
    };
    c.forward = [=](Backend& be, Env& e) {
      set_slots(be, e["slots"]);
      be.moe_combine_forward(e["out"], e["y"], e["weights"], e["slots"]);
    };
    c.backward = [](Backend& be, Env& e) {
      be.moe_combine_backward(e["dy"], e["dweights"], e["dout"], e["y"], e["weights"], e["slots"]);
    };
    out.push_back(c);
  }

  // Grouped GEMM: E experts with variable rows, one empty, and rows past offsets[E] left alone.
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> groups = {
      {{0, 1}, 1}, {{0, 3, 3, 10, 11}, 12}, {{0, 40, 41, 41, 80, 97}, 97}};
  for (const auto& [offsets, R] : groups)
    for (auto [C, OC] : {std::tuple{1, 1}, {33, 17}, {64, 96}})
      for (int b16 = 0; b16 < 2; ++b16) {
        const int64_t E = static_cast<int64_t>(offsets.size()) - 1;
        OpCase c;
        c.name = "grouped_linear/" + shape_name({{"E", E}, {"R", R}, {"C", C}, {"OC", OC}}) + (b16 ? "_bf16" : "");
        c.bf16 = b16;
        c.specs = {gemm("inp", {R, C}), gemm("weight", {E, OC, C}, 0.3), zero("out", {R, OC}), gemm("dout", {R, OC}),
                   zero("dinp", {R, C}), in("dweight", {E, OC, C})};
        c.outputs = {"out"};
        c.grads = {{"inp", "dinp"}, {"weight", "dweight"}};
        const std::vector<int64_t> offs = offsets;
        c.forward = [=](Backend& be, Env& e) { be.grouped_linear_forward(e["out"], e["inp"], e["weight"], offs); };
        c.backward = [=](Backend& be, Env& e) {
          be.grouped_linear_backward(e["dinp"], e["dweight"], e["dout"], e["inp"], e["weight"], offs);
        };
        out.push_back(c);
      }
}

std::vector<OpCase> all_op_cases() {
  std::vector<OpCase> cases;
  add_matmul_cases(cases);
  add_linear_cases(cases);
  add_embedding_cases(cases);
  add_norm_cases(cases);
  add_fused_norm_cases(cases);
  add_activation_cases(cases);
  add_rope_cases(cases);
  add_attention_cases(cases);
  add_attention_decode_cases(cases);
  add_attention_prefill_cases(cases);
  add_linear_bf16_weight_cases(cases);
  add_lm_head_cases(cases);
  add_elementwise_cases(cases);
  add_memory_cases(cases);
  add_moe_cases(cases);
  return cases;
}

}  // namespace lmt::testing
