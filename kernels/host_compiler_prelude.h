// First in a cubin library's host half (cubin_launch.h), compiled by the host compiler, not nvcc. CUTLASS and CuTe
// keep their host code behind nvcc's version macros (TMA descriptors: __CUDACC_VER_MAJOR__ >= 12), and a few
// inline functions outside any __CUDA_ARCH__ guard name device builtins: the version is nvcc's own (the build
// passes CUTLASS_EXT_NVCC_MAJOR/MINOR), the builtins are declared and never defined (no host code calls them).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cutlass/arch/wmma.h"  // first, before the version: no WMMA (nvcuda::wmma is nvcc's alone) on the host

#define __CUDACC_VER_MAJOR__ CUTLASS_EXT_NVCC_MAJOR
#define __CUDACC_VER_MINOR__ CUTLASS_EXT_NVCC_MINOR

extern const uint3 threadIdx;
extern const uint3 blockIdx;
extern const dim3 blockDim;
extern const dim3 gridDim;
void __syncthreads();
void __threadfence();
void __syncwarp(unsigned mask = 0xffffffffu);
int __ffs(int);
int __dp4a(int, int, int);
unsigned __dp4a(unsigned, unsigned, unsigned);
unsigned __byte_perm(unsigned, unsigned, unsigned);
__half2 __hfma2(__half2, __half2, __half2);
int __shfl_sync(unsigned, int, int, int width = 32);
unsigned __shfl_sync(unsigned, unsigned, int, int width = 32);
float __shfl_sync(unsigned, float, int, int width = 32);
