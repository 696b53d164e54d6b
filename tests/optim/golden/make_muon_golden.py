#!/usr/bin/python3
"""Golden reference for lmtrain's Muon: a PyTorch transcription of the reference algorithm.

Reference: Keller Jordan, "Muon: An optimizer for hidden layers in neural networks" (2024),
https://kellerjordan.github.io/posts/muon/ and https://github.com/KellerJordan/Muon (muon.py:
zeropower_via_newtonschulz5, muon_update). Differences from that file, all deliberate:
  * float32 throughout (the reference runs Newton-Schulz in bfloat16), so lmtrain can be compared
    closely;
  * momentum in the "sum" form of the earlier reference (and modded-nanogpt):
    B = mu*B + G; direction = G + mu*B (Nesterov) or B. The current muon.py uses the EMA form
    (lerp), which differs only by the factor (1 - mu) that the Frobenius normalisation removes.
The 2-D block matrices get Muon with lr = muon_lr * lr_mult; every other tensor gets
torch.optim.AdamW with lr = lr * lr_mult (here decay_embeddings = true: embeddings, positions and
the LM head decay, norms and biases do not).

Writes muon_golden.safetensors (Nesterov, 5 Newton-Schulz steps) and muon_plain_golden.safetensors
(plain momentum, 3 steps, no Muon weight decay) beside this script, with the tensors of
make_adamw_golden.py plus "final.muon.momentum.<name>" for the matrices.

Run with Debian's PyTorch: /usr/bin/python3 tests/optim/golden/make_muon_golden.py

With --bf16 it writes only muon_bf16_golden.safetensors: the Nesterov configuration with muon.py's
Newton-Schulz exactly as the reference runs it, in bfloat16 (X = G.bfloat16(), every product and
sum in bf16, the scaled update added to the f32 parameter), for lmtrain's optim.muon_ns_dtype =
"bf16". Run it with the project venv (PyTorch 2.x): build/venv/bin/python ... --bf16
"""
import sys
import os

import numpy as np
import torch

from optim_golden_common import (GRAD_SCALES, LAYOUT, LR_MULTS, STEPS, f32, initial_params,
                                 metadata, step_grads, write_safetensors)


def zeropower_via_newtonschulz5(G, steps):
    """muon.py's orthogonalisation, in float32."""
    assert G.ndim == 2
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.clone()
    if G.size(-2) > G.size(-1):
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


def zeropower_via_newtonschulz5_bf16(G, steps):
    """muon.py's zeropower_via_newtonschulz5 verbatim: the iteration in bfloat16."""
    assert G.ndim >= 2
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.bfloat16()
    if G.size(-2) > G.size(-1):
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


def muon_step(p, grad, buf, lr, cfg):
    mu = f32(cfg["muon_momentum"])
    buf.mul_(mu).add_(grad)
    direction = grad.add(buf, alpha=mu) if cfg["muon_nesterov"] else buf.clone()
    ns = zeropower_via_newtonschulz5_bf16 if cfg.get("muon_ns_dtype") == "bf16" else zeropower_via_newtonschulz5
    update = ns(direction, cfg["muon_ns_steps"])
    update *= max(1, grad.size(-2) / grad.size(-1)) ** 0.5
    p.mul_(1 - lr * f32(cfg["muon_weight_decay"]))
    p.add_(update, alpha=-lr)


def make(file_name, cfg):
    rng = np.random.default_rng(7)
    params = initial_params(rng)
    out = {f"init.{n}": t.clone() for n, t in params.items()}
    leaves = {n: torch.nn.Parameter(t.clone()) for n, t in params.items()}
    muon_names = [n for n, _, role in LAYOUT if role == "matrix"]
    decay = [leaves[n] for n, _, role in LAYOUT if role in ("embedding", "position", "lm_head")]
    no_decay = [leaves[n] for n, _, role in LAYOUT if role in ("norm", "bias")]
    adamw = torch.optim.AdamW(
        [{"params": decay, "weight_decay": f32(cfg["weight_decay"])},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=f32(cfg["lr"]), betas=(f32(cfg["beta1"]), f32(cfg["beta2"])), eps=f32(cfg["eps"]), foreach=False)
    momentum = {n: torch.zeros_like(params[n]) for n in muon_names}
    for k in range(STEPS):
        grads = step_grads(rng)
        gs = torch.tensor(GRAD_SCALES[k], dtype=torch.float32)
        for group in adamw.param_groups:
            group["lr"] = float(np.float32(cfg["lr"]) * np.float32(LR_MULTS[k]))
        muon_lr = float(np.float32(cfg["muon_lr"]) * np.float32(LR_MULTS[k]))
        for n, g in grads.items():
            out[f"grad{k + 1}.{n}"] = g.clone()
            leaves[n].grad = g * gs
        adamw.step()
        with torch.no_grad():
            for n in muon_names:
                muon_step(leaves[n], leaves[n].grad, momentum[n], muon_lr, cfg)
    for n, p in leaves.items():
        out[f"final.param.{n}"] = p.detach().clone()
        if n in momentum:
            out[f"final.muon.momentum.{n}"] = momentum[n].clone()
        else:
            out[f"final.adam.m.{n}"] = adamw.state[p]["exp_avg"].clone()
            out[f"final.adam.v.{n}"] = adamw.state[p]["exp_avg_sq"].clone()
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), file_name)
    write_safetensors(path, out, metadata(cfg))
    print(f"wrote {path}: {len(out)} tensors")


def main():
    base = {"name": "muon", "lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1,
            "decay_embeddings": True, "muon_lr": 0.02, "muon_momentum": 0.95, "muon_nesterov": True,
            "muon_ns_steps": 5, "muon_weight_decay": 0.05, "steps": STEPS, "lr_mults": LR_MULTS,
            "grad_scales": GRAD_SCALES}
    if "--bf16" in sys.argv[1:]:
        make("muon_bf16_golden.safetensors", dict(base, muon_ns_dtype="bf16"))
        return
    make("muon_golden.safetensors", base)
    make("muon_plain_golden.safetensors",
         dict(base, muon_nesterov=False, muon_ns_steps=3, muon_weight_decay=0.0))


if __name__ == "__main__":
    main()
