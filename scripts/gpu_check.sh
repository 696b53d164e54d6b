#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU (docs/CUDA.md): builds lmtrain with the CUDA backend,
# runs the GPU tests (ctest label "gpu": the op test against ref, the stories260K golden on the GPU,
# training steps on the GPU against the CPU, the trainer with checkpoint and resume on the GPU, Muon's
# Newton–Schulz against the CPU, bf16 tensor-core attention against ref, the activations' bf16
# outputs against convert(), the NCCL communicator on one GPU and on two), then benchmarks full
# training steps (and data parallelism over NCCL where there are two GPUs) and prints one JSON line per run:
# tokens/s, MFU against the device's dense bf16 peak, and peak device memory, each followed by its
# time split by op family.
#
#   scripts/gpu_check.sh                  build (build-gpu/, the GPU's own architecture), test, bench
#   scripts/gpu_check.sh --pack DIR       build here, then pack the binaries, the non-system shared
#                                         libraries they need (oneDNN, Open MPI, ...; never the CUDA
#                                         driver or cuBLAS) and the golden model into DIR.tar.xz
#   scripts/gpu_check.sh --prebuilt DIR   test and bench a packed DIR (unpacked), e.g. on a GPU node
#                                         that has the CUDA runtime but not the build dependencies
# Options: --arch LIST (CMAKE_CUDA_ARCHITECTURES; default "native" when building on a GPU machine, else
# 80;90;100), --build DIR (default build-gpu), --skip-bench, --skip-tests, --skip-profile (the
# benchmarks' time split by op family, `bench train --profile`, about 40 s on an H100).
# Exit status: 0 when every test passed and every benchmark ran; 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=build-gpu arch="" pack="" prebuilt="" bench=1 tests=1 profile=1
while (($#)); do
  case "$1" in
    --pack) pack=$2; shift 2 ;;
    --prebuilt) prebuilt=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --skip-bench) bench=0; shift ;;
    --skip-tests) tests=0; shift ;;
    --skip-profile) profile=0; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

# The gpu test binaries run whole (cuda_op_test and cuda_math_test have their own steps below).
gpu_tests=(cuda_attention_test cuda_bf16_outputs_test cuda_fused_norm_test cuda_linear_grad_write_test
           cuda_transfer_test cuda_model_test cuda_trainer_test cuda_muon_test)
targets=(lmtrain cuda_op_test cuda_math_test "${gpu_tests[@]}")
# nccl_communicator_test exists where CMake found nccl.h (src/lmt/dist/nccl/CMakeLists.txt).
nccl_target=nccl_communicator_test

if [[ -z "$prebuilt" ]]; then
  if [[ -z "$arch" ]]; then
    if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then arch=native; else arch="80;90;100"; fi
  fi
  bash scripts/setup.sh
  cmake -S . -B "$build" -G Ninja -DLMT_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$arch" -DLMT_BUILD_BENCH=OFF >/dev/null
  if cmake --build "$build" --target help | grep -q "^$nccl_target:"; then targets+=("$nccl_target"); fi
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
  bin=$build/bin
else
  bin=$prebuilt/bin
  export LD_LIBRARY_PATH="$prebuilt/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LMT_SHARED_DATA="$prebuilt/data"
fi

if [[ -n "$pack" ]]; then
  rm -rf "$pack" && mkdir -p "$pack/bin" "$pack/lib" "$pack/data/models"
  for t in "${targets[@]}"; do cp "$bin/$t" "$pack/bin/" && strip -s "$pack/bin/$t"; done
  # Every shared library the binaries load, except the C runtime, the CUDA driver and the CUDA
  # toolkit's libraries (the GPU machine has its own, matching its driver).
  for t in "${targets[@]}"; do ldd "$bin/$t"; done | awk '/=> \//{print $3}' | sort -u |
    grep -Ev '/(ld-linux|libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libz|libudev|libcuda|libcudart|libnvidia)[.-]|/libcublas' |
    while read -r lib; do cp -L "$lib" "$pack/lib/"; done
  if [[ -d ../shared/data/models/stories260K ]]; then cp -r ../shared/data/models/stories260K "$pack/data/models/"; fi
  tar -C "$(dirname "$pack")" -cJf "$pack.tar.xz" "$(basename "$pack")"
  echo "gpu_check: packed $(du -sh "$pack.tar.xz" | cut -f1) into $pack.tar.xz"
  exit 0
fi

# cuBLASLt from the CUDA toolkit or a pip wheel, wherever this machine has it.
if ! ldconfig -p 2>/dev/null | grep -q libcublasLt.so.13; then
  lt=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets /usr/lib /opt /usr/local/lib -name 'libcublasLt.so.13' 2>/dev/null | head -1 || true)
  [[ -n "$lt" ]] && export LD_LIBRARY_PATH="$(dirname "$lt"):${LD_LIBRARY_PATH:-}"
fi

# NCCL (dlopen'd by the multi-GPU path, so ldd and --pack do not see it) from the toolkit, a system
# package or a pip wheel (nvidia-nccl-cu*), wherever this machine has it.
if [[ -z "${LMT_NCCL_LIBRARY:-}" ]] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then
  sites=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
  # shellcheck disable=SC2086
  nccl=$(find /usr/local/cuda*/lib64 /usr/lib /usr/local/lib /opt $sites -name 'libnccl.so.2' 2>/dev/null | head -1 || true)
  [[ -n "$nccl" ]] && export LMT_NCCL_LIBRARY=$nccl
fi

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
# CUDA_VISIBLE_DEVICES narrows what the processes see (nvidia-smi ignores it).
if [[ -n "${CUDA_VISIBLE_DEVICES+x}" ]]; then gpus=$(tr ',' '\n' <<< "$CUDA_VISIBLE_DEVICES" | grep -c . || true); fi
status=0
# When the op test fails, each case runs again in its own process (8 at a time), so a kernel that
# faults cannot hide the others' results: a device fault is sticky for the process that hit it.
run_isolated() {
  local t=$1
  "$bin/$t" --gtest_list_tests | awk '/^[^ ]/{s=$1} /^  /{print s $1}' > "/tmp/gpu_check_$t.list"
  local n fails
  n=$(wc -l < "/tmp/gpu_check_$t.list")
  xargs -P 8 -I{} sh -c 'if timeout 120 "$0" --gtest_filter="$1" --gtest_brief=1 >"/tmp/gpu_check_case_$$.log" 2>&1;
       then echo "ok   $1"; else echo "FAIL $1"; cat "/tmp/gpu_check_case_$$.log" | grep -v "^\[" | head -20; fi;
       rm -f "/tmp/gpu_check_case_$$.log"' "$bin/$t" {} < "/tmp/gpu_check_$t.list" > "/tmp/gpu_check_$t.out"
  fails=$(grep -c '^FAIL' "/tmp/gpu_check_$t.out" || true)
  grep -v '^ok ' "/tmp/gpu_check_$t.out" || true
  echo "$t: $((n - fails)) of $n passed (each in its own process)"
  ((fails == 0))
}
if ((tests)); then
  echo "== cuda_math_test"
  OMP_WAIT_POLICY=passive "$bin/cuda_math_test" --gtest_brief=1 || status=1
  echo "== cuda_op_test"
  if ! OMP_WAIT_POLICY=passive timeout 120 "$bin/cuda_op_test" --gtest_brief=1; then
    echo "== cuda_op_test, each case in its own process"
    run_isolated cuda_op_test || status=1
    status=1
  fi
  for t in "${gpu_tests[@]}"; do
    echo "== $t"
    OMP_WAIT_POLICY=passive timeout 120 "$bin/$t" --gtest_brief=1 || status=1
  done
  # The NCCL communicator (NCCL loaded at run time: it says "skipped" where libnccl.so.2 is not found;
  # LMT_NCCL_LIBRARY names the file), on one GPU and, where there are two, on two ranks.
  echo "== nccl_communicator_test"
  if [[ ! -x "$bin/nccl_communicator_test" ]]; then
    echo "gpu_check: nccl_communicator_test was not built (CMake found no nccl.h: install NCCL's headers)" >&2
    status=1
  else
    timeout 120 "$bin/nccl_communicator_test" --gtest_brief=1 2>&1 | tee /tmp/gpu_check_nccl.log || status=1
    if ((gpus >= 1)) && grep -q 'nccl_communicator_test: skipped' /tmp/gpu_check_nccl.log; then
      echo "gpu_check: the NCCL test did not run on this GPU machine (its reason above; LMT_NCCL_LIBRARY names" \
        "libnccl.so.2 where the loader does not find it)" >&2
      status=1
    fi
  fi
  if ((gpus >= 2)) && [[ -x "$bin/nccl_communicator_test" ]] && command -v mpirun >/dev/null; then
    echo "== nccl_communicator_test, 2 ranks"
    timeout 180 mpirun --allow-run-as-root -np 2 "$bin/nccl_communicator_test" --gtest_brief=1 || status=1
  fi
fi
# One JSON line per `lmtrain bench train --json` record on stdin: preset, the record's fields named
# before `--`, tokens/s, MFU and ms per step, then NAME=EXPR fields after it (EXPR: Python over the
# record `j`).
bench_summary() {
  python3 -c '
import json, sys
args = sys.argv[1:]
cut = args.index("--") if "--" in args else len(args)
keys, extra = args[:cut], [a.split("=", 1) for a in args[cut + 1:]]
for line in sys.stdin:
    j = json.loads(line)
    out = {"preset": j["preset"], **{k: j[k] for k in keys}, "tokens_per_s": round(j["tokens_per_s"]),
           "mfu": round(j["mfu"], 4), "ms_per_step": round(1000 * j["seconds"], 1)}
    out.update({name: eval(expr, {"j": j}) for name, expr in extra})
    print(json.dumps(out))' "$@"
}

if ((bench)); then
  # preset micro-batch seq-len: the issue's two reference runs, and a small MoE model (top-2 of 8
  # experts in 4 layers: the routing on the host between kernels, moe.cu, grouped expert GEMMs).
  while read -r preset b t; do
    echo "== bench train $preset B$b T$t"
    if ! timeout 200 "$bin/lmtrain" bench train --backend cuda --preset "$preset" --micro-batch "$b" --seq-len "$t" \
         --warmup 2 --iters 5 --json | bench_summary device batch seq -- \
         'peak_device_memory_gib=round(j["memory_per_rank"]["device_peak"] / 2**30, 2)'; then
      status=1
    fi
    if ((profile)); then  # device time per op family (each op waits for the GPU while profiling)
      timeout 120 "$bin/lmtrain" bench train --backend cuda --preset "$preset" --micro-batch "$b" --seq-len "$t" \
        --warmup 2 --iters 2 --profile < /dev/null | sed -n '/time per step by op family/,$p' || status=1
    fi
  done <<'RUNS'
gpt2-124m 16 1024
llama3.2-1b 4 2048
tiny-moe 16 1024
RUNS
  # Data parallelism over NCCL on two GPUs (the issue's >= 1.9x one GPU): gpt2-124m, B16 T1024 per GPU.
  if ((gpus >= 2)) && command -v mpirun >/dev/null; then
    echo "== bench train gpt2-124m B16 T1024 on 2 GPUs (data parallel, NCCL)"
    timeout 300 mpirun --allow-run-as-root -np 2 "$bin/lmtrain" bench train --backend cuda --preset gpt2-124m \
      --micro-batch 16 --seq-len 1024 --warmup 2 --iters 5 --json |
      bench_summary world reduction -- 'grad_reduce_ms=round(1000 * j["time"]["grad_reduce"], 2)' || status=1
  fi
  # Tensor parallelism over NCCL on two GPUs: llama3.2-1b split in halves (heads, hidden units and
  # vocabulary), B4 T2048 on both; tp_comm is the time in the group's sums.
  if ((gpus >= 2)) && command -v mpirun >/dev/null; then
    echo "== bench train llama3.2-1b B4 T2048 on 2 GPUs (tensor parallel, NCCL)"
    timeout 300 mpirun --allow-run-as-root -np 2 "$bin/lmtrain" bench train --backend cuda --preset llama3.2-1b \
      --tp 2 --micro-batch 4 --seq-len 2048 --warmup 2 --iters 5 --json |
      bench_summary world tp -- 'tp_comm_ms=round(1000 * j["time"]["tp_comm"], 2)' || status=1
  fi
  # Muon's optimizer step on the GPU: both Newton–Schulz methods, against AdamW's.
  echo "== bench optim gpt2-124m"
  timeout 200 "$bin/lmtrain" bench optim --backend cuda --preset gpt2-124m --json || status=1
  # The attention kernels alone at gpt2-124m's shape (B16 T1024, 12 heads of 64): f32 SIMT and bf16
  # tensor cores.
  for compute in fp32 bf16; do
    echo "== bench attention B16 T1024 NH12 HD64 $compute"
    timeout 120 "$bin/lmtrain" bench attention --backend cuda --compute "$compute" --micro-batch 16 --seq-len 1024 \
      --heads 12 --head-dim 64 --warmup 2 --iters 10 --json | python3 -c '
import json, sys
for line in sys.stdin:
    j = json.loads(line)
    print(json.dumps({k: j[k] for k in ("device", "compute", "batch", "seq", "heads", "head_dim", "gflops_forward",
                                        "gflops_backward", "gflops") if k in j}))' || status=1
  done
fi
echo "gpu_check: $([[ $status == 0 ]] && echo passed || echo FAILED)"
exit $status
