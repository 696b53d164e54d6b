"""Check 2 of issue #16: `lmtrain export --format gguf` read by llama.cpp (llama-cpp-python) and gguf-py.

For stories260K (its llama2.c tokenizer tok512.bin passed with --tokenizer) and for a demo-style
model trained by lmtrain (lmt_fixtures.demo_run(), its own byte-level BPE tokenizer.json):

* gguf-py's GGUFReader reads the file: architecture metadata, tokenizer metadata and tensor
  shapes/types are what the model and docs/INTEROP.md (GGUF export) say.
* f32: llama.cpp's greedy decoding (token by token, argmax of the logits, no sampling) equals
  `lmtrain generate --temperature 0 --json` for N_GREEDY tokens. stories260K starts from BOS (1) and
  must also equal reference.json's greedy_from_bos; the demo tokenizer has no BOS, so its decoding
  starts from its end-of-text token (GPT-2's convention, which the GGUF's bos_token_id states).
  llama.cpp's tokenizer must also encode texts to the ids lmtrain's tokenizer gives (it checks the
  tokenizer.ggml.pre choice).
* f16 / bf16 / q8_0: the weight bytes equal gguf-py's own encoders (numpy astype(float16),
  gguf.quants.quantize BF16 / Q8_0) of the same f32 weights, gguf.quants.dequantize gives them back
  within the format's rounding, and llama.cpp loads the file and gives logits close to the f32 ones
  (tolerances below, with their reasoning).

Also a gpt2-family model trained here (greedy equal after a text prompt), and small random Hugging
Face qwen3 / qwen2 / llama(+MLP biases) models exported from their HF directories, whose llama.cpp
logits must equal transformers', and the shared Qwen3 and GPT-2 tokenizers, whose exported
vocabularies must make llama.cpp encode the golden inputs to the golden ids.
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lmt_fixtures import SOURCE, TMP, demo_run, fresh_dir, lmtrain, shared, skip  # noqa: E402

try:
    import gguf
    from gguf.quants import dequantize, quantize
    from llama_cpp import Llama
    from safetensors.numpy import load_file
except ImportError as e:  # the interop group installs all of them
    skip(f"a peer library is missing from the venv: {e}")

N_GREEDY = 96
GGML_TYPE_F32 = 0
FAILURES = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILURES.append(what)


def field(reader, key):
    f = reader.fields[key]
    return f.contents()


def export(checkpoint, out, dtype, tokenizer=None):
    args = ["export", "--checkpoint", checkpoint, "--format", "gguf", "--out", out, "--dtype", dtype]
    if tokenizer:
        args += ["--tokenizer", tokenizer]
    lmtrain(*args)
    return out


def load(path):
    # One thread: deterministic and polite on a shared machine; logits_all keeps every row's logits.
    # The KV cache in f32 (llama.cpp's default is f16), so that an f32 file computes in f32 throughout.
    return Llama(model_path=path, n_ctx=512, n_batch=512, n_threads=1, logits_all=True, verbose=False,
                 type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32)


def llama_greedy(llm, prompt, n, eos=None):
    """Greedy decoding in llama.cpp: the prompt in one eval, then one token per eval, each the
    argmax of the last logits; stops after n new tokens or at eos."""
    llm.reset()
    ids = list(prompt)
    llm.eval(ids)
    while len(ids) < len(prompt) + n:
        t = int(np.argmax(np.asarray(llm.scores[llm.n_tokens - 1])))
        ids.append(t)
        if t == eos:
            break
        llm.eval([t])
    return ids


def llama_logits(llm, ids):
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float64)


def lmtrain_greedy(checkpoint, prompt, n, tokenizer=None):
    r = lmtrain("generate", "--checkpoint", checkpoint, "--prompt-ids", ",".join(map(str, prompt)),
                "--temperature", 0, "--max-tokens", n, "--json", *(["--tokenizer", tokenizer] if tokenizer else []))
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return list(prompt) + out["ids"], out["stop_reason"]


def check_greedy(name, llm, checkpoint, prompt, eos, tokenizer=None):
    ours, stop = lmtrain_greedy(checkpoint, prompt, N_GREEDY, tokenizer)
    theirs = llama_greedy(llm, prompt, N_GREEDY, eos=eos)
    new = len(ours) - len(prompt)
    check(new >= 64, f"{name}: lmtrain generated {new} tokens (stop: {stop}), at least 64")
    check(theirs == ours, f"{name}: llama.cpp greedy == lmtrain greedy for {new} tokens after a {len(prompt)}-token prompt"
          + ("" if theirs == ours else f"\n  llama.cpp {theirs}\n  lmtrain   {ours}"))
    return ours


def check_greedy_after_text(name, reader, path, run, demo):
    """check_greedy for a model trained on the demo data: end-of-text, then a line of the corpus."""
    eot = field(reader, "tokenizer.ggml.tokens").index("<|endoftext|>")
    llm = load(path)
    prompt = [eot] + llm.tokenize(b"First Citizen:\nBefore we proceed any further, hear me speak.", add_bos=False)
    check_greedy(name, llm, run, prompt, eos=eot, tokenizer=tokenizer_of(demo))
    del llm


def permute_like_llamacpp(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute: HF rotate-half rows -> llama.cpp's pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def check_encodings(name, reader, hf_weights, n_head, n_kv):
    """The bytes of a few tensors against gguf-py's encoders of the same f32 weights."""
    want = {
        "token_embd.weight": hf_weights["model.embed_tokens.weight"],
        "blk.0.attn_q.weight": permute_like_llamacpp(hf_weights["model.layers.0.self_attn.q_proj.weight"], n_head),
        "blk.0.attn_k.weight": permute_like_llamacpp(hf_weights["model.layers.0.self_attn.k_proj.weight"], n_kv),
        "blk.0.attn_v.weight": hf_weights["model.layers.0.self_attn.v_proj.weight"],
        "blk.1.ffn_down.weight": hf_weights["model.layers.1.mlp.down_proj.weight"],
        "blk.0.attn_norm.weight": hf_weights["model.layers.0.input_layernorm.weight"],
    }
    tensors = {t.name: t for t in reader.tensors}
    for tname, w in want.items():
        t = tensors[tname]
        w = np.ascontiguousarray(w, dtype=np.float32)
        qt = t.tensor_type
        raw = np.asarray(t.data)
        if qt == gguf.GGMLQuantizationType.F32:
            ok = np.array_equal(raw.reshape(w.shape), w)
        elif qt == gguf.GGMLQuantizationType.F16:
            ok = np.array_equal(raw.reshape(w.shape).view(np.uint16), w.astype(np.float16).view(np.uint16))
        else:  # BF16, Q8_0: gguf-py's reference encoder, byte for byte
            ok = np.array_equal(raw.reshape(-1).view(np.uint8), quantize(w, qt).reshape(-1).view(np.uint8))
        check(ok, f"{name}: {tname} ({qt.name}) bytes == gguf-py's encoding of the f32 weights")
        back = dequantize(raw, qt).reshape(w.shape)
        if qt == gguf.GGMLQuantizationType.Q8_0:
            # |x - d·q| <= d/2 with d = max|block|/127 (plus the f16 rounding of d): < max|block|/200
            blocks = np.abs(w.reshape(-1, 32)).max(axis=1, keepdims=True)
            err = np.abs(back.reshape(-1, 32) - w.reshape(-1, 32))
            check(bool(np.all(err <= blocks / 200 + 1e-12)), f"{name}: {tname} q8_0 dequantised within max|block|/200")


def check_logits_close(name, llm, ids, ref, tol, why):
    got = llama_logits(llm, ids)
    diff = float(np.abs(got - ref).max())
    agree = float(np.mean(got.argmax(axis=1) == ref.argmax(axis=1)))
    check(diff <= tol, f"{name}: max |logit - f32 logit| = {diff:.4g} <= {tol} ({why}); argmax agrees at {agree:.0%}")


def stories260k(tmp):
    base = shared("models", "stories260K")
    hf = os.path.join(base, "hf")
    tok = os.path.join(base, "tok512.bin")
    ref = json.load(open(os.path.join(base, "reference.json")))
    greedy_ref = ref["greedy_from_bos"]
    if isinstance(greedy_ref, str):
        greedy_ref = json.loads(greedy_ref)
    ref_logits = np.array(json.loads(ref["logits"]) if isinstance(ref["logits"], str) else ref["logits"])
    weights = load_file(os.path.join(hf, "model.safetensors"))

    path = export(hf, os.path.join(tmp, "stories-f32.gguf"), "f32", tok)
    r = gguf.GGUFReader(path)
    meta = {
        "general.architecture": "llama", "llama.block_count": 5, "llama.context_length": 512,
        "llama.embedding_length": 64, "llama.feed_forward_length": 172, "llama.attention.head_count": 8,
        "llama.attention.head_count_kv": 4, "llama.rope.dimension_count": 8, "llama.rope.freq_base": 10000.0,
        "llama.vocab_size": 512, "general.file_type": 0, "general.alignment": 32,
        "tokenizer.ggml.model": "llama", "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
    }
    for k, v in meta.items():
        check(field(r, k) == v, f"stories260K: {k} = {field(r, k)!r} (want {v!r})")
    check(abs(field(r, "llama.attention.layer_norm_rms_epsilon") - 1e-5) < 1e-10, "stories260K: rms epsilon 1e-5")
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    check(len(tokens) == 512 and tokens[:3] == ["<unk>", "<s>", "</s>"] and tokens[3] == "<0x00>"
          and tokens[259] == "\u2581t", f"stories260K: tokens {tokens[:4]} ... {tokens[259]!r}")
    check(types[:4] == [2, 3, 3, 6] and types[259] == 1, f"stories260K: token types {types[:4]}, {types[259]}")
    shapes = {t.name: (list(map(int, t.shape)), t.tensor_type.name) for t in r.tensors}
    check(len(r.tensors) == 2 + 5 * 9, f"stories260K: {len(r.tensors)} tensors (tied: no output.weight)")
    for name, shape in {"token_embd.weight": [64, 512], "blk.0.attn_q.weight": [64, 64],
                        "blk.0.attn_k.weight": [64, 32], "blk.4.ffn_down.weight": [172, 64],
                        "blk.4.ffn_gate.weight": [64, 172], "output_norm.weight": [64]}.items():
        check(shapes.get(name) == (shape, "F32"), f"stories260K: {name} {shapes.get(name)} (want {shape} F32)")
    check_encodings("stories260K f32", r, weights, 8, 4)

    llm = load(path)
    ours = check_greedy("stories260K f32", llm, hf, [1], eos=2)
    check(ours == greedy_ref[: len(ours)], f"stories260K f32: equals reference.json greedy_from_bos ({len(ours)} ids)")
    check(llm.tokenize(ref["input_text"].encode(), add_bos=True) == ref["input_ids"],
          "stories260K: llama.cpp's tokenizer encodes the reference text to reference.json's input_ids")
    f32_logits = llama_logits(llm, ref["input_ids"])
    diff = float(np.abs(f32_logits - ref_logits).max())
    # f32 weights, f32 arithmetic in another order than the float64 reference: rounding only.
    check(diff < 1e-3, f"stories260K f32: max |llama.cpp logit - float64 reference| = {diff:.3g} < 1e-3")
    del llm

    # Tolerances: the largest logit change from rounding the weights, measured against the f32 file.
    # Logits here reach |12|; a relative weight error e moves them by roughly e·|logit|·sqrt(depth).
    # f16 keeps 11 significant bits (e = 2^-11 ≈ 5e-4), bf16 8 bits (e = 2^-8 ≈ 4e-3), q8_0 an
    # absolute max|block|/254 per weight (e up to 4e-3, larger for small weights in a block).
    for dtype, tol, why in [("f16", 0.05, "11-bit mantissa"), ("bf16", 0.5, "8-bit mantissa"),
                            ("q8_0", 0.5, "8-bit blocks, ffn_down rows of 172 fall back to f16")]:
        p = export(hf, os.path.join(tmp, f"stories-{dtype}.gguf"), dtype, tok)
        rd = gguf.GGUFReader(p)
        ft = {"f16": 1, "bf16": 32, "q8_0": 7}[dtype]
        check(field(rd, "general.file_type") == ft, f"stories260K {dtype}: general.file_type {ft}")
        types_by_name = {t.name: t.tensor_type.name for t in rd.tensors}
        want_matrix = {"f16": "F16", "bf16": "BF16", "q8_0": "Q8_0"}[dtype]
        check(types_by_name["blk.0.attn_q.weight"] == want_matrix and types_by_name["blk.0.attn_norm.weight"] == "F32",
              f"stories260K {dtype}: matrices {types_by_name['blk.0.attn_q.weight']}, norms F32")
        if dtype == "q8_0":
            check(types_by_name["blk.0.ffn_down.weight"] == "F16", "stories260K q8_0: ffn_down (rows of 172) is F16")
        check_encodings(f"stories260K {dtype}", rd, weights, 8, 4)
        llm = load(p)
        check_logits_close(f"stories260K {dtype}", llm, ref["input_ids"], f32_logits, tol, why)
        del llm


def demo(tmp):
    # 300 steps (about a minute, built once per build tree): the 40-step default model repeats one
    # token, which would make the greedy comparison weak.
    run = demo_run(300)
    # The demo run's manifest names its tokenizer by a relative path: pass it explicitly.
    path = export(run, os.path.join(tmp, "demo-f32.gguf"), "f32", tokenizer_of(run))
    r = gguf.GGUFReader(path)
    tokens = field(r, "tokenizer.ggml.tokens")
    eot = tokens.index("<|endoftext|>")
    arch = field(r, "general.architecture")
    check(arch == "llama", f"demo: architecture {arch}")
    check(field(r, "tokenizer.ggml.model") == "gpt2", "demo: tokenizer.ggml.model gpt2")
    check(field(r, "tokenizer.ggml.pre") == "gpt-4o", "demo: tokenizer.ggml.pre gpt-4o (lmtrain's o200k regex)")
    check(field(r, "tokenizer.ggml.bos_token_id") == eot and field(r, "tokenizer.ggml.eos_token_id") == eot,
          f"demo: bos = eos = <|endoftext|> ({eot})")
    check(field(r, "tokenizer.ggml.token_type")[eot] == 3, "demo: <|endoftext|> is a control token")
    check(len(field(r, "tokenizer.ggml.merges")) > 0, "demo: merges present")
    check(len(tokens) == field(r, "llama.vocab_size"), f"demo: {len(tokens)} tokens == llama.vocab_size")
    llm = load(path)
    check_greedy("demo f32", llm, run, [eot], eos=eot, tokenizer=tokenizer_of(run))
    # The pre-tokenizer choice: llama.cpp's tokenizer gives lmtrain's ids.
    texts = ["First Citizen:\nBefore we proceed any further, hear me speak.",
             "  Don't you DARE say 1234567 things, O'Brien!\n\n\tTabs and   spaces...",
             "Caf\u00e9 na\u00efve \u4e2d\u6587 \U0001F600 end"]
    inp = os.path.join(tmp, "texts.jsonl")
    with open(inp, "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    enc = lmtrain("tokenizer", "encode", "--tokenizer", tokenizer_of(run), "--input", inp, "--json")
    ours = [json.loads(line)["ids"] for line in enc.stdout.strip().splitlines()]
    theirs = [llm.tokenize(t.encode(), add_bos=False, special=False) for t in texts]
    check(ours == theirs, "demo: llama.cpp's tokenizer encodes 3 texts to lmtrain's ids"
          + ("" if ours == theirs else f"\n  lmtrain   {ours}\n  llama.cpp {theirs}"))
    # Greedy again after a real prompt (end-of-text, then the first text): batched prefill in llama.cpp.
    check_greedy("demo f32 (text prompt)", llm, run, [eot] + ours[0], eos=eot, tokenizer=tokenizer_of(run))
    del llm
    for dtype in ["f16", "bf16", "q8_0"]:
        p = export(run, os.path.join(tmp, f"demo-{dtype}.gguf"), dtype, tokenizer_of(run))
        llm = load(p)
        ids = llama_greedy(llm, [eot], 8)
        check(len(ids) > 1, f"demo {dtype}: llama.cpp loads and decodes ({ids[:5]}...)")
        del llm


def small_run(demo, name, model, steps):
    """A small model (`model`: model.* settings) trained on the demo's data and tokenizer for `steps`
    steps; built once per build tree like demo_run()."""
    root = os.path.join(os.path.dirname(os.path.abspath(TMP)), f"interop_gguf_{name}_{steps}")
    run = os.path.join(root, "run")
    if os.path.isdir(os.path.join(run, "checkpoints")):
        return run
    work = tempfile.mkdtemp(prefix=f"interop_gguf_{name}.", dir=os.path.dirname(root))
    sets = [f"model.{k}={v}" for k, v in model.items()] + [
        f"data.path={os.path.join(os.path.dirname(demo), 'data')}", f"train.max_steps={steps}", "train.micro_batch=4",
        "train.seq_len=128", "eval.every=0", f"checkpoint.every={steps}", "schedule.warmup_steps=5"]
    lmtrain("train", "--config", os.path.join(SOURCE, "configs", "demo.toml"), "--run-dir", os.path.join(work, "run"),
            *[a for kv in sets for a in ("--set", kv)])
    shutil.rmtree(root, ignore_errors=True)
    os.rename(work, root)
    return run


def gpt2_run(demo, steps=150):
    """A small gpt2-family model (LayerNorm, GELU MLP, learned positions, fused c_attn)."""
    return small_run(demo, "gpt2", {"preset": "gpt2-124m", "n_layers": 2, "d_model": 64, "n_heads": 4, "n_kv_heads": 4,
                                    "head_dim": 16, "ffn_hidden": 256, "max_seq_len": 128, "vocab_size": 1024}, steps)


def gpt2(tmp, demo):
    run = gpt2_run(demo)
    path = export(run, os.path.join(tmp, "gpt2-f32.gguf"), "f32", tokenizer_of(demo))
    r = gguf.GGUFReader(path)
    check(field(r, "general.architecture") == "gpt2", "gpt2: architecture gpt2")
    check(abs(field(r, "gpt2.attention.layer_norm_epsilon") - 1e-5) < 1e-10, "gpt2: layer_norm_epsilon")
    shapes = {t.name: list(map(int, t.shape)) for t in r.tensors}
    for name, shape in {"position_embd.weight": [64, 128], "blk.0.attn_qkv.weight": [64, 192],
                        "blk.0.attn_qkv.bias": [192], "blk.1.ffn_up.weight": [64, 256], "blk.1.ffn_down.bias": [64],
                        "output_norm.bias": [64]}.items():
        check(shapes.get(name) == shape, f"gpt2: {name} {shapes.get(name)} (want {shape})")
    check_greedy_after_text("gpt2 f32 (text prompt)", r, path, run, demo)


def random_hf_model(cfg, ids, tweak):
    """A transformers model of `cfg` with random weights (seed 0), its norms randomised around 1 and
    tweak(name, param) applied to every other parameter (under no_grad); returns it and its float64
    logits over `ids`."""
    import torch
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1 + 0.3 * torch.randn_like(p))
            else:
                tweak(n, p)
        want = model(torch.tensor([ids])).logits[0].double().numpy()
    return model, want


def hf_families(tmp, demo):
    """qwen3 (QK-norm, head_dim != d_model / n_heads, untied), qwen2 (q/k/v biases, tied) and llama
    with MLP biases: small random Hugging Face models (norms and biases randomised too, so that
    they matter) go through `lmtrain export` (which loads the HF directory) and llama.cpp, whose
    logits must equal transformers' within 1e-4 (f32 throughout; measured about 1e-5)."""
    try:
        import torch
        from transformers import LlamaConfig, Qwen2Config, Qwen3Config
    except ImportError as e:
        check(False, f"transformers/torch missing from the interop venv: {e}")
        return
    common = dict(vocab_size=1024, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.2, rms_norm_eps=1e-6,
                  rope_theta=10000.0)
    configs = {"qwen3": Qwen3Config(**common, head_dim=32, tie_word_embeddings=False),
               "qwen2": Qwen2Config(**common, tie_word_embeddings=True),
               "llama": LlamaConfig(**common, mlp_bias=True, tie_word_embeddings=False)}
    ids = [1023, 5, 77, 300, 12, 999, 45, 46, 47, 100, 200, 300, 400, 500]
    for arch, cfg in configs.items():
        def randomise_biases(n, p):
            if "bias" in n:
                p.copy_(0.3 * torch.randn_like(p))
        model, want = random_hf_model(cfg, ids, randomise_biases)
        hf = os.path.join(tmp, f"hf_{arch}")
        model.save_pretrained(hf)
        path = export(hf, os.path.join(tmp, f"hf_{arch}.gguf"), "f32", tokenizer_of(demo))
        got_arch = field(gguf.GGUFReader(path), "general.architecture")
        check(got_arch == arch, f"HF {arch}: general.architecture {got_arch}")
        llm = load(path)
        diff = float(np.abs(llama_logits(llm, ids) - want).max())
        check(diff < 1e-4, f"HF {arch} (random weights): max |llama.cpp logit - transformers logit| = {diff:.3g} < 1e-4")
        del llm


def hf_moe(tmp, demo):
    """Mixture-of-experts models: small random Hugging Face Qwen3-MoE (per-head QK-norm, top-k
    weights renormalised, GQA) and OLMoE (full-width QK-norm, top-k weights as they are) models go
    through `lmtrain export` and llama.cpp, whose logits must equal transformers' within 1e-4 (f32),
    and the q8_0 file keeps the router f32. The routers are scaled up so that the experts chosen
    differ from token to token (at initialisation every router logit is near 0)."""
    import torch
    from transformers import OlmoeConfig, Qwen3MoeConfig
    common = dict(vocab_size=1024, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=128, initializer_range=0.2, rms_norm_eps=1e-6, rope_theta=10000.0,
                  num_experts=8, num_experts_per_tok=2, tie_word_embeddings=False)
    configs = {"qwen3moe": Qwen3MoeConfig(**common, num_key_value_heads=2, head_dim=16, intermediate_size=96,
                                          moe_intermediate_size=48, norm_topk_prob=True, decoder_sparse_step=1),
               "olmoe": OlmoeConfig(**common, num_key_value_heads=4, intermediate_size=48, norm_topk_prob=False)}
    ids = [1023, 5, 77, 300, 12, 999, 45, 46, 47, 100, 200, 300, 400, 500, 7, 8, 9, 10]
    for arch, cfg in configs.items():
        def sharpen_routers(n, p):
            if n.endswith("mlp.gate.weight"):
                p.mul_(5.0)
        model, want = random_hf_model(cfg, ids, sharpen_routers)
        hf = os.path.join(tmp, f"hf_{arch}")
        model.save_pretrained(hf)
        path = export(hf, os.path.join(tmp, f"hf_{arch}.gguf"), "f32", tokenizer_of(demo))
        r = gguf.GGUFReader(path)
        check(field(r, "general.architecture") == arch, f"HF {arch}: general.architecture {field(r, 'general.architecture')}")
        check(field(r, f"{arch}.expert_count") == 8 and field(r, f"{arch}.expert_used_count") == 2,
              f"HF {arch}: expert_count 8, expert_used_count 2")
        shapes = {t.name: list(map(int, t.shape)) for t in r.tensors}
        check(shapes.get("blk.1.ffn_gate_exps.weight") == [64, 48, 8] and shapes.get("blk.1.ffn_down_exps.weight") == [48, 64, 8]
              and shapes.get("blk.1.ffn_gate_inp.weight") == [64, 8], f"HF {arch}: expert tensor shapes")
        llm = load(path)
        diff = float(np.abs(llama_logits(llm, ids) - want).max())
        check(diff < 1e-4, f"HF {arch} (random weights): max |llama.cpp logit - transformers logit| = {diff:.3g} < 1e-4")
        del llm
        q8 = export(hf, os.path.join(tmp, f"hf_{arch}_q8_0.gguf"), "q8_0", tokenizer_of(demo))
        types = {t.name: int(t.tensor_type) for t in gguf.GGUFReader(q8).tensors}
        check(types.get("blk.0.ffn_gate_inp.weight") == GGML_TYPE_F32 and types.get("blk.0.ffn_up_exps.weight") == 8,
              f"HF {arch} q8_0: router f32, experts q8_0 ({types.get('blk.0.ffn_gate_inp.weight')}, "
              f"{types.get('blk.0.ffn_up_exps.weight')})")
        llm = load(q8)
        got = llama_logits(llm, ids)
        del llm
        # q8_0 moves each weight by up to max|block|/254, and with routers this sharp some tokens switch
        # experts, which moves their logits by O(1): measured 6-7% relative RMS error (a wrong expert
        # layout would move every logit).
        rel = float(np.linalg.norm(got - want) / np.linalg.norm(want))
        check(rel < 0.15, f"HF {arch} q8_0: llama.cpp's logits within 15% (relative RMS) of transformers' f32: {rel:.3f}")


def moe_llama(tmp, demo):
    """An MoE model trained by lmtrain in the llama layout (Mixtral's: no QK-norm, renormalised
    top-k): the `tiny-moe` preset cut to 2 layers of 64 with 4 experts of 64, top 2, trained 150
    steps; exported as llama with stacked experts, llama.cpp's greedy decoding must equal lmtrain's
    for 96 tokens after a text prompt."""
    run = small_run(demo, "moe", {"preset": "tiny-moe", "n_layers": 2, "d_model": 64, "n_heads": 4, "n_kv_heads": 2,
                                  "head_dim": 16, "max_seq_len": 128, "vocab_size": 1024, "moe.num_experts": 4,
                                  "moe.top_k": 2, "moe.expert_ffn": 64}, 150)
    path = export(run, os.path.join(tmp, "moe-f32.gguf"), "f32", tokenizer_of(demo))
    r = gguf.GGUFReader(path)
    check(field(r, "general.architecture") == "llama" and field(r, "llama.expert_count") == 4
          and field(r, "llama.expert_used_count") == 2 and field(r, "llama.feed_forward_length") == 64,
          "lmtrain MoE: llama architecture, 4 experts, 2 used, feed_forward_length 64")
    check_greedy_after_text("lmtrain MoE f32 (text prompt)", r, path, run, demo)


def rope_scaled(tmp, demo):
    """RoPE scaling in GGUF: small random Llama models with linear and llama3 scaling (original context
    16, read to position 47, past it) go through `lmtrain export` and llama.cpp, whose logits must
    equal transformers' within 1e-4; dynamic and yarn are refused with an error naming the feature."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig
    common = dict(vocab_size=1024, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, initializer_range=0.2, rms_norm_eps=1e-6,
                  tie_word_embeddings=True)
    ids = [(37 * i + 11) % 1024 for i in range(48)]
    cases = {
        "linear": dict(rope_type="linear", factor=4.0, rope_theta=10000.0),
        "llama3": dict(rope_type="llama3", factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0,
                       original_max_position_embeddings=16, rope_theta=10000.0),
        "yarn": dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=16, rope_theta=10000.0),
        "dynamic": dict(rope_type="dynamic", factor=4.0, rope_theta=10000.0),
    }
    for name, rope in cases.items():
        torch.manual_seed(1)
        model = AutoModelForCausalLM.from_config(LlamaConfig(**common, rope_parameters=rope), torch_dtype=torch.float32)
        hf = os.path.join(tmp, f"rope_{name}")
        model.save_pretrained(hf)
        out = os.path.join(tmp, f"rope_{name}.gguf")
        if name in ("yarn", "dynamic"):
            r = lmtrain("export", "--checkpoint", hf, "--format", "gguf", "--out", out, "--tokenizer", tokenizer_of(demo),
                        check=False)
            check(r.returncode == 1 and "RoPE scaling" in r.stderr and not os.path.exists(out),
                  f"RoPE {name}: GGUF export refused naming the feature ({r.stderr.strip()[:120]})")
            continue
        with torch.no_grad():
            want = model(torch.tensor([ids])).logits[0].double().numpy()
        path = export(hf, out, "f32", tokenizer_of(demo))
        llm = load(path)
        diff = float(np.abs(llama_logits(llm, ids) - want).max())
        check(diff < 1e-4, f"RoPE {name} (48 positions, original context 16): max |llama.cpp - transformers| = "
              f"{diff:.3g} < 1e-4")
        del llm


def tokenizer_goldens(tmp):
    """The tokenizer mapping for the shared Qwen3 tokenizer.json and GPT-2's encoder.json + vocab.bpe:
    a tiny random HF model with that vocabulary size is exported with the tokenizer, llama.cpp loads
    the vocabulary alone (vocab_only) and must encode all 324 golden inputs to the golden ids
    (tokenizers/golden: HF tokenizers for Qwen3, which parses added tokens such as <|endoftext|> in
    the text, so llama.cpp parses specials there too; gpt-3-encoder for GPT-2, which does not)."""
    try:
        import torch  # noqa: F401
        from transformers import AutoModelForCausalLM, GPT2Config, Qwen3Config
    except ImportError as e:
        check(False, f"transformers/torch missing from the interop venv: {e}")
        return
    golden = shared("tokenizers", "golden")
    texts = [json.loads(line)["text"] for line in open(os.path.join(golden, "inputs.jsonl"))]
    cases = [("qwen3", Qwen3Config(vocab_size=151936, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                                   num_attention_heads=1, num_key_value_heads=1, head_dim=8),
              shared("tokenizers", "qwen3", "tokenizer.json"), "qwen3_tokenizer_json", "qwen2", True),
             ("gpt2", GPT2Config(vocab_size=50257, n_embd=8, n_layer=1, n_head=1, n_positions=64),
              shared("tokenizers", "gpt2"), "gpt2_encoder_json", "gpt-2", False)]
    for name, cfg, tok, gold, pre, special in cases:
        hf = os.path.join(tmp, f"vocab_{name}")
        AutoModelForCausalLM.from_config(cfg).save_pretrained(hf)
        path = export(hf, os.path.join(tmp, f"vocab_{name}.gguf"), "f32", tok)
        r = gguf.GGUFReader(path)
        check(field(r, "tokenizer.ggml.pre") == pre, f"{name} tokenizer: tokenizer.ggml.pre {field(r, 'tokenizer.ggml.pre')}")
        llm = Llama(model_path=path, vocab_only=True, verbose=False)
        want = [json.loads(line)["ids"] for line in open(os.path.join(golden, f"{gold}.jsonl"))]
        got = [llm.tokenize(t.encode(), add_bos=False, special=special) for t in texts]
        bad = [i for i in range(len(texts)) if got[i] != want[i]]
        check(not bad, f"{name} tokenizer: llama.cpp encodes the {len(texts)} golden inputs to {gold}.jsonl's ids"
              + ("" if not bad else f" (differs at {bad[:10]}; first: {got[bad[0]][:12]} vs {want[bad[0]][:12]})"))
        del llm


def tokenizer_of(run):
    """The demo run's tokenizer.json (demo_run() trains it next to the run directory)."""
    path = os.path.join(os.path.dirname(run), "tokenizer.json")
    if not os.path.exists(path):
        raise RuntimeError(f"{path} not found")
    return path


def main():
    tmp = fresh_dir("gguf")
    stories260k(tmp)
    demo(tmp)
    gpt2(tmp, demo_run(300))
    hf_families(tmp, demo_run(300))
    hf_moe(tmp, demo_run(300))
    moe_llama(tmp, demo_run(300))
    rope_scaled(tmp, demo_run(300))
    tokenizer_goldens(tmp)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        sys.exit(1)
    print("all GGUF checks passed")


if __name__ == "__main__":
    main()
