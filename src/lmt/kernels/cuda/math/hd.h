// LMT_HD marks a function that compiles for both the host and a CUDA device.
//
// The math of the CUDA kernels (per element, per row, the online softmax, the AdamW update) lives in
// headers under kernels/cuda/math as LMT_HD inline functions. nvcc compiles them into the kernels;
// the host compiler compiles the very same functions into tests/kernels/cuda_math_test.cpp, which
// checks them against the ref backend on every machine, GPU or not.
#pragma once

#if defined(__CUDACC__)
#define LMT_HD __host__ __device__ __forceinline__
#else
#define LMT_HD inline
#endif
