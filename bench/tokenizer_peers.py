"""The PyPI peers of scripts/bench_tokenizer.sh: OpenAI's tiktoken and Hugging Face tokenizers (both
native Rust, from the venv group `tokenizers`, scripts/venv.sh). Run by the script, never alone.

  tokenizer_peers.py encode --peer tiktoken|hf --tokenizer T [--encoding E] --input DOCS.jsonl
                            --threads N --runs R --lmt-ids IDS.jsonl
      Encodes every document of DOCS.jsonl (its "text" field) once untimed, checks the ids against
      `lmtrain tokenizer encode --json` (IDS.jsonl, one {"ids": [...]} per document, same order), then
      R timed passes; prints one JSON object: median seconds, MB/s, tokens/s, ids equal or the first
      difference (exit 1 when they differ). Specials in the text are plain text on both sides (tiktoken encode_ordinary; HF
      tokenizers has no such switch: a text holding an added token's text would differ, and is reported).
      One thread: one document after another. N threads: tiktoken encode_ordinary_batch(num_threads=N),
      HF encode_batch with RAYON_NUM_THREADS=N.
  tokenizer_peers.py train --input DOCS.jsonl --vocab-size V --pattern-from LMT.json --out HF.json
      HF BpeTrainer on the same documents, with lmtrain's pre-tokenizer (the Split regex of LMT.json,
      then ByteLevel), all 256 bytes as the initial alphabet and <|endoftext|> as the one special token,
      so the vocabulary size means the same on both sides; prints seconds and this process's peak RSS.
  tokenizer_peers.py compare LMT.json HF.json [--explain DOCS.jsonl]
      Merges (in order and as sets) and vocabulary (as sets of token strings) of the two trained files.
      With --explain, the counts of both choices at the first differing rank (exit 1 unless they tie).
  tokenizer_peers.py check-trained LMT.json DOCS.jsonl --lmt-ids IDS.jsonl
      The file lmtrain trained is a valid tokenizer.json: HF tokenizers loads it, gives the same ids as
      lmtrain on DOCS.jsonl, and decodes them back to the text.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time


def read_docs(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def read_ids(path):
    with open(path) as f:
        return [json.loads(line)["ids"] for line in f if line.strip()]


def first_difference(ours, theirs):
    if len(ours) != len(theirs):
        return {"documents": [len(ours), len(theirs)]}
    for d, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
            return {"document": d, "token": i, "lmtrain": a[i:i + 5], "peer": b[i:i + 5]}
    return None


def tiktoken_encoder(path, encoding):
    os.environ["TIKTOKEN_CACHE_DIR"] = ""  # read the local file, cache nothing
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    name = encoding or os.path.basename(path).split(".")[0]
    with open(os.path.join(os.path.dirname(path), "encodings.json")) as f:
        spec = json.load(f)[name]
    enc = tiktoken.Encoding(name, pat_str=spec["pat_str"], mergeable_ranks=load_tiktoken_bpe(path),
                            special_tokens=spec["special_tokens"])
    return enc, f"tiktoken {tiktoken.__version__}"


def hf_tokenizer(path):
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE
    import tokenizers
    if os.path.isdir(path):  # GPT-2 files: encoder.json + vocab.bpe
        tok = Tokenizer(BPE.from_file(os.path.join(path, "encoder.json"), os.path.join(path, "vocab.bpe")))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
    else:
        tok = Tokenizer.from_file(path)
    return tok, f"tokenizers {tokenizers.__version__}"


def cmd_encode(a):
    if a.peer == "hf":
        os.environ["RAYON_NUM_THREADS"] = str(a.threads)
        os.environ["TOKENIZERS_PARALLELISM"] = "true" if a.threads > 1 else "false"
    docs = read_docs(a.input)
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    t0 = time.perf_counter()
    if a.peer == "tiktoken":
        enc, version = tiktoken_encoder(a.tokenizer, a.encoding)
        if a.threads == 1:
            encode_all = lambda: [enc.encode_ordinary(d) for d in docs]
        else:
            encode_all = lambda: enc.encode_ordinary_batch(docs, num_threads=a.threads)
    else:
        tok, version = hf_tokenizer(a.tokenizer)
        if a.threads == 1:
            encode_all = lambda: [tok.encode(d, add_special_tokens=False).ids for d in docs]
        else:
            encode_all = lambda: [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]
    load_seconds = time.perf_counter() - t0
    ids = encode_all()  # warm-up, and the ids to check
    diff = first_difference(read_ids(a.lmt_ids), [list(x) for x in ids])
    tokens = sum(len(x) for x in ids)
    del ids
    secs = []  # --runs 0: the ids check alone (scripts/bench_tokenizer.sh --check)
    for _ in range(a.runs):
        t = time.perf_counter()
        encode_all()
        secs.append(time.perf_counter() - t)
    out = {"tool": version, "tokenizer": a.tokenizer, "threads": a.threads, "runs": a.runs, "tokens": tokens,
           "bytes": nbytes, "load_seconds": load_seconds, "ids_equal": diff is None, "first_difference": diff}
    if secs:
        med = statistics.median(secs)
        out.update({"seconds": med, "mb_per_s": nbytes / 1e6 / med, "tokens_per_s": tokens / med})
    print(json.dumps(out))
    return 0 if diff is None else 1


def cmd_train(a):
    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer
    import tokenizers
    with open(a.pattern_from) as f:
        lmt = json.load(f)
    pattern = lmt["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    docs = read_docs(a.input)
    t0 = time.perf_counter()
    tok = Tokenizer(BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(vocab_size=a.vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=trainer)
    seconds = time.perf_counter() - t0
    tok.save(a.out)
    print(json.dumps({"tool": f"tokenizers {tokenizers.__version__} BpeTrainer", "seconds": seconds,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "vocab_size": tok.get_vocab_size()}))


def merges_of(j):
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in j["model"]["merges"]]


def cmd_compare(a):
    with open(a.lmt) as f:
        lmt = json.load(f)
    with open(a.hf) as f:
        hf = json.load(f)
    ml, mh = merges_of(lmt), merges_of(hf)
    prefix = next((i for i, (x, y) in enumerate(zip(ml, mh)) if x != y), min(len(ml), len(mh)))
    vl, vh = set(lmt["model"]["vocab"]), set(hf["model"]["vocab"])
    out = {"merges": [len(ml), len(mh)], "merges_same_order_prefix": prefix,
           "merges_in_both": len(set(ml) & set(mh)), "vocab": [len(vl), len(vh)], "vocab_in_both": len(vl & vh)}
    if prefix < min(len(ml), len(mh)):
        out["first_difference"] = {"rank": prefix, "lmtrain": " ".join(ml[prefix]), "hf": " ".join(mh[prefix])}
        if a.explain:
            out["first_difference"].update(pair_counts_at(lmt, ml, prefix, ml[prefix], mh[prefix], a.explain))
    print(json.dumps(out))
    return 0 if not a.explain or "first_difference" not in out or out["first_difference"]["tie"] else 1


def pair_counts_at(lmt, merges, rank, ours, theirs, corpus):
    """The counts of both tools' choice at the first differing rank, by replaying lmtrain's merges on
    the corpus (plain Python: for small inputs only). Equal counts: the two differ by tie-breaking."""
    import regex
    pattern = regex.compile(lmt["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"])
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for b in range(256):  # GPT-2's byte -> character map (the ByteLevel alphabet)
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    words = {}
    for doc in read_docs(corpus):
        for piece in pattern.findall(doc):
            w = tuple(chars[b] for b in piece.encode("utf-8"))
            words[w] = words.get(w, 0) + 1
    for pair in merges[:rank]:
        merged = {}
        for w, f in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == pair:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + f
        words = merged
    def count(pair):
        return sum(f * sum(1 for x, y in zip(w, w[1:]) if (x, y) == pair) for w, f in words.items())
    c_ours, c_theirs = count(ours), count(theirs)
    return {"lmtrain_count": c_ours, "hf_count": c_theirs, "tie": c_ours == c_theirs}


def cmd_check_trained(a):
    tok, _ = hf_tokenizer(a.tokenizer)
    docs = read_docs(a.input)
    ids = [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]
    diff = first_difference(read_ids(a.lmt_ids), ids)
    roundtrip = sum(tok.decode(x, skip_special_tokens=False) == d for x, d in zip(ids, docs))
    print(json.dumps({"check": "trained tokenizer.json", "loads_in": "HF tokenizers", "documents": len(docs),
                      "ids_equal": diff is None, "first_difference": diff, "decodes_to_the_text": roundtrip}))
    return 0 if diff is None and roundtrip == len(docs) else 1


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("encode")
    e.add_argument("--peer", choices=["tiktoken", "hf"], required=True)
    e.add_argument("--tokenizer", required=True)
    e.add_argument("--encoding", default="")
    e.add_argument("--input", required=True)
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--runs", type=int, default=3, help="timed passes; 0: check the ids only")
    e.add_argument("--lmt-ids", required=True)
    t = sub.add_parser("train")
    t.add_argument("--input", required=True)
    t.add_argument("--vocab-size", type=int, required=True)
    t.add_argument("--pattern-from", required=True)
    t.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("lmt")
    c.add_argument("hf")
    c.add_argument("--explain", default="", metavar="DOCS.jsonl",
                   help="replay the merges on DOCS.jsonl to tell a tie from a real difference (small inputs)")
    k = sub.add_parser("check-trained")
    k.add_argument("tokenizer")
    k.add_argument("input")
    k.add_argument("--lmt-ids", required=True)
    a = p.parse_args()
    return {"encode": cmd_encode, "train": cmd_train, "compare": cmd_compare,
            "check-trained": cmd_check_trained}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
