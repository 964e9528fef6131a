// Block-scaled FP8 GEMM for Hopper (sm90a) behind sm90_fp8_block_abi.h: CUTLASS 3.x's blockwise-scaled mainloop
// (TMA operand loads, cp.async scale loads, wgmma), which multiplies each 128-deep k-block's Tensor Core partial
// sums by scale_a[m, kb] · scale_b[n / ScaleN, kb] as it promotes them into FP32 registers (DeepSeek-V3's
// fine-grained quantization: 1x128 activation tiles, 128x128 or 1x128 weight blocks). The epilogue adds the bias.
#pragma once

#include <cuda_runtime.h>

#include <numeric>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

#include "sm90_fp8_block_abi.h"
#include "sm90_fp8_block_across_scale_load.hpp"
#include "sm90_fp8_block_overlapped_promotion.hpp"
#include "sm90_fp8_block_programmatic_mainloop.hpp"
#include "sm90_fp8_block_wave_promotion.hpp"

namespace cutlass_ext::fp8_block {

// The scale blocks along k: one per 128 elements, the depth of one wgmma promotion span (4 k-steps of 32).
constexpr int kScaleBlockK = 128;

// Two consumer warpgroups on one 128-row tile, or one on each of two 64-row tiles in turn.
struct ScheduleCooperative {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise;
  using GroupedKernel = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using GroupedEpilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
struct SchedulePingpong {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8Blockwise;
  using GroupedKernel = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8Blockwise;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
  using GroupedEpilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};

// Whole output tiles per persistent CTA, or CUTLASS's stream-K scheduler in stream-K or split-K mode (partial
// tiles reduced through the workspace in FP32, after the block scales: the sums are exact re-associations).
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

// Weight scales are K-major (unit stride along k-blocks, any row stride); activation scales K-major too (the
// layout quantize_fp8 writes, and the only one the grouped kernel's per-group dense scale blocks can take for
// tokens sorted by expert) or, ScaleAMajorM, M-major (DeepGEMM's layout: a 128-row tile's scales of one k-block
// are 512 contiguous bytes, which TMA loads instead of 128 four-byte cp.async copies). ScaleN: rows of B per
// scale (128: 128x128 weight blocks, 1: 1x128 like the activations).
template <int ScaleN, bool ScaleAMajorM = false>
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<
    1, ScaleN, kScaleBlockK, ScaleAMajorM ? cute::GMMA::Major::MN : cute::GMMA::Major::K, cute::GMMA::Major::K>;

// The kernel's scales when it computes Dᵀ = B·Aᵀ (SwapAB): the weights are its A, scaled per ScaleN rows, the
// activations its B, scaled per row; both K-major.
template <int ScaleN>
using SwappedScaleConfig =
    cutlass::detail::Sm90BlockwiseScaleConfig<ScaleN, 1, kScaleBlockK, cute::GMMA::Major::K, cute::GMMA::Major::K>;

// A blockwise-scaled collective reading its scales through other layout types. CUTLASS's builder takes only
// ((granularity, rows), (128, k-blocks), L) layouts; the collective itself maps whatever coordinates it is given.
template <class Collective, class LayoutSFA, class LayoutSFB>
struct WithScaleLayouts;
template <class Policy, class Tile, class ElementA, class StridePairA, class ElementB, class StridePairB,
          class... Rest, class LayoutSFA, class LayoutSFB>
struct WithScaleLayouts<
    cutlass::gemm::collective::CollectiveMma<Policy, Tile, ElementA, StridePairA, ElementB, StridePairB, Rest...>,
    LayoutSFA, LayoutSFB> {
  using type = cutlass::gemm::collective::CollectiveMma<
      Policy, Tile, ElementA, cute::tuple<cute::tuple_element_t<0, StridePairA>, LayoutSFA>, ElementB,
      cute::tuple<cute::tuple_element_t<0, StridePairB>, LayoutSFB>, Rest...>;
};

// Weight-scale rows as tiles TileW rows wide inside a ScaleN-row block read them: mode (TileW, (ScaleN / TileW,
// blocks)), the middle count at stride 0, so a block's ScaleN / TileW tiles share its row and the API passes the
// scales as they are (CUTLASS's (granularity, rows) mode would need them repeated per tile; nothing in its
// mainloop assumes more than the coordinates this layout maps). K-major: unit stride along k-blocks.
template <int TileW, int ScaleN>
using InBlockScaleLayout = cute::Layout<
    cute::Shape<cute::Shape<cute::Int<TileW>, cute::Shape<cute::Int<ScaleN / TileW>, int32_t>>,
                cute::Shape<cute::Int<kScaleBlockK>, int32_t>, int32_t>,
    cute::Stride<cute::Stride<cute::_0, cute::Stride<cute::_0, int32_t>>, cute::Stride<cute::_0, cute::_1>, int32_t>>;

template <int TileW, int ScaleN>
InBlockScaleLayout<TileW, ScaleN> in_block_scale_layout(int n, int k_blocks, int64_t row_stride) {
  using cute::_0;
  using cute::_1;
  auto blocks = cute::make_shape(cute::Int<ScaleN / TileW>{}, (n + ScaleN - 1) / ScaleN);
  return cute::make_layout(
      cute::make_shape(cute::make_shape(cute::Int<TileW>{}, blocks),
                       cute::make_shape(cute::Int<kScaleBlockK>{}, k_blocks), 1),
      cute::make_stride(cute::make_stride(_0{}, cute::make_stride(_0{}, int32_t(row_stride))),
                        cute::make_stride(_0{}, _1{}), int32_t(0)));
}

// Rows of B per weight scale as an unswapped kernel with TileN-wide tiles reads them: ScaleN when the tiles span
// whole weight blocks, else the largest g dividing both widths for which CUTLASS's producer can tile the scales'
// (g, rows / g) mode by the TileN / g scales of a tile (one count divides the other): 4 for n = 176, 8 for 192.
constexpr int scale_rows_n(int tile_n, int scale_n) {
  int shared = std::gcd(tile_n, scale_n);
  for (int g = shared; g > 1; --g) {
    if (shared % g == 0 && ((tile_n / g) % g == 0 || g % (tile_n / g) == 0)) return g;
  }
  return 1;
}

// SwapAB: the kernel computes Dᵀ (N, M) = B · Aᵀ into D viewed column-major, so the weights fill the 128-row side
// of a cooperative tile and decode's few tokens a 32- or 64-wide n (instead of 64- or 128-row A tiles that are
// mostly zeros): a quarter of the Tensor Core work and of the shared-memory traffic per k-block at M <= 32.
// Programmatic: launched with programmatic dependent launch, asking L2 for L2PrefetchKBlocks k-blocks of the first
// tile's weights before the wait (sm90_fp8_block_programmatic_mainloop.hpp; the translation unit defines
// CUTLASS_ENABLE_GDC_FOR_SM90). Whole tiles per persistent CTA only.
template <class ElementA, class ElementB, class ElementD, int TileM, int TileN, int TileK, int ClusterM,
          int ClusterN, class Schedule, int ScaleN, class Decomposition, int Splits, bool ScaleAMajorM = false,
          bool SwapAB = false, bool OverlappedPromotion = false, bool Programmatic = false,
          int L2PrefetchKBlocks = 0>
struct Sm90Fp8BlockGemm {
  static_assert(TileK == kScaleBlockK, "one k-tile per scale block");
  static_assert(!SwapAB || TileM % ScaleN == 0 || ScaleN % TileM == 0,
                "a swapped tile spans whole weight-scale blocks, or lies inside one");
  static_assert(SwapAB || TileN >= ScaleN || (ScaleN % TileN == 0 && TileM != 256),
                "an unswapped tile narrower than a weight block divides it (and is not a 256-row one)");
  // Unswapped tiles may cut across weight-scale blocks (n = 176, 192: whole waves of tiles where 128-wide ones
  // leave a partial one, e.g. N = 2112): the kernel then reads the weight scales at a granularity the tile and the
  // blocks share (scale_rows_n), to which the API expands them (each repeated ScaleN / kScaleRowsN times).
  // A tile whose weights' side is narrower than a weight block and divides it (swapped 64-row ping-pong tiles,
  // unswapped 32- or 64-wide ones: DeepGEMM's tilings at M <= 128) lies inside one: CUTLASS's mainloop sees one
  // weight scale per tile and k-block (granularity the tile's width), read in place from the block's row
  // (InBlockScaleLayout). Unswapped, a thread then reads its rows' activation scales and one weight scale per
  // k-block, where swapped it reads one activation scale per column it holds.
  static constexpr int kWeightSide = SwapAB ? TileM : TileN;
  static constexpr bool kInBlockTiles = kWeightSide < ScaleN && ScaleN % kWeightSide == 0;
  static constexpr int kScaleRowsN =
      kInBlockTiles ? kWeightSide : SwapAB ? std::gcd(TileM, ScaleN) : scale_rows_n(TileN, ScaleN);
  static constexpr bool kAcrossScaleBlocks = !SwapAB && !kInBlockTiles && kScaleRowsN != ScaleN;
  static_assert(!(SwapAB && ScaleAMajorM), "swapped kernels read K-major activation scales");
  static_assert(!Programmatic || cute::is_same_v<Decomposition, DecomposePersistent>,
                "programmatic launch runs whole tiles per persistent CTA");
  static_assert(Programmatic || L2PrefetchKBlocks == 0, "the L2 prefetch runs ahead of the programmatic wait");
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::_1>;
  static constexpr int kAlignmentAB = 16;  // elements: TMA moves 16-byte rows of FP8
  static constexpr int kAlignmentD = 16 / int(sizeof(ElementD));
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
  using Scales =
      cute::conditional_t<SwapAB, SwappedScaleConfig<kScaleRowsN>, ScaleConfig<kScaleRowsN, ScaleAMajorM>>;
  using BuiltLayoutSFA = decltype(Scales::deduce_layoutSFA());
  using BuiltLayoutSFB = decltype(Scales::deduce_layoutSFB());
  using InBlockLayout = InBlockScaleLayout<kWeightSide, ScaleN>;
  using LayoutSFA = cute::conditional_t<kInBlockTiles && SwapAB, InBlockLayout, BuiltLayoutSFA>;
  using LayoutSFB = cute::conditional_t<kInBlockTiles && !SwapAB, InBlockLayout, BuiltLayoutSFB>;
  // The kernel's own operands and output layout: (A, B, row-major D), or (B, A, column-major D) swapped.
  using KernelElementA = cute::conditional_t<SwapAB, ElementB, ElementA>;
  using KernelElementB = cute::conditional_t<SwapAB, ElementA, ElementB>;
  using LayoutD = cute::conditional_t<SwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;

  // D = acc + bias[n]: the block scales are already in acc; a null bias reads as 0. Bias runs along N: the
  // kernel's columns, or its rows swapped.
  using Bias = cute::conditional_t<
      SwapAB,
      cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, ElementD, float,
                                                  cute::Stride<cute::_1, cute::_0, int64_t>, kAlignmentD>,
      cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, ElementD, float,
                                                  cute::Stride<cute::_0, cute::_1, int64_t>, kAlignmentD>>;
  using Output = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::plus, ElementD, float, kRound>,
      cutlass::epilogue::fusion::Sm90AccFetch, Bias>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignmentD, ElementD, LayoutD,
      kAlignmentD, typename Schedule::Epilogue, Output>::CollectiveOp;

  using BuiltMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, KernelElementA,
      cute::tuple<cutlass::layout::RowMajor, BuiltLayoutSFA>, kAlignmentAB, KernelElementB,
      cute::tuple<cutlass::layout::ColumnMajor, BuiltLayoutSFB>, kAlignmentAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<int(sizeof(typename Epilogue::SharedStorage))>,
      typename Schedule::Kernel>::CollectiveOp;
  using StockMainloop = typename WithScaleLayouts<BuiltMainloop, LayoutSFA, LayoutSFB>::type;
  // OverlappedPromotion: each k-block's scaling and promotion run while the next one's wgmmas do
  // (sm90_fp8_block_overlapped_promotion.hpp); the same sums, bit for bit.
  // 256-row cooperative tiles: each warpgroup's 128 rows promoted 64 at a time (sm90_fp8_block_wave_promotion.hpp),
  // which the stock mainloop's tile-sized partial fragment cannot hold in registers.
  // Tiles across weight-scale blocks take the same mainloop (one wave per warpgroup at 128 rows), which applies a
  // column's expanded scale as the product sfa · sfb, the operation the 128-wide tiles' combined scales do, and
  // their own weight-scale loader (CUTLASS's leaves some of a tile's n / g scales unloaded,
  // sm90_fp8_block_across_scale_load.hpp).
  static constexpr bool kWaves = (TileM == 256 || kAcrossScaleBlocks) && !SwapAB;
  static_assert(!(kWaves && OverlappedPromotion), "256-row tiles promote one 64-row wave at a time, not overlapped");
  using WaveBase = cute::conditional_t<kAcrossScaleBlocks, AcrossBlockScaleLoad<StockMainloop>, StockMainloop>;
  using PromotingMainloop = cute::conditional_t<
      kWaves, WaveBlockScaledMainloop<WaveBase, kAcrossScaleBlocks>,
      cute::conditional_t<OverlappedPromotion, OverlappedBlockScaledMainloop<StockMainloop>, StockMainloop>>;
  using Mainloop =
      cute::conditional_t<Programmatic,
                          ProgrammaticMainloop<PromotingMainloop, TileShape, ClusterShape, /*WeightsAreA=*/SwapAB>,
                          PromotingMainloop>;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      typename Decomposition::TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments arguments(const cutlass_ext_fp8_block_args& args) {
    using cute::_0;
    using cute::_1;
    int m = int(args.m), n = int(args.n), k = int(args.k);
    int k_blocks = (k + kScaleBlockK - 1) / kScaleBlockK;
    typename Gemm::Arguments arguments{};
    arguments.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    // A (m, k) and B (n, k) row-major are CUTLASS's K-major operands, in either order.
    arguments.problem_shape = {SwapAB ? n : m, SwapAB ? m : n, k, 1};
    arguments.mainloop.ptr_A = static_cast<const KernelElementA*>(SwapAB ? args.b : args.a);
    arguments.mainloop.dA = cute::make_stride(SwapAB ? args.ldb : args.lda, _1{}, int64_t(0));
    arguments.mainloop.ptr_B = static_cast<const KernelElementB*>(SwapAB ? args.a : args.b);
    arguments.mainloop.dB = cute::make_stride(SwapAB ? args.lda : args.ldb, _1{}, int64_t(0));
    // Scales as (rows, k-blocks): ((1, m), (128, k_blocks)) in CUTLASS's blockwise layout for A, strides (row, 1)
    // K-major or (1, k-block) M-major; ((ScaleN, ceil(n / ScaleN)), (128, k_blocks)) for B, strides (row, 1)
    // (kScaleRowsN rows per scale for tiles across weight-scale blocks: the API's expanded scales;
    // in_block_scale_layout for tiles inside one).
    auto activation_shape =
        cute::make_shape(cute::make_shape(_1{}, m), cute::make_shape(cute::Int<kScaleBlockK>{}, k_blocks), 1);
    constexpr int kWeightRows = kScaleRowsN;
    auto weight_shape =
        cute::make_shape(cute::make_shape(cute::Int<kWeightRows>{}, (n + kWeightRows - 1) / kWeightRows),
                         cute::make_shape(cute::Int<kScaleBlockK>{}, k_blocks), 1);
    auto k_major = [](int64_t row_stride) {
      return cute::make_stride(cute::make_stride(_0{}, int32_t(row_stride)), cute::make_stride(_0{}, _1{}),
                               int32_t(0));
    };
    if constexpr (kInBlockTiles && SwapAB) {
      arguments.mainloop.ptr_SFA = args.scale_b;
      arguments.mainloop.layout_SFA =
          in_block_scale_layout<kWeightSide, ScaleN>(n, k_blocks, args.scale_b_row_stride);
      arguments.mainloop.ptr_SFB = args.scale_a;
      arguments.mainloop.layout_SFB = cute::make_layout(activation_shape, k_major(args.scale_a_row_stride));
    } else if constexpr (SwapAB) {
      arguments.mainloop.ptr_SFA = args.scale_b;
      arguments.mainloop.layout_SFA = cute::make_layout(weight_shape, k_major(args.scale_b_row_stride));
      arguments.mainloop.ptr_SFB = args.scale_a;
      arguments.mainloop.layout_SFB = cute::make_layout(activation_shape, k_major(args.scale_a_row_stride));
    } else {
      arguments.mainloop.ptr_SFA = args.scale_a;
      if constexpr (ScaleAMajorM) {
        // TMA loads M-major scales, and CUTLASS's can_implement wants their extent along M a whole number of
        // 16-byte units: the layout spans m rounded up to 4 rows, the padding the API allocates (api.m_major).
        // Those rows' scales multiply only A's rows past m, which TMA reads as zeros and the epilogue never stores.
        auto padded_shape = cute::make_shape(cute::make_shape(_1{}, (m + 3) / 4 * 4),
                                             cute::make_shape(cute::Int<kScaleBlockK>{}, k_blocks), 1);
        arguments.mainloop.layout_SFA = cute::make_layout(
            padded_shape,
            cute::make_stride(cute::make_stride(_0{}, _1{}),
                              cute::make_stride(_0{}, int32_t(args.scale_a_block_stride)), int32_t(0)));
      } else {
        arguments.mainloop.layout_SFA = cute::make_layout(activation_shape, k_major(args.scale_a_row_stride));
      }
      arguments.mainloop.ptr_SFB = args.scale_b;
      if constexpr (kInBlockTiles) {
        arguments.mainloop.layout_SFB =
            in_block_scale_layout<kWeightSide, ScaleN>(n, k_blocks, args.scale_b_row_stride);
      } else {
        arguments.mainloop.layout_SFB = cute::make_layout(weight_shape, k_major(args.scale_b_row_stride));
      }
    }
    typename Bias::Arguments bias{static_cast<const ElementD*>(args.bias), ElementD(0), {}};
    arguments.epilogue.thread = {{}, bias, {}};
    // D (m, n) row-major is Dᵀ (n, m) column-major: the same bytes, ldd apart.
    arguments.epilogue.ptr_C = nullptr;
    arguments.epilogue.ptr_D = static_cast<ElementD*>(args.d);
    if constexpr (SwapAB) {
      arguments.epilogue.dC = cute::make_stride(_1{}, args.ldd, int64_t(0));
      arguments.epilogue.dD = cute::make_stride(_1{}, args.ldd, int64_t(0));
    } else {
      arguments.epilogue.dC = cute::make_stride(args.ldd, _1{}, int64_t(0));
      arguments.epilogue.dD = cute::make_stride(args.ldd, _1{}, int64_t(0));
    }
    arguments.hw_info.device_id = args.device;
    arguments.hw_info.sm_count = args.sm_count;
    if constexpr (!cute::is_same_v<Decomposition, DecomposePersistent>) {
      arguments.scheduler.decomposition_mode = Decomposition::kMode;
      arguments.scheduler.splits = Splits;
    }
    if constexpr (Programmatic) {
      arguments.mainloop.hw_info = arguments.hw_info;
      arguments.mainloop.scheduler = arguments.scheduler;
      arguments.mainloop.l2_prefetch_k_blocks = L2PrefetchKBlocks;
    }
    return arguments;
  }

  // TMA needs 16-byte aligned base addresses and row strides; CUTLASS checks the extents.
  static bool tma_aligned(const cutlass_ext_fp8_block_args& args) {
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return aligned(args.a) && aligned(args.b) && aligned(args.d) && args.lda % kAlignmentAB == 0 &&
           args.ldb % kAlignmentAB == 0 && args.ldd % kAlignmentD == 0 &&
           (args.bias == nullptr || aligned(args.bias)) &&
           (!ScaleAMajorM || (aligned(args.scale_a) && args.scale_a_block_stride >= (args.m + 3) / 4 * 4));
  }

  static int can_implement(const cutlass_ext_fp8_block_args* args) {
    if (!tma_aligned(*args)) return int(cutlass::Status::kErrorMisalignedOperand);
    return int(Gemm::can_implement(arguments(*args)));
  }

  static size_t workspace_size(const cutlass_ext_fp8_block_args* args) {
    return Gemm::get_workspace_size(arguments(*args));
  }

  static int run(const cutlass_ext_fp8_block_args* args, void* workspace, void* stream) {
    Gemm gemm;
    auto cuda_stream = static_cast<cudaStream_t>(stream);
    cutlass::Status status = gemm.initialize(arguments(*args), workspace, cuda_stream);
    if (status != cutlass::Status::kSuccess) return int(status);
    return int(gemm.run(cuda_stream, /*cuda_adapter=*/nullptr, /*launch_with_pdl=*/Programmatic));
  }
};

}  // namespace cutlass_ext::fp8_block
