#!/usr/bin/python3
"""PyTorch reference for lmtrain's transformer: the golden dumps that torch_parity_test compares against.

Why: our forward and backward are hand-written; an independent implementation in plain PyTorch (autograd,
no `transformers`) built from the same config and the same weights must give the same loss, logits and
gradient of every parameter. The dumps are committed under tests/golden/torch/<variant>/ so the C++ test
runs without torch; `--check` verifies where torch is present that this script still reproduces them.

Modes (run with Debian's /usr/bin/python3, which has python3-torch and python3-numpy):
  torch_reference.py --generate [DIR]   write every variant to DIR (default: torch/ beside this script)
  torch_reference.py --check DIR        recompute every variant in DIR; exit 0 if all match, else 1
  torch_reference.py --run --config C.json --weights W.safetensors --inputs I.safetensors --out O.safetensors
                     [--compute f32|bf16] [--z-loss Z]       one run on given inputs
  torch_reference.py --autocast-report DIR   bf16 variants: how far torch.autocast is from the dumps

The config uses our JSON keys (src/lmt/model/config_json.cpp); weights use Hugging Face names and shapes
(GPT-2's Conv1D weights are [in, out]; embeddings have vocab_size rows). A dump holds: tokens, targets and
(when documents are masked) doc_ids as I32 [B, T]; loss F32 [1]; logits F32 [B*T, V]; and
"grad." + name for every parameter, in HF shapes. Its metadata records compute and z_loss.

Precision. "f32": everything in float32. "bf16": our mixed precision, emulated exactly rather than with
torch.autocast: every GEMM (q/k/v/o projections, FFN, LM head; forward and both backward GEMMs) reads
bf16-rounded operands (weights, activations and the incoming gradient) and accumulates and returns f32;
biases, norms, RoPE, attention (QK^T, softmax, PV), activations, the residual stream and the loss are f32;
the embedding lookup reads the f32 master weights. torch.autocast on CPU differs: it rounds every GEMM
*output* to bf16 and runs the attention matmuls in bf16 too (see --autocast-report and README.md).
"""

import argparse
import json
import math
import os
import struct
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------------------------------
# safetensors (the format: 8-byte little-endian header length, JSON header, data section)

_NP_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "U16": np.uint16}


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, numpy array). Written in order, header padded to 8 bytes like the reference."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name, array in tensors:
        array = np.ascontiguousarray(array)
        dtype = {np.dtype(v): k for k, v in _NP_DTYPES.items()}[array.dtype]
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def read_safetensors(path):
    """Returns ({name: numpy array}, metadata dict). BF16 and F16 are widened to float32."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    metadata = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        chunk, dtype = data[begin:end], info["dtype"]
        if dtype == "BF16":
            array = (np.frombuffer(chunk, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif dtype == "F16":
            array = np.frombuffer(chunk, "<f2").astype(np.float32)
        else:
            array = np.frombuffer(chunk, np.dtype(_NP_DTYPES[dtype]).newbyteorder("<")).astype(_NP_DTYPES[dtype])
        out[name] = array.reshape(info["shape"]).copy()
    return out, metadata


# ----------------------------------------------------------------------------------------------------
# Model config: our keys and defaults (ModelConfig in src/lmt/model/config.h, config_json.cpp)

CONFIG_DEFAULTS = {
    "name": "", "family": "llama", "vocab_size": 0, "vocab_pad_to": 64, "max_seq_len": 0, "n_layers": 0,
    "d_model": 0, "n_heads": 0, "n_kv_heads": 0, "head_dim": 0, "ffn_hidden": 0, "nope_every": 0,
    "norm": "rmsnorm", "ffn": "glu", "activation": "silu", "positions": "rope", "norm_eps": 1e-5,
    "rope_theta": 10000.0, "rotary_fraction": 1.0, "init_std": 0.02, "qk_norm": False, "qk_norm_full": False,
    "attn_bias": False, "attn_out_bias": False, "mlp_bias": False, "tied_embeddings": True, "scaled_residual_init": True,
}


def load_config(cfg):
    unknown = sorted(set(cfg) - set(CONFIG_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown config keys {unknown}; valid: {sorted(CONFIG_DEFAULTS)}")
    c = dict(CONFIG_DEFAULTS, **cfg)
    if c["n_kv_heads"] == 0:
        c["n_kv_heads"] = c["n_heads"]
    if c["head_dim"] == 0:
        c["head_dim"] = c["d_model"] // c["n_heads"]
    if c["max_seq_len"] == 0:
        c["max_seq_len"] = 2048
    return c


def rotary_dim(c):
    r = int(math.floor(c["head_dim"] * c["rotary_fraction"] + 0.5))  # C++ std::lround (half away from 0)
    return r - r % 2


def layer_uses_rope(c, layer):
    if c["positions"] != "rope":
        return False
    n = c["nope_every"]
    return n <= 0 or layer % n != n - 1


def param_specs(c):
    """[(HF name, HF shape, kind)] in our layout order (src/lmt/model/params.cpp).
    kind: 'matrix' | 'embedding' | 'norm' | 'bias'."""
    C, V, H, L = c["d_model"], c["vocab_size"], c["ffn_hidden"], c["n_layers"]
    q_dim, kv_dim = c["n_heads"] * c["head_dim"], c["n_kv_heads"] * c["head_dim"]
    norm_bias = c["norm"] == "layernorm"
    specs = []

    def norm(prefix):
        specs.append((prefix + ".weight", [C], "norm"))
        if norm_bias:
            specs.append((prefix + ".bias", [C], "bias"))

    if c["family"] == "gpt2":
        specs += [("transformer.wte.weight", [V, C], "embedding"),
                  ("transformer.wpe.weight", [c["max_seq_len"], C], "embedding")]
        for l in range(L):
            p = f"transformer.h.{l}."
            norm(p + "ln_1")
            specs += [(p + "attn.c_attn.weight", [C, q_dim + 2 * kv_dim], "matrix"),  # Conv1D: [in, out]
                      (p + "attn.c_attn.bias", [q_dim + 2 * kv_dim], "bias"),
                      (p + "attn.c_proj.weight", [q_dim, C], "matrix"),
                      (p + "attn.c_proj.bias", [C], "bias")]
            norm(p + "ln_2")
            specs += [(p + "mlp.c_fc.weight", [C, H], "matrix"), (p + "mlp.c_fc.bias", [H], "bias"),
                      (p + "mlp.c_proj.weight", [H, C], "matrix"), (p + "mlp.c_proj.bias", [C], "bias")]
        norm("transformer.ln_f")
        return specs

    specs.append(("model.embed_tokens.weight", [V, C], "embedding"))
    if c["positions"] == "learned":
        specs.append(("model.embed_positions.weight", [c["max_seq_len"], C], "embedding"))
    for l in range(L):
        p = f"model.layers.{l}."
        norm(p + "input_layernorm")
        specs += [(p + "self_attn.q_proj.weight", [q_dim, C], "matrix"),
                  (p + "self_attn.k_proj.weight", [kv_dim, C], "matrix"),
                  (p + "self_attn.v_proj.weight", [kv_dim, C], "matrix")]
        if c["attn_bias"]:
            specs += [(p + "self_attn.q_proj.bias", [q_dim], "bias"), (p + "self_attn.k_proj.bias", [kv_dim], "bias"),
                      (p + "self_attn.v_proj.bias", [kv_dim], "bias")]
        if c["qk_norm"]:  # per head [HD]; qk_norm_full (OLMoE): the whole row [NH*HD], [G*HD]
            full = c["qk_norm_full"]
            specs += [(p + "self_attn.q_norm.weight", [q_dim if full else c["head_dim"]], "norm"),
                      (p + "self_attn.k_norm.weight", [kv_dim if full else c["head_dim"]], "norm")]
        specs.append((p + "self_attn.o_proj.weight", [C, q_dim], "matrix"))
        if c["attn_out_bias"]:
            specs.append((p + "self_attn.o_proj.bias", [C], "bias"))
        norm(p + "post_attention_layernorm")
        ffn = ["gate_proj", "up_proj"] if c["ffn"] == "glu" else ["up_proj"]
        specs += [(p + f"mlp.{m}.weight", [H, C], "matrix") for m in ffn]
        if c["mlp_bias"]:
            specs += [(p + f"mlp.{m}.bias", [H], "bias") for m in ffn]
        specs.append((p + "mlp.down_proj.weight", [C, H], "matrix"))
        if c["mlp_bias"]:
            specs.append((p + "mlp.down_proj.bias", [C], "bias"))
    norm("model.norm")
    if not c["tied_embeddings"]:
        specs.append(("lm_head.weight", [V, C], "embedding"))
    return specs


# ----------------------------------------------------------------------------------------------------
# The model, in plain PyTorch


def bf16_round(t):
    return t.to(torch.bfloat16).to(torch.float32)


class Bf16Linear(torch.autograd.Function):
    """y = round(x)·round(W)ᵀ + b with f32 accumulation; backward GEMMs read round(dy) (our bf16 mode)."""

    @staticmethod
    def forward(ctx, x, w, b):
        xr, wr = bf16_round(x), bf16_round(w)
        ctx.save_for_backward(xr, wr)
        ctx.has_bias = b is not None
        y = xr @ wr.t()
        return y + b if b is not None else y

    @staticmethod
    def backward(ctx, dy):
        xr, wr = ctx.saved_tensors
        dyr = bf16_round(dy)
        dx = dyr @ wr
        dw = dyr.reshape(-1, dyr.shape[-1]).t() @ xr.reshape(-1, xr.shape[-1])
        db = dyr.reshape(-1, dyr.shape[-1]).sum(0) if ctx.has_bias else None
        return dx, dw, db


def make_linear(compute):
    if compute == "bf16":
        return lambda x, w, b=None: Bf16Linear.apply(x, w, b)
    return lambda x, w, b=None: F.linear(x, w, b)  # f32, f64, and bf16-autocast (autocast decides)


def rms_norm(x, w, eps):
    x32 = x.float() if x.dtype == torch.bfloat16 else x
    return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w


def activation(name, x):
    if name == "silu":
        return F.silu(x)
    if name == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu(x)
    raise ValueError(f"unknown activation {name!r}")


def rope(x, rot, theta, dtype):
    """x [B,T,heads,HD]: Hugging Face rotate-half on the first `rot` dims, position t = 0..T-1 per row.
    Angles in f64 then cast (HF computes them in f32; the difference is < 1e-6 at these positions)."""
    T = x.shape[1]
    inv_freq = theta ** (-torch.arange(0, rot, 2, dtype=torch.float64) / rot)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    cos, sin = angles.cos().to(dtype)[None, :, None, :], angles.sin().to(dtype)[None, :, None, :]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    x1, x2 = x_rot[..., : rot // 2], x_rot[..., rot // 2 :]
    rotated = torch.cat([-x2, x1], dim=-1)
    return torch.cat([x_rot * cos + rotated * sin, x_pass], dim=-1)


def attention(q, k, v, doc_ids, scale):
    """q [B,T,NH,HD], k/v [B,T,G,HD] -> [B,T,NH·HD]. Causal; with doc_ids only the same document."""
    B, T, NH, HD = q.shape
    G = k.shape[2]
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    kh, vh = kh.repeat_interleave(NH // G, dim=1), vh.repeat_interleave(NH // G, dim=1)  # head h -> h // (NH/G)
    scores = (qh @ kh.transpose(-1, -2)) * scale
    mask = torch.ones(T, T, dtype=torch.bool).tril()[None]
    if doc_ids is not None:
        mask = mask & (doc_ids[:, :, None] == doc_ids[:, None, :])
    scores = scores.masked_fill(~mask[:, None], float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(scores.dtype)
    return (probs @ vh).transpose(1, 2).reshape(B, T, NH * HD)


def forward_logits(c, P, tokens, doc_ids, compute):
    """P: {HF name: tensor}. Returns logits [B·T, V] (float)."""
    lin = make_linear(compute)
    gpt2 = c["family"] == "gpt2"
    B, T = tokens.shape
    NH, G, HD, C = c["n_heads"], c["n_kv_heads"], c["head_dim"], c["d_model"]
    q_dim, kv_dim = NH * HD, G * HD
    eps = c["norm_eps"]

    def norm(x, prefix):
        w, b = P[prefix + ".weight"], P.get(prefix + ".bias")
        if c["norm"] == "rmsnorm":
            return rms_norm(x, w, eps)
        return F.layer_norm(x.float() if x.dtype == torch.bfloat16 else x, (C,), w, b, eps)

    embed = P["transformer.wte.weight" if gpt2 else "model.embed_tokens.weight"]
    x = embed[tokens]
    if c["positions"] == "learned":
        x = x + P["transformer.wpe.weight" if gpt2 else "model.embed_positions.weight"][:T][None]
    for l in range(c["n_layers"]):
        if gpt2:
            p = f"transformer.h.{l}."
            h = norm(x, p + "ln_1")
            qkv = lin(h, P[p + "attn.c_attn.weight"].t(), P[p + "attn.c_attn.bias"])  # Conv1D: x·W + b
            q, k, v = qkv.split([q_dim, kv_dim, kv_dim], dim=-1)
        else:
            p = f"model.layers.{l}.self_attn."
            h = norm(x, f"model.layers.{l}.input_layernorm")
            q = lin(h, P[p + "q_proj.weight"], P.get(p + "q_proj.bias"))
            k = lin(h, P[p + "k_proj.weight"], P.get(p + "k_proj.bias"))
            v = lin(h, P[p + "v_proj.weight"], P.get(p + "v_proj.bias"))
        if c["qk_norm"] and c["qk_norm_full"]:
            # OLMoE (transformers' OlmoeAttention): q_norm/k_norm on the projection outputs
            # [.., NH*HD] and [.., G*HD], before they are split into heads.
            q = rms_norm(q, P[p + "q_norm.weight"], eps)
            k = rms_norm(k, P[p + "k_norm.weight"], eps)
        q, k, v = q.reshape(B, T, NH, HD), k.reshape(B, T, G, HD), v.reshape(B, T, G, HD)
        if c["qk_norm"] and not c["qk_norm_full"]:
            q = rms_norm(q, P[p + "q_norm.weight"], eps)
            k = rms_norm(k, P[p + "k_norm.weight"], eps)
        if layer_uses_rope(c, l):
            q = rope(q, rotary_dim(c), c["rope_theta"], q.dtype)
            k = rope(k, rotary_dim(c), c["rope_theta"], k.dtype)
        att = attention(q, k, v, doc_ids, 1.0 / math.sqrt(HD))
        if gpt2:
            x = x + lin(att, P[p + "attn.c_proj.weight"].t(), P[p + "attn.c_proj.bias"])
            h = norm(x, p + "ln_2")
            a = activation(c["activation"], lin(h, P[p + "mlp.c_fc.weight"].t(), P[p + "mlp.c_fc.bias"]))
            x = x + lin(a, P[p + "mlp.c_proj.weight"].t(), P[p + "mlp.c_proj.bias"])
            continue
        x = x + lin(att, P[p + "o_proj.weight"], P.get(p + "o_proj.bias"))
        p = f"model.layers.{l}."
        h = norm(x, p + "post_attention_layernorm")
        up = lin(h, P[p + "mlp.up_proj.weight"], P.get(p + "mlp.up_proj.bias"))
        if c["ffn"] == "glu":
            gate = lin(h, P[p + "mlp.gate_proj.weight"], P.get(p + "mlp.gate_proj.bias"))
            a = activation(c["activation"], gate) * up
        else:
            a = activation(c["activation"], up)
        x = x + lin(a, P[p + "mlp.down_proj.weight"], P.get(p + "mlp.down_proj.bias"))
    h = norm(x, "transformer.ln_f" if gpt2 else "model.norm")
    head = embed if c["tied_embeddings"] else P["lm_head.weight"]
    return lin(h, head).reshape(B * T, -1).float()


def run_model(c, weights, tokens, targets, doc_ids, compute="f32", z_loss=0.0):
    """weights: {HF name: numpy f32}; tokens/targets/doc_ids: numpy int [B,T] (doc_ids may be None).
    compute: f32 | f64 | bf16 (our mixed precision) | bf16-autocast. Returns numpy outputs."""
    dtype = torch.float64 if compute == "f64" else torch.float32
    specs = param_specs(c)
    missing = [n for n, _, _ in specs if n not in weights]
    extra = sorted(set(weights) - {n for n, _, _ in specs})
    if missing or extra:
        raise ValueError(f"weights do not match the config: missing {missing}, extra {extra}")
    P = {}
    for name, shape, _ in specs:
        if list(weights[name].shape) != shape:
            raise ValueError(f"{name}: shape {list(weights[name].shape)}, config needs {shape}")
        P[name] = torch.tensor(weights[name], dtype=dtype, requires_grad=True)
    tok = torch.tensor(tokens, dtype=torch.long)
    tgt = torch.tensor(targets, dtype=torch.long).reshape(-1)
    docs = torch.tensor(doc_ids, dtype=torch.long) if doc_ids is not None else None
    if compute == "bf16-autocast":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = forward_logits(c, P, tok, docs, compute)
    else:
        logits = forward_logits(c, P, tok, docs, compute)
    # loss per token = logsumexp - logit[target] + z_loss·logsumexp², mean over targets != -100
    valid = tgt != -100
    lse = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(1, tgt.clamp(min=0)[:, None])[:, 0]
    per_token = lse - picked + z_loss * lse * lse
    loss = (per_token * valid).sum() / valid.sum().clamp(min=1)
    loss.backward()
    out = {"loss": loss.detach().reshape(1).float().numpy(), "logits": logits.detach().float().numpy()}
    for name, _, _ in specs:
        out["grad." + name] = P[name].grad.float().numpy()
    return out


# ----------------------------------------------------------------------------------------------------
# The committed variants

B, T = 2, 8
SEED = 1234


def tiny_base(name):
    # The dims of tests/model/model_test_util.h (tiny_variants): V = 37 is padded to 64 in our layout.
    return {"name": name, "family": "llama", "vocab_size": 37, "vocab_pad_to": 64, "max_seq_len": 16,
            "n_layers": 2, "d_model": 16, "n_heads": 4, "n_kv_heads": 2, "head_dim": 4, "ffn_hidden": 24,
            "nope_every": 0, "norm": "rmsnorm", "ffn": "glu", "activation": "silu", "positions": "rope",
            "norm_eps": 1e-5, "rope_theta": 10000.0, "rotary_fraction": 1.0, "init_std": 0.2, "qk_norm": False,
            "attn_bias": False, "attn_out_bias": False, "mlp_bias": False, "tied_embeddings": True,
            "scaled_residual_init": True}


def gpt2_config(name):
    return dict(tiny_base(name), family="gpt2", positions="learned", norm="layernorm", ffn="mlp",
                activation="gelu_tanh", n_kv_heads=4, attn_bias=True, attn_out_bias=True, mlp_bias=True)


# name -> (config, compute, z_loss, doc masking, some targets ignored)
VARIANTS = {
    "gpt2_style": (gpt2_config("gpt2_style"), "f32", 0.0, False, False),
    "llama_gqa": (tiny_base("llama_gqa"), "f32", 0.0, False, False),
    "qwen3_qknorm_untied": (dict(tiny_base("qwen3_qknorm_untied"), qk_norm=True, tied_embeddings=False, head_dim=8),
                            "f32", 0.0, False, False),
    "partial_rope_nope": (dict(tiny_base("partial_rope_nope"), rotary_fraction=0.5, nope_every=2, n_kv_heads=1,
                               head_dim=8, norm="layernorm_nobias", rope_theta=500.0), "f32", 0.0, False, False),
    "doc_masking": (tiny_base("doc_masking"), "f32", 0.0, True, False),
    "zloss": (tiny_base("zloss"), "f32", 1e-2, False, True),
    # Beyond the list: no positions at all with a ReLU MLP and documents; llama-family biases
    # everywhere with GeGLU, LayerNorm and learned positions; an unpadded vocabulary.
    "nope_relu_mlp_docs": (dict(tiny_base("nope_relu_mlp_docs"), positions="none", ffn="mlp", activation="relu",
                                mlp_bias=True), "f32", 0.0, True, True),
    "biases_geglu_learned": (dict(tiny_base("biases_geglu_learned"), positions="learned", norm="layernorm",
                                  activation="gelu_tanh", attn_bias=True, attn_out_bias=True, mlp_bias=True,
                                  vocab_size=64), "f32", 0.0, False, False),
    # OLMoE's QK-norm over the whole q [NH*HD = 32] and k [G*HD = 16] rows (issue #18).
    "olmoe_qknorm_full": (dict(tiny_base("olmoe_qknorm_full"), qk_norm=True, qk_norm_full=True, tied_embeddings=False,
                               head_dim=8), "f32", 0.0, False, False),
    "llama_gqa_bf16": (tiny_base("llama_gqa_bf16"), "bf16", 0.0, False, False),
    "gpt2_style_bf16": (gpt2_config("gpt2_style_bf16"), "bf16", 0.0, False, False),
}


def variant_inputs(seed, c, doc_masking, ignore_some):
    """Deterministic tokens/targets (next token of a random sequence), doc_ids, as int32 [B,T]."""
    rng = np.random.RandomState(seed)
    seq = rng.randint(0, c["vocab_size"], size=(B, T + 1))
    tokens, targets = seq[:, :T].astype(np.int32), seq[:, 1:].astype(np.int32)
    if ignore_some:
        targets[0, 2] = targets[1, 5] = targets[1, 6] = -100
    doc_ids = None
    if doc_masking:  # contiguous runs; ids need not start at 0
        doc_ids = np.array([[0, 0, 0, 1, 1, 1, 1, 2], [5, 5, 6, 6, 6, 6, 6, 6]], dtype=np.int32)[:, :T]
    return tokens, targets, doc_ids


def variant_weights(seed, c):
    """Deterministic weights: N(0, init_std) matrices/embeddings (large enough that logits differ),
    norm weights 1 + N(0, 0.1) and biases N(0, 0.1), so that a dropped weight or bias shows."""
    rng = np.random.RandomState(seed)
    out = {}
    for name, shape, kind in param_specs(c):
        noise = rng.standard_normal(size=shape)
        if kind in ("matrix", "embedding"):
            value = noise * c["init_std"]
        elif kind == "norm":
            value = 1.0 + 0.1 * noise
        else:
            value = 0.1 * noise
        out[name] = value.astype(np.float32)
    return out


def variant_files(name):
    """(config dict, weights, inputs, compute, z_loss) of a committed variant, from the script alone."""
    config, compute, z_loss, docs, ignore = VARIANTS[name]
    seed = SEED + zlib.crc32(name.removesuffix("_bf16").encode()) % 100000  # a bf16 twin shares its f32 data
    c = load_config(config)
    return config, variant_weights(seed, c), variant_inputs(seed + 1, c, docs, ignore), compute, z_loss


def input_tensors(inputs):
    tokens, targets, doc_ids = inputs
    tensors = [("tokens", tokens), ("targets", targets)]
    return tensors + [("doc_ids", doc_ids)] if doc_ids is not None else tensors


def reference_tensors(inputs, outputs):
    tensors = input_tensors(inputs) + [("loss", outputs["loss"]), ("logits", outputs["logits"])]
    tensors += [(k, v) for k, v in outputs.items() if k.startswith("grad.")]
    return tensors


def generate(root, only=None):
    torch.set_num_threads(1)
    for name in VARIANTS:
        if only and name not in only:
            continue
        config, weights, inputs, compute, z_loss = variant_files(name)
        c = load_config(config)
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
        write_safetensors(os.path.join(d, "weights.safetensors"), [(n, weights[n]) for n, _, _ in param_specs(c)])
        out = run_model(c, weights, *inputs, compute=compute, z_loss=z_loss)
        write_safetensors(os.path.join(d, "reference.safetensors"), reference_tensors(inputs, out),
                          {"compute": compute, "z_loss": repr(z_loss), "generator": "tests/golden/torch_reference.py",
                           "torch": torch.__version__})
        # How exact is the reference itself? The same run in f64 (f32 variants) or f32 (bf16 variants).
        exact = run_model(c, weights, *inputs, compute="f64" if compute == "f32" else "f32", z_loss=z_loss)
        grads = [k for k in out if k.startswith("grad.")]
        peak = max(float(np.abs(exact[k]).max()) for k in grads)  # some grads are exactly 0 (k bias)
        worst = max(float(np.abs(out[k] - exact[k]).max()) for k in grads) / peak
        sizes = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        print(f"{name:22s} {compute:5s} loss {out['loss'][0]:.6f}  vs {'f64' if compute == 'f32' else 'f32'}: "
              f"loss rel {abs(out['loss'][0] - exact['loss'][0]) / abs(exact['loss'][0]):.1e}, "
              f"logits max abs {np.abs(out['logits'] - exact['logits']).max():.1e}, "
              f"grads max|d| / max|g| (all) {worst:.1e}  ({sizes} bytes)")


# ----------------------------------------------------------------------------------------------------
# --check: the committed dumps are what this script produces

def max_rel_to_peak(got, want):
    peak = float(np.abs(want).max())
    return float(np.abs(got - want).max()) / peak if peak > 0 else float(np.abs(got - want).max())


# Recomputation on another machine or torch build may sum in another order. f32: element-wise
# |got - want| <= 1e-6 + 1e-5·|want|. bf16: a 1e-7 change of a sum can flip one bf16 rounding (an
# f64-accumulated GEMM flips one in gpt2_style_bf16, moving grad.transformer.wpe.weight by 1.3e-3 of its
# peak), so per tensor max|got - want| <= 1e-2 · max(max|want|, 1e-4 · the largest gradient), and the
# loss within 1e-4 relative.
def compare(name, key, got, want, compute, grad_peak):
    if got.shape != want.shape:
        return [f"{name}: {key} has shape {list(got.shape)}, the committed one {list(want.shape)}"]
    if compute == "f32":
        bad = np.abs(got - want) > 1e-6 + 1e-5 * np.abs(want)
        if bad.any():
            i = np.unravel_index(np.argmax(np.abs(got - want) - 1e-5 * np.abs(want)), got.shape)
            return [f"{name}: {key} differs in {int(bad.sum())} elements, e.g. at {tuple(int(j) for j in i)}: "
                    f"recomputed {got[i]:.8g}, committed {want[i]:.8g} (tolerance 1e-6 + 1e-5·|committed|)"]
        return []
    limit = 1e-4 if key == "loss" else 1e-2
    scale = float(np.abs(want).max())
    if key.startswith("grad."):
        scale = max(scale, 1e-4 * grad_peak)  # a mathematically zero gradient is rounding noise
    err = float(np.abs(got - want).max()) / scale
    if err > limit:
        return [f"{name}: {key} max|recomputed - committed| / max|committed| = {err:.2e} > {limit:g}"]
    return []


def check(root):
    torch.set_num_threads(1)
    problems = []
    present = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))) if os.path.isdir(root) else []
    for name in sorted(set(present) - set(VARIANTS)):
        problems.append(f"{name}: a committed directory this script does not generate (remove it or add the variant)")
    for name in VARIANTS:
        d = os.path.join(root, name)
        if name not in present:
            problems.append(f"{name}: missing from {root} (run --generate)")
            continue
        config, weights, inputs, compute, z_loss = variant_files(name)
        with open(os.path.join(d, "config.json")) as f:
            committed_config = json.load(f)
        if committed_config != config:
            problems.append(f"{name}: config.json differs from the script's definition")
        committed_weights, _ = read_safetensors(os.path.join(d, "weights.safetensors"))
        if set(committed_weights) != set(weights) or any(
                not np.array_equal(committed_weights[k], weights[k]) for k in weights):
            problems.append(f"{name}: weights.safetensors differs from the script's deterministic weights")
        ref, meta = read_safetensors(os.path.join(d, "reference.safetensors"))
        if meta.get("compute") != compute or float(meta.get("z_loss", "nan")) != z_loss:
            problems.append(f"{name}: reference metadata {meta} does not say compute={compute}, z_loss={z_loss}")
        want_inputs = input_tensors(inputs)
        for key, value in want_inputs:
            if key not in ref or not np.array_equal(ref[key], value):
                problems.append(f"{name}: committed input '{key}' differs from the script's")
        if "doc_ids" in ref and inputs[2] is None:
            problems.append(f"{name}: committed doc_ids but the variant masks no documents")
        # Recompute from the committed files (not the regenerated ones): what the C++ test compares.
        c = load_config(committed_config)
        out = run_model(c, committed_weights, ref["tokens"], ref["targets"], ref.get("doc_ids"),
                        compute=meta.get("compute", compute), z_loss=float(meta.get("z_loss", z_loss)))
        keys = set(k for k in ref if k in ("loss", "logits") or k.startswith("grad."))
        if keys != set(out):
            problems.append(f"{name}: committed tensors {sorted(keys ^ set(out))} do not match the model's")
        grad_peak = max(float(np.abs(ref[k]).max()) for k in keys if k.startswith("grad."))
        for key in sorted(keys & set(out)):
            problems += compare(name, key, out[key], ref[key], compute, grad_peak)
    if problems:
        print("torch_reference --check: the committed dumps are NOT reproduced:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        print("hint: if the change is intended, regenerate with "
              "`/usr/bin/python3 tests/golden/torch_reference.py --generate` and review the diff", file=sys.stderr)
        return 1
    print(f"torch_reference --check: all {len(VARIANTS)} variants in {root} reproduced (torch {torch.__version__})")
    return 0


def autocast_report(root):
    """bf16 variants: torch.autocast vs our emulated mixed precision (the dump) and vs f32."""
    torch.set_num_threads(1)
    for name, (config, compute, z_loss, _, _) in VARIANTS.items():
        if compute != "bf16":
            continue
        d = os.path.join(root, name)
        c = load_config(config)
        weights, _ = read_safetensors(os.path.join(d, "weights.safetensors"))
        ref, _ = read_safetensors(os.path.join(d, "reference.safetensors"))
        args = (c, weights, ref["tokens"], ref["targets"], ref.get("doc_ids"))
        runs = {m: run_model(*args, compute=m, z_loss=z_loss) for m in ("bf16-autocast", "f32")}
        runs["bf16 (dump)"] = ref
        for a, b in (("bf16-autocast", "bf16 (dump)"), ("bf16-autocast", "f32"), ("bf16 (dump)", "f32")):
            x, y = runs[a], runs[b]
            grads = [k for k in x if k.startswith("grad.")]
            cos = min(float(np.dot(x[k].ravel(), y[k].ravel()) /
                            (np.linalg.norm(x[k]) * np.linalg.norm(y[k]) + 1e-30)) for k in grads)
            print(f"{name:18s} {a:13s} vs {b:11s}: loss rel {abs(x['loss'][0] - y['loss'][0]) / abs(y['loss'][0]):.1e}"
                  f"  logits max|d|/max {max_rel_to_peak(x['logits'], y['logits']):.1e}"
                  f"  grads worst max|d|/max {max(max_rel_to_peak(x[k], y[k]) for k in grads):.1e}"
                  f"  worst cosine {cos:.6f}")
    return 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--generate", nargs="?", const=os.path.join(here, "torch"), metavar="DIR")
    mode.add_argument("--check", metavar="DIR")
    mode.add_argument("--run", action="store_true")
    mode.add_argument("--autocast-report", metavar="DIR")
    ap.add_argument("--only", nargs="+", metavar="VARIANT", help="--generate: only these variants")
    ap.add_argument("--config")
    ap.add_argument("--weights")
    ap.add_argument("--inputs", help="safetensors with tokens, targets [B,T] I32 and optional doc_ids")
    ap.add_argument("--out")
    ap.add_argument("--compute", default="f32", choices=["f32", "bf16", "f64", "bf16-autocast"])
    ap.add_argument("--z-loss", type=float, default=0.0)
    a = ap.parse_args()
    if a.generate:
        generate(a.generate, a.only)
        return 0
    if a.check:
        return check(a.check)
    if a.autocast_report:
        return autocast_report(a.autocast_report)
    if not (a.config and a.weights and a.inputs and a.out):
        ap.error("--run needs --config, --weights, --inputs and --out")
    with open(a.config) as f:
        config = json.load(f)
    weights, _ = read_safetensors(a.weights)
    inputs, _ = read_safetensors(a.inputs)
    triple = (inputs["tokens"].astype(np.int32), inputs["targets"].astype(np.int32),
              inputs["doc_ids"].astype(np.int32) if "doc_ids" in inputs else None)
    out = run_model(load_config(config), weights, *triple, compute=a.compute, z_loss=a.z_loss)
    write_safetensors(a.out, reference_tensors(triple, out), {"compute": a.compute, "z_loss": repr(a.z_loss)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
