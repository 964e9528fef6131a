// halfhalf's memory passes around the GEMM (seed 000 eqs. 19-22, 4.1.1): scale by a power of two and split each
// FP32 element into FP16 hi and lo·2^11 packed in one 32-bit word, once per element instead of once per warp
// that reads it, written row-major whatever the input's strides; and multiply the product back by the shifts.
// Torch-free; exported by every kernel library.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cutlass/cutlass.h"

#include "launcher_abi.h"
#include "range_shift_abi.h"

namespace cutlass_ext {

constexpr float kHalfHalfLoScale = 2048.0f;

// Both passes work on 32 x 32 tiles of the (row-major) output with 32 x 8 threads, 4 rows each.
constexpr int kTile = 32, kTileRowsPerPass = 8;

CUTLASS_HOST_DEVICE int64_t tiles_of(int64_t extent, int64_t tile) { return (extent + tile - 1) / tile; }
// Grid y and z stop at 65535 blocks; the kernels walk the tiles beyond in strides of the grid.
inline unsigned capped(int64_t blocks) { return unsigned(blocks < 65535 ? blocks : 65535); }

// The 32 x 32 tile kernels' grid: x over columns, y over rows, z over the batch.
inline dim3 tile_grid(int64_t batch, int64_t rows, int64_t columns) {
  return dim3(unsigned(tiles_of(columns, kTile)), capped(tiles_of(rows, kTile)), capped(batch));
}

// 2^shift for |shift| <= 126: a normal FP32 number, so multiplying by it changes no mantissa bit.
__device__ __forceinline__ float power_of_two(int shift) { return __int_as_float((shift + 127) << 23); }

// hi = RN_fp16(x) and lo = RN_fp16((x - hi)·2^11). An infinite or NaN hi gets lo = 0 so that Inf times a
// finite value stays Inf instead of Inf - Inf.
struct HalfHalfSplit {
  __half hi, lo;
  __device__ __forceinline__ explicit HalfHalfSplit(float x) {
    hi = __float2half_rn(x);
    float hi_value = __half2float(hi);
    float remainder = fabsf(hi_value) < INFINITY ? x - hi_value : 0.0f;
    lo = __float2half_rn(remainder * kHalfHalfLoScale);
  }
};

// TF32 hi and lo, each rounded to nearest (ties away) and stored with its low 13 bits zero, so that x - hi is
// exact (seed 3.3). Integer ops, not the conversion unit; Inf or NaN hi gets lo = 0 as above.
struct Tf32Tf32Split {
  float hi, lo;
  __device__ __forceinline__ static float round(float x) {
    return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
  }
  __device__ __forceinline__ explicit Tf32Tf32Split(float x) {
    hi = round(x);
    lo = fabsf(hi) < INFINITY ? round(x - hi) : 0.0f;
  }
};

// What a split pass reads: `batch` (rows, columns) FP32 matrices with any strides, element (b, r, c) scaled by
// 2^shift[b, r, c] (no scaling where shift is null). Columns from `columns` up to `written_columns` are written
// as zeros (the padding of split_planes' rows).
struct SplitSource {
  const float* x;
  int64_t batch, rows, columns, written_columns;
  int64_t x_stride_batch, x_stride_row, x_stride_column;
  const int32_t* shift;
  int64_t shift_stride_batch, shift_stride_row, shift_stride_column;
};

// halfhalf_pack's output: hi in the low half and lo·2^11 in the high half of each 32-bit word, dense row-major.
struct PackedWriter {
  uint32_t* out;
  int64_t rows, columns;
  __device__ __forceinline__ void operator()(int64_t batch, int64_t row, int64_t column, float x) const {
    HalfHalfSplit split(x);
    out[(batch * rows + row) * columns + column] = pack(split);
  }
  // four neighbours of a row (column a multiple of 4, columns too): one 16-byte store
  __device__ __forceinline__ void write4(int64_t batch, int64_t row, int64_t column, const float (&x)[4]) const {
    uint4 words{pack(HalfHalfSplit(x[0])), pack(HalfHalfSplit(x[1])), pack(HalfHalfSplit(x[2])),
                pack(HalfHalfSplit(x[3]))};
    *reinterpret_cast<uint4*>(out + (batch * rows + row) * columns + column) = words;
  }
  __device__ __forceinline__ static uint32_t pack(HalfHalfSplit split) {
    return uint32_t(__half_as_ushort(split.hi)) | (uint32_t(__half_as_ushort(split.lo)) << 16);
  }
};

// split_planes' output: two row-major planes, rows `ld` elements apart.
template <class Split, class Element>
struct PlanesWriter {
  Element* hi;
  Element* lo;
  int64_t rows, ld;
  __device__ __forceinline__ void operator()(int64_t batch, int64_t row, int64_t column, float x) const {
    Split split(x);
    int64_t index = (batch * rows + row) * ld + column;
    hi[index] = split.hi;
    lo[index] = split.lo;
  }
  // four neighbours of a row (column a multiple of 4, ld too): one vector store per plane
  __device__ __forceinline__ void write4(int64_t batch, int64_t row, int64_t column, const float (&x)[4]) const {
    struct alignas(4 * sizeof(Element)) Four {
      Element v[4];
    } hi4, lo4;
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < 4; ++j) {
      Split split(x[j]);
      hi4.v[j] = split.hi;
      lo4.v[j] = split.lo;
    }
    int64_t index = (batch * rows + row) * ld + column;
    *reinterpret_cast<Four*>(hi + index) = hi4;
    *reinterpret_cast<Four*>(lo + index) = lo4;
  }
};

// Tiles are grid-strided in y (rows) and z (batch) so that any extent fits the grid's limits.
#define CUTLASS_EXT_FOR_EACH_TILE(BATCH, ROWS)                                                  \
  for (int64_t batch = blockIdx.z; batch < (BATCH); batch += gridDim.z)                        \
    for (int64_t row0 = int64_t(blockIdx.y) * kTile; row0 < (ROWS); row0 += int64_t(gridDim.y) * kTile)

// Reads each element of the source once, scales it, and hands it to `write`.
template <class Writer>
__global__ void split_kernel(SplitSource args, Writer write) {
  __shared__ float tile[kTile][kTile + 1];  // [column][row] of a column-major input; +1 against bank conflicts
  constexpr int kRowsPerThread = kTile / kTileRowsPerPass;
  const int64_t column = int64_t(blockIdx.x) * kTile + threadIdx.x;
  const bool column_in = column < args.columns, column_written = column < args.written_columns;
  // A column-major input is read down its columns (unit stride) and transposed through shared memory.
  const bool transpose = args.x_stride_row == 1 && args.x_stride_column != 1;
  const float* __restrict__ x_all = args.x;
  const int32_t* __restrict__ shift_all = args.shift;
  CUTLASS_EXT_FOR_EACH_TILE(args.batch, args.rows) {
    const float* __restrict__ x = x_all + batch * args.x_stride_batch;
    float values[kRowsPerThread];
    int shifts[kRowsPerThread];
    if (transpose) {
      __syncthreads();  // the previous tile's readers are done
      const int64_t read_row = row0 + threadIdx.x;
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kRowsPerThread; ++j) {
        int64_t read_column = int64_t(blockIdx.x) * kTile + threadIdx.y + j * kTileRowsPerPass;
        if (read_row < args.rows && read_column < args.columns) {
          tile[threadIdx.y + j * kTileRowsPerPass][threadIdx.x] = x[read_row + read_column * args.x_stride_column];
        }
      }
      __syncthreads();
    }
    // every load of the tile first (independent, in flight together), then the stores
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kRowsPerThread; ++j) {
      int i = threadIdx.y + j * kTileRowsPerPass;
      int64_t row = row0 + i;
      bool in = column_in && row < args.rows;
      values[j] = !in ? 0.0f
                      : (transpose ? tile[threadIdx.x][i] : x[row * args.x_stride_row + column * args.x_stride_column]);
      shifts[j] = in && shift_all != nullptr ? shift_all[batch * args.shift_stride_batch + row * args.shift_stride_row +
                                                         column * args.shift_stride_column]
                                             : 0;
    }
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kRowsPerThread; ++j) {
      int64_t row = row0 + threadIdx.y + j * kTileRowsPerPass;
      if (column_written && row < args.rows) write(batch, row, column, values[j] * power_of_two(shifts[j]));
    }
  }
}

// split_kernel for rows stored contiguously (unit column stride, rows starting on 16 bytes, columns and
// written_columns multiples of 4; see rows_contiguous): each thread reads four neighbours with one 16-byte load and
// writes them with one vector store per output, where split_kernel's scalar accesses reach ~65% of copy bandwidth.
template <class Writer>
__global__ void split_rows_kernel(SplitSource args, Writer write) {
  const int64_t column = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (column >= args.written_columns) return;
  const bool in = column < args.columns;  // a group of four is wholly in or wholly padding
  const float* __restrict__ x_all = args.x;
  const int32_t* __restrict__ shift_all = args.shift;
  for (int64_t batch = blockIdx.z; batch < args.batch; batch += gridDim.z) {
    for (int64_t row = blockIdx.y; row < args.rows; row += gridDim.y) {
      float values[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (in) {
        float4 x = *reinterpret_cast<const float4*>(x_all + batch * args.x_stride_batch + row * args.x_stride_row +
                                                    column);
        values[0] = x.x, values[1] = x.y, values[2] = x.z, values[3] = x.w;
        if (shift_all != nullptr) {
          const int32_t* shift = shift_all + batch * args.shift_stride_batch + row * args.shift_stride_row;
          CUTLASS_PRAGMA_UNROLL
          for (int j = 0; j < 4; ++j) values[j] *= power_of_two(shift[(column + j) * args.shift_stride_column]);
        }
      }
      write.write4(batch, row, column, values);
    }
  }
}

// split_kernel for inputs read down their columns (unit row stride: a transposed row-major matrix such as the
// Bᵀ of a row-major B), in 32 x 128 output tiles through shared memory: 16-byte loads down the input's columns,
// then four neighbours of an output row per vector store. Same alignment needs as split_rows_kernel, with rows
// and the column stride in place of columns and the row stride (see columns_contiguous).
constexpr int kColumnTileRows = 32, kColumnTileColumns = 128, kColumnThreads = 256;

template <class Writer>
__global__ void split_columns_kernel(SplitSource args, Writer write) {
  __shared__ float tile[kColumnTileRows][kColumnTileColumns + 1];  // +1: the loads' scattered writes miss conflicts
  const int64_t column0 = int64_t(blockIdx.x) * kColumnTileColumns;
  const int t = threadIdx.x;
  const float* __restrict__ x_all = args.x;
  const int32_t* __restrict__ shift_all = args.shift;
  for (int64_t batch = blockIdx.z; batch < args.batch; batch += gridDim.z) {
    const float* __restrict__ x = x_all + batch * args.x_stride_batch;
    for (int64_t row0 = int64_t(blockIdx.y) * kColumnTileRows; row0 < args.rows;
         row0 += int64_t(gridDim.y) * kColumnTileRows) {
      __syncthreads();  // the previous tile's readers are done
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kColumnTileColumns * kColumnTileRows / 4 / kColumnThreads; ++i) {
        const int quad = t % (kColumnTileRows / 4), c = t / (kColumnTileRows / 4) + i * (kColumnThreads * 4 / kColumnTileRows);
        const int64_t column = column0 + c, row = row0 + 4 * quad;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (column < args.columns && row < args.rows) {
          v = *reinterpret_cast<const float4*>(x + row + column * args.x_stride_column);
        }
        tile[4 * quad + 0][c] = v.x, tile[4 * quad + 1][c] = v.y, tile[4 * quad + 2][c] = v.z, tile[4 * quad + 3][c] = v.w;
      }
      __syncthreads();
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kColumnTileColumns * kColumnTileRows / 4 / kColumnThreads; ++j) {
        const int group = t % (kColumnTileColumns / 4), r = t / (kColumnTileColumns / 4) + j * (kColumnThreads * 4 / kColumnTileColumns);
        const int64_t row = row0 + r, column = column0 + 4 * group;
        if (row >= args.rows || column >= args.written_columns) continue;
        float values[4] = {tile[r][4 * group], tile[r][4 * group + 1], tile[r][4 * group + 2], tile[r][4 * group + 3]};
        if (shift_all != nullptr && column < args.columns) {
          const int32_t* shift = shift_all + batch * args.shift_stride_batch + row * args.shift_stride_row;
          CUTLASS_PRAGMA_UNROLL
          for (int k = 0; k < 4; ++k) values[k] *= power_of_two(shift[(column + k) * args.shift_stride_column]);
        }
        write.write4(batch, row, column, values);
      }
    }
  }
}

constexpr int kRowThreads = 256;

// What both vector kernels need: 16-byte aligned x, whole groups of four columns in and out, batches 16 bytes apart.
inline bool whole_vectors(const SplitSource& args) {
  return args.columns % 4 == 0 && args.written_columns % 4 == 0 && (args.batch <= 1 || args.x_stride_batch % 4 == 0) &&
         reinterpret_cast<uintptr_t>(args.x) % 16 == 0;
}

// split_rows_kernel: unit column stride, rows 16 bytes apart.
inline bool rows_contiguous(const SplitSource& args) {
  return args.x_stride_column == 1 && (args.rows <= 1 || args.x_stride_row % 4 == 0) && whole_vectors(args);
}

// split_columns_kernel: unit row stride, columns 16 bytes apart, whole groups of four rows.
inline bool columns_contiguous(const SplitSource& args) {
  return args.x_stride_row == 1 && args.rows % 4 == 0 && (args.columns <= 1 || args.x_stride_column % 4 == 0) &&
         whole_vectors(args);
}

// Runs the split pass over `source` with `writer`: vectorized where rows or columns are contiguous.
template <class Writer>
void launch_split(const SplitSource& source, const Writer& writer, cudaStream_t stream) {
  const int64_t columns = source.written_columns;
  if (rows_contiguous(source)) {
    dim3 grid(unsigned(tiles_of(columns / 4, kRowThreads)), capped(source.rows), capped(source.batch));
    split_rows_kernel<<<grid, kRowThreads, 0, stream>>>(source, writer);
  } else if (columns_contiguous(source)) {
    dim3 grid(unsigned(tiles_of(columns, kColumnTileColumns)), capped(tiles_of(source.rows, kColumnTileRows)),
              capped(source.batch));
    split_columns_kernel<<<grid, kColumnThreads, 0, stream>>>(source, writer);
  } else {
    split_kernel<<<tile_grid(source.batch, source.rows, columns), dim3(kTile, kTileRowsPerPass), 0, stream>>>(source,
                                                                                                            writer);
  }
}

// c · 2^-shift with one rounding: the factor (|shift| <= 252) is exact in FP64. Then gemm's epilogue, alpha · that
// + beta · source, as CUTLASS's LinearCombination computes it (one fused multiply-add); beta = 0 reads no source.
// The unscaling pass and the packed kernel's epilogue (sm80_gemm.cuh) both compute this.
__device__ __forceinline__ float unscaled_epilogue(float c, int shift, float source, float alpha, float beta) {
  float value = float(double(c) * __longlong_as_double((long long)(1023 - shift) << 52));
  if (beta == 0.0f) return alpha == 1.0f ? value : alpha * value;
  return fmaf(alpha, value, beta * source);
}

__device__ __forceinline__ float unscaled(const cutlass_ext_unscale_args& args, float c, int shift, int64_t batch,
                                          int64_t row, int64_t column) {
  bool read = args.source != nullptr && args.beta != 0.0f;
  float source = read ? args.source[batch * args.source_batch_stride + row * args.source_row_stride +
                                    column * args.source_column_stride]
                      : 0.0f;
  return unscaled_epilogue(c, shift, source, args.alpha, read ? args.beta : 0.0f);
}

__global__ void halfhalf_unscale_kernel(cutlass_ext_unscale_args args) {
  constexpr int kRowsPerThread = kTile / kTileRowsPerPass;
  const int64_t column = int64_t(blockIdx.x) * kTile + threadIdx.x;
  if (column >= args.n) return;
  const float* c = args.c;  // out may alias c: each element is read before it is written, by one thread
  float* out = args.out;
  CUTLASS_EXT_FOR_EACH_TILE(args.batch, args.m) {
    int column_shift = args.column_shift[batch * args.column_shift_batch_stride + column * args.column_shift_stride];
    float values[kRowsPerThread];
    int shifts[kRowsPerThread];
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kRowsPerThread; ++j) {
      int64_t row = row0 + threadIdx.y + j * kTileRowsPerPass;
      bool in = row < args.m;
      values[j] = in ? c[(batch * args.m + row) * args.n + column] : 0.0f;
      shifts[j] = in ? args.row_shift[batch * args.row_shift_batch_stride + row * args.row_shift_stride] : 0;
    }
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kRowsPerThread; ++j) {
      int64_t row = row0 + threadIdx.y + j * kTileRowsPerPass;
      if (row < args.m) {
        out[(batch * args.m + row) * args.n + column] =
            unscaled(args, values[j], shifts[j] + column_shift, batch, row, column);
      }
    }
  }
}

// halfhalf's range shifts (seed 4.1.1), as cutlass_ext.scaling.fp16_range_shift computes them with torch ops: the
// largest magnitude of each slice (NaN if the slice holds one) and 15 - its frexp exponent, clamped to +-126.
// Slices along a unit stride are read by one warp each; slices across it by 32 neighbouring slices per block, 32
// partial maxima each (kAcrossRows), combined in shared memory.
__device__ __forceinline__ int range_shift_of(float largest) {
  int exponent;
  frexpf(largest, &exponent);
  return min(max(15 - exponent, -126), 126);
}

__device__ __forceinline__ float max_magnitude(float a, float b) {
  return (isnan(a) || isnan(b)) ? __int_as_float(0x7fffffff) : fmaxf(a, b);
}

// One warp per slice: lanes walk the slice's elements (unit stride when the slice runs along it).
__global__ void range_shift_along_kernel(cutlass_ext_range_shift_args args, int64_t slices, int64_t length,
                                         int64_t slice_stride, int64_t element_stride) {
  const int64_t warps_per_block = blockDim.x / 32;
  for (int64_t slice = int64_t(blockIdx.x) * warps_per_block + threadIdx.x / 32; slice < args.batch * slices;
       slice += int64_t(gridDim.x) * warps_per_block) {
    const int64_t batch = slice / slices, index = slice % slices;
    const float* x = args.x + batch * args.x_stride_batch + index * slice_stride;
    float largest = 0.0f;
    for (int64_t i = threadIdx.x % 32; i < length; i += 32) largest = max_magnitude(largest, fabsf(x[i * element_stride]));
    CUTLASS_PRAGMA_UNROLL
    for (int offset = 16; offset > 0; offset /= 2) {
      largest = max_magnitude(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
    }
    if (threadIdx.x % 32 == 0) args.out[slice] = range_shift_of(largest);
  }
}

// 32 neighbouring slices per block (threadIdx.x), kAcrossRows threads along each (threadIdx.y): reads coalesce
// across slices. B of few columns over a deep K has few such tiles (128 at N = 4096), one block per SM: 32 threads
// along each slice and four loads in flight per thread keep its loads coming (B of 4096 x 4096: 24.7 us on an H200;
// with 8 threads per slice it took 68 us on an H100, a different card). It takes 32 registers (nvcc 13.0): 1024
// threads fit; a build that needed more than 64 would fail at launch with an error, not run wrong.
constexpr int kAcrossRows = 32;

__global__ void range_shift_across_kernel(cutlass_ext_range_shift_args args, int64_t slices, int64_t length,
                                          int64_t slice_stride, int64_t element_stride) {
  __shared__ float partial[kAcrossRows][kTile + 1];
  const int64_t tiles = (slices + kTile - 1) / kTile;
  for (int64_t tile = blockIdx.x; tile < args.batch * tiles; tile += gridDim.x) {
    const int64_t batch = tile / tiles, index = (tile % tiles) * kTile + threadIdx.x;
    float largest = 0.0f;
    if (index < slices) {
      const float* x = args.x + batch * args.x_stride_batch + index * slice_stride;
#pragma unroll 4
      for (int64_t i = threadIdx.y; i < length; i += kAcrossRows) {
        largest = max_magnitude(largest, fabsf(x[i * element_stride]));
      }
    }
    partial[threadIdx.y][threadIdx.x] = largest;
    __syncthreads();
    if (threadIdx.y == 0 && index < slices) {
      CUTLASS_PRAGMA_UNROLL
      for (int j = 1; j < kAcrossRows; ++j) largest = max_magnitude(largest, partial[j][threadIdx.x]);
      args.out[batch * slices + index] = range_shift_of(largest);
    }
    __syncthreads();
  }
}

inline int launch_range_shift(const cutlass_ext_range_shift_args& args, cudaStream_t stream) {
  const bool per_column = args.per_column != 0;
  const int64_t slices = per_column ? args.columns : args.rows, length = per_column ? args.rows : args.columns;
  const int64_t slice_stride = per_column ? args.x_stride_column : args.x_stride_row;
  const int64_t element_stride = per_column ? args.x_stride_row : args.x_stride_column;
  if (args.batch * slices * length == 0) return 0;
  constexpr int64_t kMaxBlocks = 65535;
  if (element_stride == 1 || slice_stride != 1) {
    constexpr int kWarps = 8;
    int64_t blocks = (args.batch * slices + kWarps - 1) / kWarps;
    range_shift_along_kernel<<<unsigned(blocks < kMaxBlocks ? blocks : kMaxBlocks), kWarps * 32, 0, stream>>>(
        args, slices, length, slice_stride, element_stride);
  } else {
    int64_t blocks = args.batch * ((slices + kTile - 1) / kTile);
    range_shift_across_kernel<<<unsigned(blocks < kMaxBlocks ? blocks : kMaxBlocks), dim3(kTile, kAcrossRows), 0,
                                stream>>>(args, slices, length, slice_stride, element_stride);
  }
  return int(cudaGetLastError());
}

// Strips of 32 slices of one operand of halfhalf_operands_kernel; none for an empty operand.
CUTLASS_HOST_DEVICE int64_t strips_of(const cutlass_ext_operand_pass& op) {
  return op.rows * op.columns == 0 ? 0 : op.batch * tiles_of(op.per_column ? op.columns : op.rows, kTile);
}

// One strip of an operand pass: 32 slices (rows of A, columns of B) of one batch, and how to walk them.
struct Strip {
  const float* x;
  int64_t batch, slice0, slices, length, slice_stride, element_stride;
  bool per_column;
  __device__ Strip(const cutlass_ext_operand_pass& op, int64_t local) {
    per_column = op.per_column != 0;
    slices = per_column ? op.columns : op.rows;
    length = per_column ? op.rows : op.columns;
    slice_stride = per_column ? op.x_stride_column : op.x_stride_row;
    element_stride = per_column ? op.x_stride_row : op.x_stride_column;
    const int64_t per_batch = tiles_of(slices, kTile);
    batch = local / per_batch;
    slice0 = (local % per_batch) * kTile;
    x = op.x + batch * op.x_stride_batch;
  }
};

// The largest magnitude of each of the strip's slices over elements [begin, end), for lane `lane` of group 0 (the
// block's 32 x 8 threads all take part; `partial` is shared). Along the unit stride lanes walk a slice's elements
// (4 slices per warp); else lanes take 32 neighbouring slices and the 8 warps split each slice's elements.
__device__ float strip_maxima(const Strip& strip, int64_t begin, int64_t end, float (&partial)[kTileRowsPerPass][kTile + 1]) {
  const int lane = threadIdx.x, group = threadIdx.y;
  const bool along = strip.element_stride == 1;
  float largest = 0.0f;
  if (along) {
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kTile / kTileRowsPerPass; ++j) {
      const int s = group + j * kTileRowsPerPass;
      float slice_largest = 0.0f;
      if (strip.slice0 + s < strip.slices) {
        const float* row = strip.x + (strip.slice0 + s) * strip.slice_stride;
        for (int64_t i = begin + lane; i < end; i += kTile) slice_largest = max_magnitude(slice_largest, fabsf(row[i]));
      }
      CUTLASS_PRAGMA_UNROLL
      for (int offset = 16; offset > 0; offset /= 2) {
        slice_largest = max_magnitude(slice_largest, __shfl_xor_sync(0xffffffffu, slice_largest, offset));
      }
      if (lane == 0) partial[0][s] = slice_largest;
    }
  } else {
    if (strip.slice0 + lane < strip.slices) {
      const float* column = strip.x + (strip.slice0 + lane) * strip.slice_stride;
      for (int64_t i = begin + group; i < end; i += kTileRowsPerPass) {
        largest = max_magnitude(largest, fabsf(column[i * strip.element_stride]));
      }
    }
    partial[group][lane] = largest;
  }
  __syncthreads();
  if (group == 0) {
    largest = partial[0][lane];
    if (!along) {
      CUTLASS_PRAGMA_UNROLL
      for (int j = 1; j < kTileRowsPerPass; ++j) largest = max_magnitude(largest, partial[j][lane]);
    }
  }
  return largest;
}

// Elements [begin, end) of the strip's slices scaled by 2^shifts[slice] and packed, in 32 x 32 tiles through shared
// memory, read along the input's unit stride and written along the output's (row-major: A's rows are slices, lanes
// along elements; B's rows are elements, lanes along slices).
__device__ void pack_strip(const cutlass_ext_operand_pass& op, const Strip& strip, int64_t begin, int64_t end,
                           const int (&shifts)[kTile], float (&tile)[kTile][kTile + 1]) {
  const int lane = threadIdx.x, group = threadIdx.y;
  const bool along = strip.element_stride == 1;
  uint32_t* packed = static_cast<uint32_t*>(op.packed) + strip.batch * op.rows * op.columns;
  for (int64_t element0 = begin; element0 < end; element0 += kTile) {
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kTile / kTileRowsPerPass; ++j) {
      const int other = group + j * kTileRowsPerPass;
      const int s = along ? other : lane, e = along ? lane : other;
      if (strip.slice0 + s < strip.slices && element0 + e < end) {
        tile[s][e] = strip.x[(strip.slice0 + s) * strip.slice_stride + (element0 + e) * strip.element_stride];
      }
    }
    __syncthreads();
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kTile / kTileRowsPerPass; ++j) {
      const int other = group + j * kTileRowsPerPass;
      const int s = strip.per_column ? lane : other, e = strip.per_column ? other : lane;
      const int64_t slice = strip.slice0 + s, element = element0 + e;
      if (slice < strip.slices && element < end) {
        const float value = tile[s][e] * power_of_two(shifts[s]);
        const int64_t index = strip.per_column ? element * op.columns + slice : slice * op.columns + element;
        packed[index] = PackedWriter::pack(HalfHalfSplit(value));
      }
    }
    __syncthreads();
  }
}

// halfhalf's operand pass fused (range shift, scale, split, pack) for both operands in one launch: an eager call's
// host time is mostly launches (docs/design-notes.md, dispatch and the cost of a call). Each block takes a strip
// of 32 slices (rows of A, columns of B): their maxima first, then the strip again in 32 x 32 tiles. Same values as
// range_shift followed by halfhalf_pack (max is exact in any order; NaN propagates), reading the input twice.
__global__ void halfhalf_operands_kernel(cutlass_ext_halfhalf_operands_args args) {
  __shared__ float tile[kTile][kTile + 1];  // [slice][element]; +1 against bank conflicts
  __shared__ float partial[kTileRowsPerPass][kTile + 1];
  __shared__ int shifts[kTile];
  const int lane = threadIdx.x, group = threadIdx.y;
  const int64_t strips_a = strips_of(args.a), strips_all = strips_a + strips_of(args.b);
  for (int64_t index = blockIdx.x; index < strips_all; index += gridDim.x) {
    const cutlass_ext_operand_pass& op = index < strips_a ? args.a : args.b;
    const Strip strip(op, index < strips_a ? index : index - strips_a);
    const float largest = strip_maxima(strip, 0, strip.length, partial);
    if (group == 0) {
      shifts[lane] = range_shift_of(largest);
      if (strip.slice0 + lane < strip.slices) op.shift[strip.batch * strip.slices + strip.slice0 + lane] = shifts[lane];
    }
    __syncthreads();
    pack_strip(op, strip, 0, strip.length, shifts, tile);
  }
}

// Few strips of long slices (A of few rows, B of few columns over a deep K: 144 strips of 4096 elements at 512 x 4096
// x 4096) leave the fused kernel one block per SM, with too few loads in flight. There each strip is cut into
// chunks of kLongChunk elements, one block per (strip, chunk): the chunks' maxima meet in the shift array by an
// integer atomic max of their bit patterns (magnitudes order as integers, and NaN, made 0x7fffffff as max_magnitude
// makes it, above Inf: the same maximum as the fused kernel's), then the packing reads the maxima and the shifts
// replace them: two memsets and three launches, same values.
constexpr int64_t kLongChunk = 512;
constexpr int64_t kFewStrips = 512;  // about four blocks per SM on a 132-SM GPU
constexpr int64_t kLongSlice = 2048;

CUTLASS_HOST_DEVICE int64_t chunks_of(const cutlass_ext_operand_pass& op) {
  return tiles_of(op.per_column ? op.rows : op.columns, kLongChunk);
}

CUTLASS_HOST_DEVICE int64_t chunked_blocks_of(const cutlass_ext_operand_pass& op) {
  return strips_of(op) * chunks_of(op);
}

// Block `index` of a chunked launch over both operands: its operand, strip and element range.
struct StripChunk {
  const cutlass_ext_operand_pass* op;
  int64_t strip, begin;
  __device__ StripChunk(const cutlass_ext_halfhalf_operands_args& args, int64_t index) {
    const int64_t blocks_a = chunked_blocks_of(args.a);
    op = index < blocks_a ? &args.a : &args.b;
    const int64_t local = index < blocks_a ? index : index - blocks_a, chunks = chunks_of(*op);
    strip = local / chunks;
    begin = (local % chunks) * kLongChunk;
  }
};

__device__ __forceinline__ int32_t* shift_of(const cutlass_ext_operand_pass& op, const Strip& strip, int slice) {
  return op.shift + strip.batch * strip.slices + strip.slice0 + slice;
}

__global__ void halfhalf_chunk_maxima_kernel(cutlass_ext_halfhalf_operands_args args) {
  __shared__ float partial[kTileRowsPerPass][kTile + 1];
  const int64_t blocks = chunked_blocks_of(args.a) + chunked_blocks_of(args.b);
  for (int64_t index = blockIdx.x; index < blocks; index += gridDim.x) {
    const StripChunk chunk(args, index);
    const Strip strip(*chunk.op, chunk.strip);
    const float largest = strip_maxima(strip, chunk.begin, min(chunk.begin + kLongChunk, strip.length), partial);
    if (threadIdx.y == 0 && strip.slice0 + threadIdx.x < strip.slices) {
      atomicMax(shift_of(*chunk.op, strip, threadIdx.x), isnan(largest) ? 0x7fffffff : __float_as_int(largest));
    }
    __syncthreads();  // partial is reused by the next chunk
  }
}

__global__ void halfhalf_chunk_pack_kernel(cutlass_ext_halfhalf_operands_args args) {
  __shared__ float tile[kTile][kTile + 1];
  __shared__ int shifts[kTile];
  const int64_t blocks = chunked_blocks_of(args.a) + chunked_blocks_of(args.b);
  for (int64_t index = blockIdx.x; index < blocks; index += gridDim.x) {
    const StripChunk chunk(args, index);
    const Strip strip(*chunk.op, chunk.strip);
    if (threadIdx.y == 0) {
      shifts[threadIdx.x] = strip.slice0 + threadIdx.x < strip.slices
                                ? range_shift_of(__int_as_float(*shift_of(*chunk.op, strip, threadIdx.x)))
                                : 0;
    }
    __syncthreads();
    pack_strip(*chunk.op, strip, chunk.begin, min(chunk.begin + kLongChunk, strip.length), shifts, tile);
  }
}

// The maxima's bit patterns in the shift arrays become the shifts.
__global__ void halfhalf_shifts_kernel(cutlass_ext_halfhalf_operands_args args) {
  const int64_t slices_a = args.a.rows * args.a.columns == 0 ? 0 : args.a.batch * args.a.rows;
  const int64_t slices_b = args.b.rows * args.b.columns == 0 ? 0 : args.b.batch * args.b.columns;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < slices_a + slices_b;
       i += int64_t(gridDim.x) * blockDim.x) {
    int32_t* shift = i < slices_a ? args.a.shift + i : args.b.shift + (i - slices_a);
    *shift = range_shift_of(__int_as_float(*shift));
  }
}

inline bool few_long_strips(const cutlass_ext_halfhalf_operands_args& args) {
  auto length = [](const cutlass_ext_operand_pass& op) { return op.per_column ? op.rows : op.columns; };
  const int64_t longest = length(args.a) > length(args.b) ? length(args.a) : length(args.b);
  return strips_of(args.a) + strips_of(args.b) < kFewStrips && longest >= kLongSlice;
}

inline int launch_halfhalf_operands(const cutlass_ext_halfhalf_operands_args& args, cudaStream_t stream) {
  const int64_t strips = strips_of(args.a) + strips_of(args.b);
  if (strips == 0) return 0;
  const dim3 block(kTile, kTileRowsPerPass);
  if (!few_long_strips(args)) {
    halfhalf_operands_kernel<<<capped(strips), block, 0, stream>>>(args);
    return int(cudaGetLastError());
  }
  for (const cutlass_ext_operand_pass* op : {&args.a, &args.b}) {
    if (strips_of(*op) == 0) continue;
    const int64_t slices = op->batch * (op->per_column ? op->columns : op->rows);
    if (cudaError_t error = cudaMemsetAsync(op->shift, 0, slices * sizeof(int32_t), stream)) return int(error);
  }
  const int64_t blocks = chunked_blocks_of(args.a) + chunked_blocks_of(args.b);
  halfhalf_chunk_maxima_kernel<<<capped(blocks), block, 0, stream>>>(args);
  halfhalf_chunk_pack_kernel<<<capped(blocks), block, 0, stream>>>(args);
  const int64_t slices = args.a.batch * args.a.rows + args.b.batch * args.b.columns;
  halfhalf_shifts_kernel<<<capped((slices + 255) / 256), 256, 0, stream>>>(args);
  return int(cudaGetLastError());
}

#undef CUTLASS_EXT_FOR_EACH_TILE

}  // namespace cutlass_ext

// 0 or a cudaError_t; an empty problem launches nothing.
#define CUTLASS_EXT_EXPORT_RANGE_SHIFT()                                                                    \
  extern "C" int cutlass_ext_range_shift(const cutlass_ext_range_shift_args* args, void* stream) {          \
    return cutlass_ext::launch_range_shift(*args, static_cast<cudaStream_t>(stream));                      \
  }

#define CUTLASS_EXT_EXPORT_HALFHALF_OPERANDS()                                                              \
  CUTLASS_EXT_EXPORT_RANGE_SHIFT()                                                                          \
  extern "C" int cutlass_ext_halfhalf_operands(const cutlass_ext_halfhalf_operands_args* args, void* stream) { \
    return cutlass_ext::launch_halfhalf_operands(*args, static_cast<cudaStream_t>(stream));                \
  }                                                                                                         \
  extern "C" int cutlass_ext_halfhalf_pack(const cutlass_ext_pack_args* args, void* stream) {              \
    if (args->batch * args->rows * args->columns == 0) return 0;                                            \
    cutlass_ext::SplitSource source{args->x,             args->batch,        args->rows,                        \
                                    args->columns,       args->columns,      args->x_stride_batch,              \
                                    args->x_stride_row,  args->x_stride_column, args->shift,                    \
                                    args->shift_stride_batch, args->shift_stride_row, args->shift_stride_column}; \
    cutlass_ext::PackedWriter writer{static_cast<uint32_t*>(args->out), args->rows, args->columns};         \
    cutlass_ext::launch_split(source, writer, static_cast<cudaStream_t>(stream));                           \
    return int(cudaGetLastError());                                                                         \
  }                                                                                                         \
  extern "C" int cutlass_ext_halfhalf_unscale(const cutlass_ext_unscale_args* args, void* stream) {        \
    if (args->batch * args->m * args->n == 0) return 0;                                                     \
    cutlass_ext::halfhalf_unscale_kernel<<<cutlass_ext::tile_grid(args->batch, args->m, args->n),           \
                                           dim3(cutlass_ext::kTile, cutlass_ext::kTileRowsPerPass), 0,      \
                                           static_cast<cudaStream_t>(stream)>>>(*args);                     \
    return int(cudaGetLastError());                                                                         \
  }

// The Hopper corrected SGEMM's operand pass (launcher_abi.h): 0 or a cudaError_t.
#define CUTLASS_EXT_EXPORT_SPLIT_PLANES()                                                                   \
  CUTLASS_EXT_EXPORT_RANGE_SHIFT()                                                                          \
  extern "C" int cutlass_ext_split_planes(const cutlass_ext_planes_args* args, void* stream) {             \
    if (args->batch * args->rows * args->columns == 0) return 0;                                            \
    cutlass_ext::SplitSource source{args->x,             args->batch,        args->rows,                        \
                                    args->columns,       args->ld,           args->x_stride_batch,              \
                                    args->x_stride_row,  args->x_stride_column, args->shift,                    \
                                    args->shift_stride_batch, args->shift_stride_row, args->shift_stride_column}; \
    auto cuda_stream = static_cast<cudaStream_t>(stream);                                                   \
    if (args->format == CUTLASS_EXT_PLANES_HALF) {                                                          \
      cutlass_ext::PlanesWriter<cutlass_ext::HalfHalfSplit, __half> writer{                                 \
          static_cast<__half*>(args->hi), static_cast<__half*>(args->lo), args->rows, args->ld};            \
      cutlass_ext::launch_split(source, writer, cuda_stream);                                               \
    } else if (args->format == CUTLASS_EXT_PLANES_TF32) {                                                   \
      cutlass_ext::PlanesWriter<cutlass_ext::Tf32Tf32Split, float> writer{                                  \
          static_cast<float*>(args->hi), static_cast<float*>(args->lo), args->rows, args->ld};              \
      cutlass_ext::launch_split(source, writer, cuda_stream);                                               \
    } else {                                                                                                \
      return int(cudaErrorInvalidValue);                                                                    \
    }                                                                                                       \
    return int(cudaGetLastError());                                                                         \
  }
