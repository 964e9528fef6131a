// The low-bit-accumulator GEMM (seed 002): a SIMT kernel whose multiply-add is FMAq, in the chunked order of
// cutlass_ext.lowbit.reference, and the gradient kernel of its STEs (seed 002 appendix D), which recomputes the
// chain window by window once for both gradients and applies the STE mask on the fly (no M·N·K tensor).
#pragma once

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

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

// The turnstile between the gradient kernel's CTAs: a counter written with release and read with acquire (GPU
// scope). A waiting thread polls it relaxed and acquires once: an acquire load invalidates the SM's L1, and a
// fence would also wait for the thread's loads still in flight (the next step's operands).
__device__ __forceinline__ void wait_above(const int32_t* flag, int32_t value) {
#if defined(__CUDA_ARCH__)
  int32_t seen;
  for (;;) {
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
    if (seen > value) break;
    __nanosleep(100);
  }
  // reads the value seen or a later one, each written with release after the sums it counts
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
#else
  while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) <= value) __nanosleep(100);
#endif
}

__device__ __forceinline__ void store_release(int32_t* flag, int32_t value) {
#if defined(__CUDA_ARCH__)
  // a fence then a relaxed store: the fence also releases what the CTA's other threads wrote before the barrier
  asm volatile("fence.acq_rel.gpu;\n\tst.relaxed.gpu.global.b32 [%0], %1;" : : "l"(flag), "r"(value) : "memory");
#else
  __atomic_store_n(flag, value, __ATOMIC_RELEASE);
#endif
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
  // A gradient thread owns one row of a CTA's kGradThreads rows and runs one, two or four chains at a time
  // (GradRowWindow::kPairs): six 64-thread blocks per SM hide their latency with at most 168 registers, which
  // the kernels of windows that are a whole chunk fit unspilled. The CTA takes kGradColumns columns per step: about 128 dB terms per row,
  // whose sums over the rows its threads then run, two or so each. G and B of a step are staged in shared memory
  // by coalesced loads (little L1 is left beside ~37 KB of shared memory per CTA).
  static constexpr int kGradThreads = 64;
  static constexpr int kGradBlocksPerSm = 6;
  static constexpr int kGradColumns = 128 / kWindow < 2 ? 2 : 128 / kWindow;
  static constexpr int kGradTerms = kGradColumns * kWindow;
  static constexpr int kSums = (kGradTerms + kGradThreads - 1) / kGradThreads;  // dB sums per thread and step
  // A row of `terms` is 4 words past a multiple of 32 where threads store 16 bytes (their rows' stores fall in
  // distinct bank quads), 2 words past where they store 8 or 4 (distinct bank pairs; with 4 words, 4-way bank
  // conflicts); a warp's sums read one row's consecutive words.
  static constexpr int grad_pitch(int pairs) { return kSums * kGradThreads + (pairs % 4 == 0 ? 4 : 2); }
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

  // The chain state of a thread's outputs: S of the current chunk, T of the chunks before it; for the recursive
  // STE (kBlocked) each output's last second-level overflow and the thread's last chunk with a first-level one
  // (ChainRecord: one flag for all the thread's outputs costs one predicate operation per FMAq).
  template <bool kUnderflow, bool kFast, bool kBlocked>
  struct Accumulators {
    float chunk_sum[kThreadM][kThreadN];
    float total[kThreadM][kThreadN];
    int32_t blocked[kThreadM][kThreadN];
    int32_t chunk_index, last_failed;
    bool failed;  // a first-level step of the current chunk overflowed

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
      last_failed = -1;
      failed = false;
    }

    // S <- FMAq(x, w, S) of output (i, j)
    __device__ void step(const Format& format, int i, int j, float x, float w) {
      if constexpr (kBlocked) {
        const float sum = format.add_product<kUnderflow, kFast>(mul_rn(x, w), chunk_sum[i][j]);
        failed = failed || !format.passes_overflow(sum);
        chunk_sum[i][j] = format.q_acc<kUnderflow, kFast>(sum);
      } else {
        chunk_sum[i][j] = format.fmaq<kUnderflow, kFast>(x, w, chunk_sum[i][j]);
      }
    }

    // T <- Q_acc(T + S_c) (seed 002 Fig. 1 right, second level); the recursive STE remembers the last overflows.
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
      if (kBlocked && failed) last_failed = chunk_index;
      failed = false;
      ++chunk_index;
    }
  };

  template <bool kUnderflow, bool kFast, bool kBlocked>
  __device__ static void forward(const cutlass_ext_lowbit_forward_args& args, int64_t batch, int64_t row_block) {
    __shared__ __align__(16) float a_tile[kBlockK][kPitchM];
    __shared__ __align__(16) float b_tile[kBlockK][kPitchN];
    Forward tiles{args, Format::from(args.format), a_tile, b_tile,
                  args.a + batch * args.a_batch_stride, args.b + batch * args.b_batch_stride,
                  row_block * kBlockM, int64_t(blockIdx.x) * kBlockN,
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
              acc.step(format, i, j, a_fragment[i], b_fragment[j]);
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
    const bool packed = ChainRecord::packed(args.k, chunk);
#pragma unroll
    for (int i = 0; i < kThreadM; ++i)
#pragma unroll
      for (int j = 0; j < kThreadN; ++j) {
        const int64_t m = tiles.m0 + thread_m + i, n = tiles.n0 + thread_n + j;
        if (m < args.m && n < args.n) {
          d[m * args.d_row_stride + n * args.d_column_stride] = add_rn(acc.total[i][j], 0.0f);  // −0 -> +0
          if (kBlocked)
            args.blocked[(batch * args.m + m) * args.n + n] =
                ChainRecord::encode(acc.blocked[i][j], acc.last_failed, packed);
        }
      }
  }

  // The immediate STEs' kernels for windows that are not a whole chunk run kCarryWindows consecutive windows per
  // CTA and carry each chain's partial sum from one window to the next (the chains' sums between windows and the
  // A values and dA sums of the window not running wait in shared memory): only a group's first window reruns
  // its chunk's earlier steps. Two windows of 8 or 16 steps: the CTA stays under 48 KB of static shared memory
  // (47 KB, four per SM); shorter windows stage more columns per step and would not.
  static constexpr int kCarryWindows = kWindow >= 8 && kWindow <= 16 ? 2 : 1;
  static constexpr bool carries(int ste, int span) {
    return kCarryWindows > 1 && ste != CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF && span != kSpanChunk;
  }
  // Windows per CTA (the launcher's and the kernel's), and the CTAs of a launch.
  static int grads_group(const cutlass_ext_lowbit_grads_args& args) {
    return carries(args.ste, window_span(args.format.chunk, kWindow)) ? kCarryWindows : 1;
  }
  static int64_t grads_ctas(const cutlass_ext_lowbit_grads_args& args, int group) {
    const int64_t windows = (args.k + kWindow - 1) / kWindow;
    return args.batch * ((windows + group - 1) / group) * ((args.m + kGradThreads - 1) / kGradThreads);
  }

  // The CTA of logical index `id` (taken in start order from a counter, so every lower index already runs):
  // rows [p·kGradThreads, +kGradThreads) of `group` consecutive windows of one batch, p = id mod (row blocks).
  // For each step of kGradColumns columns and each of its windows it stages B's window, each thread recomputes
  // its row's chains for them (dA terms into its registers, dB terms into shared memory), and then the threads
  // sum the dB terms over the CTA's rows in order, continuing the sums the CTA of the rows before it left in dB:
  // it waits for that CTA's count of finished (step, window)s (a turnstile, as CUTLASS's serial split-K), so
  // dB[k, j] is the one sequential sum over all rows. With several windows per CTA the chains run on from one
  // window into the next, and the dA sums of a window wait in shared memory while the others run.
  template <int kSte, bool kUnderflow, bool kFast, int kSpan>
  __device__ static void grads(const cutlass_ext_lowbit_grads_args& args, int group) {
    constexpr bool kCarries = carries(kSte, kSpan);
    __shared__ __align__(16) float w_tile[kGradColumns][kWindow];
    __shared__ float g_tile[kGradColumns][kGradThreads + 1];
    using Thread = GradRowWindow<kWindow, kSte, kUnderflow, kFast, kSpan>;
    constexpr int kGradPitch = grad_pitch(Thread::kPairs);
    __shared__ __align__(16) float terms[kGradThreads][kGradPitch];  // a row's dB terms at i * kGradColumns + c
    constexpr bool kRecursive = kSte == CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF;
    __shared__ uint8_t open_tile[kRecursive ? kGradColumns : 1][kGradThreads];  // GradRowWindow::open_code
    // a thread's A values and dA sums of the window it is not running (rows a word past kWindow: a bank per
    // thread), and the chains' partial sums from one window to the next
    static_assert(!kCarries || kCarryWindows == 2, "one window's values wait in shared memory");
    __shared__ float dx_tile[kCarries ? kGradThreads : 1][kCarries ? kWindow + 1 : 1];
    __shared__ float x_tile[kCarries ? kGradThreads : 1][kCarries ? kWindow + 1 : 1];
    __shared__ float carry_tile[kCarries ? kGradColumns : 1][kGradThreads];
    __shared__ int64_t logical_id;
    if constexpr (!kCarries) group = 1;
    if (threadIdx.x == 0) logical_id = atomicAdd(reinterpret_cast<unsigned int*>(args.workspace), 1u);
    __syncthreads();
    const int64_t row_blocks = (args.m + kGradThreads - 1) / kGradThreads;
    const int64_t windows = (args.k + kWindow - 1) / kWindow;
    const int64_t groups = (windows + group - 1) / group;
    const int64_t row_block = logical_id % row_blocks, first_window = logical_id / row_blocks % groups * group;
    const int64_t batch = logical_id / row_blocks / groups;
    const int group_windows = !kCarries ? 1 : int(windows - first_window < group ? windows - first_window : group);
    int32_t* const steps_done = args.workspace + 1 + logical_id;  // this CTA's; its predecessor's is one before
    const int64_t row0 = row_block * kGradThreads;
    const int rows = int(args.m - row0 < kGradThreads ? args.m - row0 : kGradThreads);
    const int64_t row = row0 + threadIdx.x;
    const bool active = threadIdx.x < rows;
    // Without carried chains the thread's one window lives across the steps (its dA sums in registers).
    Thread kept(args, batch, active ? row : row0, first_window);
    const float* w = args.b + batch * args.b_batch_stride;
    float* db = args.db == nullptr ? nullptr : args.db + batch * args.db_batch_stride;
    const float* g = args.g + batch * args.g_batch_stride;
    const bool along_k = args.b_row_stride == 1 && args.b_column_stride != 1;  // B's unit stride runs along k
    const bool g_along_rows = args.g_row_stride == 1 && args.g_column_stride != 1;
    const int32_t* blocked = kRecursive ? args.blocked + batch * args.blocked_batch_stride : nullptr;
    auto window_width = [&](int v) {
      const int64_t left = args.k - (first_window + v) * kWindow;
      return int(left < kWindow ? left : kWindow);
    };
    if constexpr (kCarries) {
      // window 1's A values wait for its first step (window 0's are `kept`'s)
      const Thread second(args, batch, active ? row : row0, first_window + 1, group_windows > 1);
#pragma unroll
      for (int i = 0; i < kWindow; ++i) {
        dx_tile[threadIdx.x][i] = 0.0f;
        x_tile[threadIdx.x][i] = second.x_window[i];
      }
    }

    // A thread stages the elements e = threadIdx.x + l·kGradThreads of each step's tiles: (c, i) of B's window,
    // (r, c) of G. Where the thread count is a multiple of the tile's inner extent, an element's address is the
    // first one's plus l strides: a step's loads cost an add each, not a 64-bit index computation.
    constexpr int kLoads = (kGradTerms + kGradThreads - 1) / kGradThreads;
    auto w_coord = [&](int l, int& c, int& i) {
      const int e = threadIdx.x + l * kGradThreads;
      c = along_k ? e / kWindow : e % kGradColumns;
      i = along_k ? e % kWindow : e / kGradColumns;
    };
    auto w_offset = [&](int l) {  // from B[k0, c0]
      int c, i;
      w_coord(l, c, i);
      return i * args.b_row_stride + c * args.b_column_stride;
    };
    // where linear, element l is element 0 plus l times a stride the CTA shares (held in uniform registers)
    constexpr bool kLinearW = kGradThreads % kWindow == 0 && kGradThreads % kGradColumns == 0;
    const int64_t w_stride = along_k ? kGradThreads / kWindow * args.b_column_stride
                                     : kGradThreads / kGradColumns * args.b_row_stride;
    const float* const w_group = w + first_window * kWindow * args.b_row_stride;
    float w_next[kLoads];
    auto load_w = [&](int64_t c0, int v) {
      const int64_t left = args.n - c0;
      const int width = kCarries ? window_width(v) : kept.width;
      const float* source = w_group + v * kWindow * args.b_row_stride + c0 * args.b_column_stride;
      const int64_t w_first = w_offset(0);
#pragma unroll
      for (int l = 0; l < kLoads; ++l) {
        int c, i;
        w_coord(l, c, i);
        const bool inside = threadIdx.x + l * kGradThreads < kGradTerms && c < left && i < width;
        w_next[l] = inside ? __ldg(source + (kLinearW ? w_first + l * w_stride : w_offset(l))) : 0.0f;
      }
    };
    // G of the step's columns for the CTA's rows, read one step ahead as B's window is (zeros outside), and for
    // the recursive STE where the second level lets the gradient through (read from the forward's `blocked`
    // once per output and window, not once per thread and column as the chains need it; decoded when staged, a
    // step after the load, so no thread waits for it).
    constexpr int kGLoads = kGradColumns;
    float g_next[kGLoads];
    int32_t record_next[kRecursive ? kGLoads : 1];
    auto g_index = [&](int l, int& r, int& c) {
      const int e = threadIdx.x + l * kGradThreads;
      r = g_along_rows ? e % kGradThreads : e / kGradColumns;
      c = g_along_rows ? e / kGradThreads : e % kGradColumns;
    };
    constexpr bool kLinearG = kGradThreads % kGradColumns == 0;
    auto g_offset = [&](int l, int64_t row_stride, int64_t column_stride) {  // from G[row0, c0]
      int r, c;
      g_index(l, r, c);
      return r * row_stride + c * column_stride;
    };
    const int64_t g_stride = g_along_rows ? args.g_column_stride : kGradThreads / kGradColumns * args.g_row_stride;
    const int64_t record_stride = !kRecursive      ? 0
                                  : g_along_rows ? args.blocked_column_stride
                                                 : kGradThreads / kGradColumns * args.blocked_row_stride;
    const float* const g_rows = g + row0 * args.g_row_stride;
    const int32_t* const record_rows = kRecursive ? blocked + row0 * args.blocked_row_stride : nullptr;
    auto load_g = [&](int64_t c0) {
      const int64_t left = args.n - c0;
      const float* source = g_rows + c0 * args.g_column_stride;
      const int32_t* records = kRecursive ? record_rows + c0 * args.blocked_column_stride : nullptr;
      const int64_t g_first = g_offset(0, args.g_row_stride, args.g_column_stride);
      const int64_t record_first = kRecursive ? g_offset(0, args.blocked_row_stride, args.blocked_column_stride) : 0;
#pragma unroll
      for (int l = 0; l < kGLoads; ++l) {
        int r, c;
        g_index(l, r, c);
        const bool inside = r < rows && c < left;
        g_next[l] = inside ? __ldg(source + (kLinearG ? g_first + l * g_stride
                                                      : g_offset(l, args.g_row_stride, args.g_column_stride)))
                           : 0.0f;
        if constexpr (kRecursive)
          record_next[l] =
              inside ? __ldg(records + (kLinearG ? record_first + l * record_stride
                                                 : g_offset(l, args.blocked_row_stride, args.blocked_column_stride)))
                     : ChainRecord::encode(-1, -1, kept.packed);
      }
    };
    // kPairs columns' chains at a time (the last ones alone); the dB terms to this thread's row of `terms`.
    constexpr int kPairs = Thread::kPairs;
    auto run_columns = [&](Thread& thread, bool carried, auto full, auto columns, int c, int64_t c_global) {
      constexpr int kColumns = decltype(columns)::value;
      float g_value[kColumns];
      int open[kColumns];
      float carry[kColumns];
      bool chain = !kRecursive;
#pragma unroll
      for (int j = 0; j < kColumns; ++j) {
        g_value[j] = g_tile[c + j][threadIdx.x];
        const int code = kRecursive ? open_tile[c + j][threadIdx.x] : 0;
        open[j] = code & ~Thread::kNeedsChain;
        chain = chain || (code & Thread::kNeedsChain) != 0;
        carry[j] = kCarries ? carry_tile[c + j][threadIdx.x] : 0.0f;
      }
      // a step's terms of the kColumns columns in one 8- or 16-byte store where aligned (c is a multiple of them)
      auto db_sink = [&](int i, const float (&db_terms)[kColumns]) {
        float* out = &terms[threadIdx.x][i * kGradColumns + c];
        if constexpr (kColumns == 4 && kGradColumns % 4 == 0) {
          *reinterpret_cast<float4*>(out) = float4{db_terms[0], db_terms[1], db_terms[2], db_terms[3]};
        } else if constexpr (kColumns == 2 && kGradColumns % 2 == 0) {
          *reinterpret_cast<float2*>(out) = float2{db_terms[0], db_terms[1]};
        } else {
#pragma unroll
          for (int j = 0; j < kColumns; ++j) out[j] = db_terms[j];
        }
      };
      auto w_at = [&](int j, int i) { return w_tile[c + j][i]; };  // a broadcast
      thread.template columns<decltype(full)::value, kColumns>(c_global, w_at, g_value, open, chain, db_sink,
                                                               carried, carry);
      if constexpr (kCarries) {
#pragma unroll
        for (int j = 0; j < kColumns; ++j) carry_tile[c + j][threadIdx.x] = carry[j];
      }
    };
    auto columns_of_step = [&](Thread& thread, bool carried, auto full, int64_t c0, int count) {
      int c = 0;
      for (; c + kPairs <= count; c += kPairs)
        run_columns(thread, carried, full, std::integral_constant<int, kPairs>{}, c, c0 + c);
      for (; c < count; ++c) run_columns(thread, carried, full, std::integral_constant<int, 1>{}, c, c0 + c);
    };

    // The dB sums a thread runs: terms t = threadIdx.x·kSums + u, (c, i) = (t mod kGradColumns, t / kGradColumns).
    auto sum_coord = [&](int u, int& t, int& c, int& i) {
      t = threadIdx.x * kSums + u;
      c = t % kGradColumns;
      i = t / kGradColumns;
    };
    auto sum_offset = [&](int u) {  // from dB[k0, c0]
      int t, c, i;
      sum_coord(u, t, c, i);
      return i * args.db_row_stride + c * args.db_column_stride;
    };
    constexpr bool kLinearSums = kGradColumns % kSums == 0;  // a thread's sums: consecutive columns of one k
    float* const db_group = db == nullptr ? nullptr : db + first_window * kWindow * args.db_row_stride;

    // kCarries: the dA sums of the window run last (held_window) in registers, the other's in dx_tile
    float held[kCarries ? kWindow : 1] = {};
    float held_x[kCarries ? kWindow : 1];
    int held_window = 0;
    if constexpr (kCarries) {
#pragma unroll
      for (int i = 0; i < kWindow; ++i) held_x[i] = kept.x_window[i];
    }
    load_w(0, 0);
    load_g(0);
    int32_t step = 0;
    for (int64_t c0 = 0; c0 < args.n; c0 += kGradColumns) {
      const int count = int(args.n - c0 < kGradColumns ? args.n - c0 : kGradColumns);
      for (int v = 0; v < group_windows; ++v, ++step) {
        __syncthreads();  // the previous step's sums have read `terms` and `w_tile`
#pragma unroll
        for (int l = 0; l < kLoads; ++l) {
          if (threadIdx.x + l * kGradThreads < kGradTerms) {
            int c, i;
            w_coord(l, c, i);
            w_tile[c][i] = w_next[l];
          }
        }
        if (v == 0) {
#pragma unroll
          for (int l = 0; l < kGLoads; ++l) {
            int r, c;
            g_index(l, r, c);
            g_tile[c][r] = g_next[l];
            if constexpr (kRecursive) open_tile[c][r] = uint8_t(kept.open_code(record_next[l]));
          }
        }
        __syncthreads();
        if (v + 1 < group_windows) {
          load_w(c0, v + 1);
        } else if (c0 + kGradColumns < args.n) {
          load_w(c0 + kGradColumns, 0);
          load_g(c0 + kGradColumns);
        }
        const int width = kCarries ? window_width(v) : kept.width;
        if (active) {
          auto run = [&](Thread& thread) {
            if (width == kWindow)
              columns_of_step(thread, kCarries && v > 0, std::true_type{}, c0, count);
            else
              columns_of_step(thread, kCarries && v > 0, std::false_type{}, c0, count);
          };
          if constexpr (kCarries) {
            // window v's A values and dA sums: those of the previous step, or swapped with the ones waiting in
            // shared memory
            Thread thread(args, batch, row, first_window + v, false);
            float* const waiting_dx = dx_tile[threadIdx.x];
            float* const waiting_x = x_tile[threadIdx.x];
            const bool swap = held_window != v;
#pragma unroll
            for (int i = 0; i < kWindow; ++i) {
              thread.dx_window[i] = swap ? waiting_dx[i] : held[i];
              thread.x_window[i] = swap ? waiting_x[i] : held_x[i];
              if (swap) {
                waiting_dx[i] = held[i];
                waiting_x[i] = held_x[i];
              }
            }
            run(thread);
#pragma unroll
            for (int i = 0; i < kWindow; ++i) {
              held[i] = thread.dx_window[i];
              held_x[i] = thread.x_window[i];
            }
            held_window = v;
          } else {
            run(kept);
          }
        }
        if (db == nullptr) continue;
        if (row_block > 0 && threadIdx.x == 0) {
          wait_above(steps_done - 1, step);
        }
        __syncthreads();  // the terms are in place and the rows before ours have added theirs
        // a thread's kSums sums are consecutive terms (one 8-byte load per row; along dB's columns they are
        // consecutive addresses of dB) and run side by side
        float sum[kSums];
        float* out[kSums];
        bool valid[kSums];
        const float* column = &terms[0][threadIdx.x * kSums];
        float* const db_step = db_group + v * kWindow * args.db_row_stride + c0 * args.db_column_stride;
        const int64_t sum_first = sum_offset(0);
#pragma unroll
        for (int u = 0; u < kSums; ++u) {
          int t, c, i;
          sum_coord(u, t, c, i);
          valid[u] = t < kGradTerms && c < count && i < width;
          out[u] = db_step + (kLinearSums ? sum_first + u * args.db_column_stride : sum_offset(u));
          sum[u] = valid[u] && row_block > 0 ? __ldcg(out[u]) : 0.0f;
        }
        if (rows == kGradThreads) {  // every row block but a short last one: constant offsets, no bound test
#pragma unroll 8
          for (int r = 0; r < kGradThreads; ++r)
#pragma unroll
            for (int u = 0; u < kSums; ++u) sum[u] = add_rn(sum[u], column[r * kGradPitch + u]);
        } else {
          for (int r = 0; r < rows; ++r)
#pragma unroll
            for (int u = 0; u < kSums; ++u) sum[u] = add_rn(sum[u], column[r * kGradPitch + u]);
        }
#pragma unroll
        for (int u = 0; u < kSums; ++u)
          if (valid[u]) *out[u] = sum[u];
        // the CTA's stores precede thread 0's release through the barrier, whose fence orders them all at GPU
        // scope (CUTLASS's barrier.h arrives the same way): one fence per CTA, not one per thread
        __syncthreads();
        if (threadIdx.x == 0) store_release(steps_done, step + 1);
      }
    }
    if (!active) return;
    if constexpr (kCarries) {
      for (int v = 0; v < group_windows; ++v) {
        Thread thread(args, batch, row, first_window + v);
#pragma unroll
        for (int i = 0; i < kWindow; ++i) thread.dx_window[i] = v == held_window ? held[i] : dx_tile[threadIdx.x][i];
        thread.finish(batch, row);
      }
    } else {
      kept.finish(batch, row);
    }
  }

  static int64_t grads_workspace(const cutlass_ext_lowbit_grads_args* args);
  static int run_forward(const cutlass_ext_lowbit_forward_args* args, void* stream);
  static int run_grads(const cutlass_ext_lowbit_grads_args* args, void* stream);
};

// The launchers (nvcc only: a host program can include the structs above to run a CTA's threads itself).
#if defined(__CUDACC__)
template <class Gemm, bool kUnderflow, bool kFast, bool kBlocked>
__global__ void __launch_bounds__(Gemm::kThreads)
    lowbit_forward_kernel(const cutlass_ext_lowbit_forward_args args, int first_row_block) {
  // grid z is at most 65535: larger batches take several problems per CTA. Grid y is too: more row blocks take
  // several launches, each from its first_row_block (a loop over row blocks here slowed every launch by 5-20%).
  for (int64_t batch = blockIdx.z; batch < args.batch; batch += gridDim.z)
    Gemm::template forward<kUnderflow, kFast, kBlocked>(args, batch, int64_t(first_row_block + int(blockIdx.y)));
}

template <class Gemm, int kSte, bool kUnderflow, bool kFast, int kSpan>
__global__ void __launch_bounds__(Gemm::kGradThreads, Gemm::kGradBlocksPerSm)
    lowbit_grads_kernel(const cutlass_ext_lowbit_grads_args args, int group) {
  Gemm::template grads<kSte, kUnderflow, kFast, kSpan>(args, group);
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
  if (grid_m > INT32_MAX || grid_n > INT32_MAX) return int(cudaErrorInvalidValue);
  cudaStream_t cuda_stream = static_cast<cudaStream_t>(stream);
  const bool blocked = args->blocked != nullptr;
  for (int64_t first = 0; first < grid_m; first += kMaxGridYZ) {
    const int64_t rows = grid_m - first < kMaxGridYZ ? grid_m - first : kMaxGridYZ;
    const dim3 grid(unsigned(grid_n), unsigned(rows), unsigned(args->batch < kMaxGridYZ ? args->batch : kMaxGridYZ));
    dispatch_format(args->format, [&](auto underflow, auto fast) {
      constexpr bool uf = decltype(underflow)::value, fa = decltype(fast)::value;
      if (blocked)
        lowbit_forward_kernel<Gemm, uf, fa, true><<<grid, kThreads, 0, cuda_stream>>>(*args, int(first));
      else
        lowbit_forward_kernel<Gemm, uf, fa, false><<<grid, kThreads, 0, cuda_stream>>>(*args, int(first));
    });
  }
  return int(cudaGetLastError());
}

// One STE's gradient kernels for formats with or without underflow (six of a variant's 44: one library part each).
template <class Gemm, int kSte, bool kUnderflow>
void launch_grads(const cutlass_ext_lowbit_grads_args* args, dim3 grid, cudaStream_t stream) {
  const int span = window_span(args->format.chunk, Gemm::kWindowSize);  // GradRowWindow's kSpan
  const bool fast = Format::from(args->format).has_fast_form();
  auto with_fast_form = [&](auto fast_form) {
    constexpr bool uf = kUnderflow, fa = decltype(fast_form)::value;
    // kGradBlocksPerSm CTAs of ~34 KB shared memory each: ask for the largest shared-memory carveout
    auto launch = [&](auto kernel) {
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
      kernel<<<grid, Gemm::kGradThreads, 0, stream>>>(*args, Gemm::grads_group(*args));
    };
    if (span == kSpanChunk)
      launch(lowbit_grads_kernel<Gemm, kSte, uf, fa, kSpanChunk>);
    else if (span == kSpanInChunk)
      launch(lowbit_grads_kernel<Gemm, kSte, uf, fa, kSpanInChunk>);
    else
      launch(lowbit_grads_kernel<Gemm, kSte, uf, fa, kSpanAcross>);
  };
  if (fast)
    with_fast_form(std::true_type{});
  else
    with_fast_form(std::false_type{});
}

// One CTA per (batch, group of windows, row block); the workspace holds the CTA counter and each CTA's finished
// steps.
template <int kBlockM, int kBlockN, int kBlockK, int kThreadM, int kThreadN, int kWindow>
int64_t LowbitGemm<kBlockM, kBlockN, kBlockK, kThreadM, kThreadN, kWindow>::grads_workspace(
    const cutlass_ext_lowbit_grads_args* args) {
  if (args->m <= 0 || args->k <= 0 || args->batch <= 0) return 0;
  return int64_t(sizeof(int32_t)) * (1 + grads_ctas(*args, grads_group(*args)));
}

template <int kBlockM, int kBlockN, int kBlockK, int kThreadM, int kThreadN, int kWindow>
int LowbitGemm<kBlockM, kBlockN, kBlockK, kThreadM, kThreadN, kWindow>::run_grads(
    const cutlass_ext_lowbit_grads_args* args, void* stream) {
  using Gemm = LowbitGemm;
  if (args->m < 0 || args->n < 0 || args->k < 0 || args->batch < 0 || args->format.chunk < 1 ||
      args->k > INT32_MAX)
    return int(cudaErrorInvalidValue);
  if (args->ste == CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF && args->blocked == nullptr) return int(cudaErrorInvalidValue);
  if (args->m == 0 || args->k == 0 || args->batch == 0) return 0;
  const int64_t workspace = grads_workspace(args);
  if (args->workspace == nullptr || workspace / int64_t(sizeof(int32_t)) - 1 > INT32_MAX)
    return int(cudaErrorInvalidValue);
  cudaStream_t cuda_stream = static_cast<cudaStream_t>(stream);
  const cudaError_t cleared = cudaMemsetAsync(args->workspace, 0, size_t(workspace), cuda_stream);
  if (cleared != cudaSuccess) return int(cleared);
  const dim3 grid(unsigned(workspace / int64_t(sizeof(int32_t)) - 1));
  const bool underflow = args->format.underflow;
  switch (args->ste) {
    case CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF:
      underflow ? launch_grads<Gemm, CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF, true>(args, grid, cuda_stream)
                : launch_grads<Gemm, CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF, false>(args, grid, cuda_stream);
      break;
    case CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_OF:
      underflow ? launch_grads<Gemm, CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_OF, true>(args, grid, cuda_stream)
                : launch_grads<Gemm, CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_OF, false>(args, grid, cuda_stream);
      break;
    case CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_DIFF:
      underflow ? launch_grads<Gemm, CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_DIFF, true>(args, grid, cuda_stream)
                : launch_grads<Gemm, CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_DIFF, false>(args, grid, cuda_stream);
      break;
    default:
      return int(cudaErrorInvalidValue);
  }
  return int(cudaGetLastError());
}

#endif  // defined(__CUDACC__)

}  // namespace lowbit
}  // namespace cutlass_ext

// A variant's launchers, `<NAME>_lowbit_forward`, `<NAME>_lowbit_grads` and `<NAME>_lowbit_grads_workspace`
// (lowbit_abi.h).
#define CUTLASS_EXT_LOWBIT_LAUNCHERS(NAME, ...)                                                            \
  extern "C" int NAME##_lowbit_forward(const cutlass_ext_lowbit_forward_args* args, void* stream) {        \
    return __VA_ARGS__::run_forward(args, stream);                                                         \
  }                                                                                                        \
  extern "C" int NAME##_lowbit_grads(const cutlass_ext_lowbit_grads_args* args, void* stream) {            \
    return __VA_ARGS__::run_grads(args, stream);                                                           \
  }                                                                                                        \
  extern "C" int64_t NAME##_lowbit_grads_workspace(const cutlass_ext_lowbit_grads_args* args) {            \
    return __VA_ARGS__::grads_workspace(args);                                                             \
  }

// One STE's gradient kernels for one underflow setting (six of a variant's 44) as an explicit instantiation (KIND
// `template`) or its declaration (`extern template`).
#define CUTLASS_EXT_LOWBIT_GRADS(KIND, STE, UNDERFLOW, ...)                                                   \
  KIND void cutlass_ext::lowbit::launch_grads<__VA_ARGS__, STE, UNDERFLOW>(const cutlass_ext_lowbit_grads_args*, \
                                                                           dim3, cudaStream_t);
#define CUTLASS_EXT_LOWBIT_STE_GRADS(KIND, STE, ...)         \
  CUTLASS_EXT_LOWBIT_GRADS(KIND, STE, false, __VA_ARGS__) \
  CUTLASS_EXT_LOWBIT_GRADS(KIND, STE, true, __VA_ARGS__)

// A library compiled from seven translation units side by side (the family's `parts`, CUTLASS_EXT_LIBRARY_PART
// 0-6): part 0 holds the launchers and the forward kernels, part p the gradient kernels of the STE numbered
// (p + 1) / 2 (CUTLASS_EXT_LOWBIT_STE_*) for formats without underflow (p odd) or with it (p even), which part 0
// only declares. One unit alone (no parts defined) holds everything.
#if !defined(CUTLASS_EXT_LIBRARY_PART)
#define CUTLASS_EXT_EXPORT_LOWBIT_GEMM(NAME, ...) CUTLASS_EXT_LOWBIT_LAUNCHERS(NAME, __VA_ARGS__)
#elif CUTLASS_EXT_LIBRARY_PART == 0
static_assert(CUTLASS_EXT_LIBRARY_PARTS == 7, "a low-bit library is one unit, or seven");
#define CUTLASS_EXT_EXPORT_LOWBIT_GEMM(NAME, ...)                                          \
  CUTLASS_EXT_LOWBIT_STE_GRADS(extern template, CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF, __VA_ARGS__)  \
  CUTLASS_EXT_LOWBIT_STE_GRADS(extern template, CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_OF, __VA_ARGS__)  \
  CUTLASS_EXT_LOWBIT_STE_GRADS(extern template, CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_DIFF, __VA_ARGS__) \
  CUTLASS_EXT_LOWBIT_LAUNCHERS(NAME, __VA_ARGS__)
#else
#define CUTLASS_EXT_EXPORT_LOWBIT_GEMM(NAME, ...) \
  CUTLASS_EXT_LOWBIT_GRADS(template, (CUTLASS_EXT_LIBRARY_PART + 1) / 2, CUTLASS_EXT_LIBRARY_PART % 2 == 0, __VA_ARGS__)
#endif
