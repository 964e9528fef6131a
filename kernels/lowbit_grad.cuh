// The STE backward of the low-bit-accumulator GEMM (seed 002 appendix D) for one thread's work, as
// __host__ __device__ code: the gradient kernel runs it per (row, window) and a host program tests it.
#pragma once

#include "lowbit_abi.h"
#include "lowbit_fmaq.cuh"

namespace cutlass_ext {
namespace lowbit {

// dX[r, k0 .. k0 + kWindow) of one row r: for each column c in increasing order, the chain of output (r, c) is
// recomputed from the start of the chunk holding k0 through the window (and, for the recursive STE, to the end
// of the window's last chunk), giving each step's STE bit; the unmasked terms G[r, c]·W[k, c] are added.
// `column` takes the window's W[k0 + i, c] from the caller (the kernel stages them in shared memory).
template <int kWindow, int kSte, bool kUnderflow, bool kFast>
struct GradRowWindow {
  const cutlass_ext_lowbit_grad_args& args;
  Format format;
  int64_t chunk, k0, first, chain_end;
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
  template <bool kFull>
  LOWBIT_HD void column(int64_t c, const float (&w_window)[kWindow]) {
    const float* w_column = w + c * args.w_column_stride;
    const float g_value = g[c * args.g_column_stride];
    float s = 0.0f;
    for (int64_t k = first; k < k0; ++k)
      s = format.fmaq<kUnderflow, kFast>(x[k * args.x_column_stride], w_column[k * args.w_row_stride], s);
    bool passes[kWindow];
#pragma unroll
    for (int i = 0; i < kWindow; ++i) {
      passes[i] = false;
      if (kFull || i < width) {
        if (starts_chunk[i]) s = 0.0f;
        const Step step = fmaq_step<kUnderflow, kFast>(format, x_window[i], w_window[i], s);
        passes[i] = kSte == CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_DIFF ? passes_diff(step, s, args.eps1, args.eps2)
                                                                  : format.passes_overflow(step.sum);
        s = step.result;
      }
    }
    if (kSte == CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF) {
      // seed 002 eq. 11 in the chunked order: a step's gradient passes every later step of its chunk and every
      // later second-level add; the forward recorded the last chunk whose second-level add overflowed.
      bool later_pass = true;
      for (int64_t k = k0 + width; k < chain_end; ++k) {
        const Step step =
            fmaq_step<kUnderflow, kFast>(format, x[k * args.x_column_stride], w_column[k * args.w_row_stride], s);
        later_pass = later_pass && format.passes_overflow(step.sum);
        s = step.result;
      }
      // first k whose chunk is after the last blocked one
      const int64_t open_from = (int64_t(blocked[c * args.blocked_column_stride]) + 1) * chunk;
#pragma unroll
      for (int i = kWindow - 1; i >= 0; --i) {
        if (kFull || i < width) {
          const bool through = passes[i] && later_pass;
          later_pass = starts_chunk[i] || through;
          passes[i] = through && k0 + i >= open_from;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kWindow; ++i)
      if (passes[i]) dx_window[i] = add_rn(dx_window[i], mul_rn(g_value, w_window[i]));
  }

  LOWBIT_HD void finish(int64_t batch, int64_t row) const {
    float* dx = args.dx + batch * args.dx_batch_stride + row * args.dx_row_stride;
#pragma unroll
    for (int i = 0; i < kWindow; ++i)
      if (i < width) dx[(k0 + i) * args.dx_column_stride] = dx_window[i];
  }
};

// The whole of one thread's work, W read from global memory (the host program's form of the kernel).
template <int kWindow, int kSte, bool kUnderflow, bool kFast>
LOWBIT_HD void grad_row_window(const cutlass_ext_lowbit_grad_args& args, int64_t batch, int64_t row, int64_t window) {
  GradRowWindow<kWindow, kSte, kUnderflow, kFast> thread(args, batch, row, window);
  const float* w = args.w + batch * args.w_batch_stride;
  for (int64_t c = 0; c < args.columns; ++c) {
    float w_window[kWindow];
    for (int i = 0; i < kWindow; ++i)
      w_window[i] = i < thread.width ? w[(thread.k0 + i) * args.w_row_stride + c * args.w_column_stride] : 0.0f;
    if (thread.width == kWindow)
      thread.template column<true>(c, w_window);
    else
      thread.template column<false>(c, w_window);
  }
  thread.finish(batch, row);
}

}  // namespace lowbit
}  // namespace cutlass_ext
