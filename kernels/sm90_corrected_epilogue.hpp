// The Hopper corrected SGEMM's epilogue, stored from registers: each thread writes its accumulator elements straight
// to D (two adjacent columns at a time), after halfhalf's unscaling acc · 2^-(row_shift[m] + column_shift[n]) (one
// rounding: the factor is exact in FP64) and, in the variants with a bias, alpha · that + bias[n] (one rounding).
// Why not CUTLASS's TMA epilogue: its store path (shared-memory staging, TMA store, subtile pipeline) was 40% of the
// kernel's template instantiation, ~9 s of a variant's ~25 s of cicc on two cores; for FP32 output behind a
// mainloop of three products per k-block the stores' cost is small either way. An operator-style collective, as
// CUTLASS's DefaultEpilogue, which Sm90TmaWarpSpecializedAdapter fits to the warp-specialized kernels.
#pragma once

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/detail.hpp"

namespace cutlass_ext {

struct CorrectedEpilogueArguments {
  int32_t const* row_shift = nullptr;  // halfhalf: per row of A, per batch row_shift_batch_stride apart
  int64_t row_shift_batch_stride = 0;
  int32_t const* column_shift = nullptr;  // per column of B
  int64_t column_shift_batch_stride = 0;
  float alpha = 1.f;            // with a bias
  float const* bias = nullptr;  // (n), every batch; null reads as 0
};

// What a null shift or bias pointer reads (Sm90CorrectedEpilogueOp::read_or_zero).
static __device__ const int32_t kZeroWord = 0;

template <bool Scaled, bool Bias>
class Sm90CorrectedEpilogueOp {
 public:
  using StrideD = cute::Stride<int64_t, cute::_1, int64_t>;  // row-major (m, n, batch)
  using ElementC = void;                                     // no source
  using StrideC = StrideD;
  using ElementD = float;
  using ElementAccumulator = float;
  using ElementCompute = float;
  using ElementOutput = float;
  using ElementScalar = float;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;

  struct SharedStorage {};
  using TensorStorage = SharedStorage;

  struct Arguments {
    CorrectedEpilogueArguments thread{};
    float const* ptr_C = nullptr;  // unused: the kernel layer names C
    StrideC dC{};
    float* ptr_D = nullptr;
    StrideD dD{};
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.ptr_D != nullptr;
  }

  CUTLASS_HOST_DEVICE Sm90CorrectedEpilogueOp(Params const& params, SharedStorage const& = SharedStorage())
      : params(params) {}

  // The tile at blk_coord_mnkl: each thread's elements as tiled_mma lays out its accumulators. SM90 wgmma fragments
  // hold pairs of adjacent columns of one row (values 2j, 2j+1), stored 8 bytes at once where both are in D.
  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl, cute::Tensor<FrgEngine, FrgLayout> const& accumulators,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    using namespace cute;
    int rows = int(get<0>(problem_shape_mnkl)), columns = int(get<1>(problem_shape_mnkl));
    int first_m = int(get<0>(blk_coord_mnkl)) * int(size<0>(blk_shape_mnk));
    int first_n = int(get<1>(blk_coord_mnkl)) * int(size<1>(blk_shape_mnk));
    int64_t batch = int64_t(get<3>(blk_coord_mnkl));

    // (m, n) within the tile of each of this thread's accumulator elements
    Tensor tCcD = tiled_mma.get_thread_slice(thread_idx).partition_C(make_identity_tensor(take<0, 2>(blk_shape_mnk)));
    constexpr int kElements = decltype(size(accumulators))::value;
    static_assert(decltype(size(tCcD))::value == kElements, "one coordinate per element");
    static_assert(kElements % 2 == 0, "accumulators come in column pairs");

    float* d = params.ptr_D + batch * get<2>(params.dD);
    int64_t ldd = get<0>(params.dD);
    CorrectedEpilogueArguments const& op = params.thread;
    int32_t const* row_shift = op.row_shift != nullptr ? op.row_shift + batch * op.row_shift_batch_stride : nullptr;
    int32_t const* column_shift =
        op.column_shift != nullptr ? op.column_shift + batch * op.column_shift_batch_stride : nullptr;

    // Every value first, then the stores: loads of one row's or column's values merge only where no store to D
    // (which could alias them, for the compiler) comes between.
    float out[kElements];
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kElements; ++i) {
      out[i] = value(accumulators(i), first_m + int(get<0>(tCcD(i))), first_n + int(get<1>(tCcD(i))), rows, columns,
                     row_shift, column_shift);
    }
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kElements; i += 2) {
      int m = first_m + int(get<0>(tCcD(i))), n = first_n + int(get<1>(tCcD(i)));
      int m1 = first_m + int(get<0>(tCcD(i + 1))), n1 = first_n + int(get<1>(tCcD(i + 1)));
      if (m1 == m && n1 == n + 1) {  // wgmma's layout (folded at compile time)
        if (m < rows && n1 < columns) {
          *reinterpret_cast<float2*>(d + m * ldd + n) = make_float2(out[i], out[i + 1]);  // n even, D 16-byte aligned
        } else if (m < rows && n < columns) {
          d[m * ldd + n] = out[i];
        }
      } else {
        if (m < rows && n < columns) d[m * ldd + n] = out[i];
        if (m1 < rows && n1 < columns) d[m1 * ldd + n1] = out[i + 1];
      }
    }
  }

 private:
  // One element's output; its row's and column's values read at (m, n) clamped into D, so an element outside D
  // (not stored) reads in bounds without a branch.
  CUTLASS_DEVICE float value(float acc, int m, int n, int rows, int columns, int32_t const* row_shift,
                             int32_t const* column_shift) const {
    float x = acc;
    if constexpr (Scaled || Bias) {
      m = cute::min(m, rows - 1);
      n = cute::min(n, columns - 1);
      if constexpr (Scaled) {
        int exponent = read_or_zero(row_shift, m) + read_or_zero(column_shift, n);
        x = float(double(x) * __longlong_as_double((long long)(1023 - exponent) << 52));
      }
      if constexpr (Bias) x = fmaf(params.thread.alpha, x, read_or_zero(params.thread.bias, n));
    }
    return x;
  }

  // base[index], or 0 where base is null (the ABI's "a null shift or bias reads as 0"): a null base reads a zero
  // word instead, without a branch, so the compiler merges the loads of one row's or column's value (a load behind
  // a null test, one branch per element, keeps it from doing that).
  template <class T>
  static CUTLASS_DEVICE T read_or_zero(T const* base, int index) {
    static_assert(sizeof(T) == sizeof(kZeroWord), "a 32-bit value");
    T const* from = base != nullptr ? base : reinterpret_cast<T const*>(&kZeroWord);
    return __ldg(from + (base != nullptr ? index : 0));
  }

  Params params;
};

template <bool Scaled, bool Bias>
using Sm90CorrectedEpilogue =
    cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Sm90CorrectedEpilogueOp<Scaled, Bias>>;

}  // namespace cutlass_ext
