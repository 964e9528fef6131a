// The STE backward of the low-bit-accumulator GEMM (seed 002 appendix D) for one thread's work, as
// __host__ __device__ code: the gradient kernel runs it per (row, window) and a host program tests it.
// One recomputation of each output's chain yields the STE bit of every step, which feeds both gradients.
#pragma once

#include <type_traits>

#include "lowbit_abi.h"
#include "lowbit_fmaq.cuh"

namespace cutlass_ext {
namespace lowbit {

// The forward's record of one output for the recursive STE's backward: L2, the last chunk whose second-level add
// overflowed, and L1, the last chunk holding a first-level step that overflowed (−1: none). The forward may record
// a later L1 than the output's own (it keeps one for all of a thread's outputs): the backward then recomputes more
// chains, with the same result. Where a chain has at most kMaxPackedChunks chunks both fit one int32 (L1 + 1 in the
// high 16 bits, L2 + 1 in the low); a longer chain's record is L2 alone, and L1 unknown.
struct ChainRecord {
  static constexpr int64_t kMaxPackedChunks = 65534;
  LOWBIT_HD static bool packed(int64_t k, int64_t chunk) { return (k + chunk - 1) / chunk <= kMaxPackedChunks; }
  LOWBIT_HD static int32_t encode(int32_t last_blocked, int32_t last_failed, bool packed) {
    return packed ? int32_t((uint32_t(last_failed + 1) << 16) | uint32_t(last_blocked + 1)) : last_blocked;
  }
  LOWBIT_HD static int32_t last_blocked(int32_t record, bool packed) {
    return packed ? int32_t(uint32_t(record) & 0xffffu) - 1 : record;
  }
  LOWBIT_HD static int64_t last_failed(int32_t record, bool packed) {
    return packed ? int64_t(uint32_t(record) >> 16) - 1 : INT64_MAX;
  }
};

// Where a gradient window of kWindow steps lies in the chunks: across chunk boundaries, inside one longer chunk
// (the chunk a multiple of the window), or exactly one chunk.
constexpr int kSpanAcross = 0, kSpanInChunk = 1, kSpanChunk = 2;

LOWBIT_HD int window_span(int64_t chunk, int window) {
  return chunk == window ? kSpanChunk : chunk % window == 0 ? kSpanInChunk : kSpanAcross;
}

// dA[r, k0 .. k0 + kWindow) of one row r of A: for each column c in increasing order, the chain of output (r, c)
// is recomputed from the start of the chunk holding k0 through the window (and, for the recursive STE, to the end
// of the window's last chunk), giving each step's STE bit; the unmasked terms G[r, c]·B[k, c] are added, and the
// dB terms G[r, c]·A[r, k] (+0.0 where masked) go to a sink, which sums them over the rows in increasing r.
// `columns` runs kColumns chains side by side (independent work to hide each chain's latency) and adds their
// terms in increasing c: kPairs of them, four (two for the recursive STE, which spills with four) where the
// window lies in one chunk, one otherwise (the recursive STE would spill with two). kSpan (window_span): where
// the window lies. In one chunk, no step of it resets the partial sum (its first step starts a chunk only where
// the recomputation starts); where it is the whole chunk, no step comes before or after it in the chunk either
// (the common case: the chain of the window alone, without the code of the steps around it).
template <int kWindow, int kSte, bool kUnderflow, bool kFast, int kSpan>
struct GradRowWindow {
  static constexpr bool kInChunk = kSpan != kSpanAcross;
  static constexpr bool kWholeChunk = kSpan == kSpanChunk;
  static constexpr int kPairs = !kInChunk ? 1 : kSte == CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF ? 2 : 4;
  const cutlass_ext_lowbit_grads_args& args;
  Format format;
  int64_t chunk, k0, first, chain_end;
  int64_t first_chunk;  // first / chunk
  bool packed;          // ChainRecord::packed: the record holds L1
  int width;
  const float* x;  // A[r, ·]
  const float* w;  // B of this batch
  float x_window[kWindow];
  bool starts_chunk[kWindow];
  float dx_window[kWindow];

  // load_x: read the window's A values (else the caller sets x_window)
  LOWBIT_HD GradRowWindow(const cutlass_ext_lowbit_grads_args& arguments, int64_t batch, int64_t row, int64_t window,
                          bool load_x = true)
      : args(arguments), format(Format::from(arguments.format)), chunk(arguments.format.chunk), k0(window * kWindow) {
    width = int(args.k - k0 < kWindow ? args.k - k0 : kWindow);
    x = args.a + batch * args.a_batch_stride + row * args.a_row_stride;
    w = args.b + batch * args.b_batch_stride;
    first_chunk = k0 / chunk;
    first = first_chunk * chunk;  // start of k0's chunk
    packed = ChainRecord::packed(args.k, chunk);
    const int64_t tail_end = ((k0 + width - 1) / chunk + 1) * chunk;  // end of the last k's chunk
    chain_end = tail_end < args.k ? tail_end : args.k;
    int64_t position = k0 - first;
#pragma unroll
    for (int i = 0; i < kWindow; ++i) {
      x_window[i] = load_x && i < width ? x[(k0 + i) * args.a_column_stride] : 0.0f;
      starts_chunk[i] = position == 0;
      position = position + 1 == chunk ? 0 : position + 1;
      dx_window[i] = 0.0f;
    }
  }

  // The recursive STE's second level for one output: the gradient reaches the window's steps from i on (0 ..
  // kWindow), those after `last_blocked`, the forward's last chunk whose second-level add overflowed.
  LOWBIT_HD int open_at(int32_t last_blocked) const {
    const int64_t open_from = (int64_t(last_blocked) + 1) * chunk - k0;
    return open_from < 0 ? 0 : open_from > kWindow ? kWindow : int(open_from);
  }

  // open_at of an output's ChainRecord, with kNeedsChain set where its chain must be recomputed to know which
  // steps pass: some step of the chunks the window's recomputation covers (k0's chunk on) may have overflowed,
  // and the second level lets some step of the window through. Else the steps from open_at on pass.
  static constexpr int kNeedsChain = 0x80;
  static_assert(kWindow < kNeedsChain, "open_at and kNeedsChain share a byte");
  LOWBIT_HD int open_code(int32_t record) const {
    const int open = open_at(ChainRecord::last_blocked(record, packed));
    const bool needs_chain = open < kWindow && ChainRecord::last_failed(record, packed) >= first_chunk;
    return open | (needs_chain ? kNeedsChain : 0);
  }

  // The chains' partial sums at k0 from the start of k0's chunk, A and B read from global memory four steps at a
  // time (all loads of four steps issued before their FMAqs: one wait for memory per four steps, not one per step).
  template <int kColumns>
  LOWBIT_HD void rerun_chunk_start(const float* const (&w_column)[kColumns], float (&s)[kColumns]) const {
    int64_t k = first;
    for (; k + 4 <= k0; k += 4) {
      float x_quad[4], w_quad[4][kColumns];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        x_quad[q] = x[(k + q) * args.a_column_stride];
#pragma unroll
        for (int j = 0; j < kColumns; ++j) w_quad[q][j] = w_column[j][(k + q) * args.b_row_stride];
      }
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int j = 0; j < kColumns; ++j) s[j] = format.fmaq<kUnderflow, kFast>(x_quad[q], w_quad[q][j], s[j]);
    }
    for (; k < k0; ++k)
#pragma unroll
      for (int j = 0; j < kColumns; ++j)
        s[j] = format.fmaq<kUnderflow, kFast>(x[k * args.a_column_stride], w_column[j][k * args.b_row_stride], s[j]);
  }

  // The recursive STE: the chains from the window's end to the end of its last chunk, whether each step's sum
  // stayed below R_OF; loads as in rerun_chunk_start, all columns' chains side by side.
  template <int kColumns>
  LOWBIT_HD void run_chunk_end(const float* const (&w_column)[kColumns], float (&s)[kColumns],
                               bool (&passes)[kColumns]) const {
    auto step = [&](int j, float x_value, float w_value) {
      const Step result = fmaq_step<kUnderflow, kFast>(format, x_value, w_value, s[j]);
      passes[j] = passes[j] && format.passes_overflow(result.sum);
      s[j] = result.result;
    };
    int64_t k = k0 + width;
    for (; k + 4 <= chain_end; k += 4) {
      float x_quad[4], w_quad[4][kColumns];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        x_quad[q] = x[(k + q) * args.a_column_stride];
#pragma unroll
        for (int j = 0; j < kColumns; ++j) w_quad[q][j] = w_column[j][(k + q) * args.b_row_stride];
      }
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int j = 0; j < kColumns; ++j) step(j, x_quad[q], w_quad[q][j]);
    }
    for (; k < chain_end; ++k)
#pragma unroll
      for (int j = 0; j < kColumns; ++j) step(j, x[k * args.a_column_stride], w_column[j][k * args.b_row_stride]);
  }

  // kFull: the window holds kWindow steps (every window but a short last one), so no step needs a bound check.
  // w_at(j, i): B[k0 + i, c + j] (0 past the window's width). g_value: G[r, c + j]. open: open_at of output
  // (r, c + j) (recursive STE only, open_code without kNeedsChain). chain: recompute the chains (the recursive
  // STE without it: no column's open_code had kNeedsChain, so the steps from open on pass). db_sink(i, terms):
  // the dB terms of columns c .. c + kColumns − 1 at k0 + i (+0.0 where masked), for i < width. carry (the
  // immediate STEs): with `carried`, each chain's partial sum at k0, left by the window before this one in the
  // same thread (no rerun of the chunk's earlier steps); on return, the partial sum after the window's last step.
  template <bool kFull, int kColumns, class WAt, class DbSink>
  LOWBIT_HD void columns(int64_t c, WAt&& w_at, const float (&g_value)[kColumns], const int (&open)[kColumns],
                         bool chain, DbSink&& db_sink, bool carried, float (&carry)[kColumns]) {
    // A step's terms: G·B[k, c] into dA (skipped where masked) and G·A[r, k] to the dB sink (+0.0 where masked: a
    // running sum that starts at +0.0 is never −0.0, so adding +0.0 changes nothing). For fixed i, increasing j.
    auto emit = [&](int i, const bool (&pass)[kColumns], const float (&w_value)[kColumns]) {
      float db_terms[kColumns];
#pragma unroll
      for (int j = 0; j < kColumns; ++j) {
        if (pass[j]) dx_window[i] = add_rn(dx_window[i], mul_rn(g_value[j], w_value[j]));
        db_terms[j] = pass[j] ? mul_rn(g_value[j], x_window[i]) : 0.0f;
      }
      db_sink(i, db_terms);
    };
    // B's values four steps at a time (one 16-byte shared load per column in the kernel), read before the steps
    // that use them: few registers held, and no load latency between a step and the next.
    constexpr int kQuad = kWindow % 4 == 0 ? 4 : 1;
    auto load_quad = [&](int i, float (&w_quad)[kColumns][kQuad]) {
#pragma unroll
      for (int j = 0; j < kColumns; ++j)
#pragma unroll
        for (int q = 0; q < kQuad; ++q) w_quad[j][q] = w_at(j, i + q);
    };
    // The recursive STE's terms once each step's bit is known (pass_of(i, j)), B's window read again.
    auto emit_deferred = [&](auto&& pass_of) {
      float w_quad[kColumns][kQuad];
#pragma unroll
      for (int i = 0; i < kWindow; ++i) {
        if (i % kQuad == 0) load_quad(i, w_quad);
        if (kFull || i < width) {
          bool step_passes[kColumns];
          float w_value[kColumns];
#pragma unroll
          for (int j = 0; j < kColumns; ++j) {
            step_passes[j] = pass_of(i, j);
            w_value[j] = w_quad[j][i % kQuad];
          }
          emit(i, step_passes, w_value);
        }
      }
    };
    constexpr bool kRecursive = kSte == CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF;
    if (kRecursive && !chain) {
      bool all_open = true;
#pragma unroll
      for (int j = 0; j < kColumns; ++j) all_open = all_open && open[j] == 0;
      if (all_open)  // the common case: no mask at all
        emit_deferred([](int, int) { return true; });
      else
        emit_deferred([&](int i, int j) { return i >= open[j]; });
      return;
    }
    const float* w_column[kColumns];
    float s[kColumns];
#pragma unroll
    for (int j = 0; j < kColumns; ++j) {
      w_column[j] = w + (c + j) * args.b_column_stride;
      s[j] = 0.0f;
    }
    if constexpr (!kWholeChunk) {
      if (carried && k0 != first) {  // (a window that starts a chunk starts from 0)
#pragma unroll
        for (int j = 0; j < kColumns; ++j) s[j] = carry[j];
      } else {
        rerun_chunk_start<kColumns>(w_column, s);
      }
    }
    // The immediate STEs emit each step's terms as it runs; the recursive one once the later steps are known.
    // Recursive STE in one chunk: a step passes iff every later step of the chunk and the chunk's later
    // second-level adds pass (seed 002 eq. 11), i.e. iff it comes after the last failing step: from step
    // pass_from[j] on. Across chunks each step's bit is kept (passes).
    bool passes[kWindow][kColumns];
    int pass_from[kColumns];
#pragma unroll
    for (int j = 0; j < kColumns; ++j) pass_from[j] = 0;
    float w_quad[kColumns][kQuad];
#pragma unroll
    for (int i = 0; i < kWindow; ++i) {
      if (i % kQuad == 0) load_quad(i, w_quad);
      bool step_passes[kColumns];
      float w_value[kColumns];
#pragma unroll
      for (int j = 0; j < kColumns; ++j) {
        passes[i][j] = false;
        if (kFull || i < width) {
          if (!kInChunk && starts_chunk[i]) s[j] = 0.0f;
          const Step step = fmaq_step<kUnderflow, kFast>(format, x_window[i], w_quad[j][i % kQuad], s[j]);
          const bool pass = kSte == CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_DIFF
                                ? passes_diff(step, s[j], args.eps1, args.eps2)
                                : format.passes_overflow(step.sum);
          step_passes[j] = pass;
          w_value[j] = w_quad[j][i % kQuad];
          if (kRecursive && kInChunk && !pass) pass_from[j] = i + 1;
          if (kRecursive && !kInChunk) passes[i][j] = pass;
          s[j] = step.result;
        }
      }
      if (!kRecursive && (kFull || i < width)) emit(i, step_passes, w_value);
    }
    if constexpr (!kRecursive) {
#pragma unroll
      for (int j = 0; j < kColumns; ++j) carry[j] = s[j];
    }
    if constexpr (kRecursive) {
      bool chunk_end_passes[kColumns];
#pragma unroll
      for (int j = 0; j < kColumns; ++j) chunk_end_passes[j] = true;
      if constexpr (!kWholeChunk) run_chunk_end<kColumns>(w_column, s, chunk_end_passes);
#pragma unroll
      for (int j = 0; j < kColumns; ++j) {
        bool later_pass = chunk_end_passes[j];
        // no gradient reaches the steps of the last blocked chunk or earlier ones (in one chunk: all or none)
        if (kInChunk) {
          pass_from[j] = !later_pass ? kWindow : pass_from[j] > open[j] ? pass_from[j] : open[j];
        } else {
#pragma unroll
          for (int i = kWindow - 1; i >= 0; --i) {
            if (kFull || i < width) {
              const bool through = passes[i][j] && later_pass;
              later_pass = starts_chunk[i] || through;
              passes[i][j] = through && i >= open[j];
            }
          }
        }
      }
      emit_deferred([&](int i, int j) { return kInChunk ? i >= pass_from[j] : passes[i][j]; });
    }
  }

  LOWBIT_HD void finish(int64_t batch, int64_t row) const {
    if (args.da == nullptr) return;
    float* dx = args.da + batch * args.da_batch_stride + row * args.da_row_stride;
#pragma unroll
    for (int i = 0; i < kWindow; ++i)
      if (i < width) dx[(k0 + i) * args.da_column_stride] = dx_window[i];
  }
};

// Both gradients of one window on the host, as the kernel computes them: the rows in increasing order, each
// running its columns kPairs at a time (the last ones one at a time) with B read from global memory, and the dB
// terms added to dB in row order (the kernel's cross-row sum).
template <int kWindow, int kSte, bool kUnderflow, bool kFast, int kSpan>
void grads_window_of(const cutlass_ext_lowbit_grads_args& args, int64_t batch, int64_t window) {
  float* db = args.db == nullptr ? nullptr : args.db + batch * args.db_batch_stride;
  const float* w = args.b + batch * args.b_batch_stride;
  for (int64_t row = 0; row < args.m; ++row) {
    GradRowWindow<kWindow, kSte, kUnderflow, kFast, kSpan> thread(args, batch, row, window);
    auto run = [&](auto columns, int64_t c) {
      constexpr int kColumns = decltype(columns)::value;
      float w_window[kColumns][kWindow];
      for (int j = 0; j < kColumns; ++j)
        for (int i = 0; i < kWindow; ++i)
          w_window[j][i] =
              i < thread.width ? w[(thread.k0 + i) * args.b_row_stride + (c + j) * args.b_column_stride] : 0.0f;
      const float* g = args.g + batch * args.g_batch_stride + row * args.g_row_stride;
      float g_value[kColumns];
      int open[kColumns];
      bool chain = kSte != CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF;
      for (int j = 0; j < kColumns; ++j) {
        g_value[j] = g[(c + j) * args.g_column_stride];
        const int code = kSte != CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF
                             ? 0
                             : thread.open_code(args.blocked[batch * args.blocked_batch_stride +
                                                             row * args.blocked_row_stride +
                                                             (c + j) * args.blocked_column_stride]);
        open[j] = code & ~thread.kNeedsChain;
        chain = chain || (code & thread.kNeedsChain) != 0;
      }
      auto sink = [&](int i, const float (&terms)[kColumns]) {
        for (int j = 0; j < kColumns && db != nullptr; ++j) {
          float& sum = db[(thread.k0 + i) * args.db_row_stride + (c + j) * args.db_column_stride];
          sum = row == 0 ? add_rn(0.0f, terms[j]) : add_rn(sum, terms[j]);
        }
      };
      auto w_at = [&](int j, int i) { return w_window[j][i]; };
      float carry[kColumns];
      if (thread.width == kWindow)
        thread.template columns<true, kColumns>(c, w_at, g_value, open, chain, sink, false, carry);
      else
        thread.template columns<false, kColumns>(c, w_at, g_value, open, chain, sink, false, carry);
    };
    int64_t c = 0;
    constexpr int kPairs = decltype(thread)::kPairs;
    for (; c + kPairs <= args.n; c += kPairs) run(std::integral_constant<int, kPairs>{}, c);
    for (; c < args.n; ++c) run(std::integral_constant<int, 1>{}, c);
    thread.finish(batch, row);
  }
}

template <int kWindow, int kSte, bool kUnderflow, bool kFast>
void grads_window(const cutlass_ext_lowbit_grads_args& args, int64_t batch, int64_t window) {
  switch (window_span(args.format.chunk, kWindow)) {
    case kSpanChunk:
      return grads_window_of<kWindow, kSte, kUnderflow, kFast, kSpanChunk>(args, batch, window);
    case kSpanInChunk:
      return grads_window_of<kWindow, kSte, kUnderflow, kFast, kSpanInChunk>(args, batch, window);
    default:
      return grads_window_of<kWindow, kSte, kUnderflow, kFast, kSpanAcross>(args, batch, window);
  }
}

}  // namespace lowbit
}  // namespace cutlass_ext
