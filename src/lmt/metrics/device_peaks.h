// Accelerator table: memory and DENSE peak throughput per precision, for planning and for MFU.
//
// Every figure is the vendor datasheet's dense number (no 2:4 structured sparsity; datasheets print
// the sparse figure first, twice the dense one) for the SXM/board part named in `description`.
// MFU (model FLOPs utilisation, PaLM appendix B) is only comparable across runs when its denominator
// is the dense peak, so nothing here may ever hold a sparse figure.
//
// The `cpu` entry is this machine: its peaks are measured (metrics/hardware.h: fp32 FMA and the bf16
// unit, on the threads this process uses), through the per-machine peak cache (metrics/peaks.h,
// peak_flops), and its memory is the physical RAM (sysconf). Looking it up the first time reads the
// cache or costs the ~0.1 s peak measurement; the GPU entries cost nothing.
//
// Names are lower-case and stable (`v100`, `a100-40gb`, `a100-80gb`, `a6000`, `h100-sxm`, `h100-pcie`,
// `h200`, `b200`, `cpu`); scripts and configs rely on them. Lookup is case-insensitive.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lmt/base/status.h"

namespace lmt::metrics {

// The arithmetic the matmuls run in. `fp32` means strict fp32 (no tensor cores); `tf32` the tensor
// core path for fp32 inputs; `bf16` 16-bit tensor cores (fp16 on V100, which has no bf16); `fp8`
// e4m3/e5m2 tensor cores (Hopper and later).
enum class Precision { kFp32, kTf32, kBf16, kFp8 };

StatusOr<Precision> parse_precision(const std::string& name);  // "fp32", "tf32", "bf16", "fp8"
std::string_view precision_name(Precision p);

struct DeviceSpec {
  std::string name;         // table key, e.g. "h100-sxm"
  std::string description;  // e.g. "NVIDIA H100 SXM5 80GB"
  bool is_cpu = false;
  double memory_bytes = 0;  // usable device memory (GPU: HBM/GDDR capacity; CPU: physical RAM)
  // Dense peaks in FLOP/s (1 FMA = 2 FLOPs); 0 where the device has no such unit.
  double fp32_flops = 0;  // non-tensor fp32
  double tf32_flops = 0;  // tensor-core tf32
  double bf16_flops = 0;  // tensor-core bf16 (V100: fp16, see note)
  double fp8_flops = 0;   // tensor-core fp8
  // Memory a process holds before the model (CUDA context, cuBLAS/NCCL workspaces): a planning
  // allowance, not a measurement. 1 GiB on GPUs, 0 on the CPU.
  double runtime_overhead_bytes = 0;
  std::string note;  // caveats (e.g. "no bf16: the bf16 peak is the fp16 tensor-core peak")
};

// The spec of a named device; NotFound with every valid name in the hint otherwise.
StatusOr<DeviceSpec> device_spec(const std::string& name);
// All valid names, in table order (GPUs oldest first, then "cpu").
std::vector<std::string> device_names();

// The table entry of a GPU named as its driver names it (cudaDeviceProp::name, e.g. "NVIDIA H100 80GB
// HBM3" -> h100-sxm, "NVIDIA H100 PCIe" -> h100-pcie, "NVIDIA H200" -> h200, "NVIDIA A100-SXM4-80GB"
// -> a100-80gb, "NVIDIA B200" -> b200). NotFound naming it, with a hint to pass --peak-flops, for a
// GPU the table does not know.
StatusOr<DeviceSpec> device_spec_for_gpu(std::string_view driver_name);

// Dense peak FLOP/s of `d` at precision `p`. InvalidArgument, with the precisions the device does
// support in the hint, when it has no unit for `p` (fp8 before Hopper, tf32 on V100 or the CPU).
StatusOr<double> dense_peak_flops(const DeviceSpec& d, Precision p);

}  // namespace lmt::metrics
