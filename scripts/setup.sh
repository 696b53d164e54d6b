#!/usr/bin/env bash
# Installs every Debian package lmtrain needs to build, test and benchmark. Idempotent: packages that
# are already present are skipped, so a second run costs one dpkg query. Nothing is fetched from
# anywhere but Debian's repositories.
#
#   scripts/setup.sh            build + test dependencies
#   scripts/setup.sh --golden   also python3-torch/numpy, to regenerate golden reference dumps
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libdnnl-dev              # oneDNN: fp32/bf16 GEMM (AMX / AVX512-BF16)
  libopenmpi-dev openmpi-bin  # multi-process data parallelism
  libpcre2-dev             # Unicode regex for tokenizer pre-tokenisation
  libicu-dev               # Unicode NFC for tokenizer.json normalizers (Qwen3)
  libxxhash-dev            # XXH64 checksums of shards and checkpoint files (src/lmt/base/xxh64.h)
  nettle-dev               # SHA-256 of tokenizer fingerprints (src/lmt/data/tokenizer/sha256.h)
  nlohmann-json3-dev       # JSON (tokenizer.json, metrics, safetensors headers)
  libtomlplusplus-dev      # TOML recipes
  libcli11-dev             # command line
  libgtest-dev libgmock-dev libbenchmark-dev  # tests and microbenchmarks
  clang libclang-rt-14-dev # libFuzzer targets (tests/fuzz, `make fuzz`; part of `make test`)
  bible-kjv bible-kjv-text # the demo's corpus: the King James Bible (public domain)
  zlib1g-dev libzstd-dev   # gzip and zstd inputs (src/lmt/io/input_stream.h)
  gzip zstd bzip2 xz-utils # the compressors the compressed-input tests run
  chromium                 # headless browser: the report test renders RUN/report.html (tests/report)
)
if [[ "${1:-}" == "--golden" ]]; then
  packages+=(python3-torch python3-numpy)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
