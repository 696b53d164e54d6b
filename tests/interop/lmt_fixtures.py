"""Shared fixtures of the interop checks (tests/interop/*.py, run by scripts/venv_run.sh).

demo_run() trains a model the way `make demo` does (scripts/demo.sh: a byte-level BPE tokenizer
trained by lmtrain, shards made by `lmtrain data prepare`, configs/demo.toml's model and recipe),
only on tinyshakespeare from ../shared and for a few steps, so that a test can export a real lmtrain
checkpoint. It is built once per build tree (cached under $LMT_TEST_TMP/../interop_demo_STEPS)
and reused by every check; a half-built fixture (no COMPLETE marker) is never reused. ctest runs the
checks in parallel, so the build holds an exclusive lock (interop_demo_STEPS.lock): a second check
waits for the first one's model instead of removing it mid-training.
"""
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile

LMTRAIN = os.environ.get("LMTRAIN_BIN", "lmtrain")
SHARED = os.environ.get("LMT_SHARED_DATA", os.path.join(os.path.dirname(__file__), "../../../shared/data"))
SOURCE = os.environ.get("LMT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "../.."))
TMP = os.environ.get("LMT_TEST_TMP", os.path.join(tempfile.gettempdir(), "lmt_interop"))


def skip(message):
    """Reports a skip to ctest (SKIP_RETURN_CODE 77) with the reason."""
    print("SKIP: " + message)
    sys.exit(77)


def shared(*parts):
    path = os.path.join(SHARED, *parts)
    if not os.path.exists(path):
        skip(f"{path} not found (../shared/data is absent; see its README)")
    return path


def lmtrain(*args, check=True):
    """Runs lmtrain; on failure prints its output and raises."""
    r = subprocess.run([LMTRAIN, *map(str, args)], capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise RuntimeError(f"lmtrain {' '.join(map(str, args))} exited {r.returncode}")
    return r


def fresh_dir(name):
    """An empty scratch directory under $LMT_TEST_TMP."""
    path = os.path.join(TMP, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def demo_run(steps=40):
    """The run directory of a demo-style model trained for `steps` steps (built once, then cached).

    It is built in place (the dataset manifest records the tokenizer's absolute path, which must stay
    valid) and marked complete last; an incomplete build (a killed test) is removed and redone."""
    root = os.path.join(os.path.dirname(os.path.abspath(TMP)), f"interop_demo_{steps}")
    os.makedirs(os.path.dirname(root), exist_ok=True)
    with open(root + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        return _build_demo_run(root, steps)


def _build_demo_run(root, steps):
    run = os.path.join(root, "run")
    done = os.path.join(root, "COMPLETE")
    if os.path.exists(done):
        return run
    corpus = shared("corpora", "tinyshakespeare.txt")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    tok = os.path.join(root, "tokenizer.json")
    lmtrain("tokenizer", "train", "--input", corpus, "--vocab-size", 1024, "--out", tok)
    lmtrain("data", "prepare", "--tokenizer", tok, "--input", corpus, "--out", os.path.join(root, "data"),
            "--val-fraction", 0.05)
    lmtrain("train", "--config", os.path.join(SOURCE, "configs", "demo.toml"), "--run-dir", run,
            "--set", f"data.path={os.path.join(root, 'data')}", "--set", f"train.max_steps={steps}",
            "--set", "train.micro_batch=4", "--set", "train.seq_len=128", "--set", "eval.every=0",
            "--set", f"checkpoint.every={steps}", "--set", "schedule.warmup_steps=5")
    with open(done, "w") as f:
        f.write("ok\n")
    return run
