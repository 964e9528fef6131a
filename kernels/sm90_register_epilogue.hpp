// Epilogues stored from registers, for CUTLASS 3.x warp-specialized kernels: each thread computes its accumulator
// elements' outputs (a Fusion: the Hopper corrected SGEMM's unscaling and bias, FP8's scales and bias) and stores
// them straight to D. Why not CUTLASS's TMA epilogue: its store path (shared-memory staging, TMA store, subtile
// pipeline) is about half of a Hopper kernel's template instantiation, 9-15 s of cicc on two cores a variant, and
// where the mainloop dominates (three products per k-block, or decode's stream of weights) the stores' cost is
// small either way. An operator-style collective, as CUTLASS's DefaultEpilogue, which
// Sm90TmaWarpSpecializedAdapter fits to the warp-specialized kernels.
//
// A Fusion has Arguments (the epilogue's `thread` arguments) and a Tile, made per output tile from them and the
// batch index, whose operator()(acc, m, n) gives an element's output in FP32 (m, n: its coordinates in D, clamped
// into D, so that an element outside D, which is not stored, reads in bounds).
#pragma once

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/arch/grid_dependency_control.h"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/detail.hpp"
#include "cutlass/numeric_conversion.h"

namespace cutlass_ext {

// What a null pointer reads: a zero word (0 as a 16- or 32-bit float), and a float one.
static __device__ const int32_t kZeroWord = 0;
static __device__ const float kOneWord = 1.f;

// base[index] as a float, or `fallback` where base is null. A null base reads the fallback's word instead, without
// a branch, so the compiler merges the loads of one row's or column's value (a load behind a null test, one branch
// per element, keeps it from doing that). T: float, or a 16-bit CUTLASS float (half_t, bfloat16_t).
template <class T>
CUTLASS_DEVICE float read_or(T const* base, int64_t index, T const* fallback) {
  if (base == nullptr) {
    base = fallback;
    index = 0;
  }
  if constexpr (sizeof(T) == 4) {
    return __ldg(reinterpret_cast<float const*>(base) + index);
  } else {
    static_assert(sizeof(T) == 2, "a 16- or 32-bit value");
    return float(T::bitcast(__ldg(reinterpret_cast<unsigned short const*>(base) + index)));
  }
}
template <class T>
CUTLASS_DEVICE float read_or_zero(T const* base, int64_t index) {
  return read_or(base, index, reinterpret_cast<T const*>(&kZeroWord));
}
template <class T>  // a template, as the others: host compiles of this header never instantiate it
CUTLASS_DEVICE float read_or_one(T const* base, int64_t index) {
  static_assert(cute::is_same_v<T, float>, "a float: the scales");
  return read_or(base, index, &kOneWord);
}

template <class Fusion, class ElementD_, class StrideD_>
class Sm90RegisterEpilogueOp {
 public:
  using ElementD = ElementD_;
  using StrideD = StrideD_;  // (m, n, batch): row-major D has (ld, 1, batch stride), column-major (1, ld, …)
  using ElementC = void;     // no source
  using StrideC = StrideD;
  using ElementAccumulator = float;
  using ElementCompute = float;
  using ElementOutput = ElementD;
  using ElementScalar = float;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;

  struct SharedStorage {};
  using TensorStorage = SharedStorage;

  struct Arguments {
    typename Fusion::Arguments thread{};
    ElementD const* ptr_C = nullptr;  // unused: the kernel layer names C
    StrideC dC{};
    ElementD* ptr_D = nullptr;
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
  // Row-major D is stored two elements at a time: aligned to two, rows an even number of elements apart.
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    if (args.ptr_D == nullptr) return false;
    if constexpr (kPairs) {
      return reinterpret_cast<uintptr_t>(args.ptr_D) % (2 * sizeof(ElementD)) == 0 && cute::get<0>(args.dD) % 2 == 0 &&
             cute::get<2>(args.dD) % 2 == 0;
    }
    return true;
  }

  CUTLASS_HOST_DEVICE Sm90RegisterEpilogueOp(Params const& params, SharedStorage const& = SharedStorage())
      : params(params) {}

  // The tile at blk_coord_mnkl: each thread's elements as tiled_mma lays out its accumulators. SM90 wgmma fragments
  // hold pairs of adjacent columns of one row (values 2j, 2j+1): row-major D stores each pair at once.
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

    // The values may come from the grid before (programmatic launch): the producer waited for it, but these reads
    // are the consumers' own (a no-op without programmatic launch, and once that grid is done).
    cutlass::arch::wait_on_dependent_grids();

    // (m, n) within the tile of each of this thread's accumulator elements
    Tensor tCcD = tiled_mma.get_thread_slice(thread_idx).partition_C(make_identity_tensor(take<0, 2>(blk_shape_mnk)));
    constexpr int kElements = decltype(size(accumulators))::value;
    static_assert(decltype(size(tCcD))::value == kElements, "one coordinate per element");
    static_assert(kElements % 2 == 0, "accumulators come in column pairs");
    static_assert(decltype(size<1>(blk_shape_mnk))::value % 2 == 0, "pairs start at even columns: n even");

    // Every value first, then the stores: loads of one row's or column's values merge only where no store to D
    // (which could alias them, for the compiler) comes between.
    typename Fusion::Tile fusion(params.thread, batch);
    float out[kElements];
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kElements; ++i) {
      int m = cute::min(first_m + int(get<0>(tCcD(i))), rows - 1);
      int n = cute::min(first_n + int(get<1>(tCcD(i))), columns - 1);
      out[i] = fusion(float(accumulators(i)), m, n);
    }

    cutlass::NumericConverter<ElementD, float, cutlass::FloatRoundStyle::round_to_nearest> to_d;
    ElementD* d = params.ptr_D + batch * get<2>(params.dD);
    int64_t stride_m = get<0>(params.dD), stride_n = get<1>(params.dD);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kElements; i += 2) {
      int m = first_m + int(get<0>(tCcD(i))), n = first_n + int(get<1>(tCcD(i)));
      int m1 = first_m + int(get<0>(tCcD(i + 1))), n1 = first_n + int(get<1>(tCcD(i + 1)));
      bool pair = false;
      if constexpr (kPairs) pair = m1 == m && n1 == n + 1;  // wgmma's layout (folded at compile time)
      if (pair) {
        if (m < rows && n1 < columns) {  // n even: aligned (can_implement)
          cutlass::AlignedArray<ElementD, 2> both;
          both[0] = to_d(out[i]);
          both[1] = to_d(out[i + 1]);
          *reinterpret_cast<cutlass::AlignedArray<ElementD, 2>*>(d + m * stride_m + n) = both;
        } else if (m < rows && n < columns) {
          d[m * stride_m + n] = to_d(out[i]);
        }
      } else {
        if (m < rows && n < columns) d[m * stride_m + n * stride_n] = to_d(out[i]);
        if (m1 < rows && n1 < columns) d[m1 * stride_m + n1 * stride_n] = to_d(out[i + 1]);
      }
    }
  }

 private:
  static constexpr bool kPairs = cute::is_constant<1, decltype(cute::get<1>(StrideD{}))>::value;  // row-major D

  Params params;
};

template <class Fusion, class ElementD, class StrideD>
using Sm90RegisterEpilogue =
    cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Sm90RegisterEpilogueOp<Fusion, ElementD, StrideD>>;

}  // namespace cutlass_ext
