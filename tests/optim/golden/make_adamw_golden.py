#!/usr/bin/python3
"""Golden reference for lmtrain's AdamW: torch.optim.AdamW over the tiny layout, two param groups.

Writes adamw_golden.safetensors beside this script: the initial parameters ("init.<name>"), the
gradients of every step before scaling ("grad<k>.<name>", k = 1..5) and the final parameters and
moments ("final.param.<name>", "final.adam.m.<name>", "final.adam.v.<name>"); the metadata holds
the hyper-parameters, the per-step lr multipliers and grad scales, and the layout.

Groups as lmtrain forms them with decay_embeddings = false: 2-D block matrices decay; embeddings,
positions, the LM head, norms and biases do not. Each step sets the groups' lr to lr · lr_mult (in
float32) and multiplies the gradients by grad_scale first, as Optimizer::step does.

Run with Debian's PyTorch: /usr/bin/python3 tests/optim/golden/make_adamw_golden.py
"""
import os

import numpy as np
import torch

from optim_golden_common import (GRAD_SCALES, LAYOUT, LR_MULTS, STEPS, f32, initial_params,
                                 metadata, step_grads, write_safetensors)

CONFIG = {"name": "adamw", "lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1,
          "decay_embeddings": False, "steps": STEPS, "lr_mults": LR_MULTS, "grad_scales": GRAD_SCALES}


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(6)
    params = initial_params(rng)
    out = {f"init.{n}": t.clone() for n, t in params.items()}
    leaves = {n: torch.nn.Parameter(t.clone()) for n, t in params.items()}
    decay = [leaves[n] for n, _, role in LAYOUT if role == "matrix"]
    no_decay = [leaves[n] for n, _, role in LAYOUT if role != "matrix"]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": f32(CONFIG["weight_decay"])},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=f32(CONFIG["lr"]), betas=(f32(CONFIG["beta1"]), f32(CONFIG["beta2"])), eps=f32(CONFIG["eps"]),
        foreach=False)
    for k in range(STEPS):
        grads = step_grads(rng)
        lr = float(np.float32(CONFIG["lr"]) * np.float32(LR_MULTS[k]))
        gs = torch.tensor(GRAD_SCALES[k], dtype=torch.float32)
        for group in opt.param_groups:
            group["lr"] = lr
        for n, g in grads.items():
            out[f"grad{k + 1}.{n}"] = g.clone()
            leaves[n].grad = g * gs
        opt.step()
    for n, p in leaves.items():
        state = opt.state[p]
        out[f"final.param.{n}"] = p.detach().clone()
        out[f"final.adam.m.{n}"] = state["exp_avg"].clone()
        out[f"final.adam.v.{n}"] = state["exp_avg_sq"].clone()
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "adamw_golden.safetensors")
    write_safetensors(path, out, metadata(CONFIG))
    print(f"wrote {path}: {len(out)} tensors")


if __name__ == "__main__":
    main()
