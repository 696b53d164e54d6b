# LMT_CUDA: whether to build the CUDA backend (src/lmt/kernels/cuda, target lmt_kernels_cuda).
#   AUTO (default)  build it when CMake finds a CUDA compiler (nvcc on PATH, $CUDACXX, or
#                   /usr/local/cuda/bin/nvcc) and the toolkit's cuBLASLt
#   ON              require it (configure fails without CUDA)
#   OFF             never
# Sanitizer and fuzz builds leave it out: their instrumentation flags are host-compiler flags.
# Architectures: CMAKE_CUDA_ARCHITECTURES, default 80;90;100 (A100, H100/H200, B200); a build for one
# machine can name only its own (scripts/gpu_check.sh passes 90 on an H100).
# nvcc runs with warnings as errors, host-compiler warnings included.
set(LMT_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO, ON or OFF (docs/CUDA.md)")
set_property(CACHE LMT_CUDA PROPERTY STRINGS AUTO ON OFF)
set(LMT_CUDA_ENABLED OFF)
if(NOT LMT_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "LMT_CUDA=${LMT_CUDA}: expected AUTO, ON or OFF")
endif()
if(NOT LMT_CUDA STREQUAL "OFF" AND NOT LMT_SANITIZE)
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90 100)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(TARGET CUDA::cublasLt)
      set(LMT_CUDA_ENABLED ON)
    endif()
  endif()
  if(NOT LMT_CUDA_ENABLED AND LMT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LMT_CUDA=ON but no CUDA compiler with cuBLASLt was found "
                        "(hint: install the CUDA toolkit, put nvcc on PATH or set CUDACXX)")
  endif()
elseif(LMT_CUDA STREQUAL "ON" AND LMT_SANITIZE)
  message(FATAL_ERROR "LMT_CUDA=ON cannot be combined with LMT_SANITIZE (host-only instrumentation)")
endif()
if(LMT_CUDA_ENABLED)
  # CMake 3.25 does not know nvcc 13's C++20 flag; tell it (what newer CMake versions do themselves).
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_FLAGS_RELEASE "-O3 -DNDEBUG")
  set(LMT_CUDA_FLAGS -Werror=all-warnings -lineinfo
      "-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter,-Werror")
  message(STATUS "LMT_CUDA: building the cuda backend for architectures ${CMAKE_CUDA_ARCHITECTURES} "
                 "(nvcc ${CMAKE_CUDA_COMPILER_VERSION})")
else()
  message(STATUS "LMT_CUDA: the cuda backend is not built (LMT_CUDA=${LMT_CUDA})")
endif()

# lmt_link_cuda_backend(TARGET): links the cuda backend into an executable whole, so its registrar
# runs (kernels/registry.h), and the NCCL communicator likewise (dist/device_communicator.h); a no-op
# without them.
function(lmt_link_cuda_backend target)
  if(TARGET lmt_kernels_cuda)
    target_link_libraries(${target} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,lmt_kernels_cuda>")
  endif()
  if(TARGET lmt_dist_nccl)
    target_link_libraries(${target} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,lmt_dist_nccl>")
  endif()
endfunction()

# lmt_cuda_test_of(NAME SOURCE file DEFINE macro DEPS ...): a test of the "cuda" backend (ctest label
# gpu) built from a cpu test's source, its `macro` (the backend that source tests) defined as "cuda",
# linked with the CUDA backend.
function(lmt_cuda_test_of name)
  cmake_parse_arguments(ARG "" "SOURCE;DEFINE" "DEPS" ${ARGN})
  lmt_test(${name} SOURCES ${ARG_SOURCE} DEPS ${ARG_DEPS} LABELS gpu)
  target_compile_definitions(${name} PRIVATE ${ARG_DEFINE}="cuda")
  lmt_link_cuda_backend(${name})
endfunction()
