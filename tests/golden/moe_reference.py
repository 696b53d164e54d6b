#!/usr/bin/env python3
"""PyTorch parity dumps for the MoE FFN block (issue #18), from Hugging Face's real
Qwen3MoeForCausalLM (transformers 5.x, torch 2.15; run with the project venv's python).

Two variants, B = 2, T = 8, d_model 16, 2 layers, vocab 37, 4 query heads on 2 kv heads (head_dim 8,
Qwen3 QK-norm per head), RMSNorm eps 1e-6, SwiGLU, RoPE theta 10000, tied embeddings, top-2 of 8
experts of hidden 12:
  top2of8:        every layer MoE, renormalised top-k (Qwen3-MoE), aux loss 0.01, router z-loss 1e-3.
  top2of8_shared: layer 0 dense (ffn_hidden 32; HF mlp_only_layers=[0]), layer 1 MoE with one
                  ungated shared expert (hidden 12; added to the MLP output by a forward hook, the
                  Qwen2-MoE shared expert without its sigmoid gate), top-k not renormalised (OLMoE),
                  aux loss 0.05, no z-loss.
The matching ModelConfigs are written in C++ in tests/golden/moe_parity_test.cpp (the config JSON
keys for MoE belong to another change); this script and the test must agree on them.

The objective whose gradients are dumped is
  mean CE over the targets + Σ_MoE layers [aux_coef · E · Σ_e (load_e/N) · mean_n p_ne + z_coef · mean_n lse_n²]
with p = softmax(router logits) (HF's router_logits output), load_e the routed top-k slots of
expert e (no gradient). This is the per-layer form of HF's load_balancing_loss_func (which pools all
layers' tokens before the product). `loss` in the dump is the mean CE alone (what lmtrain returns).

The model runs in f64 and the results are stored as F32 (files as tests/golden/README.md describes:
weights.safetensors with per-expert HF checkpoint names, reference.safetensors with tokens, targets,
loss, logits and grad.<name>).

  moe_reference.py --generate [DIR]   (default tests/golden/torch_moe)
"""
import os
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import write_safetensors  # noqa: E402

B, T, V, C, E, K, HE = 2, 8, 37, 16, 8, 2, 12

VARIANTS = {
    "top2of8": dict(shared=0, dense_layers=[], renormalize=True, aux=0.01, z=1e-3),
    "top2of8_shared": dict(shared=1, dense_layers=[0], renormalize=False, aux=0.05, z=0.0),
}


def build(v):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeMLP
    cfg = Qwen3MoeConfig(vocab_size=V, hidden_size=C, intermediate_size=32, moe_intermediate_size=HE,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         num_experts=E, num_experts_per_tok=K, norm_topk_prob=v["renormalize"],
                         decoder_sparse_step=1, mlp_only_layers=v["dense_layers"], rms_norm_eps=1e-6,
                         rope_theta=10000.0, tie_word_embeddings=True, max_position_embeddings=64,
                         router_aux_loss_coef=0.0, attn_implementation="eager",
                         experts_implementation="eager")  # plain per-expert loop: works in f64
    model = Qwen3MoeForCausalLM(cfg).double()
    shared = {}
    if v["shared"]:
        for l in range(2):
            if l in v["dense_layers"]:
                continue
            mlp = Qwen3MoeMLP(cfg, intermediate_size=HE * v["shared"]).double()
            shared[l] = mlp
            model.model.layers[l].mlp.register_forward_hook(lambda mod, inp, out, mlp=mlp: out + mlp(inp[0]))
    return cfg, model, shared


def named_params(model, shared, v):
    """[(our HF checkpoint name, getter returning the torch tensor (a view of a parameter))]."""
    out = [("model.embed_tokens.weight", lambda: model.model.embed_tokens.weight)]
    for l in range(2):
        layer = model.model.layers[l]
        p = f"model.layers.{l}."
        a = layer.self_attn
        out += [(p + "input_layernorm.weight", lambda a=layer: a.input_layernorm.weight),
                (p + "self_attn.q_proj.weight", lambda a=a: a.q_proj.weight),
                (p + "self_attn.k_proj.weight", lambda a=a: a.k_proj.weight),
                (p + "self_attn.v_proj.weight", lambda a=a: a.v_proj.weight),
                (p + "self_attn.q_norm.weight", lambda a=a: a.q_norm.weight),
                (p + "self_attn.k_norm.weight", lambda a=a: a.k_norm.weight),
                (p + "self_attn.o_proj.weight", lambda a=a: a.o_proj.weight),
                (p + "post_attention_layernorm.weight", lambda a=layer: a.post_attention_layernorm.weight)]
        if l in v["dense_layers"]:
            m = layer.mlp
            out += [(p + "mlp.gate_proj.weight", lambda m=m: m.gate_proj.weight),
                    (p + "mlp.up_proj.weight", lambda m=m: m.up_proj.weight),
                    (p + "mlp.down_proj.weight", lambda m=m: m.down_proj.weight)]
            continue
        ex = layer.mlp.experts
        out.append((p + "mlp.gate.weight", lambda g=layer.mlp.gate: g.weight))
        for e in range(E):
            x = p + f"mlp.experts.{e}."
            out += [(x + "gate_proj.weight", lambda ex=ex, e=e: ex.gate_up_proj[e, :HE]),
                    (x + "up_proj.weight", lambda ex=ex, e=e: ex.gate_up_proj[e, HE:]),
                    (x + "down_proj.weight", lambda ex=ex, e=e: ex.down_proj[e])]
        if l in shared:
            s = shared[l]
            out += [(p + "mlp.shared_expert.gate_proj.weight", lambda s=s: s.gate_proj.weight),
                    (p + "mlp.shared_expert.up_proj.weight", lambda s=s: s.up_proj.weight),
                    (p + "mlp.shared_expert.down_proj.weight", lambda s=s: s.down_proj.weight)]
    out.append(("model.norm.weight", lambda: model.model.norm.weight))
    return out


def grad_of(name, model, shared, v):
    """The gradient of a named (possibly sliced) parameter."""
    for n, get in named_params(model, shared, v):
        if n != name:
            continue
        t = get()
        if t.grad is not None:
            return t.grad
        # a slice of a fused parameter: slice the parameter's gradient the same way
        l = int(name.split(".")[2])
        ex = model.model.layers[l].mlp.experts
        e = int(name.split(".")[5])
        if name.endswith("gate_proj.weight"):
            return ex.gate_up_proj.grad[e, :HE]
        if name.endswith("up_proj.weight"):
            return ex.gate_up_proj.grad[e, HE:]
        return ex.down_proj.grad[e]
    raise KeyError(name)


def generate_variant(name, v, root):
    seed = 4321 + zlib.crc32(name.encode()) % 100000
    torch.manual_seed(0)
    cfg, model, shared = build(v)
    rng = np.random.RandomState(seed)
    weights = {}
    with torch.no_grad():
        for n, get in named_params(model, shared, v):
            t = get()
            noise = rng.standard_normal(size=tuple(t.shape))
            value = (1.0 + 0.1 * noise) if t.dim() == 1 else 0.2 * noise  # norms ~1, matrices N(0, 0.2)
            value = value.astype(np.float32)
            t.copy_(torch.from_numpy(value.astype(np.float64)))
            weights[n] = value
    rng = np.random.RandomState(seed + 1)
    seq = rng.randint(0, V, size=(B, T + 1))
    tokens, targets = seq[:, :T].astype(np.int32), seq[:, 1:].astype(np.int32)

    out = model(input_ids=torch.tensor(tokens, dtype=torch.long), output_router_logits=True)
    logits = out.logits.reshape(B * T, V)
    ce = F.cross_entropy(logits, torch.tensor(targets, dtype=torch.long).reshape(-1))
    total = ce
    router_logits = [r for r in out.router_logits if r is not None]
    assert len(router_logits) == 2 - len(v["dense_layers"]), len(router_logits)
    N = B * T
    for rl in router_logits:
        rl = rl.reshape(N, E).double()
        p = torch.softmax(rl, dim=-1)
        idx = torch.topk(p, K, dim=-1).indices
        load = F.one_hot(idx, E).sum(dim=(0, 1)).double()
        total = total + v["aux"] * E * ((load / N) * p.mean(0)).sum()
        if v["z"] > 0:
            total = total + v["z"] * (torch.logsumexp(rl, dim=-1) ** 2).mean()
    total.backward()

    tensors = [("tokens", tokens), ("targets", targets),
               ("loss", ce.detach().reshape(1).float().numpy()), ("logits", logits.detach().float().numpy())]
    for n, _ in named_params(model, shared, v):
        tensors.append(("grad." + n, grad_of(n, model, shared, v).detach().float().numpy()))
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    import transformers
    meta = {"torch": torch.__version__, "transformers": transformers.__version__, "aux_loss_coef": str(v["aux"]),
            "router_z_loss": str(v["z"]), "total_objective": repr(float(total))}
    write_safetensors(os.path.join(d, "weights.safetensors"), sorted(weights.items()))
    write_safetensors(os.path.join(d, "reference.safetensors"), tensors, meta)
    print(f"{name}: CE {float(ce):.6f}, objective {float(total):.6f}, {len(weights)} tensors")


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--generate":
        root = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_moe")
        torch.set_num_threads(1)
        for name, v in VARIANTS.items():
            generate_variant(name, v, root)
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
