"""Issue #16, check 4: `lmtrain eval` and lm-evaluation-harness (its hf backend, the same model
directory) give the same per-item, per-choice log-likelihoods (|diff| <= 1e-4, or four float32
ulps of lm-eval's float32 sum where that is larger: |logL| >= 512) and the same accuracies on
ARC-Easy, PIQA and HellaSwag (docs/INTEROP.md (lm-eval-harness parity)).

    scripts/venv_run.sh BUILD interop tests/interop/test_lm_eval.py [--model HF_DIR] [--items N]

lm-eval reads the shared eval files through local task configs written at test time
(docs/INTEROP.md (lm-eval-harness parity)): each `include:`s lm-eval's own task YAML (arc/arc_easy.yaml,
piqa/piqa.yaml, hellaswag/hellaswag.yaml), so the prompt templates, target delimiter and metrics are
lm-eval's; only the data source changes (`dataset_path: json`, the shared file) plus a
`process_docs` that maps the file's fields onto the fields lm-eval's template reads. lmtrain reads
the same shared files with its own parsers (`lmtrain eval --task T --data FILE --limit N`).

Checked per item: lmtrain's context and choice texts equal lm-eval's request arguments exactly; the
gold index; every choice's log-likelihood within 1e-4; the continuation token counts equal what the
HF tokenizer gives (lm-eval's encode(context + choice) minus encode(context)); the acc / acc_norm
predictions (lm-eval's acc_norm = lmtrain's acc_norm_char). Then the task accuracies. Also: lmtrain's
tokenizer (the model directory's tokenizer.json) encodes every context and context + choice to the
same ids as the HF tokenizer (AutoTokenizer) does.
"""
import argparse
import json
import os
import sys
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lmt_fixtures import TMP, fresh_dir, lmtrain, shared, skip  # noqa: E402

TOL = 1e-4


def tolerance(ll):
    """1e-4, or four float32 ulps of the value where that is larger: lm-eval's hf backend sums the
    token log-probs in float32 and returns that float32. Each addition of that sum rounds to the
    partial sum's spacing (6.1e-5 at |ll| in [512, 1024)), so a continuation of a hundred tokens or
    more carries a few ulps of rounding (seen: 1.33e-4 = 2.2 ulps at ll = -1012.86). Only very long
    or very unlikely continuations reach |ll| >= 512."""
    import numpy as np
    return max(TOL, 4 * float(np.spacing(np.float32(abs(ll)))))

# task -> (shared file, lm-eval YAML to include, process_docs in lmt_utils.py)
TASKS = {
    "arc_easy": (("eval", "arc", "arc_easy.llmfoundry.jsonl"), "arc/arc_easy.yaml", "arc_docs"),
    "piqa": (("eval", "piqa", "valid.jsonl"), "piqa/piqa.yaml", "piqa_docs"),
    "hellaswag": (("eval", "hellaswag", "hellaswag_val.llamacpp.jsonl"), "hellaswag/hellaswag.yaml", "hellaswag_docs"),
}

# process_docs for the local task configs: the shared files' fields -> the fields lm-eval's own task
# templates read (the Hugging Face datasets allenai/ai2_arc, baber/piqa and Rowan/hellaswag).
UTILS = '''
import datasets
from lm_eval.tasks.hellaswag import utils as hellaswag_utils

PIQA_LABELS = {piqa_labels!r}
LIMIT = {limit!r}  # lm-eval scores the first LIMIT docs; only those are converted


def head(ds):
    return ds.select(range(min(LIMIT, len(ds))))


def arc_docs(ds: datasets.Dataset) -> datasets.Dataset:
    # llm-foundry {{"query": "Question: ...", "choices": [...], "gold": i}} -> ai2_arc's
    # {{"question", "choices": {{"text", "label"}}, "answerKey"}} (the labels are lost: A, B, C, ...).
    def to_ai2(doc):
        q = doc["query"]
        q = q[len("Question: "):] if q.startswith("Question: ") else q
        labels = [chr(ord("A") + i) for i in range(len(doc["choices"]))]
        return {{"question": q, "choices": {{"text": list(doc["choices"]), "label": labels}},
                "answerKey": labels[doc["gold"]]}}
    ds = head(ds)
    return ds.map(to_ai2, remove_columns=ds.column_names)


def piqa_docs(ds: datasets.Dataset) -> datasets.Dataset:
    # The canonical valid.jsonl has no labels: they are the line-aligned valid-labels.lst.
    with open(PIQA_LABELS) as f:
        labels = [int(line) for line in f.read().split()]
    assert len(labels) == len(ds), (len(labels), len(ds))
    return head(ds).map(lambda doc, i: {{"label": labels[i]}}, with_indices=True)


def hellaswag_docs(ds: datasets.Dataset) -> datasets.Dataset:
    # The llama.cpp conversion has the joined "ctx" (ctx_a + " " + ctx_b, ctx_b not capitalised):
    # ctx_a = ctx, ctx_b = "" then lm-eval's own hellaswag process_docs (preprocess, query, choices).
    ds = head(ds).map(lambda doc: {{"ctx_a": doc["ctx"], "ctx_b": ""}})
    return hellaswag_utils.process_docs(ds)
'''


def lm_eval_dir():
    import lm_eval
    return os.path.dirname(lm_eval.__file__)


def labels_path(path):
    """PIQA's line-aligned labels file beside its data file (valid.jsonl -> valid-labels.lst)."""
    return path[:-len(".jsonl")] + "-labels.lst"


# The choice texts of one raw line of each shared file (before the leading space and, for
# HellaSwag, lm-eval's preprocess, which only removes characters).
CHOICES = {"arc_easy": lambda d: d["choices"], "piqa": lambda d: [d["sol1"], d["sol2"]], "hellaswag": lambda d: d["endings"]}


def data_files(model, n, work):
    """task -> the data file both tools read: the shared file, or, where a choice of one of the first
    n items does not fit the model's positions (neither tool can score a continuation longer than
    max_position_embeddings: lmtrain refuses, lm-eval asserts), a copy of the first n items that fit,
    written under `work` in the same format (PIQA with its labels file). Printed when it happens."""
    from transformers import AutoConfig, AutoTokenizer
    cfg = AutoConfig.from_pretrained(model)
    max_len = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions")
    tok = AutoTokenizer.from_pretrained(model)
    out = {}
    for task, (parts, _, _) in TASKS.items():
        path = shared(*parts)
        with open(path, encoding="utf-8") as f:
            lines = [line for line in f.read().split("\n") if line.strip()]
        labels = None
        if task == "piqa":
            with open(labels_path(path)) as f:
                labels = f.read().split()
        keep, dropped = [], []
        for i, line in enumerate(lines):
            if len(keep) == n:
                break
            # +4: the boundary with the context can add a token; the margin only drops more.
            longest = max(len(tok(" " + c, add_special_tokens=False).input_ids) for c in CHOICES[task](json.loads(line)))
            (keep if longest + 4 <= max_len else dropped).append(i)
        if not dropped:
            out[task] = path
            continue
        print(f"{task}: items {dropped} (0-based lines of {path}) are left out: a choice is longer than the model's "
              f"{max_len} positions")
        os.makedirs(os.path.join(work, task), exist_ok=True)
        out[task] = os.path.join(work, task, os.path.basename(path))
        with open(out[task], "w", encoding="utf-8") as f:
            f.writelines(lines[i] + "\n" for i in keep)
        if labels is not None:
            with open(labels_path(out[task]), "w") as f:
                f.writelines(labels[i] + "\n" for i in keep)
    return out


def write_task_configs(root, limit, files):
    """The local task directory: lmt_utils.py and one lmt_<task>.yaml per task (absolute paths)."""
    with open(os.path.join(root, "lmt_utils.py"), "w") as f:
        f.write(UTILS.format(piqa_labels=labels_path(files["piqa"]), limit=limit))
    for task, (parts, include, docs_fn) in TASKS.items():
        yaml = textwrap.dedent(f"""\
            include: {os.path.join(lm_eval_dir(), "tasks", include)}
            task: lmt_{task}
            tag: null
            dataset_path: json
            dataset_name: null
            dataset_kwargs:
              data_files:
                test: {json.dumps(files[task])}
            training_split: null
            validation_split: null
            test_split: test
            process_docs: !function lmt_utils.{docs_fn}
            """)
        with open(os.path.join(root, f"lmt_{task}.yaml"), "w") as f:
            f.write(yaml)


def model_dir():
    """The Hugging Face model directory both tools evaluate: `lmtrain export --format hf` of a
    demo-style run trained by lmtrain (lmt_fixtures.demo_run(300), shared with the GGUF check), with
    the tokenizer its checkpoint carries."""
    out = os.path.join(fresh_dir("lm_eval_model"), "hf")
    from lmt_fixtures import demo_run
    lmtrain("export", "--checkpoint", demo_run(300), "--format", "hf", "--out", out)
    assert os.path.exists(os.path.join(out, "tokenizer.json")), f"the export {out} has no tokenizer.json"
    print(f"model: lmtrain export --format hf of the demo run -> {out}")
    return out


def run_lm_eval(model, n, task_dir):
    import lm_eval
    from lm_eval.tasks import TaskManager
    tm = TaskManager(include_path=task_dir, include_defaults=False)
    res = lm_eval.simple_evaluate(model="hf", model_args=f"pretrained={model},dtype=float32",
                                  tasks=[f"lmt_{t}" for t in TASKS], task_manager=tm, num_fewshot=0,
                                  batch_size=8, device="cpu", limit=n, log_samples=True,
                                  random_seed=0, numpy_random_seed=0, torch_random_seed=0)
    return res


def run_lmtrain(model, task, data, n, out):
    r = lmtrain("eval", "--checkpoint", model, "--task", task, "--data", data, "--limit", n, "--json",
                "--items-out", out)
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    with open(out) as f:
        items = [json.loads(line) for line in f]
    return summary, items


def check_tokenizer(model, texts, work):
    """lmtrain's tokenizer (the directory's tokenizer.json) encodes like the HF tokenizer."""
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(model)
    path = os.path.join(work, "texts.jsonl")
    with open(path, "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    r = lmtrain("tokenizer", "encode", "--tokenizer", os.path.join(model, "tokenizer.json"), "--input", path, "--json")
    ours = [json.loads(line)["ids"] for line in r.stdout.splitlines() if line.strip()]
    assert len(ours) == len(texts), (len(ours), len(texts))
    bad = [(t, o, hf(t, add_special_tokens=False).input_ids) for t, o in zip(texts, ours)
           if o != hf(t, add_special_tokens=False).input_ids]
    for t, o, h in bad[:3]:
        print(f"  tokenizer mismatch on {t!r}:\n    lmtrain {o}\n    HF      {h}")
    assert not bad, f"{len(bad)} of {len(texts)} texts encode differently"
    print(f"tokenizer: {len(texts)} texts encode to the same ids in lmtrain and AutoTokenizer")
    return hf


def compare(task, samples, summary, items, res, hf, n):
    """Per-item and per-task comparison; returns the largest |diff| of a log-likelihood."""
    samples = sorted(samples, key=lambda s: s["doc_id"])
    assert len(samples) == len(items) == n, (task, len(samples), len(items), n)
    worst, near_ties, over_abs, errors = 0.0, 0, 0, []
    for s, it in zip(samples, items):
        i = s["doc_id"]
        assert it["index"] == i, (task, it["index"], i)
        args = [tuple(a) for a in s["arguments"]]
        ours = [(it["context"], c) for c in it["choices"]]
        if args != ours:
            errors.append(f"item {i}: prompt texts differ\n  lm-eval {args}\n  lmtrain {ours}")
            continue
        if s["target"] != it["gold"]:
            errors.append(f"item {i}: gold {s['target']} (lm-eval) vs {it['gold']} (lmtrain)")
        lls = [float(r[0]) for r in s["filtered_resps"]]
        for c, (a, b) in enumerate(zip(lls, it["logprob"])):
            worst = max(worst, abs(a - b))
            over_abs += abs(a - b) > TOL
            if abs(a - b) > tolerance(a):
                errors.append(f"item {i} choice {c}: log-likelihood {a!r} (lm-eval) vs {b!r} (lmtrain)")
        # lm-eval's continuation ids: encode(context + choice) minus encode(context) (no BOS).
        for c, (ctx, cont) in enumerate(ours):
            whole = hf(ctx + cont, add_special_tokens=False).input_ids
            ntok = len(whole) - len(hf(ctx, add_special_tokens=False).input_ids)
            if ntok != it["tokens"][c]:
                errors.append(f"item {i} choice {c}: {it['tokens'][c]} continuation tokens (lmtrain) vs {ntok} (HF)")
        # Per-item metrics: lm-eval's acc / acc_norm against lmtrain's pred / pred_norm_char. A
        # disagreement is only tolerated where lm-eval's own top two are closer than the tolerance.
        chars = [len(t) for t in (c[1:] if c.startswith(" ") else c for c in it["choices"])]
        assert chars == it["chars"], (task, i, chars, it["chars"])
        for metric, pred, div in (("acc", it["pred"], [1] * len(lls)), ("acc_norm", it["pred_norm_char"], chars)):
            if s[metric] != float(pred == it["gold"]):
                v = sorted((ll / d for ll, d in zip(lls, div)), reverse=True)
                if v[0] - v[1] <= 2 * tolerance(v[0]):
                    near_ties += 1
                else:
                    errors.append(f"item {i}: {metric} {s[metric]} (lm-eval) vs pred {pred}, gold {it['gold']} (lmtrain)")
    for e in errors[:10]:
        print("  " + e)
    assert not errors, f"{task}: {len(errors)} mismatches"
    r = res["results"][f"lmt_{task}"]
    print(f"{task}: {n} items, max |dlogL| = {worst:.2e}; acc lm-eval {r['acc,none']:.4f} lmtrain {summary['acc']:.4f}; "
          f"acc_norm lm-eval {r['acc_norm,none']:.4f} lmtrain acc_norm_char {summary['acc_norm_char']:.4f}"
          + (f" ({near_ties} near-ties)" if near_ties else "")
          + (f"; {over_abs} log-likelihoods differ by more than {TOL}, all within 4 float32 ulps of lm-eval's value"
             if over_abs else ""))
    if not near_ties:
        assert abs(r["acc,none"] - summary["acc"]) < 1e-12, (task, r["acc,none"], summary["acc"])
        assert abs(r["acc_norm,none"] - summary["acc_norm_char"]) < 1e-12, (task, r["acc_norm,none"], summary["acc_norm_char"])
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a Hugging Face model directory (default: model_dir())")
    ap.add_argument("--items", type=int, default=int(os.environ.get("LMT_LMEVAL_ITEMS", 300)), help="items per task")
    args = ap.parse_args()
    try:
        import lm_eval  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        skip(f"{e}; run scripts/venv.sh BUILD interop")
    os.environ.setdefault("HF_HOME", os.path.join(TMP, "hf_home"))  # the datasets cache stays in the build tree
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    for parts, _, _ in TASKS.values():
        shared(*parts)
    model = args.model or model_dir()
    work = fresh_dir("lm_eval_work")
    task_dir = os.path.join(work, "tasks")
    os.makedirs(task_dir)
    files = data_files(model, args.items, work)
    write_task_configs(task_dir, args.items, files)
    res = run_lm_eval(model, args.items, task_dir)
    outs = {t: run_lmtrain(model, t, files[t], args.items, os.path.join(work, f"{t}.items.jsonl")) for t in TASKS}
    texts = sorted({t for _, items in outs.values() for it in items
                    for t in [it["context"]] + [it["context"] + c for c in it["choices"]]})
    hf = check_tokenizer(model, texts, work)
    worst = max(compare(t, res["samples"][f"lmt_{t}"], *outs[t], res, hf, args.items) for t in TASKS)
    print(f"OK: lmtrain eval == lm-eval on {len(TASKS)} tasks x {args.items} items (max |dlogL| {worst:.2e})")


if __name__ == "__main__":
    main()
