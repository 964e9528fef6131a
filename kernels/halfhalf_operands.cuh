// halfhalf's memory passes around the GEMM (seed 000 eqs. 19-22, 4.1.1): scale by a power of two and split each
// FP32 element into FP16 hi and lo·2^11 packed in one 32-bit word, once per element instead of once per warp
// that reads it; and multiply the product back by the shifts. Torch-free; exported by every kernel library.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "launcher_abi.h"

namespace cutlass_ext {

constexpr float kHalfHalfLoScale = 2048.0f;

// The bits of 2^shift for |shift| <= 126 (a normal FP32 number: multiplying by it changes no mantissa bit).
__device__ __forceinline__ float power_of_two(int shift) { return __int_as_float((shift + 127) << 23); }

// hi = RN_fp16(x) in the low half, lo = RN_fp16((x - hi)·2^11) in the high half. An infinite or NaN hi gets
// lo = 0 so that Inf times a finite value stays Inf instead of Inf - Inf.
__device__ __forceinline__ uint32_t pack_halfhalf(float x) {
  __half hi = __float2half_rn(x);
  float hi_value = __half2float(hi);
  float remainder = fabsf(hi_value) < INFINITY ? x - hi_value : 0.0f;
  __half lo = __float2half_rn(remainder * kHalfHalfLoScale);
  return uint32_t(__half_as_ushort(hi)) | (uint32_t(__half_as_ushort(lo)) << 16);
}

// One thread per 4 consecutive elements of a line (the innermost, unit-stride dimension); lines grid-strided.
__global__ void halfhalf_pack_kernel(cutlass_ext_pack_args args) {
  int64_t column = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (column >= args.inner) return;
  for (int64_t line = blockIdx.y; line < args.outer * args.middle; line += gridDim.y) {
    int64_t outer = line / args.middle, middle = line % args.middle;
    const float* x = args.x + line * args.inner;
    uint32_t* out = static_cast<uint32_t*>(args.out) + line * args.inner;
    const int32_t* shift = args.shift + outer * args.shift_stride_outer + middle * args.shift_stride_middle;
    if (args.vectorized && column + 4 <= args.inner) {  // 16-byte loads and stores
      float4 v = *reinterpret_cast<const float4*>(x + column);
      auto scale = [&](int64_t i) { return power_of_two(shift[i * args.shift_stride_inner]); };
      *reinterpret_cast<uint4*>(out + column) =
          make_uint4(pack_halfhalf(v.x * scale(column)), pack_halfhalf(v.y * scale(column + 1)),
                     pack_halfhalf(v.z * scale(column + 2)), pack_halfhalf(v.w * scale(column + 3)));
      continue;
    }
    for (int64_t i = column; i < column + 4 && i < args.inner; ++i) {
      out[i] = pack_halfhalf(x[i] * power_of_two(shift[i * args.shift_stride_inner]));
    }
  }
}

// c · 2^-(row_shift + column_shift), rounded once (scalbnf) however far the two shifts reach together.
__global__ void halfhalf_unscale_kernel(cutlass_ext_unscale_args args) {
  int64_t column = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (column >= args.n) return;
  for (int64_t line = blockIdx.y; line < args.batch * args.m; line += gridDim.y) {
    int64_t batch = line / args.m, row = line % args.m;
    int shift = args.row_shift[batch * args.row_shift_batch_stride + row * args.row_shift_stride] +
                args.column_shift[batch * args.column_shift_batch_stride + column * args.column_shift_stride];
    args.out[line * args.n + column] = scalbnf(args.c[line * args.n + column], -shift);
  }
}

inline dim3 line_grid(int64_t columns_per_block, int64_t inner, int64_t lines) {
  return dim3(unsigned((inner + columns_per_block - 1) / columns_per_block), unsigned(lines < 65535 ? lines : 65535));
}

}  // namespace cutlass_ext

// 0 or a cudaError_t; an empty problem launches nothing.
#define CUTLASS_EXT_EXPORT_HALFHALF_OPERANDS()                                                            \
  extern "C" int cutlass_ext_halfhalf_pack(const cutlass_ext_pack_args* args, void* stream) {            \
    if (args->outer * args->middle * args->inner == 0) return 0;                                          \
    constexpr int kThreads = 256;                                                                         \
    cutlass_ext_pack_args launch = *args;                                                                 \
    launch.vectorized = args->inner % 4 == 0 && reinterpret_cast<uintptr_t>(args->x) % 16 == 0 &&         \
                        reinterpret_cast<uintptr_t>(args->out) % 16 == 0;                                 \
    cutlass_ext::halfhalf_pack_kernel<<<cutlass_ext::line_grid(4 * kThreads, args->inner,                 \
                                                               args->outer * args->middle),               \
                                        kThreads, 0, static_cast<cudaStream_t>(stream)>>>(launch);        \
    return int(cudaGetLastError());                                                                       \
  }                                                                                                       \
  extern "C" int cutlass_ext_halfhalf_unscale(const cutlass_ext_unscale_args* args, void* stream) {      \
    if (args->batch * args->m * args->n == 0) return 0;                                                   \
    constexpr int kThreads = 256;                                                                         \
    cutlass_ext::halfhalf_unscale_kernel<<<cutlass_ext::line_grid(kThreads, args->n, args->batch * args->m), \
                                           kThreads, 0, static_cast<cudaStream_t>(stream)>>>(*args);      \
    return int(cudaGetLastError());                                                                       \
  }
