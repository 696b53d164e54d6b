#!/usr/bin/env python3
"""datatrove's MinHash deduplication on a JSONL corpus, to compare with lmtrain's (issue #17).

Runs datatrove's four MinHash stages (signature, buckets, cluster, filter) with FineWeb's settings,
the same as lmtrain's defaults: word 5-grams, 14 buckets x 8 hashes (112), seed 1, 64-bit xxhash
shingles. Prints one JSON object: the documents datatrove removes (line index in the input and
`id`), every cluster (line indices), and the settings. It times nothing.

Run from the venv that `scripts/venv.sh build clean` makes:
  build/venv/bin/python bench/clean_datatrove.py [--input ../shared/data/corpora/medium_prose.jsonl]
      [--norm datatrove|none] [--out removed.json]
medium_prose.jsonl (296 long documents) has no near-duplicates at these settings (datatrove removes
none), so for a comparison that exercises the S-curve, first derive a corpus with planted variants
and run both tools on it:
  build/venv/bin/python bench/clean_datatrove.py --make-variants /tmp/prose_variants.jsonl
  build/venv/bin/python bench/clean_datatrove.py --input /tmp/prose_variants.jsonl --out dt.json
  lmtrain data clean --input /tmp/prose_variants.jsonl ...
The variants are copies of the first 80 documents with 0.5%, 2%, 5% or 10% of their words replaced
(seeded), ids `<id>#v<percent>`, appended after the originals: word-5-gram Jaccard about 0.95,
0.82, 0.63 and 0.42 with their original (the `jaccard` field of each variant, computed exactly).

--filters: the whole of `lmtrain data clean`'s default rule settings, timed, for
scripts/bench_clean.sh (docs/PERFORMANCE.md, "Data cleaning"): GopherRepetitionFilter,
GopherQualityFilter, C4QualityFilter and FineWebQualityFilter with their class defaults (which are
lmtrain's defaults, docs/DATA_CLEAN.md) in FineWeb's order, then the four MinHash stages above on the
documents that pass (C4's line removal applied), all in this one process with one worker
(LocalPipelineExecutor, workers=1). Prints one JSON object: documents removed per filter (and per
datatrove reason) and by MinHash, the wall seconds of the pipeline (imports and interpreter start
left out; `import_seconds` says what they took), and the process's peak RSS (ru_maxrss):
  build/venv/bin/python bench/clean_datatrove.py --filters [--input ...] [--norm none]
The filters use datatrove's own English word tokenizer (spaCy, in the venv group `clean`).

Differences from lmtrain to keep in mind when comparing (docs/DATA_CLEAN_MINHASH.md):
- Words. datatrove's English word tokenizer needs spaCy, which the venv does not have; this script
  gives datatrove a whitespace tokenizer instead, which is what lmtrain's `word` unit is.
- Normalisation. `--norm datatrove` (default) applies datatrove's `simplify_text` (lower case,
  punctuation removed, numbers -> 0, diacritics removed, whitespace collapsed) before shingling, as
  FineWeb does; `--norm none` shingles the raw text, as lmtrain's `minhash_signature` does with
  text that was not normalised that way.
- Hashes. The permutation parameters come from numpy's RandomState(seed) in datatrove and from a
  splitmix64 stream in lmtrain, so individual borderline pairs (Jaccard near the S-curve's middle,
  ~0.6-0.8) can fall differently; both follow the same S-curve 1-(1-s^8)^14.
- Short texts. datatrove writes no signature for a text with fewer than 5 words (it is never a
  duplicate); lmtrain makes one shingle of the whole text, so identical short texts do cluster.
- Which member is kept. datatrove's union-find keeps the root of a union by size, lmtrain keeps the
  smallest index. The set of clusters and the number removed are comparable; the removed indices
  of clusters with 3+ members can differ.
"""
import argparse
import json
import os
import resource
import struct
import sys
import tempfile
import time

_T_IMPORT = time.monotonic()

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (
    MinhashConfig,
    MinhashDedupBuckets,
    MinhashDedupCluster,
    MinhashDedupFilter,
    MinhashDedupSignature,
)
from datatrove.data import Document
from datatrove.pipeline.base import PipelineStep
from datatrove.utils.hashing import HashConfig
from datatrove.utils.text import TextNormConfig
from datatrove.utils.word_tokenizers import WordTokenizer


class WhitespaceTokenizer(WordTokenizer):
    """Words are maximal runs of non-whitespace, as in lmtrain's `word` shingles."""

    def word_tokenize(self, text):
        return text.split()

    def sent_tokenize(self, text):
        return [text]

    def span_tokenize(self, text):
        spans, pos = [], 0
        for word in text.split():
            start = text.index(word, pos)
            spans.append((start, start + len(word)))
            pos = start + len(word)
        return spans


class JsonlDocs(PipelineStep):
    """Reads the JSONL file's records as Documents, one per non-blank line, index = line order.

    (datatrove's JsonlReader/JsonlWriter need orjson, which its `processing` extra does not install.)
    """

    name = "jsonl docs"

    def __init__(self, path):
        super().__init__()
        self.path = path

    def run(self, data=None, rank=0, world_size=1):
        with open(self.path, "rb") as f:
            for i, line in enumerate(l for l in f if l.strip()):
                record = json.loads(line)
                yield Document(text=record["text"], id=str(record.get("id", i)), metadata={"index": i})


class WriteIndices(PipelineStep):
    """Writes the `index` of every document that reaches it, one per line."""

    name = "write indices"

    def __init__(self, path):
        super().__init__()
        self.path = path

    def run(self, data, rank=0, world_size=1):
        with open(self.path, "w") as f:
            for doc in data:
                f.write(f"{doc.metadata['index']}\n")
                yield doc


class Collect(PipelineStep):
    """Keeps the documents that reach it in `Collect.docs` (a class attribute: the executor runs a
    deep copy of the pipeline in this process), re-indexed in arrival order for the MinHash stages."""

    name = "collect"
    docs = []

    def run(self, data, rank=0, world_size=1):
        for doc in data:
            doc.metadata["index"] = len(Collect.docs)
            Collect.docs.append(doc)
            yield doc


class Replay(PipelineStep):
    """Yields the documents Collect kept."""

    name = "replay"

    def run(self, data=None, rank=0, world_size=1):
        yield from Collect.docs


def run_minhash(reader, config, work, bands, tok):
    """datatrove's four MinHash stages, one worker; returns the removed indices and the clusters."""
    sigs, buckets, remove, logs = (os.path.join(work, d) for d in ("sigs", "buckets", "remove", "logs"))
    stages = [
        ("signature", [reader(), MinhashDedupSignature(output_folder=sigs, config=config, language=tok)], 1),
        ("buckets", [MinhashDedupBuckets(input_folder=sigs, output_folder=buckets, config=config)], bands),
        ("cluster", [MinhashDedupCluster(input_folder=buckets, output_folder=remove, config=config,
                                         save_cluster_id=True)], 1),
        ("filter", [reader(), MinhashDedupFilter(input_folder=remove),
                    WriteIndices(os.path.join(work, "kept.txt"))], 1),
    ]
    for name, pipeline, tasks in stages:
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=1,
                              logging_dir=os.path.join(logs, name)).run()
    removed = sorted(d for (d,) in read_u32_file(os.path.join(remove, "000000.remove"), 1))
    clusters = {}
    for doc, cluster in read_u32_file(os.path.join(remove, "000000.clusters"), 2):
        clusters.setdefault(cluster, []).append(doc)
    with open(os.path.join(work, "kept.txt")) as f:
        kept = [int(line) for line in f]
    return removed, clusters, kept


def run_filters(args, config, work):
    """--filters: the four quality filters then MinHash, timed (see the module's doc)."""
    from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                            GopherRepetitionFilter)
    import_seconds = time.monotonic() - _T_IMPORT
    path = os.path.abspath(args.input)
    t0 = time.monotonic()
    filters = [("gopher_repetition", GopherRepetitionFilter()), ("gopher_quality", GopherQualityFilter()),
               ("c4", C4QualityFilter()), ("fineweb", FineWebQualityFilter())]
    Collect.docs = []
    stats = LocalPipelineExecutor(pipeline=[JsonlDocs(path)] + [f for _, f in filters] + [Collect()], tasks=1,
                                  workers=1, logging_dir=os.path.join(work, "logs", "filters")).run()
    t_filters = time.monotonic() - t0
    # One Stats per step, in pipeline order (named str(step)): the reader, the four filters, Collect.
    step_stats = [st.stats for st in stats.stats]
    assert len(step_stats) == len(filters) + 2 and all(f.name in st.name for (_, f), st in zip(filters, stats.stats[1:]))
    removed_by_filter, reasons = {}, {}
    for (name, f), st in zip(filters, step_stats[1:]):
        removed_by_filter[name] = int(st["dropped"].total) if "dropped" in st else 0
        for key, v in st.items():
            if key.startswith("dropped_"):
                reasons[f"{name}:{key[len('dropped_'):]}"] = int(v.total)
    documents_in = int(step_stats[1]["total"].total)
    passed = len(Collect.docs)
    bytes_in = os.path.getsize(path)
    t1 = time.monotonic()
    removed, clusters, kept = run_minhash(Replay, config, work, args.bands, WhitespaceTokenizer("en"))
    t_minhash = time.monotonic() - t1
    seconds = time.monotonic() - t0
    if sorted(set(range(passed)) - set(kept)) != removed:
        print("clean_datatrove.py: the filter stage removed other documents than the .remove file lists",
              file=sys.stderr)
        return None
    return {
        "tool": "datatrove",
        "input": path,
        "bytes_in": bytes_in,
        "documents_in": documents_in,
        "documents_out": passed - len(removed),
        "removed": dict(removed_by_filter, minhash=len(removed)),
        "removed_reasons": dict(sorted(reasons.items())),
        "minhash_clusters": sum(1 for c in clusters.values() if len(c) > 1),
        "seconds": seconds,
        "stage_seconds": {"filters": t_filters, "minhash": t_minhash},
        "import_seconds": import_seconds,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "workers": 1,
        "settings": {"filters": "datatrove class defaults", "ngram": args.ngram, "unit": "word (whitespace)",
                     "bands": args.bands, "rows": args.rows, "seed": args.seed, "hash": "xxhash64",
                     "normalisation": args.norm},
    }


def read_u32_file(path, fields):
    if not os.path.exists(path):
        return []
    data = open(path, "rb").read()
    n = struct.calcsize("<" + "I" * fields)
    return [struct.unpack_from("<" + "I" * fields, data, i) for i in range(0, len(data), n)]


def shingles(text, n):
    words = text.split()
    if len(words) < n:
        return {" ".join(words)}
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


def make_variants(src, dst, ngram):
    import random
    rng = random.Random(17)
    with open(src, "rb") as f:
        records = [json.loads(line) for line in f if line.strip()]
    out = list(records)
    for i, record in enumerate(records[:80]):
        percent = [0.5, 2, 5, 10][i % 4]
        words = record["text"].split()
        for k in range(len(words)):
            if rng.random() < percent / 100:
                words[k] = f"zq{rng.randrange(10**9)}"
        variant = dict(record)
        variant["id"] = f"{record.get('id', i)}#v{percent:g}"
        variant["text"] = " ".join(words)
        a, b = shingles(record["text"], ngram), shingles(variant["text"], ngram)
        variant["jaccard"] = len(a & b) / len(a | b)
        out.append(variant)
    with open(dst, "w") as f:
        for r in out:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{dst}: {len(records)} documents and {len(out) - len(records)} variants", file=sys.stderr)
    return 0


def main():
    default_input = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data",
                                 "corpora", "medium_prose.jsonl")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--input", default=default_input, help="one JSONL file with a `text` field")
    ap.add_argument("--norm", choices=["datatrove", "none"], default="datatrove")
    ap.add_argument("--ngram", type=int, default=5)
    ap.add_argument("--bands", type=int, default=14)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", help="scratch directory (default: a temporary one, removed)")
    ap.add_argument("--out", help="write the JSON here instead of stdout")
    ap.add_argument("--filters", action="store_true",
                    help="run the four quality filters, then MinHash, timed, in one process (see above)")
    ap.add_argument("--make-variants", metavar="OUT_JSONL",
                    help="write the input plus planted near-duplicate variants to OUT_JSONL and exit")
    args = ap.parse_args()
    if args.make_variants:
        return make_variants(os.path.abspath(args.input), args.make_variants, args.ngram)

    norm = TextNormConfig() if args.norm == "datatrove" else TextNormConfig(
        lowercase=False, norm_whitespace=False, remove_punctuation=False, norm_unicode_diacritics=False,
        norm_numbers=False)
    config = MinhashConfig(n_grams=args.ngram, num_buckets=args.bands, hashes_per_bucket=args.rows, seed=args.seed,
                           norm_config=norm, hash_config=HashConfig(precision=64, hash_fc="xxhash"))

    if args.filters:
        with tempfile.TemporaryDirectory(prefix="clean_datatrove_") as tmp:
            result = run_filters(args, config, args.work or tmp)
        if result is None:
            return 1
        emit(json.dumps(result), args.out)
        return 0

    path = os.path.abspath(args.input)
    with open(path, "rb") as f:
        records = [json.loads(line) for line in f if line.strip()]
    with tempfile.TemporaryDirectory(prefix="clean_datatrove_") as tmp:
        # The filter stage's survivors are cross-checked with the .remove file below.
        removed, clusters, kept = run_minhash(lambda: JsonlDocs(path), config, args.work or tmp, args.bands,
                                              WhitespaceTokenizer("en"))

    ids = [r.get("id", str(i)) for i, r in enumerate(records)]
    if sorted(set(range(len(records))) - set(kept)) != removed:
        print("clean_datatrove.py: the filter stage removed other documents than the .remove file lists",
              file=sys.stderr)
        return 1
    result = {
        "tool": "datatrove",
        "input": path,
        "documents": len(records),
        "settings": {"ngram": args.ngram, "unit": "word (whitespace)", "bands": args.bands, "rows": args.rows,
                     "seed": args.seed, "hash": "xxhash64", "normalisation": args.norm},
        "removed_count": len(removed),
        "removed": [{"index": d, "id": ids[d]} for d in removed],
        "clusters": sorted(sorted(c) for c in clusters.values() if len(c) > 1),
    }
    emit(json.dumps(result, indent=1), args.out)
    return 0


def emit(text, out):
    """Writes the result to `out`, or prints it."""
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    sys.exit(main())
