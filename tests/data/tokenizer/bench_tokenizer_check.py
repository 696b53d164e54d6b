"""The correctness part of scripts/bench_tokenizer.sh (`--check`): on 40 short documents of the shared
corpus, lmtrain's token ids equal PyPI tiktoken's (cl100k_base, r50k_base) and HF tokenizers' (GPT-2
files, Qwen3's tokenizer.json, the vocabulary lmtrain trains); the tokenizer.json that `lmtrain
tokenizer train` writes loads in HF tokenizers, gives lmtrain's ids and decodes to the text; and where
lmtrain's merges first differ from HF BpeTrainer's on the same corpus and vocabulary size, both
choices have the same count (a tie broken differently). No timing.
Env: LMTRAIN_BIN, LMT_SHARED_DATA, LMT_SOURCE_DIR (set by lmt_venv_test).
"""
import json
import os
import subprocess
import sys

data = os.environ["LMT_SHARED_DATA"]
if not os.path.exists(os.path.join(data, "corpora", "medium_prose.jsonl")):
    print(f"SKIP: shared data not found at {data} (see ../shared/data/README.md)")
    sys.exit(77)
build = os.path.dirname(os.path.dirname(os.environ["LMTRAIN_BIN"]))
env = dict(os.environ, LMT_VENV=sys.prefix)
r = subprocess.run(["bash", os.path.join(os.environ["LMT_SOURCE_DIR"], "scripts", "bench_tokenizer.sh"), build, "--check"],
                   env=env, capture_output=True, text=True)
print(r.stdout)
print(r.stderr, file=sys.stderr)
assert r.returncode == 0, f"bench_tokenizer.sh --check exited {r.returncode}"
rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]

encodes = [x for x in rows if "encode" in x]
pairs = sorted((x["encode"], x["peer"]) for x in encodes)
assert pairs == [("cl100k_base", "tiktoken"), ("gpt2", "hf"), ("gpt2", "tiktoken"), ("qwen3", "hf"),
                 ("trained_1000", "hf")], pairs
for x in encodes:
    assert x["ids_equal"] and x["tokens"] > 1000, x

trained = next(x for x in rows if x.get("check") == "trained tokenizer.json")
assert trained["ids_equal"] and trained["decodes_to_the_text"] == trained["documents"] == 40, trained

compare = next(x for x in rows if x.get("train") == "compare")
assert compare["vocab"] == [1000, 1000], compare
assert compare["merges"][0] == compare["merges"][1] > 700, compare
if "first_difference" in compare:
    assert compare["first_difference"]["tie"], compare
# Ties are rare among the first merges: the two trainers agree on most of them.
assert compare["merges_in_both"] > 0.8 * compare["merges"][0], compare

summary = rows[-1]
assert summary["ids_equal"] == summary["ids_compared"] == 6, summary
print(f"bench_tokenizer_check: ok: {len(encodes)} encode comparisons equal; {compare['merges_in_both']} of "
      f"{compare['merges'][0]} merges shared with HF BpeTrainer, first difference at rank "
      f"{compare.get('first_difference', {}).get('rank', 'none')} (a tie)")
