"""Check 1 (docs/INTEROP.md): lmtrain export --format hf, then transformers computes the same logits.

- stories260K (../shared/data/models/stories260K/hf, loaded by lmtrain and exported again): the
  logits of transformers (fp32) on the exported directory equal lmtrain's and reference.json's
  (a float64 NumPy reference) within 1e-4.
- A demo-style model trained by lmtrain (lmt_fixtures.demo_run): its export loads in
  AutoModelForCausalLM with the same logits within 1e-4, and AutoTokenizer on the export encodes
  every golden input (../shared/data/tokenizers/golden/inputs.jsonl) to the ids that
  `lmtrain tokenizer encode` gives with the tokenizer copy inside the checkpoint.
Every lmtrain command runs from a scratch directory, not the one the data was prepared in.
"""
import filecmp
import json
import os
import sys

from hf_common import hf_logits, lmt_logits, max_diff
from lmt_fixtures import demo_run, fresh_dir, lmtrain, shared

TOL = 1e-4


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        sys.exit(1)


def stories():
    ref = json.load(open(shared("models", "stories260K", "reference.json")))
    out = os.path.join(fresh_dir("hf_stories"), "export")
    r = lmtrain("export", "--checkpoint", shared("models", "stories260K", "hf"), "--format", "hf", "--out", out)
    check("no tokenizer" in r.stderr, "stories260K without a tokenizer: exported with a warning")
    ids = ref["input_ids"]
    ours = lmt_logits(out, ids)
    theirs, model = hf_logits(out, ids)
    check(type(model).__name__ == "LlamaForCausalLM", f"stories260K loads as {type(model).__name__}")
    check(max_diff(ours, theirs) < TOL, f"stories260K: lmtrain vs transformers max |diff| {max_diff(ours, theirs):.2e}")
    check(max_diff(theirs, ref["logits"]) < TOL, f"stories260K: transformers vs reference.json {max_diff(theirs, ref['logits']):.2e}")
    check(max_diff(ours, ref["logits"]) < TOL, f"stories260K: lmtrain vs reference.json {max_diff(ours, ref['logits']):.2e}")


def demo():
    from transformers import AutoTokenizer

    run = demo_run()
    out = os.path.join(fresh_dir("hf_demo"), "export")
    lmtrain("export", "--checkpoint", run, "--format", "hf", "--out", out)
    for f in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
              "special_tokens_map.json"):
        check(os.path.exists(os.path.join(out, f)), f"demo export has {f}")
    ckpts = sorted(os.listdir(os.path.join(run, "checkpoints")))
    tok_copy = os.path.join(run, "checkpoints", ckpts[-1], "tokenizer", "tokenizer.json")
    check(os.path.exists(tok_copy), "the demo checkpoint carries its tokenizer")
    inputs = shared("tokenizers", "golden", "inputs.jsonl")
    texts = [json.loads(line)["text"] for line in open(inputs, encoding="utf-8") if line.strip()]
    hf_tok = AutoTokenizer.from_pretrained(out)
    check(type(hf_tok).__name__.endswith("Fast") or "Tokenizers" in type(hf_tok).__name__, f"AutoTokenizer gives {type(hf_tok).__name__}")
    # Two modes: special-token texts (<|endoftext|>) as plain text (lmtrain's default, HF's
    # split_special_tokens=True) and parsed into their ids (lmtrain --special-tokens, HF's default).
    for flags, split in (([], True), (["--special-tokens"], False)):
        r = lmtrain("tokenizer", "encode", "--tokenizer", tok_copy, "--input", inputs, "--json", *flags)
        ours = [json.loads(line)["ids"] for line in r.stdout.splitlines() if line.strip()]
        check(len(ours) == len(texts), f"lmtrain encoded {len(ours)} of {len(texts)} golden inputs")
        bad = [i for i, (t, want) in enumerate(zip(texts, ours))
               if hf_tok(t, add_special_tokens=False, split_special_tokens=split)["input_ids"] != want]
        check(not bad, f"AutoTokenizer (split_special_tokens={split}) encodes all {len(texts)} golden inputs as lmtrain "
                       f"{' '.join(flags) or '(plain)'} does (differ: {bad[:5]})")
    r = lmtrain("tokenizer", "encode", "--tokenizer", tok_copy, "--input", inputs, "--json")
    ours = [json.loads(line)["ids"] for line in r.stdout.splitlines() if line.strip()]
    ids = [i for seq in ours for i in seq][:96]
    a = lmt_logits(run, ids)
    b, model = hf_logits(out, ids)
    check(type(model).__name__ == "LlamaForCausalLM", f"demo model loads as {type(model).__name__}")
    check(max_diff(a, b) < TOL, f"demo: lmtrain vs transformers max |diff| {max_diff(a, b):.2e} over {len(ids)} tokens")


def families(run):
    """Each family's mapping, checked by transformers: small models of the gpt2 and qwen3 presets
    (and an untied llama) trained one step by lmtrain on the demo data, exported, same logits."""
    from lmt_fixtures import SOURCE

    data = os.path.join(os.path.dirname(run), "data")
    small = {"model.n_layers": 2, "model.d_model": 64, "model.n_heads": 4, "model.head_dim": 16, "model.ffn_hidden": 96,
             "model.max_seq_len": 64}
    cases = [("gpt2-124m", {"model.n_kv_heads": 4}, "GPT2LMHeadModel"),
             ("qwen3-1.8b", {"model.n_kv_heads": 2, "model.tied_embeddings": "true"}, "Qwen3ForCausalLM"),
             ("qwen3-1.8b", {"model.n_kv_heads": 2, "model.tied_embeddings": "false"}, "Qwen3ForCausalLM"),
             ("tiny", {"model.n_kv_heads": 2, "model.tied_embeddings": "false", "model.rope_theta": 500000.0}, "LlamaForCausalLM")]
    ids = list(range(3, 60, 2))
    ckpts = sorted(os.listdir(os.path.join(run, "checkpoints")))
    tok = os.path.join(run, "checkpoints", ckpts[-1], "tokenizer", "tokenizer.json")
    for i, (preset, extra, arch) in enumerate(cases):
        work = fresh_dir(f"hf_family_{i}")
        args = ["train", "--config", os.path.join(SOURCE, "configs", "demo.toml"), "--run-dir", os.path.join(work, "run")]
        for k, v in {"model.preset": preset, **small, **extra, "data.path": data, "train.max_steps": 1, "train.micro_batch": 2,
                     "train.seq_len": 32, "eval.every": 0, "schedule.warmup_steps": 0, "train.dtype": "fp32"}.items():
            args += ["--set", f"{k}={v}"]
        lmtrain(*args)
        out = os.path.join(work, "export")
        lmtrain("export", "--checkpoint", os.path.join(work, "run"), "--format", "hf", "--out", out)
        check(filecmp.cmp(os.path.join(out, "tokenizer.json"), tok, shallow=False),
              f"{preset} {extra}: the export carries the demo data's tokenizer (from the checkpoint's copy)")
        a = lmt_logits(os.path.join(work, "run"), ids)
        b, model = hf_logits(out, ids)
        check(type(model).__name__ == arch, f"{preset} {extra}: loads as {type(model).__name__}")
        check(max_diff(a, b) < TOL, f"{preset} {extra}: lmtrain vs transformers max |diff| {max_diff(a, b):.2e}")


def relative_paths():
    """`data prepare --tokenizer tok.json` (relative) in one directory, train there, then use the run
    from another directory after the original tokenizer is gone: the checkpoint's copy serves."""
    import subprocess
    from lmt_fixtures import LMTRAIN, SOURCE

    a = fresh_dir("hf_rel_a")
    corpus = shared("corpora", "tinyshakespeare.txt")

    def run(cwd, *args):
        r = subprocess.run([LMTRAIN, *map(str, args)], cwd=cwd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stdout + r.stderr)
        return r

    check(run(a, "tokenizer", "train", "--input", corpus, "--vocab-size", 300, "--out", "tok.json").returncode == 0, "tokenizer trained")
    check(run(a, "data", "prepare", "--tokenizer", "tok.json", "--input", corpus, "--out", "data").returncode == 0, "data prepared")
    manifest = json.load(open(os.path.join(a, "data", "manifest.json")))
    check(os.path.isabs(manifest["tokenizer"]["path"]), f"the manifest records an absolute tokenizer path ({manifest['tokenizer']['path']})")
    check(run(a, "train", "--config", os.path.join(SOURCE, "configs", "demo.toml"), "--run-dir", "run", "--set", "data.path=data",
              "--set", "train.max_steps=2", "--set", "train.micro_batch=2", "--set", "train.seq_len=32", "--set", "eval.every=0",
              "--set", "schedule.warmup_steps=1").returncode == 0, "trained 2 steps")
    os.rename(os.path.join(a, "tok.json"), os.path.join(a, "tok.json.moved"))
    b = fresh_dir("hf_rel_b")
    g = run(b, "generate", "--checkpoint", os.path.join(a, "run"), "--prompt", "To be", "--max-tokens", 4, "--temperature", 0)
    check(g.returncode == 0, "generate --prompt from another directory, the original tokenizer gone: " + g.stderr[-200:])
    out = os.path.join(b, "export")
    e = run(b, "export", "--checkpoint", os.path.join(a, "run"), "--format", "hf", "--out", out)
    check(e.returncode == 0 and os.path.exists(os.path.join(out, "tokenizer.json")), "export takes the checkpoint's tokenizer copy")


if __name__ == "__main__":
    os.chdir(fresh_dir("hf_cwd"))  # nothing may depend on where the data was prepared
    stories()
    demo()
    families(demo_run())
    relative_paths()
    print("check 1 passed")
