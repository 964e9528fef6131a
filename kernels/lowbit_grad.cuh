// The STE backward of the low-bit-accumulator GEMM (seed 002 appendix D) for one thread's work, as
// __host__ __device__ code: the gradient kernel runs it per (row, window) and a host program tests it.
#pragma once

#include <type_traits>

#include "lowbit_abi.h"
#include "lowbit_fmaq.cuh"

namespace cutlass_ext {
namespace lowbit {

// dX[r, k0 .. k0 + kWindow) of one row r: for each column c in increasing order, the chain of output (r, c) is
// recomputed from the start of the chunk holding k0 through the window (and, for the recursive STE, to the end
// of the window's last chunk), giving each step's STE bit; the unmasked terms G[r, c]·W[k, c] are added.
// `columns` runs kColumns chains side by side (independent work to hide each chain's latency) and adds their
// terms in increasing c: kPairs of them in the window-in-one-chunk case, one in the general case (whose
// recursive STE would spill with two). kInChunk: the chunk is a multiple of kWindow, so the window lies in one chunk and no
// step of it resets the partial sum (its first step starts a chunk only where the recomputation starts).
template <int kWindow, int kSte, bool kUnderflow, bool kFast, bool kInChunk>
struct GradRowWindow {
  static constexpr int kPairs = kInChunk ? 2 : 1;
  const cutlass_ext_lowbit_grad_args& args;
  Format format;
  int64_t chunk, k0, first, chain_end;
  int32_t window_chunk;  // k0's chunk (k < 2^31)
  int width;
  const float* x;  // X[r, ·]
  const float* w;  // W of this batch
  const float* g;  // G[r, ·]
  const int32_t* blocked;  // the forward's last overflowing chunk of (r, ·), recursive STE only
  float x_window[kWindow];
  bool starts_chunk[kWindow];
  float dx_window[kWindow];

  LOWBIT_HD GradRowWindow(const cutlass_ext_lowbit_grad_args& arguments, int64_t batch, int64_t row, int64_t window)
      : args(arguments), format(Format::from(arguments.format)), chunk(arguments.format.chunk), k0(window * kWindow) {
    width = int(args.k - k0 < kWindow ? args.k - k0 : kWindow);
    x = args.x + batch * args.x_batch_stride + row * args.x_row_stride;
    w = args.w + batch * args.w_batch_stride;
    g = args.g + batch * args.g_batch_stride + row * args.g_row_stride;
    blocked = kSte == CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF
                  ? args.blocked + batch * args.blocked_batch_stride + row * args.blocked_row_stride
                  : nullptr;
    window_chunk = int32_t(k0 / chunk);
    first = k0 / chunk * chunk;                                        // start of k0's chunk
    const int64_t tail_end = ((k0 + width - 1) / chunk + 1) * chunk;  // end of the last k's chunk
    chain_end = tail_end < args.k ? tail_end : args.k;
    int64_t position = k0 - first;
#pragma unroll
    for (int i = 0; i < kWindow; ++i) {
      x_window[i] = i < width ? x[(k0 + i) * args.x_column_stride] : 0.0f;
      starts_chunk[i] = position == 0;
      position = position + 1 == chunk ? 0 : position + 1;
      dx_window[i] = 0.0f;
    }
  }

  // kFull: the window holds kWindow steps (every window but a short last one), so no step needs a bound check.
  template <bool kFull, int kColumns>
  LOWBIT_HD void columns(int64_t c, const float (&w_window)[kColumns][kWindow]) {
    const float* w_column[kColumns];
    float g_value[kColumns], s[kColumns];
#pragma unroll
    for (int j = 0; j < kColumns; ++j) {
      w_column[j] = w + (c + j) * args.w_column_stride;
      g_value[j] = g[(c + j) * args.g_column_stride];
      s[j] = 0.0f;
    }
    for (int64_t k = first; k < k0; ++k)
#pragma unroll
      for (int j = 0; j < kColumns; ++j)
        s[j] = format.fmaq<kUnderflow, kFast>(x[k * args.x_column_stride], w_column[j][k * args.w_row_stride], s[j]);
    bool passes[kColumns][kWindow];
    // Recursive STE in one chunk: a step passes iff every later step of the chunk and the chunk's later
    // second-level adds pass (seed 002 eq. 11), i.e. iff it comes after the last failing step.
    int last_fail[kColumns];
#pragma unroll
    for (int j = 0; j < kColumns; ++j) last_fail[j] = -1;
#pragma unroll
    for (int i = 0; i < kWindow; ++i)
#pragma unroll
      for (int j = 0; j < kColumns; ++j) {
        passes[j][i] = false;
        if (kFull || i < width) {
          if (!kInChunk && starts_chunk[i]) s[j] = 0.0f;
          const Step step = fmaq_step<kUnderflow, kFast>(format, x_window[i], w_window[j][i], s[j]);
          passes[j][i] = kSte == CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_DIFF ? passes_diff(step, s[j], args.eps1, args.eps2)
                                                                     : format.passes_overflow(step.sum);
          if (kInChunk && kSte == CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF && !passes[j][i]) last_fail[j] = i;
          s[j] = step.result;
        }
      }
    if (kSte == CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF) {
#pragma unroll
      for (int j = 0; j < kColumns; ++j) {
        bool later_pass = true;
        for (int64_t k = k0 + width; k < chain_end; ++k) {
          const Step step = fmaq_step<kUnderflow, kFast>(format, x[k * args.x_column_stride],
                                                         w_column[j][k * args.w_row_stride], s[j]);
          later_pass = later_pass && format.passes_overflow(step.sum);
          s[j] = step.result;
        }
        // the last chunk whose second-level add overflowed: no gradient reaches its steps or earlier ones
        const int32_t last_blocked = blocked[(c + j) * args.blocked_column_stride];
        if (kInChunk) {
          if (!later_pass || window_chunk <= last_blocked) last_fail[j] = kWindow;
#pragma unroll
          for (int i = 0; i < kWindow; ++i) passes[j][i] = (kFull || i < width) && i > last_fail[j];
        } else {
          const int64_t open_from = (int64_t(last_blocked) + 1) * chunk;  // first k after the last blocked chunk
#pragma unroll
          for (int i = kWindow - 1; i >= 0; --i) {
            if (kFull || i < width) {
              const bool through = passes[j][i] && later_pass;
              later_pass = starts_chunk[i] || through;
              passes[j][i] = through && k0 + i >= open_from;
            }
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kColumns; ++j)
#pragma unroll
      for (int i = 0; i < kWindow; ++i)
        if (passes[j][i]) dx_window[i] = add_rn(dx_window[i], mul_rn(g_value[j], w_window[j][i]));
  }

  LOWBIT_HD void finish(int64_t batch, int64_t row) const {
    float* dx = args.dx + batch * args.dx_batch_stride + row * args.dx_row_stride;
#pragma unroll
    for (int i = 0; i < kWindow; ++i)
      if (i < width) dx[(k0 + i) * args.dx_column_stride] = dx_window[i];
  }
};

// The whole of one thread's work, W read from global memory (the host program's form of the kernel): columns
// kPairs at a time as the kernel runs them, the last ones one at a time.
template <int kWindow, int kSte, bool kUnderflow, bool kFast, bool kInChunk>
LOWBIT_HD void grad_row_window_of(const cutlass_ext_lowbit_grad_args& args, int64_t batch, int64_t row,
                                  int64_t window) {
  GradRowWindow<kWindow, kSte, kUnderflow, kFast, kInChunk> thread(args, batch, row, window);
  const float* w = args.w + batch * args.w_batch_stride;
  auto run = [&](auto columns, int64_t c) {
    constexpr int kColumns = decltype(columns)::value;
    float w_window[kColumns][kWindow];
    for (int j = 0; j < kColumns; ++j)
      for (int i = 0; i < kWindow; ++i)
        w_window[j][i] =
            i < thread.width ? w[(thread.k0 + i) * args.w_row_stride + (c + j) * args.w_column_stride] : 0.0f;
    if (thread.width == kWindow)
      thread.template columns<true, kColumns>(c, w_window);
    else
      thread.template columns<false, kColumns>(c, w_window);
  };
  int64_t c = 0;
  constexpr int kPairs = decltype(thread)::kPairs;
  for (; c + kPairs <= args.columns; c += kPairs) run(std::integral_constant<int, kPairs>{}, c);
  for (; c < args.columns; ++c) run(std::integral_constant<int, 1>{}, c);
  thread.finish(batch, row);
}

template <int kWindow, int kSte, bool kUnderflow, bool kFast>
LOWBIT_HD void grad_row_window(const cutlass_ext_lowbit_grad_args& args, int64_t batch, int64_t row, int64_t window) {
  if (args.format.chunk % kWindow == 0)
    grad_row_window_of<kWindow, kSte, kUnderflow, kFast, true>(args, batch, row, window);
  else
    grad_row_window_of<kWindow, kSte, kUnderflow, kFast, false>(args, batch, row, window);
}

}  // namespace lowbit
}  // namespace cutlass_ext
