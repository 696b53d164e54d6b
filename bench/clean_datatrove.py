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
import struct
import sys
import tempfile

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
    ap.add_argument("--make-variants", metavar="OUT_JSONL",
                    help="write the input plus planted near-duplicate variants to OUT_JSONL and exit")
    args = ap.parse_args()
    if args.make_variants:
        return make_variants(os.path.abspath(args.input), args.make_variants, args.ngram)

    path = os.path.abspath(args.input)
    with open(path, "rb") as f:
        records = [json.loads(line) for line in f if line.strip()]
    norm = TextNormConfig() if args.norm == "datatrove" else TextNormConfig(
        lowercase=False, norm_whitespace=False, remove_punctuation=False, norm_unicode_diacritics=False,
        norm_numbers=False)
    config = MinhashConfig(n_grams=args.ngram, num_buckets=args.bands, hashes_per_bucket=args.rows, seed=args.seed,
                           norm_config=norm, hash_config=HashConfig(precision=64, hash_fc="xxhash"))

    with tempfile.TemporaryDirectory(prefix="clean_datatrove_") as tmp:
        work = args.work or tmp
        sigs, buckets, remove, logs = (os.path.join(work, d) for d in ("sigs", "buckets", "remove", "logs"))

        tok = WhitespaceTokenizer("en")
        stages = [
            ("signature", [JsonlDocs(path), MinhashDedupSignature(output_folder=sigs, config=config, language=tok)], 1),
            ("buckets", [MinhashDedupBuckets(input_folder=sigs, output_folder=buckets, config=config)], args.bands),
            ("cluster", [MinhashDedupCluster(input_folder=buckets, output_folder=remove, config=config,
                                             save_cluster_id=True)], 1),
            ("filter", [JsonlDocs(path), MinhashDedupFilter(input_folder=remove),
                        WriteIndices(os.path.join(work, "kept.txt"))], 1),
        ]
        for name, pipeline, tasks in stages:
            LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=1,
                                  logging_dir=os.path.join(logs, name)).run()

        removed = sorted(d for (d,) in read_u32_file(os.path.join(remove, "000000.remove"), 1))
        clusters = {}
        for doc, cluster in read_u32_file(os.path.join(remove, "000000.clusters"), 2):
            clusters.setdefault(cluster, []).append(doc)
        # Cross-check with what the filter stage let through.
        with open(os.path.join(work, "kept.txt")) as f:
            kept = [int(line) for line in f]

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
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
