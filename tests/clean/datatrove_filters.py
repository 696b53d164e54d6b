"""lmtrain data clean's four quality filters side by side with datatrove 0.10.1's on the same texts.

Runs `lmtrain data clean` with normalisation, dedup and MinHash off (the filters alone, datatrove's
default thresholds) on the first N documents of the shared 15 MB corpus plus line-split variants of
them (so that the line rules fire), and datatrove's GopherRepetitionFilter, GopherQualityFilter,
C4QualityFilter and FineWebQualityFilter in the same order (FineWeb's) on the same texts. Checks that
the documents removed by each filter agree within a few percent, and prints the disagreements.
Usage: datatrove_filters.py [--docs N]  (env: LMTRAIN_BIN, LMT_SHARED_DATA, LMT_TEST_TMP)
"""
import argparse
import collections
import json
import os
import shutil
import subprocess
import sys

try:
    import spacy  # noqa: F401  (datatrove's English word tokenizer)
except ImportError:
    print("skipped: spaCy is not in the venv; run scripts/venv.sh build clean (it pins spacy)")
    sys.exit(77)

from datatrove.data import Document
from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                        GopherRepetitionFilter)


def corpus(n):
    src = os.path.join(os.environ["LMT_SHARED_DATA"], "corpora", "medium_prose.jsonl")
    docs = []
    with open(src) as f:
        for line in f:
            docs.append(json.loads(line)["text"])
            if len(docs) >= n:
                break
    # Variants that bring each rule near its threshold: the texts cut into lines at sentence ends,
    # into short chunks (web-like), cut to 40-60 words, with repeated paragraphs, bullet lists and
    # numbers mixed in.
    out = []
    for i, t in enumerate(docs):
        t = t[:20000]
        words = t.split()
        lines = t.replace(". ", ".\n").split("\n")
        out.append(t)
        out.append("\n".join(lines))
        out.append("\n".join(" ".join(words[k:k + 6]) for k in range(0, min(len(words), 1000), 6)))
        out.append(" ".join(words[:40 + i % 21]) + ".")
        paras = ["\n".join(lines[k:k + 3]) for k in range(0, min(len(lines), 30), 3)]
        out.append("\n\n".join(paras + paras[: i % 6]))
        out.append("\n".join(("- " if k % 10 < 7 + i % 4 else "") + l for k, l in enumerate(lines[:40])))
        out.append(" ".join(w if k % (3 + i % 5) else w + " " + str(k) for k, w in enumerate(words[:800])))
        out.append("\n".join(lines[:5 + i % 4]))
    return out


def datatrove_reasons(texts):
    filters = [("gopher_repetition", GopherRepetitionFilter()), ("gopher_quality", GopherQualityFilter()),
               ("c4", C4QualityFilter()), ("fineweb", FineWebQualityFilter())]
    reasons = []
    for i, t in enumerate(texts):
        doc = Document(text=t, id=str(i))
        reason = None
        for name, f in filters:
            r = f.filter(doc)
            if r is not True and r is not None:
                ok, why = (r, name) if isinstance(r, bool) else (r[0], r[1])
                if not ok:
                    reason = name + ":" + why
                    break
        reasons.append(reason)
    return reasons


def lmtrain_reasons(texts, tmp):
    inp = os.path.join(tmp, "in.jsonl")
    with open(inp, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    cfg = os.path.join(tmp, "clean.toml")
    with open(cfg, "w") as f:
        f.write("[normalize]\nnfc = false\nwhitespace = false\ncontrol_chars = false\n"
                "[exact_dedup]\nenabled = false\n[minhash]\nenabled = false\n"
                "[output]\nremoved_samples_per_reason = 1000000\n")
    out = os.path.join(tmp, "out")
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([os.environ["LMTRAIN_BIN"], "data", "clean", "--input", inp, "--out", out, "--config", cfg,
                    "--threads", "2", "--json"], check=True, stdout=subprocess.DEVNULL)
    reasons = [None] * len(texts)
    with open(os.path.join(out, "removed_sample.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if j["reason"].startswith("normalize:"):
                j["reason"] = "gopher_repetition:empty"
            reasons[j["doc"]] = j["reason"]
    return reasons


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=60)
    ap.add_argument("--tolerance", type=float, default=0.05, help="max |lmtrain - datatrove| / documents per filter")
    a = ap.parse_args()
    tmp = os.environ.get("LMT_TEST_TMP", "/tmp/lmt_datatrove_filters")
    os.makedirs(tmp, exist_ok=True)
    texts = corpus(a.docs)
    ours, theirs = lmtrain_reasons(texts, tmp), datatrove_reasons(texts)
    n = len(texts)
    by_filter = lambda rs: collections.Counter((r or "kept").split(":")[0] for r in rs)
    co, ct = by_filter(ours), by_filter(theirs)
    same = sum(1 for x, y in zip(ours, theirs) if x == y)
    print(f"{n} documents; same verdict and reason: {same} ({100.0 * same / n:.1f}%)")
    print(f"{'filter':20s} {'lmtrain':>8s} {'datatrove':>9s}")
    ok = True
    for k in sorted(set(co) | set(ct)):
        print(f"{k:20s} {co[k]:8d} {ct[k]:9d}")
        if abs(co[k] - ct[k]) / n > a.tolerance:
            ok = False
    print("reasons, lmtrain / datatrove:")
    for k in sorted(set(ours + theirs) - {None}):
        print(f"  {k:45s} {ours.count(k):5d} {theirs.count(k):5d}")
    diffs = [(i, x, y) for i, (x, y) in enumerate(zip(ours, theirs)) if x != y]
    for i, x, y in diffs[:15]:
        print(f"  doc {i}: lmtrain {x}, datatrove {y}")
    if not ok:
        print(f"FAIL: a filter's removals differ by more than {100 * a.tolerance:.0f}% of the documents")
        return 1
    print("OK: every filter agrees within the tolerance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
