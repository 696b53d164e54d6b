"""Shared pieces of the optimizer golden scripts (make_adamw_golden.py, make_muon_golden.py).

The tensors are those of lmtrain's ParamLayout for the tiny config that tests/optim/golden_test.cpp
builds (llama naming, 1 layer, d_model 8, 2 heads of 8, 1 kv head, learned positions, QK-norm,
attention biases, untied LM head, vocabulary 20 padded to 32). The C++ test checks that this list
matches ParamLayout exactly (names, storage shapes, roles), so the two cannot drift apart silently.

Everything is float32, and every hyper-parameter is rounded to float32 before use, because the C++
side holds them as float: the scripts then differ from lmtrain only in the order of operations.
"""
import json
import struct

import numpy as np
import torch

VOCAB, PADDED_VOCAB = 20, 32
L = "model.layers.0."
# (name, storage shape, role): roles as lmt::model::ParamRole names them.
LAYOUT = [
    ("model.embed_tokens.weight", (PADDED_VOCAB, 8), "embedding"),
    ("model.embed_positions.weight", (16, 8), "position"),
    (L + "input_layernorm.weight", (8,), "norm"),
    (L + "self_attn.q_proj.weight", (16, 8), "matrix"),
    (L + "self_attn.k_proj.weight", (8, 8), "matrix"),
    (L + "self_attn.v_proj.weight", (8, 8), "matrix"),
    (L + "self_attn.q_proj.bias", (16,), "bias"),
    (L + "self_attn.k_proj.bias", (8,), "bias"),
    (L + "self_attn.v_proj.bias", (8,), "bias"),
    (L + "self_attn.q_norm.weight", (8,), "norm"),
    (L + "self_attn.k_norm.weight", (8,), "norm"),
    (L + "self_attn.o_proj.weight", (8, 16), "matrix"),
    (L + "post_attention_layernorm.weight", (8,), "norm"),
    (L + "mlp.gate_proj.weight", (12, 8), "matrix"),
    (L + "mlp.up_proj.weight", (12, 8), "matrix"),
    (L + "mlp.down_proj.weight", (8, 12), "matrix"),
    ("model.norm.weight", (8,), "norm"),
    ("lm_head.weight", (PADDED_VOCAB, 8), "lm_head"),
]
STEPS = 5
LR_MULTS = [0.25, 0.5, 1.0, 0.75, 0.4]     # the schedule's multiplier per step
GRAD_SCALES = [1.0, 0.5, 0.8, 1.0, 0.3]    # the clipping factor per step


def f32(x):
    """x rounded to float32, as a Python float (what a C++ float holds)."""
    return float(np.float32(x))


def is_vocab_table(role):
    return role in ("embedding", "lm_head")


def initial_params(rng):
    params = {}
    for name, shape, role in LAYOUT:
        if role == "norm":
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        elif role == "bias":
            w = 0.1 * rng.standard_normal(shape)
        else:
            w = 0.2 * rng.standard_normal(shape)
        if is_vocab_table(role):
            w[VOCAB:] = 0.0  # vocabulary padding rows are zero and never read
        params[name] = torch.tensor(w, dtype=torch.float32)
    return params


def step_grads(rng):
    grads = {}
    for name, shape, role in LAYOUT:
        g = rng.standard_normal(shape)
        if is_vocab_table(role):
            g[VOCAB:] = 0.0  # padding rows never get gradients
        grads[name] = torch.tensor(g, dtype=torch.float32)
    return grads


def write_safetensors(path, tensors, metadata):
    """Minimal safetensors writer (header length, JSON header padded to 8 bytes, f32 data)."""
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)


def metadata(config):
    return {"config": json.dumps(config), "layout": json.dumps([[n, list(s), r] for n, s, r in LAYOUT])}
