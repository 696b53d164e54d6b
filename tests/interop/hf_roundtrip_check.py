"""Check 3 and the export dtypes (docs/INTEROP.md).

- Round trip: stories260K's HF weights -> `lmtrain train` with model.init_from (one real optimizer
  step whose learning rate is 0: warmup starts at lr 0) -> `lmtrain export --format hf`: every
  tensor is bit-identical to the source (bytes compared through safetensors).
- bf16 / f16 exports load in transformers as bfloat16 / float16, and their tensors equal torch's own
  rounding of the f32 weights bit for bit.
- A sharded export (--max-shard-size 100KB) writes model-0000i-of-0000N.safetensors + index and
  loads with the same logits as the single-file export.
"""
import json
import os
import sys

import numpy as np

from hf_common import hf_logits, max_diff
from lmt_fixtures import fresh_dir, lmtrain, shared

HF = None


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        sys.exit(1)


def tensors(path):
    from safetensors import safe_open

    out = {}
    with safe_open(path, "pt") as f:
        for k in f.keys():
            out[k] = f.get_tensor(k)
    return out


def roundtrip(work):
    cfg = json.load(open(os.path.join(HF, "config.json")))
    corpus = shared("corpora", "tinyshakespeare.txt")
    tok = os.path.join(work, "tok512.json")
    lmtrain("tokenizer", "train", "--input", corpus, "--vocab-size", 512, "--out", tok)
    lmtrain("data", "prepare", "--tokenizer", tok, "--input", corpus, "--out", os.path.join(work, "data"), "--val-fraction", 0)
    run = os.path.join(work, "run")
    sets = {"model.preset": "tiny", "model.init_from": HF, "model.vocab_size": cfg["vocab_size"],
            "model.max_seq_len": cfg["max_position_embeddings"], "model.n_layers": cfg["num_hidden_layers"],
            "model.d_model": cfg["hidden_size"], "model.n_heads": cfg["num_attention_heads"],
            "model.n_kv_heads": cfg["num_key_value_heads"], "model.head_dim": cfg["head_dim"],
            "model.ffn_hidden": cfg["intermediate_size"], "model.tied_embeddings": "true",
            "data.path": os.path.join(work, "data"), "train.max_steps": 1, "train.micro_batch": 2, "train.seq_len": 64,
            # One real step (forward, backward, AdamW) whose lr is exactly 0: wsd decaying over the
            # whole 1-step run to min_ratio 0. A foreign tokenizer makes the loss high: no divergence skip.
            "schedule.kind": "wsd", "schedule.decay_fraction": 1, "schedule.min_ratio": 0, "schedule.warmup_steps": 0,
            "stability.loss_margin": 1e6, "eval.every": 0, "checkpoint.every": 1, "train.dtype": "fp32"}
    def train_args(run_dir, **extra):
        args = ["train", "--config", os.path.join(os.environ.get("LMT_SOURCE_DIR", "."), "configs", "demo.toml"),
                "--run-dir", run_dir]
        for k, v in {**sets, **extra}.items():
            args += ["--set", f"{k}={v}"]
        return args

    lmtrain(*train_args(run))
    rec = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if '"loss"' in l]
    check(len(rec) == 1 and rec[0]["step"] == 1 and rec[0]["lr"] == 0 and "skipped" not in rec[0] and rec[0]["grad_norm"] > 0,
          f"one real optimizer step with lr 0 (metrics: step {rec[0].get('step')}, lr {rec[0].get('lr')}, "
          f"grad_norm {rec[0].get('grad_norm')}, skipped {rec[0].get('skipped')})")
    out = os.path.join(work, "export")
    lmtrain("export", "--checkpoint", run, "--format", "hf", "--out", out)
    a, b = tensors(os.path.join(HF, "model.safetensors")), tensors(os.path.join(out, "model.safetensors"))
    check(sorted(a) == sorted(b), f"round trip: the same {len(a)} tensor names")
    differ = [k for k in a if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape
              or a[k].numpy().tobytes() != b[k].numpy().tobytes()]
    check(not differ, f"round trip HF -> model.init_from -> export: every tensor bit-identical (differ: {differ[:5]})")
    # The mismatch message: a model.* key that changes a shape.
    bad = lmtrain(*train_args(os.path.join(work, "run_bad"), **{"model.ffn_hidden": 160}), check=False)
    check(bad.returncode != 0 and "model.init_from" in bad.stderr and "[172,64]" in bad.stderr.replace(" ", "") and
          "[160,64]" in bad.stderr.replace(" ", ""), "a shape mismatch names the tensor and both shapes: " +
          next((l for l in bad.stderr.splitlines() if "init_from" in l), bad.stderr[-300:]))


def dtypes(work):
    import torch

    ref = tensors(os.path.join(HF, "model.safetensors"))
    ids = json.load(open(shared("models", "stories260K", "reference.json")))["input_ids"]
    f32_logits, _ = hf_logits(HF, ids, dtype=torch.float32)
    for name, dt in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        out = os.path.join(work, name)
        lmtrain("export", "--checkpoint", HF, "--format", "hf", "--out", out, "--dtype", name)
        cfg = json.load(open(os.path.join(out, "config.json")))
        _, model = hf_logits(out, ids, dtype="auto")
        check(model.dtype == dt, f"{name} export loads with dtype='auto' as {model.dtype} (config dtype {cfg.get('dtype')})")
        got = tensors(os.path.join(out, "model.safetensors"))
        differ = [k for k in ref if got[k].dtype != dt or not torch.equal(got[k].view(torch.int16), ref[k].to(dt).view(torch.int16))]
        check(not differ, f"{name} tensors equal torch's rounding of the f32 weights bit for bit (differ: {differ[:3]})")
    out = os.path.join(work, "sharded")
    lmtrain("export", "--checkpoint", HF, "--format", "hf", "--out", out, "--max-shard-size", "100KB")
    shards = sorted(f for f in os.listdir(out) if f.startswith("model-"))
    index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
    check(len(shards) > 1 and not os.path.exists(os.path.join(out, "model.safetensors")) and
          sorted(set(index["weight_map"].values())) == shards, f"sharded export: {len(shards)} shards + index")
    from safetensors import safe_open

    def fits(s):  # at most 100KB of tensor data, unless the shard is one tensor larger than that
        with safe_open(os.path.join(out, s), "pt") as f:
            sizes = [f.get_slice(k).get_shape() for k in f.keys()]
        nbytes = sum(4 * int(np.prod(x)) for x in sizes)
        return nbytes <= 100_000 or len(sizes) == 1
    check(all(fits(s) for s in shards), "each shard holds at most 100KB of tensors (or one larger tensor)")
    logits, _ = hf_logits(out, ids, dtype=torch.float32)
    check(max_diff(logits, f32_logits) == 0.0, "the sharded export computes the same logits")
    exists = lmtrain("export", "--checkpoint", HF, "--format", "hf", "--out", out, check=False)
    check(exists.returncode != 0 and "already exists" in exists.stderr, "an existing --out is refused")


def families(work):
    """Randomly initialised transformers models of each family (save_pretrained) -> lmtrain export:
    every tensor bit-identical and the architecture kept, and lmtrain's logits on the source equal
    transformers' within 1e-4. Covers the mappings no lmtrain recipe key reaches (Qwen2's q/k/v
    biases, Llama's attention_bias and mlp_bias)."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, Qwen2Config, Qwen3Config

    from hf_common import lmt_logits

    common = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64)
    cases = [("Qwen2ForCausalLM", Qwen2Config(**common, tie_word_embeddings=False)),
             ("Qwen3ForCausalLM", Qwen3Config(**common, head_dim=8, tie_word_embeddings=True)),
             ("LlamaForCausalLM", LlamaConfig(**common, attention_bias=True, mlp_bias=True, tie_word_embeddings=False)),
             ("GPT2LMHeadModel", GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64))]
    ids = list(range(1, 90, 3))
    for i, (arch, cfg) in enumerate(cases):
        torch.manual_seed(i)
        cfg.architectures = [arch]
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()  # GPT-2's dropout off
        with torch.no_grad():  # biases and norms start at 0/1: make them non-trivial
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        src = os.path.join(work, f"family_{i}")
        model.save_pretrained(src)
        out = os.path.join(work, f"family_{i}_export")
        lmtrain("export", "--checkpoint", src, "--format", "hf", "--out", out, "--tokenizer", "none")
        a, b = tensors(os.path.join(src, "model.safetensors")), tensors(os.path.join(out, "model.safetensors"))
        a = {k: v for k, v in a.items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
        differ = [k for k in a if k not in b or a[k].numpy().tobytes() != b[k].numpy().tobytes()] + [k for k in b if k not in a]
        check(not differ, f"{arch}: save_pretrained -> lmtrain export, all {len(a)} tensors bit-identical (differ: {differ[:4]})")
        check(json.load(open(os.path.join(out, "config.json")))["architectures"] == [arch], f"{arch}: architecture kept")
        ours = lmt_logits(src, ids)
        with torch.no_grad():
            theirs = model(torch.tensor([ids])).logits[0].double().numpy()
        check(max_diff(ours, theirs) < 1e-4, f"{arch}: lmtrain vs transformers max |diff| {max_diff(ours, theirs):.2e}")


if __name__ == "__main__":
    HF = shared("models", "stories260K", "hf")
    work = fresh_dir("hf_roundtrip")
    os.chdir(work)
    roundtrip(work)
    dtypes(work)
    families(work)
    print("check 3 passed")
