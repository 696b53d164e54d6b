#!/usr/bin/env bash
# Creates (or updates) the Python venv of real peer libraries that tests and benchmarks compare
# lmtrain with. Everything comes from PyPI, pinned; nothing here is a dependency of lmtrain itself
# (those are Debian packages, scripts/setup.sh).
#
#   scripts/venv.sh [build_dir] [group ...]     groups: interop clean tokenizers (default: all)
#
#   interop     transformers + torch (CPU use), safetensors, tokenizers, gguf, llama-cpp-python
#               (llama.cpp compiled from source: minutes on 2 cores), lm-eval +
#               accelerate (its hf backend imports it)                         (docs/INTEROP.md)
#   clean       datatrove, the data-cleaning peer                                (docs/DATA_CLEAN.md)
#   tokenizers  tiktoken and HF tokenizers (native), the tokenizer peers         (docs/TOKENIZERS.md)
#
# The venv lives under the build tree ($build_dir/venv, or $LMT_VENV), so `make clean` removes it and
# a second run only checks a stamp per group. Tests find it there and skip with a message naming this
# script when it (or a group) is absent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
shift || true
groups=("$@")
((${#groups[@]})) || groups=(interop clean tokenizers)
[[ $build = /* ]] || build=$root/$build
venv=${LMT_VENV:-$build/venv}

requirements() {
  case $1 in
    interop)
      echo "torch==2.15.0 transformers==5.24.0 safetensors==0.8.0 tokenizers==0.23.3 numpy==2.4.6 sentencepiece==0.2.3 gguf==0.19.0"
      echo "lm-eval==0.4.13 accelerate==1.15.0 llama-cpp-python==0.3.36" ;;
    clean) echo "datatrove[processing]==0.10.1 spacy==3.8.7" ;;  # spaCy: datatrove's English word tokenizer
    tokenizers) echo "tiktoken==0.14.0 tokenizers==0.23.3" ;;
    *) echo "venv.sh: unknown group '$1' (known: interop clean tokenizers)" >&2; return 2 ;;
  esac
}

python=${LMT_VENV_PYTHON:-python3}
if [[ ! -x $venv/bin/python ]]; then
  echo "venv: creating $venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
fi

for g in "${groups[@]}"; do
  reqs=$(requirements "$g")
  stamp=$venv/.lmt-$g
  if [[ -f $stamp && "$(cat "$stamp")" == "$reqs" ]]; then
    echo "venv: $g up to date"
    continue
  fi
  echo "venv: installing $g: $(echo $reqs)"
  # llama-cpp-python compiles llama.cpp: CPU only, no tests or examples, every core.
  CMAKE_ARGS="-DGGML_CUDA=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF ${CMAKE_ARGS:-}" \
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    "$venv/bin/pip" install -q $reqs
  echo "$reqs" >"$stamp"
done
echo "venv: ready: $venv"
