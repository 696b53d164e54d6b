#!/usr/bin/python3
"""Reference continuation log-probs for eval_test: stories260K (Hugging Face form) in PyTorch, float64.

Why: lmtrain scores multiple-choice answers as sum_t log p(continuation_t | context, continuation_<t),
read from the model's per-token losses with the context and continuation packed into padded,
sorted batches. This script computes the same numbers the obvious way, one sequence at a time with
log_softmax over full logits, in float64 from the safetensors weights, with a Llama forward written
here (RMSNorm, rotate-half RoPE, GQA causal attention, SwiGLU; helpers shared with
tests/golden/torch_reference.py). eval_test compares within 1e-4.

Usage (Debian's python3-torch): /usr/bin/python3 make_logprob_reference.py [--model DIR] [--out FILE]
  DIR default: ../../../../shared/data/models/stories260K/hf; FILE default: logprob_reference.json here.
The pairs: BOS=1 first, ids < 512; contexts/continuations cut from the reference story of
stories260K/reference.json plus seeded random ids, several continuations per context (as choices).
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "golden"))
from torch_reference import attention, read_safetensors, rms_norm, rope  # noqa: E402


def llama_logits(cfg, P, ids):
    """ids: list of ints -> logits [T, V] float64 (one sequence, positions 0..T-1)."""
    C, NH, G = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    HD = cfg.get("head_dim", C // NH)
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    T = len(ids)
    embed = P["model.embed_tokens.weight"]
    x = embed[torch.tensor(ids)][None]  # [1, T, C]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms_norm(x, P[p + "input_layernorm.weight"], eps)
        q = (h @ P[p + "self_attn.q_proj.weight"].T).reshape(1, T, NH, HD)
        k = (h @ P[p + "self_attn.k_proj.weight"].T).reshape(1, T, G, HD)
        v = (h @ P[p + "self_attn.v_proj.weight"].T).reshape(1, T, G, HD)
        q, k = rope(q, HD, theta, q.dtype), rope(k, HD, theta, k.dtype)
        x = x + attention(q, k, v, None, 1.0 / math.sqrt(HD)) @ P[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        gate, up = h @ P[p + "mlp.gate_proj.weight"].T, h @ P[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ P[p + "mlp.down_proj.weight"].T
    h = rms_norm(x, P["model.norm.weight"], eps)
    head = P.get("lm_head.weight", embed)
    return (h @ head.T)[0]


def continuation_logprob(cfg, P, context, continuation):
    ids = context + continuation
    logp = torch.log_softmax(llama_logits(cfg, P, ids[:-1]), dim=-1)
    first = len(context) - 1  # position whose next token is continuation[0]
    return float(sum(logp[first + i, tok] for i, tok in enumerate(continuation)))


def make_pairs(story):
    rng = np.random.default_rng(8)
    rand = lambda n: [int(t) for t in rng.integers(3, 512, size=n)]  # noqa: E731
    pairs = []
    # A real context with its true next words and two distractors of other lengths (a 3-way choice).
    pairs.append({"context": story[:12], "continuations": [story[12:17], story[20:23], rand(7)]})
    # The shortest context (BOS alone) and a one-token continuation.
    pairs.append({"context": story[:1], "continuations": [story[1:2], story[1:9], [2]]})
    # A long context, two continuations.
    pairs.append({"context": story[:27], "continuations": [story[27:32], rand(4)]})
    # Random ids (BOS first) with random continuations.
    pairs.append({"context": [1] + rand(40), "continuations": [rand(1), rand(6), rand(13)]})
    return pairs


def main():
    ap = argparse.ArgumentParser()
    root = os.path.join(HERE, "..", "..", "..", "..", "shared", "data", "models", "stories260K")
    ap.add_argument("--model", default=os.path.join(root, "hf"))
    ap.add_argument("--out", default=os.path.join(HERE, "logprob_reference.json"))
    args = ap.parse_args()
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    weights, _ = read_safetensors(os.path.join(args.model, "model.safetensors"))
    P = {k: torch.from_numpy(v).to(torch.float64) for k, v in weights.items()}
    with open(os.path.join(args.model, "..", "reference.json")) as f:
        story = json.load(f)["input_ids"]
    assert story[0] == 1, "the reference story starts with BOS=1"
    pairs = make_pairs(story)
    for p in pairs:
        p["logprobs"] = [continuation_logprob(cfg, P, p["context"], c) for c in p["continuations"]]
    out = {"model": "stories260K/hf", "dtype": "float64", "script": "tests/eval/golden/make_logprob_reference.py",
           "pairs": pairs}
    with open(args.out, "w") as f:  # one pair per line: small, and diffs stay readable
        head = json.dumps({k: v for k, v in out.items() if k != "pairs"})[:-1]
        f.write(head + ', "pairs": [\n' + ",\n".join(json.dumps(p) for p in pairs) + "\n]}\n")
    for p in pairs:
        print(len(p["context"]), [len(c) for c in p["continuations"]], ["%.6f" % x for x in p["logprobs"]])


if __name__ == "__main__":
    main()
