// What the two dense Hopper FP8 GEMMs share (sm90_fp8_gemm.cuh: scales in the epilogue; sm90_fp8_block_gemm.cuh:
// block scales in the mainloop): how output tiles are shared out over the persistent CTAs, D and its bias with the
// operands in either order, and the TMA alignment of a launcher's pointers and row strides.
#pragma once

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/layout/matrix.h"

namespace cutlass_ext {

// How output tiles (and slices of K) are shared out over the persistent CTAs. Stream-K and split-K are one
// CUTLASS scheduler, told at run time how to decompose; partial tiles are reduced through the workspace.
struct DecomposePersistent {
  using TileScheduler = cutlass::gemm::PersistentScheduler;
};
struct DecomposeStreamK {
  using TileScheduler = cutlass::gemm::StreamKScheduler;
  static constexpr auto kMode = cutlass::gemm::kernel::detail::DecompositionMode::StreamK;
};
struct DecomposeSplitK {
  using TileScheduler = cutlass::gemm::StreamKScheduler;
  static constexpr auto kMode = cutlass::gemm::kernel::detail::DecompositionMode::SplitK;
};

// D (m, n) row-major as the kernel writes it: its own row-major D, or, SwapAB (the kernel computes Dᵀ = B·Aᵀ),
// Dᵀ (n, m) column-major: the same bytes, ldd apart. The bias runs along N: the kernel's columns, or its rows
// swapped; a null bias reads as 0.
template <class ElementD, class TileShape, bool SwapAB>
struct Sm90Fp8Output {
  static constexpr int kAlignment = 16 / int(sizeof(ElementD));  // elements: TMA writes 16-byte rows
  using Layout = cute::conditional_t<SwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using Bias = cute::conditional_t<
      SwapAB,
      cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, ElementD, float,
                                                  cute::Stride<cute::_1, cute::_0, int64_t>, kAlignment>,
      cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, ElementD, float,
                                                  cute::Stride<cute::_0, cute::_1, int64_t>, kAlignment>>;

  template <class EpilogueArguments>
  static void set(EpilogueArguments& epilogue, void* d, int64_t ldd) {
    epilogue.ptr_C = nullptr;
    epilogue.ptr_D = static_cast<ElementD*>(d);
    if constexpr (SwapAB) {
      epilogue.dC = cute::make_stride(cute::_1{}, ldd, int64_t(0));
      epilogue.dD = cute::make_stride(cute::_1{}, ldd, int64_t(0));
    } else {
      epilogue.dC = cute::make_stride(ldd, cute::_1{}, int64_t(0));
      epilogue.dD = cute::make_stride(ldd, cute::_1{}, int64_t(0));
    }
  }
};

// TMA needs 16-byte aligned base addresses and row strides (AlignmentAB elements of A and B, AlignmentD of D);
// CUTLASS checks the extents. Args: a dense launcher's arguments (a, b, d, bias, lda, ldb, ldd).
template <int AlignmentAB, int AlignmentD, class Args>
bool tma_aligned(const Args& args) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return aligned(args.a) && aligned(args.b) && aligned(args.d) && args.lda % AlignmentAB == 0 &&
         args.ldb % AlignmentAB == 0 && args.ldd % AlignmentD == 0 && (args.bias == nullptr || aligned(args.bias));
}

}  // namespace cutlass_ext
