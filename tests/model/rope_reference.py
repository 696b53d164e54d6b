#!/usr/bin/env python3
"""PyTorch references for RoPE scaling (issue #16): tiny random LlamaForCausalLM models, one per
rope_type, built and run by Hugging Face transformers.

  rope_reference.py OUT_DIR           writes the goldens (tests/model/golden/rope)
  rope_reference.py --check DIR       regenerates into a temporary directory and fails unless DIR
                                      still holds what transformers produces (run by ctest through
                                      lmt_venv_test, GROUP interop)

OUT_DIR/model.safetensors holds the weights, shared by every type (the RoPE parameters are not
weights). OUT_DIR/<case>/ is a Hugging Face model directory: config.json as transformers 5 writes
it (rope_parameters), model.safetensors (a symlink to ../model.safetensors) and golden.json:
  tokens        the input ids, TOTAL of them, positions 0..TOTAL-1 (past the original context)
  positions     the positions whose logits are stored
  full          logits at those positions from one forward over all tokens
  prefill       how many tokens the incremental run feeds in its first call
  incremental   logits at those positions from generate-style decoding with a KV cache: the first
                `prefill` tokens in one call, then one token per call (fresh model, so dynamic
                scaling starts from its initial state)
The model runs in float64 (transformers computes RoPE's cos/sin in float32 regardless).
OUT_DIR/inv_freq.json: for each case, and for Llama 3.2 1B's published RoPE (theta 500000, head_dim
64, llama3 factor 32), transformers' inv_freq table and attention scaling (ROPE_INIT_FUNCTIONS;
dynamic at seq_len 96).
tests/model/rope_scaling_test.cpp compares lmtrain against these.
"""
import json
import os
import shutil
import sys
import tempfile

import torch
import transformers
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

VOCAB, D, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN = 32, 32, 2, 2, 1, 16, 48
TOTAL, PREFILL = 96, 8
POSITIONS = [0, 7, 8, 31, 32, 47, 64, 95]
THETA = 10000.0

# case -> (max_position_embeddings, rope_parameters). The original context is 32 positions
# everywhere, so positions 32..95 are past it.
CASES = {
    "default": (128, {"rope_type": "default", "rope_theta": THETA}),
    "linear": (128, {"rope_type": "linear", "rope_theta": THETA, "factor": 4.0}),
    # dynamic scales past max_position_embeddings (HF ignores original_max_position_embeddings here)
    "dynamic": (32, {"rope_type": "dynamic", "rope_theta": THETA, "factor": 4.0}),
    "yarn": (128, {"rope_type": "yarn", "rope_theta": THETA, "factor": 4.0, "original_max_position_embeddings": 32}),
    "yarn_mscale": (128, {"rope_type": "yarn", "rope_theta": THETA, "factor": 4.0,
                          "original_max_position_embeddings": 32, "beta_fast": 16.0, "beta_slow": 2.0,
                          "mscale": 0.707, "mscale_all_dim": 0.5, "truncate": False}),
    "llama3": (128, {"rope_type": "llama3", "rope_theta": THETA, "factor": 4.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
}


def config(max_pos, rope):
    return LlamaConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=FFN, num_hidden_layers=LAYERS,
                       num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                       max_position_embeddings=max_pos, rms_norm_eps=1e-5, tie_word_embeddings=True,
                       initializer_range=0.25, rope_parameters=dict(rope), bos_token_id=1, eos_token_id=2)


LLAMA32_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def inv_freq_tables():
    tables = {}
    cases = dict(CASES)
    cases["llama3.2-1b"] = (131072, LLAMA32_ROPE)
    for name, (max_pos, rope) in cases.items():
        if name == "llama3.2-1b":
            c = LlamaConfig(hidden_size=2048, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                            max_position_embeddings=max_pos, rope_parameters=dict(rope))
        else:
            c = config(max_pos, rope)
        rope_type = c.rope_parameters["rope_type"]
        if rope_type == "default":
            inv, scale = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding.compute_default_rope_parameters(c)
        else:
            inv, scale = ROPE_INIT_FUNCTIONS[rope_type](c, None, seq_len=TOTAL if rope_type == "dynamic" else None)
        tables[name] = {"seq_len": TOTAL, "inv_freq": [float(x) for x in inv.tolist()],
                        "attention_scaling": float(scale)}
    return tables


def logits_full(model, tokens):
    with torch.no_grad():
        out = model(torch.tensor([tokens]), use_cache=False).logits[0]
    return [out[p].tolist() for p in POSITIONS]


def logits_incremental(model, tokens):
    rows = {}
    cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        out = model(torch.tensor([tokens[:PREFILL]]), past_key_values=cache, use_cache=True)
        for i in range(PREFILL):
            rows[i] = out.logits[0, i]
        for t in range(PREFILL, TOTAL):
            out = model(torch.tensor([[tokens[t]]]), past_key_values=out.past_key_values, use_cache=True,
                        position_ids=torch.tensor([[t]]))
            rows[t] = out.logits[0, 0]
    return [rows[p].tolist() for p in POSITIONS]


def generate(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(1234)
    base = LlamaForCausalLM(config(*CASES["default"])).to(torch.float32)
    # Norm weights away from 1 so that they matter too.
    with torch.no_grad():
        for name, p in base.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    tmp = os.path.join(out_dir, ".base")
    base.save_pretrained(tmp, safe_serialization=True)
    shutil.move(os.path.join(tmp, "model.safetensors"), os.path.join(out_dir, "model.safetensors"))
    shutil.rmtree(tmp)
    with open(os.path.join(out_dir, "inv_freq.json"), "w") as f:
        json.dump(inv_freq_tables(), f, indent=1)
        f.write("\n")
    gen = torch.Generator().manual_seed(99)
    tokens = torch.randint(0, VOCAB, (TOTAL,), generator=gen).tolist()
    for name, (max_pos, rope) in CASES.items():
        d = os.path.join(out_dir, name)
        os.makedirs(d, exist_ok=True)
        config(max_pos, rope).save_pretrained(d)
        link = os.path.join(d, "model.safetensors")
        if os.path.lexists(link):
            os.remove(link)
        os.symlink("../model.safetensors", link)
        # Load through the saved directory: the goldens come from what transformers reads back.
        full = logits_full(LlamaForCausalLM.from_pretrained(d, dtype=torch.float32).double().eval(), tokens)
        inc = logits_incremental(LlamaForCausalLM.from_pretrained(d, dtype=torch.float32).double().eval(), tokens)
        golden = {"transformers": transformers.__version__, "torch": torch.__version__, "tokens": tokens,
                  "positions": POSITIONS, "prefill": PREFILL,
                  "full": [[float("%.9g" % x) for x in row] for row in full],
                  "incremental": [[float("%.9g" % x) for x in row] for row in inc]}
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(golden, f, separators=(",", ":"))
            f.write("\n")


def check(committed):
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp)
        a, b = load_file(os.path.join(committed, "model.safetensors")), load_file(os.path.join(tmp, "model.safetensors"))
        assert a.keys() == b.keys(), f"tensor names differ: {sorted(a)} vs {sorted(b)}"
        for k in a:
            assert torch.equal(a[k], b[k]), f"weights differ in {k}: rerun {sys.argv[0]} {committed}"
        bad = []
        with open(os.path.join(committed, "inv_freq.json")) as x, open(os.path.join(tmp, "inv_freq.json")) as y:
            if json.load(x) != json.load(y):
                bad.append("inv_freq.json differs")
        for name in CASES:
            for f in ("config.json", "golden.json"):
                with open(os.path.join(committed, name, f)) as x, open(os.path.join(tmp, name, f)) as y:
                    cj, nj = json.load(x), json.load(y)
                if f == "config.json":
                    for k in ("transformers_version",):
                        cj.pop(k, None), nj.pop(k, None)
                    if cj != nj:
                        bad.append(f"{name}/config.json: {cj} != {nj}")
                    continue
                assert cj["tokens"] == nj["tokens"] and cj["positions"] == nj["positions"], name
                for key in ("full", "incremental"):
                    diff = max(abs(p - q) for r, s in zip(cj[key], nj[key]) for p, q in zip(r, s))
                    print(f"{name}/{key}: max |committed - transformers {transformers.__version__}| = {diff:.3g}")
                    if diff > 1e-6:
                        bad.append(f"{name}/{key} differs by {diff}")
        # The goldens are not vacuous: past the original context every scaling type changes the logits.
        with open(os.path.join(tmp, "default", "golden.json")) as f:
            plain = json.load(f)["full"]
        for name in CASES:
            if name == "default":
                continue
            with open(os.path.join(tmp, name, "golden.json")) as f:
                scaled = json.load(f)["full"]
            diff = max(abs(p - q) for r, s in zip(plain[-3:], scaled[-3:]) for p, q in zip(r, s))
            print(f"{name}: max |scaled - default| past the original context = {diff:.3g}")
            if diff < 1e-2:
                bad.append(f"{name}: scaling barely changes the logits ({diff})")
        if bad:
            print("FAIL:\n  " + "\n  ".join(bad))
            sys.exit(1)
    print("OK: the committed RoPE goldens are what transformers produces")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
    elif len(sys.argv) == 2:
        generate(sys.argv[1])
    else:
        sys.exit(__doc__)
