// halfhalf's memory passes around the GEMM (seed 000 eqs. 19-22, 4.1.1): scale by a power of two and split each
// FP32 element into FP16 hi and lo·2^11 packed in one 32-bit word, once per element instead of once per warp
// that reads it, written row-major whatever the input's strides; and multiply the product back by the shifts.
// Torch-free; exported by every kernel library.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "launcher_abi.h"

namespace cutlass_ext {

constexpr float kHalfHalfLoScale = 2048.0f;

// Both passes work on 32 x 32 tiles of the (row-major) output with 32 x 8 threads, 4 rows each.
constexpr int kTile = 32, kTileRowsPerPass = 8;

// 2^shift for |shift| <= 126: a normal FP32 number, so multiplying by it changes no mantissa bit.
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

// Tiles are grid-strided in y (rows) and z (batch) so that any extent fits the grid's limits.
#define CUTLASS_EXT_FOR_EACH_TILE(BATCH, ROWS)                                                  \
  for (int64_t batch = blockIdx.z; batch < (BATCH); batch += gridDim.z)                        \
    for (int64_t row0 = int64_t(blockIdx.y) * kTile; row0 < (ROWS); row0 += int64_t(gridDim.y) * kTile)

__global__ void halfhalf_pack_kernel(cutlass_ext_pack_args args) {
  __shared__ float tile[kTile][kTile + 1];  // [column][row] of a column-major input; +1 against bank conflicts
  const int64_t column0 = int64_t(blockIdx.x) * kTile;
  // A column-major input is read down its columns (unit stride) and transposed through shared memory.
  const bool transpose = args.x_stride_row == 1 && args.x_stride_column != 1;
  CUTLASS_EXT_FOR_EACH_TILE(args.batch, args.rows) {
    const float* x = args.x + batch * args.x_stride_batch;
    if (transpose) {
      __syncthreads();  // the previous tile's readers are done
      for (int j = threadIdx.y; j < kTile; j += kTileRowsPerPass) {
        int64_t row = row0 + threadIdx.x, column = column0 + j;
        if (row < args.rows && column < args.columns) tile[j][threadIdx.x] = x[row + column * args.x_stride_column];
      }
      __syncthreads();
    }
    for (int i = threadIdx.y; i < kTile; i += kTileRowsPerPass) {
      int64_t row = row0 + i, column = column0 + threadIdx.x;
      if (row >= args.rows || column >= args.columns) continue;
      float value = transpose ? tile[threadIdx.x][i] : x[row * args.x_stride_row + column * args.x_stride_column];
      int shift = args.shift[batch * args.shift_stride_batch + row * args.shift_stride_row +
                             column * args.shift_stride_column];
      static_cast<uint32_t*>(args.out)[(batch * args.rows + row) * args.columns + column] =
          pack_halfhalf(value * power_of_two(shift));
    }
  }
}

// c · 2^-(row_shift + column_shift) with one rounding: the factor (|exponent| <= 252) is exact in FP64.
__global__ void halfhalf_unscale_kernel(cutlass_ext_unscale_args args) {
  const int64_t column = int64_t(blockIdx.x) * kTile + threadIdx.x;
  if (column >= args.n) return;
  CUTLASS_EXT_FOR_EACH_TILE(args.batch, args.m) {
    int column_shift = args.column_shift[batch * args.column_shift_batch_stride + column * args.column_shift_stride];
    for (int i = threadIdx.y; i < kTile && row0 + i < args.m; i += kTileRowsPerPass) {
      int64_t row = row0 + i, index = (batch * args.m + row) * args.n + column;
      int shift = args.row_shift[batch * args.row_shift_batch_stride + row * args.row_shift_stride] + column_shift;
      double factor = __longlong_as_double((long long)(1023 - shift) << 52);
      args.out[index] = float(double(args.c[index]) * factor);
    }
  }
}

#undef CUTLASS_EXT_FOR_EACH_TILE

inline dim3 tile_grid(int64_t batch, int64_t rows, int64_t columns) {
  auto tiles = [](int64_t extent) { return (extent + kTile - 1) / kTile; };
  auto capped = [](int64_t count, int64_t limit) { return unsigned(count < limit ? count : limit); };
  return dim3(unsigned(tiles(columns)), capped(tiles(rows), 65535), capped(batch, 65535));
}

}  // namespace cutlass_ext

// 0 or a cudaError_t; an empty problem launches nothing.
#define CUTLASS_EXT_EXPORT_HALFHALF_OPERANDS()                                                              \
  extern "C" int cutlass_ext_halfhalf_pack(const cutlass_ext_pack_args* args, void* stream) {              \
    if (args->batch * args->rows * args->columns == 0) return 0;                                            \
    cutlass_ext::halfhalf_pack_kernel<<<cutlass_ext::tile_grid(args->batch, args->rows, args->columns),     \
                                        dim3(cutlass_ext::kTile, cutlass_ext::kTileRowsPerPass), 0,         \
                                        static_cast<cudaStream_t>(stream)>>>(*args);                        \
    return int(cudaGetLastError());                                                                         \
  }                                                                                                         \
  extern "C" int cutlass_ext_halfhalf_unscale(const cutlass_ext_unscale_args* args, void* stream) {        \
    if (args->batch * args->m * args->n == 0) return 0;                                                     \
    cutlass_ext::halfhalf_unscale_kernel<<<cutlass_ext::tile_grid(args->batch, args->m, args->n),           \
                                           dim3(cutlass_ext::kTile, cutlass_ext::kTileRowsPerPass), 0,      \
                                           static_cast<cudaStream_t>(stream)>>>(*args);                     \
    return int(cudaGetLastError());                                                                         \
  }
