// The low-bit-accumulator GEMM (seed 002): a SIMT kernel whose multiply-add is FMAq, in the chunked order of
// cutlass_ext.lowbit.reference, and the gradient kernel of its STEs (seed 002 appendix D), which recomputes the
// chain window by window and applies the STE mask on the fly (no M·N·K tensor).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "lowbit_abi.h"
#include "lowbit_fmaq.cuh"
#include "lowbit_grad.cuh"

namespace cutlass_ext {
namespace lowbit {

// Reads kCount consecutive floats of shared memory (16-byte vectors where the count allows).
template <int kCount>
__device__ __forceinline__ void load_fragment(float (&out)[kCount], const float* source) {
  if constexpr (kCount % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kCount; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(source + i);
      out[i] = v.x;
      out[i + 1] = v.y;
      out[i + 2] = v.z;
      out[i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kCount; ++i) out[i] = source[i];
  }
}

// A CTA computes a kBlockM x kBlockN tile of D; each thread a kThreadM x kThreadN register tile, running the exact
// sequential chain of each of its outputs: the k-loop is the chain's order, so parallelism is over M and N only.
template <int kBlockM, int kBlockN, int kBlockK, int kThreadM, int kThreadN, int kWindow>
struct LowbitGemm {
  static constexpr int kThreadsM = kBlockM / kThreadM;
  static constexpr int kThreadsN = kBlockN / kThreadN;
  static constexpr int kThreads = kThreadsM * kThreadsN;
  static constexpr int kLoadsA = kBlockM * kBlockK / kThreads;
  static constexpr int kLoadsB = kBlockK * kBlockN / kThreads;
  // +4 floats per row: fewer bank conflicts on the transposing stores, rows stay 16-byte aligned.
  static constexpr int kPitchM = kBlockM + 4;
  static constexpr int kPitchN = kBlockN + 4;
  // A gradient thread runs one or two chains at a time (GradRowWindow::kPairs): enough warps per SM to hide
  // their latency (three 128-thread blocks: at most 168 registers, which the two-chain kernels fit unspilled).
  static constexpr int kGradThreads = 128;
  static constexpr int kGradBlocksPerSm = 3;
  static constexpr int kGradColumns = 32;
  static constexpr int kWindowSize = kWindow;
  static_assert(kBlockM % kThreadM == 0 && kBlockN % kThreadN == 0, "thread tile must divide the block tile");
  static_assert(kBlockM * kBlockK % kThreads == 0 && kBlockK * kBlockN % kThreads == 0, "tile loads must divide");
  static_assert(kWindow >= 1 && kWindow <= 32, "gradient window of 1..32 k");

  struct Forward {
    const cutlass_ext_lowbit_forward_args& args;
    const Format format;
    float (&a_tile)[kBlockK][kPitchM];
    float (&b_tile)[kBlockK][kPitchN];
    const float* a;
    const float* b;
    int64_t m0, n0;
    bool a_along_k, b_along_n;  // which index consecutive threads load (the operand's unit-stride one)
    float a_next[kLoadsA], b_next[kLoadsB];

    __device__ void tile_index_a(int l, int& m, int& k) const {
      const int e = threadIdx.x + l * kThreads;
      if (a_along_k) {
        k = e % kBlockK;
        m = e / kBlockK;
      } else {
        m = e % kBlockM;
        k = e / kBlockM;
      }
    }

    __device__ void tile_index_b(int l, int& k, int& n) const {
      const int e = threadIdx.x + l * kThreads;
      if (b_along_n) {
        n = e % kBlockN;
        k = e / kBlockN;
      } else {
        k = e % kBlockK;
        n = e / kBlockK;
      }
    }

    // Global -> registers for the k-tile at k0 (zeros outside the matrices; they are never accumulated).
    __device__ void load(int64_t k0) {
#pragma unroll
      for (int l = 0; l < kLoadsA; ++l) {
        int m, k;
        tile_index_a(l, m, k);
        const bool inside = m0 + m < args.m && k0 + k < args.k;
        a_next[l] = inside ? __ldg(a + (m0 + m) * args.a_row_stride + (k0 + k) * args.a_column_stride) : 0.0f;
      }
#pragma unroll
      for (int l = 0; l < kLoadsB; ++l) {
        int k, n;
        tile_index_b(l, k, n);
        const bool inside = k0 + k < args.k && n0 + n < args.n;
        b_next[l] = inside ? __ldg(b + (k0 + k) * args.b_row_stride + (n0 + n) * args.b_column_stride) : 0.0f;
      }
    }

    __device__ void store() {
#pragma unroll
      for (int l = 0; l < kLoadsA; ++l) {
        int m, k;
        tile_index_a(l, m, k);
        a_tile[k][m] = a_next[l];
      }
#pragma unroll
      for (int l = 0; l < kLoadsB; ++l) {
        int k, n;
        tile_index_b(l, k, n);
        b_tile[k][n] = b_next[l];
      }
    }
  };

  // The chain state of a thread's outputs: S of the current chunk, T of the chunks before it.
  template <bool kUnderflow, bool kFast, bool kBlocked>
  struct Accumulators {
    float chunk_sum[kThreadM][kThreadN];
    float total[kThreadM][kThreadN];
    int32_t blocked[kThreadM][kThreadN];
    int32_t chunk_index;

    __device__ void clear() {
#pragma unroll
      for (int i = 0; i < kThreadM; ++i)
#pragma unroll
        for (int j = 0; j < kThreadN; ++j) {
          chunk_sum[i][j] = 0.0f;
          total[i][j] = 0.0f;
          blocked[i][j] = -1;
        }
      chunk_index = 0;
    }

    // T <- Q_acc(T + S_c) (seed 002 Fig. 1 right, second level); the recursive STE remembers the last overflow.
    __device__ void combine(const Format& format) {
#pragma unroll
      for (int i = 0; i < kThreadM; ++i)
#pragma unroll
        for (int j = 0; j < kThreadN; ++j) {
          const float sum = add_rn(total[i][j], chunk_sum[i][j]);
          if (kBlocked && !format.passes_overflow(sum)) blocked[i][j] = chunk_index;
          total[i][j] = format.q_acc<kUnderflow, kFast>(sum);
          chunk_sum[i][j] = 0.0f;
        }
      ++chunk_index;
    }
  };

  template <bool kUnderflow, bool kFast, bool kBlocked>
  __device__ static void forward(const cutlass_ext_lowbit_forward_args& args) {
    __shared__ __align__(16) float a_tile[kBlockK][kPitchM];
    __shared__ __align__(16) float b_tile[kBlockK][kPitchN];
    const int64_t batch = blockIdx.z;
    Forward tiles{args, Format::from(args.format), a_tile, b_tile,
                  args.a + batch * args.a_batch_stride, args.b + batch * args.b_batch_stride,
                  int64_t(blockIdx.y) * kBlockM, int64_t(blockIdx.x) * kBlockN,
                  !(args.a_row_stride == 1 && args.a_column_stride != 1),
                  !(args.b_row_stride == 1 && args.b_column_stride != 1)};
    const Format& format = tiles.format;
    const int thread_m = (threadIdx.x / kThreadsN) * kThreadM;
    const int thread_n = (threadIdx.x % kThreadsN) * kThreadN;
    const int64_t chunk = args.format.chunk;

    Accumulators<kUnderflow, kFast, kBlocked> acc;
    acc.clear();
    int64_t position = 0;  // products already in the current chunk

    // k-steps kk_begin .. kk_end of the staged tile, in segments that end at a chunk's end or the tile's: the
    // second-level add runs once per chunk, outside the unrolled loop (the loop stays small in the i-cache).
    auto run_steps = [&](int kk, const int kk_end) {
      while (kk < kk_end) {
        const int64_t chunk_left = chunk - position;
        const int segment_end = chunk_left < kk_end - kk ? kk + int(chunk_left) : kk_end;
        position += segment_end - kk;
#pragma unroll 4
        for (; kk < segment_end; ++kk) {
          float a_fragment[kThreadM], b_fragment[kThreadN];
          load_fragment(a_fragment, &a_tile[kk][thread_m]);
          load_fragment(b_fragment, &b_tile[kk][thread_n]);
#pragma unroll
          for (int i = 0; i < kThreadM; ++i)
#pragma unroll
            for (int j = 0; j < kThreadN; ++j)
              acc.chunk_sum[i][j] =
                  format.fmaq<kUnderflow, kFast>(a_fragment[i], b_fragment[j], acc.chunk_sum[i][j]);
        }
        if (position == chunk) {
          position = 0;
          acc.combine(format);
        }
      }
    };

    tiles.load(0);
    for (int64_t k0 = 0; k0 < args.k; k0 += kBlockK) {
      __syncthreads();
      tiles.store();
      __syncthreads();
      if (k0 + kBlockK < args.k) tiles.load(k0 + kBlockK);
      run_steps(0, args.k - k0 < kBlockK ? int(args.k - k0) : kBlockK);
    }
    if (position > 0) acc.combine(format);  // the short last chunk

    float* d = args.d + batch * args.d_batch_stride;
#pragma unroll
    for (int i = 0; i < kThreadM; ++i)
#pragma unroll
      for (int j = 0; j < kThreadN; ++j) {
        const int64_t m = tiles.m0 + thread_m + i, n = tiles.n0 + thread_n + j;
        if (m < args.m && n < args.n) {
          d[m * args.d_row_stride + n * args.d_column_stride] = add_rn(acc.total[i][j], 0.0f);  // −0 -> +0
          if (kBlocked) args.blocked[(batch * args.m + m) * args.n + n] = acc.blocked[i][j];
        }
      }
  }

  // One thread per (row, window of kWindow k); the CTA's rows share W's window, staged kGradColumns columns at a
  // time in shared memory (every thread reads the same words: broadcasts).
  template <int kSte, bool kUnderflow, bool kFast, bool kInChunk>
  __device__ static void grad(const cutlass_ext_lowbit_grad_args& args) {
    __shared__ __align__(16) float w_tile[kGradColumns][kWindow];
    const int64_t row = int64_t(blockIdx.x) * kGradThreads + threadIdx.x;
    const int64_t batch = blockIdx.z;
    const bool active = row < args.rows;
    GradRowWindow<kWindow, kSte, kUnderflow, kFast, kInChunk> thread(args, batch, active ? row : 0, blockIdx.y);
    const float* w = args.w + batch * args.w_batch_stride;
    const bool along_k = args.w_row_stride == 1 && args.w_column_stride != 1;  // W's unit stride runs along k

    // kPairs columns' chains at a time (the last ones alone).
    constexpr int kPairs = decltype(thread)::kPairs;
    auto columns_of_tile = [&](auto full, int64_t c0, int count) {
      int c = 0;
      for (; c + kPairs <= count; c += kPairs) {
        float w_window[kPairs][kWindow];
#pragma unroll
        for (int j = 0; j < kPairs; ++j) load_fragment(w_window[j], &w_tile[c + j][0]);
        thread.template columns<decltype(full)::value, kPairs>(c0 + c, w_window);
      }
      for (; c < count; ++c) {
        float w_window[1][kWindow];
        load_fragment(w_window[0], &w_tile[c][0]);
        thread.template columns<decltype(full)::value, 1>(c0 + c, w_window);
      }
    };
    for (int64_t c0 = 0; c0 < args.columns; c0 += kGradColumns) {
      __syncthreads();
      for (int e = threadIdx.x; e < kGradColumns * kWindow; e += kGradThreads) {
        const int c = along_k ? e / kWindow : e % kGradColumns;
        const int i = along_k ? e % kWindow : e / kGradColumns;
        const bool inside = c0 + c < args.columns && i < thread.width;
        w_tile[c][i] = inside ? __ldg(w + (thread.k0 + i) * args.w_row_stride + (c0 + c) * args.w_column_stride) : 0.0f;
      }
      __syncthreads();
      if (!active) continue;
      const int count = int(args.columns - c0 < kGradColumns ? args.columns - c0 : kGradColumns);
      if (thread.width == kWindow)
        columns_of_tile(std::true_type{}, c0, count);
      else
        columns_of_tile(std::false_type{}, c0, count);
    }
    if (active) thread.finish(batch, row);
  }

  static int run_forward(const cutlass_ext_lowbit_forward_args* args, void* stream);
  static int run_grad(const cutlass_ext_lowbit_grad_args* args, void* stream);
};

template <class Gemm, bool kUnderflow, bool kFast, bool kBlocked>
__global__ void __launch_bounds__(Gemm::kThreads) lowbit_forward_kernel(const cutlass_ext_lowbit_forward_args args) {
  Gemm::template forward<kUnderflow, kFast, kBlocked>(args);
}

template <class Gemm, int kSte, bool kUnderflow, bool kFast, bool kInChunk>
__global__ void __launch_bounds__(Gemm::kGradThreads, Gemm::kGradBlocksPerSm)
    lowbit_grad_kernel(const cutlass_ext_lowbit_grad_args args) {
  Gemm::template grad<kSte, kUnderflow, kFast, kInChunk>(args);
}

// Launches KERNEL<..., kUnderflow, kFast, ...> for the format's flags (the fast form: Quantizer::has_fast_form).
template <class Launch>
void dispatch_format(const cutlass_ext_lowbit_format& format, Launch&& launch) {
  const bool fast = Format::from(format).has_fast_form();
  if (format.underflow) {
    if (fast)
      launch(std::true_type{}, std::true_type{});
    else
      launch(std::true_type{}, std::false_type{});
  } else {
    if (fast)
      launch(std::false_type{}, std::true_type{});
    else
      launch(std::false_type{}, std::false_type{});
  }
}

constexpr int64_t kMaxGridYZ = 65535;

template <int kBlockM, int kBlockN, int kBlockK, int kThreadM, int kThreadN, int kWindow>
int LowbitGemm<kBlockM, kBlockN, kBlockK, kThreadM, kThreadN, kWindow>::run_forward(
    const cutlass_ext_lowbit_forward_args* args, void* stream) {
  using Gemm = LowbitGemm;
  if (args->m < 0 || args->n < 0 || args->k < 0 || args->batch < 0 || args->format.chunk < 1 ||
      args->k > INT32_MAX)
    return int(cudaErrorInvalidValue);
  if (args->m == 0 || args->n == 0 || args->batch == 0) return 0;
  const int64_t grid_m = (args->m + kBlockM - 1) / kBlockM, grid_n = (args->n + kBlockN - 1) / kBlockN;
  if (grid_m > kMaxGridYZ || args->batch > kMaxGridYZ || grid_n > INT32_MAX) return int(cudaErrorInvalidValue);
  const dim3 grid(unsigned(grid_n), unsigned(grid_m), unsigned(args->batch));
  cudaStream_t cuda_stream = static_cast<cudaStream_t>(stream);
  const bool blocked = args->blocked != nullptr;
  dispatch_format(args->format, [&](auto underflow, auto fast) {
    if (blocked)
      lowbit_forward_kernel<Gemm, decltype(underflow)::value, decltype(fast)::value, true><<<grid, kThreads, 0, cuda_stream>>>(*args);
    else
      lowbit_forward_kernel<Gemm, decltype(underflow)::value, decltype(fast)::value, false><<<grid, kThreads, 0, cuda_stream>>>(*args);
  });
  return int(cudaGetLastError());
}

template <class Gemm, int kSte>
void launch_grad(const cutlass_ext_lowbit_grad_args* args, dim3 grid, cudaStream_t stream) {
  const bool in_chunk = args->format.chunk % Gemm::kWindowSize == 0;  // GradRowWindow's kInChunk
  dispatch_format(args->format, [&](auto underflow, auto fast) {
    constexpr bool uf = decltype(underflow)::value, fa = decltype(fast)::value;
    if (in_chunk)
      lowbit_grad_kernel<Gemm, kSte, uf, fa, true><<<grid, Gemm::kGradThreads, 0, stream>>>(*args);
    else
      lowbit_grad_kernel<Gemm, kSte, uf, fa, false><<<grid, Gemm::kGradThreads, 0, stream>>>(*args);
  });
}

template <int kBlockM, int kBlockN, int kBlockK, int kThreadM, int kThreadN, int kWindow>
int LowbitGemm<kBlockM, kBlockN, kBlockK, kThreadM, kThreadN, kWindow>::run_grad(
    const cutlass_ext_lowbit_grad_args* args, void* stream) {
  using Gemm = LowbitGemm;
  if (args->rows < 0 || args->columns < 0 || args->k < 0 || args->batch < 0 || args->format.chunk < 1 ||
      args->k > INT32_MAX)
    return int(cudaErrorInvalidValue);
  if (args->ste == CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF && args->blocked == nullptr) return int(cudaErrorInvalidValue);
  if (args->rows == 0 || args->k == 0 || args->batch == 0) return 0;
  const int64_t grid_rows = (args->rows + kGradThreads - 1) / kGradThreads;
  const int64_t grid_k = (args->k + kWindow - 1) / kWindow;
  if (grid_k > kMaxGridYZ || args->batch > kMaxGridYZ || grid_rows > INT32_MAX) return int(cudaErrorInvalidValue);
  const dim3 grid(unsigned(grid_rows), unsigned(grid_k), unsigned(args->batch));
  cudaStream_t cuda_stream = static_cast<cudaStream_t>(stream);
  switch (args->ste) {
    case CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF:
      launch_grad<Gemm, CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF>(args, grid, cuda_stream);
      break;
    case CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_OF:
      launch_grad<Gemm, CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_OF>(args, grid, cuda_stream);
      break;
    case CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_DIFF:
      launch_grad<Gemm, CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_DIFF>(args, grid, cuda_stream);
      break;
    default:
      return int(cudaErrorInvalidValue);
  }
  return int(cudaGetLastError());
}

}  // namespace lowbit
}  // namespace cutlass_ext

// A variant's two launchers, `<NAME>_lowbit_forward` and `<NAME>_lowbit_grad` (lowbit_abi.h).
#define CUTLASS_EXT_EXPORT_LOWBIT_GEMM(NAME, ...)                                                          \
  extern "C" int NAME##_lowbit_forward(const cutlass_ext_lowbit_forward_args* args, void* stream) {        \
    return __VA_ARGS__::run_forward(args, stream);                                                         \
  }                                                                                                        \
  extern "C" int NAME##_lowbit_grad(const cutlass_ext_lowbit_grad_args* args, void* stream) {              \
    return __VA_ARGS__::run_grad(args, stream);                                                            \
  }
