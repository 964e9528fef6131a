// The Ozaki-II operand pass (row shifts, INT8 residue planes) and recombination (CRT, scale back to FP32).
#pragma once

#include <cuda_runtime.h>

#include "ozaki_abi.h"
#include "ozaki_arith.cuh"

namespace cutlass_ext {
namespace ozaki {

constexpr int kTileRows = 32;
constexpr int kTileK = 128;
constexpr int kPassThreads = 256;
constexpr int kRowsPerWarp = kTileRows / (kPassThreads / 32);

// A kTileRows x kTileK tile of x into shared memory, zero outside the matrix; the threads of a warp read along
// whichever of row and k is contiguous, so the loads coalesce for x and for its transpose alike. Where that
// direction's 16-byte groups are aligned and inside the matrix, each thread issues its four float4 loads before
// storing any: four times the bytes in flight of a float per load (design notes §9).
__device__ __forceinline__ void load_tile(float (&tile)[kTileRows][kTileK + 1],
                                          const cutlass_ext_ozaki_scale_args& args, const float* x, int64_t row0,
                                          int64_t k0) {
  const bool k_contiguous = args.x_k_stride == 1 || args.x_row_stride != 1;
  const int64_t unit_stride = k_contiguous ? args.x_k_stride : args.x_row_stride;  // 1 unless x is strided both ways
  const int64_t other_stride = k_contiguous ? args.x_row_stride : args.x_k_stride;
  const bool whole = row0 + kTileRows <= args.rows && k0 + kTileK <= args.k;
  const bool vector =
      whole && unit_stride == 1 && other_stride % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (vector) {
    constexpr int kVectors = kTileRows * kTileK / 4 / kPassThreads;
    float4 v[kVectors];
#pragma unroll
    for (int j = 0; j < kVectors; ++j) {
      const int i = threadIdx.x + j * kPassThreads;
      // k contiguous: 32 float4 along a row; rows contiguous: 8 float4 down a k
      const int row = k_contiguous ? i / (kTileK / 4) : 4 * (i % (kTileRows / 4));
      const int kk = k_contiguous ? 4 * (i % (kTileK / 4)) : i / (kTileRows / 4);
      v[j] = *reinterpret_cast<const float4*>(x + (row0 + row) * args.x_row_stride + (k0 + kk) * args.x_k_stride);
    }
#pragma unroll
    for (int j = 0; j < kVectors; ++j) {
      const int i = threadIdx.x + j * kPassThreads;
      const int row = k_contiguous ? i / (kTileK / 4) : 4 * (i % (kTileRows / 4));
      const int kk = k_contiguous ? 4 * (i % (kTileK / 4)) : i / (kTileRows / 4);
      const float values[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if (k_contiguous) {
          tile[row][kk + c] = values[c];
        } else {
          tile[row + c][kk] = values[c];
        }
      }
    }
    return;
  }
#pragma unroll 4
  for (int i = threadIdx.x; i < kTileRows * kTileK; i += kPassThreads) {
    const int row = k_contiguous ? i / kTileK : i % kTileRows;
    const int kk = k_contiguous ? i % kTileK : i / kTileRows;
    const int64_t r = row0 + row, k = k0 + kk;
    tile[row][kk] = (r < args.rows && k < args.k) ? x[r * args.x_row_stride + k * args.x_k_stride] : 0.0f;
  }
}

// Partial sums of squares over k-slices of kNormSliceK: norms[(b · slices + slice) · rows + row], each row's slice
// summed by one thread in k order (the same order for every layout, so the shifts equal the reference's). Each warp
// load is one 128-byte line: rows contiguous (a row-major B), a warp reads 32 rows at one k, 16 k per batch of
// loads; k contiguous (a row-major A), a warp reads 32 k of one row into shared memory and each thread then sums
// its row from there (one line per load rather than 32: 2.7x the speed of a thread walking its row; 8192² on an
// H100: 99 µs, rows contiguous 91).
constexpr int kNormThreads = 128;
constexpr int kNormChunk = 32;     // k per shared-memory stage (k contiguous)
constexpr int kNormRowChunk = 16;  // k per batch of loads (rows contiguous): 16 beat 8; 32 ran 4x slower

template <bool kStaged>
__global__ void __launch_bounds__(kNormThreads) norm_kernel(const cutlass_ext_ozaki_scale_args args) {
  const int64_t row0 = int64_t(blockIdx.x) * kNormThreads, row = row0 + threadIdx.x, b = blockIdx.z;
  const int64_t slice = blockIdx.y, slices = gridDim.y;
  const int64_t k_begin = slice * kNormSliceK, k_end = min(args.k, k_begin + kNormSliceK);
  const float* x = args.x + b * args.x_batch_stride;
  double sum = 0.0;  // squares are >= 0: the zeros loaded past k_end leave it unchanged
  if constexpr (kStaged) {
    __shared__ float tile[kNormThreads][kNormChunk + 1];  // +1: conflict-free rows and columns
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    constexpr int kWarps = kNormThreads / 32, kWarpRows = kNormThreads / kWarps;
    for (int64_t k0 = k_begin; k0 < k_end; k0 += kNormChunk) {
      float v[kWarpRows];
      const int64_t k = k0 + lane;
      const float* source = x + (row0 + warp) * args.x_row_stride + k;  // x_k_stride == 1
      const int64_t step = kWarps * args.x_row_stride;
      const int rows_left = int(min(int64_t(kNormThreads), args.rows - row0)) - warp;  // rows j·kWarps < rows_left
#pragma unroll
      for (int j = 0; j < kWarpRows; ++j, source += step) {
        v[j] = (kWarps * j < rows_left && k < k_end) ? *source : 0.0f;
      }
      __syncthreads();  // the previous chunk is summed
#pragma unroll
      for (int j = 0; j < kWarpRows; ++j) tile[warp + kWarps * j][lane] = v[j];
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kNormChunk; ++kk) {
        const double value = tile[threadIdx.x][kk];
        sum = fma(value, value, sum);  // exact square (48 bits), one rounding per add
      }
    }
  } else {
    if (row >= args.rows) return;
    const int64_t k_stride = args.x_k_stride;
    const float* source = x + row * args.x_row_stride + k_begin * k_stride;
    int64_t k = k_begin;
    for (; k + kNormRowChunk <= k_end; k += kNormRowChunk, source += kNormRowChunk * k_stride) {
      float v[kNormRowChunk];  // whole chunks unpredicated: the loads issue back to back
#pragma unroll
      for (int j = 0; j < kNormRowChunk; ++j) v[j] = source[j * k_stride];
#pragma unroll
      for (int j = 0; j < kNormRowChunk; ++j) {
        const double value = v[j];
        sum = fma(value, value, sum);
      }
    }
    for (; k < k_end; ++k, source += k_stride) {
      const double value = *source;
      sum = fma(value, value, sum);
    }
  }
  if (row < args.rows) args.norms[(b * slices + slice) * args.rows + row] = sum;
}

// Residue planes of a kTileRows x kTileK tile; the row's shift from the slices' sums (in slice order).
template <int kCount, int kBudget>
__global__ void __launch_bounds__(kPassThreads) residue_kernel(const cutlass_ext_ozaki_scale_args args, int slices) {
  __shared__ float tile[kTileRows][kTileK + 1];
  __shared__ int row_shift[kTileRows];
  const int64_t row0 = int64_t(blockIdx.x) * kTileRows, k0 = int64_t(blockIdx.y) * kTileK, b = blockIdx.z;
  if (threadIdx.x < kTileRows) {
    const int64_t row = row0 + threadIdx.x;
    int shift = 0;
    if (row < args.rows) {
      double squares = 0.0;
      for (int s = 0; s < slices; ++s) squares += args.norms[(b * slices + s) * args.rows + row];
      shift = shift_from_squares(squares, kBudget);
      if (blockIdx.y == 0) args.shifts[b * args.rows + row] = shift;
    }
    row_shift[threadIdx.x] = shift;
  }
  load_tile(tile, args, args.x + b * args.x_batch_stride, row0, k0);
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t k = k0 + 4 * lane;
  if (k >= args.k_pitch) return;
  const int64_t plane_elements = args.batch * args.rows_pitch * args.k_pitch;
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) {
    const int row = warp + 8 * j;
    if (row0 + row >= args.rows_pitch) break;  // rows past `rows` were loaded as zeros: their residues are 0
    uint32_t bytes[4][kCount];
    // A row holding Inf or NaN: its residues are 0 (masked after the arithmetic, which runs on a unit scale).
    const bool finite = row_shift[row] != kNonFiniteShift;
    const int shift = finite ? row_shift[row] : 0;
    const uint32_t keep = finite ? ~0u : 0u;
    if constexpr (kBudget <= 31) {
      // |round(x·2^s)| ≤ 2^kBudget·(1 + 2^-30) + 1/2 < 2^32: an FP32 integer, reduced on the FP32 pipe.
      const FloatScale scale(shift);
#pragma unroll
      for (int c = 0; c < 4; ++c) residue_bytes<kCount>(scaled_float(tile[row][4 * lane + c], scale), bytes[c]);
    } else {
      const double scale = pow2(shift);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        int r[kCount];
        residues<kCount>(scaled_integer(finite ? tile[row][4 * lane + c] : 0.0f, scale), r);  // no Inf to int64
#pragma unroll
        for (int l = 0; l < kCount; ++l) bytes[c][l] = uint32_t(r[l]) & 255u;
      }
    }
    int8_t* out = args.planes + (b * args.rows_pitch + row0 + row) * args.k_pitch + k;
#pragma unroll
    for (int l = 0; l < kCount; ++l) {
      const uint32_t packed = (bytes[0][l] | (bytes[1][l] << 8) | (bytes[2][l] << 16) | (bytes[3][l] << 24)) & keep;
      *reinterpret_cast<uint32_t*>(out + l * plane_elements) = packed;
    }
  }
}

template <int kCount, int kBudget>
int run_scale(const cutlass_ext_ozaki_scale_args* args, void* stream) {
  if (args->rows == 0 || args->batch == 0 || args->k_pitch == 0) return 0;
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  const int slices = int((args->k + kNormSliceK - 1) / kNormSliceK);
  const dim3 norm_grid(unsigned((args->rows + kNormThreads - 1) / kNormThreads), unsigned(slices),
                       unsigned(args->batch));
  if (slices > 0) {
    // staged through shared memory where k is the contiguous index and rows are not
    if (args->x_k_stride == 1 && args->x_row_stride != 1) {
      norm_kernel<true><<<norm_grid, kNormThreads, 0, cuda_stream>>>(*args);
    } else {
      norm_kernel<false><<<norm_grid, kNormThreads, 0, cuda_stream>>>(*args);
    }
  }
  const dim3 residue_grid(unsigned((args->rows_pitch + kTileRows - 1) / kTileRows),
                          unsigned((args->k_pitch + kTileK - 1) / kTileK), unsigned(args->batch));
  residue_kernel<kCount, kBudget><<<residue_grid, kPassThreads, 0, cuda_stream>>>(*args, slices);
  return int(cudaGetLastError());
}

constexpr int kRecombineThreads = 128;
constexpr int kRecombineColumns = 4;  // per thread: one 4-byte word of INT8 residues or 16 bytes of INT32 products

template <class Product>
__device__ __forceinline__ void load_columns(const Product* source, int32_t (&out)[kRecombineColumns]) {
  if constexpr (sizeof(Product) == 1) {
    const uint32_t word = *reinterpret_cast<const uint32_t*>(source);
#pragma unroll
    for (int c = 0; c < kRecombineColumns; ++c) out[c] = int32_t(int8_t(word >> (8 * c)));
  } else {
    const int4 words = *reinterpret_cast<const int4*>(source);
    out[0] = words.x, out[1] = words.y, out[2] = words.z, out[3] = words.w;
  }
}

// kRecombineColumns adjacent outputs per thread (the pitch pads every row to whole groups).
template <int kCount, class Product>
__global__ void __launch_bounds__(kRecombineThreads) recombine_kernel(const cutlass_ext_ozaki_recombine_args args) {
  const int64_t column0 = (int64_t(blockIdx.x) * kRecombineThreads + threadIdx.x) * kRecombineColumns;
  const int64_t b = blockIdx.z;
  if (column0 >= args.n) return;
  const int64_t plane_elements = args.batch * args.m * args.n_pitch;
  int shift_b[kRecombineColumns];
#pragma unroll
  for (int c = 0; c < kRecombineColumns; ++c) {
    shift_b[c] = column0 + c < args.n ? args.shift_b[b * args.n + column0 + c] : 0;
  }
  for (int64_t row = blockIdx.y; row < args.m; row += gridDim.y) {
    const Product* source = static_cast<const Product*>(args.products) + (b * args.m + row) * args.n_pitch + column0;
    int32_t products[kRecombineColumns][kCount];
#pragma unroll
    for (int l = 0; l < kCount; ++l) {
      int32_t values[kRecombineColumns];
      load_columns(source + l * plane_elements, values);
#pragma unroll
      for (int c = 0; c < kRecombineColumns; ++c) products[c][l] = values[c];
    }
    const int shift_a = args.shift_a[b * args.m + row];
    float* out = args.out + b * args.out_batch_stride + row * args.out_row_stride;
#pragma unroll
    for (int c = 0; c < kRecombineColumns; ++c) {
      if (column0 + c < args.n) {
        out[(column0 + c) * args.out_column_stride] =
            recombine<kCount, sizeof(Product) == 1>(products[c], shift_a, shift_b[c]);
      }
    }
  }
}

template <int kCount, class Product>
int run_recombine(const cutlass_ext_ozaki_recombine_args* args, void* stream) {
  if (args->m == 0 || args->n == 0 || args->batch == 0) return 0;
  constexpr int kColumnsPerBlock = kRecombineThreads * kRecombineColumns;
  const dim3 grid(unsigned((args->n + kColumnsPerBlock - 1) / kColumnsPerBlock),
                  unsigned(args->m < 65535 ? args->m : 65535), unsigned(args->batch));
  recombine_kernel<kCount, Product><<<grid, kRecombineThreads, 0, static_cast<cudaStream_t>(stream)>>>(*args);
  return int(cudaGetLastError());
}

}  // namespace ozaki
}  // namespace cutlass_ext
