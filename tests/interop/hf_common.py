"""Helpers of the Hugging Face checks: lmtrain's logits and transformers' logits for the same ids."""
import json
import os

import numpy as np

from lmt_fixtures import TMP, lmtrain


def lmt_logits(checkpoint, ids):
    """lmtrain's logits [T, V] after each id (`lmtrain logits`), as float64."""
    out = os.path.join(TMP, "logits.json")
    os.makedirs(TMP, exist_ok=True)
    if os.path.exists(out):
        os.remove(out)
    lmtrain("logits", "--checkpoint", checkpoint, "--ids", ",".join(map(str, ids)), "--out", out)
    with open(out) as f:
        return np.array(json.load(f)["logits"], dtype=np.float64)


def hf_logits(path, ids, dtype=None):
    """transformers' logits [T, V] of the exported directory, loaded with no extra code."""
    import torch
    from transformers import AutoModelForCausalLM

    kwargs = {"dtype": dtype} if dtype is not None else {}
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    model.eval()
    with torch.no_grad():
        out = model(torch.tensor([ids], dtype=torch.long)).logits[0]
    return out.to(torch.float64).numpy(), model


def max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))
