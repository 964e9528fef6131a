// CUTLASS 3.x FP8 GEMM for Hopper (sm90a: TMA loads, wgmma, warp-specialized, persistent) behind the FP8
// launcher of launcher_abi.h. Stock CollectiveBuilder kernels; what is ours is the epilogue (scales and bias in
// one EVT) and the choice of schedule, accumulation and tile scheduler that the sweep tunes per shape.
#pragma once

// Programmatic dependent launch (PDL): with CUTLASS_ENABLE_GDC_FOR_SM90 defined before this header, a kernel waits
// (griddepcontrol.wait) for the grid before it to finish before reading memory and lets the next one start its
// prologue early. Back to back, as in a decode step's CUDA graph, that hides a few µs of setup per GEMM. The code
// generator defines it for libraries of persistent-scheduler variants only: CUTLASS 4.2's stream-K scheduler does
// not compile with it (its const is_last_tile binds a member to a non-const reference).
#include <cuda_runtime.h>

// CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED (every wgmma n that FP8 has, multiples of 8 up to 256, not only CuTe's
// default 8, 16, 32, 64, 96, 128, 192, 256): the code generator defines it before this header for tiles whose n
// needs it, where CollectiveBuilder would otherwise cut a 144- or 160-column tile into n = 16 or 32 atoms that each
// read the tile's A rows from shared memory again. Elsewhere it is left out: parsing those shapes' definitions
// takes about a third of a variant's compile (the default 128x128 kernel: 54 s of cicc with them, 34 s without,
// the same PTX).

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal_decl.h"
#include "cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp"
#include "cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_pingpong.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

#include "launcher_abi.h"
#include "library_exports.h"
#include "cubin_launch.h"
#include "sm90_dynamic_tile_scheduler.hpp"
#include "sm90_fp8_overlapped_promotion.hpp"
#include "sm90_fp8_turn_taking_promotion.hpp"
#include "sm90_l2_prefetch_mainloop.hpp"
#include "sm90_register_epilogue.hpp"
#include "sm90_scale_bias_arguments.hpp"
#include "sm90_stage_epilogue.hpp"
#include "sm90_weights_load_mainloop.hpp"

namespace cutlass_ext {

// Kernel and epilogue schedules. Promoted accumulation adds the Tensor Core's partial sums into FP32 registers
// every PromotionKBlocks k-blocks (the wgmma accumulator keeps only ~22 mantissa bits for FP8); fast accumulation
// leaves the whole K loop inside the Tensor Core.
struct ScheduleCooperative {
  template <bool FastAccum>
  using Kernel = cute::conditional_t<FastAccum, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum,
                                     cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
struct SchedulePingpong {
  template <bool FastAccum>
  using Kernel = cute::conditional_t<FastAccum, cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum,
                                     cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
};

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
// Whole tiles, each CTA's next one claimed from a counter when it starts its current one
// (sm90_dynamic_tile_scheduler.hpp): cooperative kernels with one-CTA clusters.
struct DecomposeDynamic {
  using TileScheduler = DynamicScheduler;
};

// D = row_scale[m] · (column_scale[n] · acc) + bias in the kernel's rows and columns, with the EVT's roundings (FP32,
// then to D's type), for the epilogue stored from registers (sm90_register_epilogue.hpp). A scale is one value or,
// where its rowwise flag is set, a vector; null reads as 1. The bias runs along the kernel's columns, or its rows
// (BiasAlongRows: swapped); null reads as 0.
template <class ElementD, bool BiasAlongRows>
struct ScaleBiasFusion {
  using Arguments = ScaleBiasArguments<ElementD>;

  struct Tile {
    Arguments args;

    CUTLASS_DEVICE Tile(Arguments const& args, int64_t) : args(args) {}

    CUTLASS_DEVICE float operator()(float acc, int m, int n) const {
      float row = read_or_one(args.row_scale, args.row_scale_rowwise ? m : 0);
      float column = read_or_one(args.column_scale, args.column_scale_rowwise ? n : 0);
      return fmaf(row, column * acc, read_or_zero(args.bias, BiasAlongRows ? m : n));
    }
  };
};

// Builder::CollectiveOp where Instantiate, else Otherwise, without instantiating the builder.
template <bool Instantiate, class Builder, class Otherwise>
struct CollectiveIf {
  using type = Otherwise;
};
template <class Builder, class Otherwise>
struct CollectiveIf<true, Builder, Otherwise> {
  using type = typename Builder::CollectiveOp;
};

// Which output side the persistent scheduler's tile order runs along first, in the output's M and N (the kernel's
// are the other way round when swapped). Auto: CUTLASS's heuristic (along the side with fewer tiles).
enum class Raster { Auto, AlongM, AlongN };

// Swizzle: CUTLASS's max_swizzle_size, tiles launched in groups of up to this many along one side so that CTAs
// running together share panels of A and B in L2. PromotionKBlocks: k-blocks between promotions (promoted
// accumulation only). RasterOrder: see Raster. All three are run-time arguments of one kernel: variants that
// differ only in them share code.
// SwapAB: the kernel computes Dᵀ (N, M) = B · Aᵀ into D viewed column-major, so the weights fill wgmma's 64-row
// side and decode's few tokens its n side (n = 16 or 32 instead of 64-row A tiles that are mostly zeros): each
// stage carries more weight bytes, and more stages fit in shared memory.
// L2PrefetchKBlocks: k-blocks of the weights (B, or A swapped) of the CTA's first tile that it asks L2 for before
// waiting on the grid before it (sm90_l2_prefetch_mainloop.hpp); 0: none. Persistent, programmatic launch only.
// PromotionTurns: promotion every k-block hidden behind the other warpgroup's k-block instead of the warpgroup's own
// next one (sm90_fp8_turn_taking_promotion.hpp: two accumulator fragments instead of three, so wider tiles fit).
// StageEpilogueD: D written through the tile's last mainloop stage (sm90_stage_epilogue.hpp), which leaves the
// mainloop a seventh stage at 128x128x128.
// WeightsFirst: the producer requests each k-block's weights before its activations (sm90_weights_load_mainloop.hpp).
// BufferEpilogueD: the stage epilogue's code writing D through a buffer of its own (sm90_stage_epilogue.hpp,
// OwnBuffer): CUTLASS's epilogue's stage count and output in less than half its compile.
template <class ElementA, class ElementB, class ElementD, int TileM, int TileN, int TileK, int ClusterM,
          int ClusterN, class Schedule, bool FastAccum, class Decomposition, int Splits, int Swizzle = 1,
          int PromotionKBlocks = 1, bool SwapAB = false, int L2PrefetchKBlocks = 0, Raster RasterOrder = Raster::Auto,
          bool PromotionTurns = false, bool StageEpilogueD = false, bool WeightsFirst = false,
          bool BufferEpilogueD = false>
struct Sm90Fp8Gemm {
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::_1>;
  static constexpr int kAlignmentAB = 16;  // elements: TMA moves 16-byte rows of FP8
  static constexpr int kAlignmentD = 16 / int(sizeof(ElementD));
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
  // The kernel's own operands and output layout: (A, B, row-major D), or (B, A, column-major D) swapped.
  using KernelElementA = cute::conditional_t<SwapAB, ElementB, ElementA>;
  using KernelElementB = cute::conditional_t<SwapAB, ElementA, ElementB>;
  using LayoutD = cute::conditional_t<SwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;

  // D = scale_a[m] · (scale_b[n] · acc) + bias[n], in the kernel's rows and columns: its row scale is scale_a
  // (scale_b swapped), its column scale the other. A scale's stride says at run time whether it is one value
  // (per tensor) or a vector (row-wise); a null bias reads as 0. Bias runs along N: the kernel's columns, or
  // its rows swapped.
  using RowScale = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float, float,
                                                               cute::Stride<bool, cute::_0, int64_t>>;
  using ColumnScale = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float, float,
                                                                  cute::Stride<cute::_0, bool, int64_t>>;
  using Bias = cute::conditional_t<
      SwapAB,
      cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, ElementD, float,
                                                  cute::Stride<cute::_1, cute::_0, int64_t>, kAlignmentD>,
      cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, ElementD, float,
                                                  cute::Stride<cute::_0, cute::_1, int64_t>, kAlignmentD>>;
  using ScaledAccumulator = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>, ColumnScale,
      cutlass::epilogue::fusion::Sm90AccFetch>;
  using Output = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, ElementD, float, kRound>, RowScale,
      ScaledAccumulator, Bias>;

  // Decode's swapped kernels store D from registers (sm90_register_epilogue.hpp): a few values a thread behind a
  // stream of weights, and half the kernel's compile. The others keep CUTLASS's TMA epilogue, which stages a tile's
  // scales once (per-element reads cost prefill 1.4-3.9%, docs/design-notes.md).
  static constexpr bool kRegisterEpilogue = SwapAB;
  using RegisterEpilogue = Sm90RegisterEpilogue<ScaleBiasFusion<ElementD, SwapAB>, ElementD,
                                                cutlass::detail::TagToStrideC_t<LayoutD>>;
  using BaseEpilogue = typename CollectiveIf<
      !kRegisterEpilogue,
      cutlass::epilogue::collective::CollectiveBuilder<
          cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
          cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignmentD, ElementD,
          LayoutD, kAlignmentD, typename Schedule::Epilogue, Output>,
      RegisterEpilogue>::type;

  static constexpr bool kDynamic = cute::is_same_v<Decomposition, DecomposeDynamic>;
  static_assert(!kDynamic || (cute::is_same_v<Schedule, ScheduleCooperative> && ClusterM * ClusterN == 1),
                "the dynamic tile scheduler runs cooperative kernels with one CTA per cluster");
  // D written through the tile's last mainloop stage (sm90_stage_epilogue.hpp) instead of CUTLASS's TMA epilogue,
  // or by the same code through a buffer of its own.
  static constexpr bool kStageEpilogue = StageEpilogueD;
  static constexpr bool kOwnEpilogue = StageEpilogueD || BufferEpilogueD;
  static_assert(!(StageEpilogueD && BufferEpilogueD), "D goes through a held stage or a buffer, not both");
  static_assert(!kOwnEpilogue ||
                    (!SwapAB && !FastAccum && PromotionKBlocks == 1 && !PromotionTurns &&
                     cute::is_same_v<Schedule, ScheduleCooperative> &&
                     cute::is_same_v<Decomposition, DecomposePersistent> && sizeof(ElementD) == 2 && TileM == 128 &&
                     TileK == 128 && TileN % 64 == 0 && TileN <= 128),
                "the stage epilogue takes cooperative, persistent, promoted-every-k-block 128x(64|128)x128 tiles of "
                "16-bit row-major D");
  // Shared memory the mainloop's stages leave to the rest: the epilogue's, and the dynamic scheduler's posted tiles.
  static constexpr int kCarveoutBytes =
      (kStageEpilogue    ? int(sizeof(StageEpilogueColumns<ElementD, TileN>))
       : BufferEpilogueD ? int(sizeof(BufferEpilogueStorage<ElementD, TileM, TileN>))
                         : int(sizeof(typename BaseEpilogue::SharedStorage))) +
      (kDynamic ? int(sizeof(typename DynamicTileSchedulerSm90::SharedStorage)) + 16 : 0);

  using StockMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, KernelElementA, cutlass::layout::RowMajor, kAlignmentAB,
      KernelElementB, cutlass::layout::ColumnMajor, kAlignmentAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<kCarveoutBytes>,
      typename Schedule::template Kernel<FastAccum>>::CollectiveOp;
  static_assert(cute::size<1>(typename StockMainloop::TiledMma::AtomShape_MNK{}) == TileN,
                "one wgmma spans the tile's n (CuTe's extended wgmma shapes)");
  // Promotion every k-block overlaps the Tensor Core (sm90_fp8_overlapped_promotion.hpp, or taking turns:
  // sm90_fp8_turn_taking_promotion.hpp); longer promotion spans keep CUTLASS's own mainloop (they fail the accuracy
  // bound at 128-deep k-blocks: kept to reproduce old rows).
  static_assert(!PromotionTurns || (!FastAccum && PromotionKBlocks == 1 &&
                                    cute::is_same_v<Schedule, ScheduleCooperative>),
                "warpgroups take turns promoting every k-block of a cooperative tile");
  using EveryBlockMainloop = cute::conditional_t<PromotionTurns, TurnTakingPromotionMainloop<StockMainloop>,
                                                 OverlappedPromotionMainloop<StockMainloop>>;
  using PromotingMainloop =
      cute::conditional_t<(!FastAccum && PromotionKBlocks == 1), EveryBlockMainloop, StockMainloop>;
  static_assert(L2PrefetchKBlocks == 0 || cute::is_same_v<Decomposition, DecomposePersistent>,
                "the L2 prefetch runs ahead of the programmatic-launch wait for the static scheduler's first tile");
  using OrderedMainloop =
      cute::conditional_t<WeightsFirst, WeightsLoadMainloop<PromotingMainloop, SwapAB, false, true>, PromotingMainloop>;
  using PrefetchingMainloop = cute::conditional_t<
      (L2PrefetchKBlocks > 0),
      L2PrefetchMainloop<PromotingMainloop, TileShape, ClusterShape, SwapAB, WeightsFirst>, OrderedMainloop>;
  using Mainloop =
      cute::conditional_t<kStageEpilogue, HoldLastStageMainloop<PrefetchingMainloop>, PrefetchingMainloop>;
  using Epilogue = cute::conditional_t<
      kOwnEpilogue,
      StageEpilogueAdapter<StageEpilogue<ElementD, TileShape, typename StockMainloop::TensorStorage,
                                         StockMainloop::DispatchPolicy::Stages, BufferEpilogueD>>,
      BaseEpilogue>;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      typename Decomposition::TileScheduler>;
  static_assert(!kStageEpilogue ||
                    sizeof(typename Kernel::SharedStorage::TensorStorage) ==
                        sizeof(KernelTensorStorageMirror<typename Epilogue::TensorStorage,
                                                         typename StockMainloop::TensorStorage>),
                "the stage epilogue finds the mainloop's stages where the kernel puts them");
  // CUTLASS's stage count leaves out the 1024-byte alignment of the kernel's shared storage: with a 34 KB epilogue
  // buffer the 128x128 tile fills the opt-in limit to the byte, so say so here rather than at launch.
  static_assert(!BufferEpilogueD || sizeof(typename Kernel::SharedStorage) <= 232448,
                "the kernel's shared memory exceeds sm90's 227 KB opt-in limit");

  static typename Kernel::Arguments arguments(const cutlass_ext_fp8_args& args) {
    using cute::_0;
    using cute::_1;
    typename Kernel::Arguments arguments{};
    arguments.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    // A (m, k) and B (n, k) row-major are CUTLASS's K-major operands, as FP8 wgmma wants both, in either order.
    const void* kernel_a = SwapAB ? args.b : args.a;
    const void* kernel_b = SwapAB ? args.a : args.b;
    int64_t ld_kernel_a = SwapAB ? args.ldb : args.lda;
    int64_t ld_kernel_b = SwapAB ? args.lda : args.ldb;
    int rows = int(SwapAB ? args.n : args.m), columns = int(SwapAB ? args.m : args.n);
    arguments.problem_shape = {rows, columns, int(args.k), 1};
    arguments.mainloop.ptr_A = static_cast<const KernelElementA*>(kernel_a);
    arguments.mainloop.dA = cute::make_stride(ld_kernel_a, _1{}, int64_t(0));
    arguments.mainloop.ptr_B = static_cast<const KernelElementB*>(kernel_b);
    arguments.mainloop.dB = cute::make_stride(ld_kernel_b, _1{}, int64_t(0));
    const void* row_scale = SwapAB ? args.scale_b : args.scale_a;
    const void* column_scale = SwapAB ? args.scale_a : args.scale_b;
    bool row_scale_rowwise = SwapAB ? args.scale_b_rowwise : args.scale_a_rowwise;
    bool column_scale_rowwise = SwapAB ? args.scale_a_rowwise : args.scale_b_rowwise;
    if constexpr (kOwnEpilogue) {
      arguments.epilogue.row_scale = static_cast<const float*>(row_scale);
      arguments.epilogue.row_scale_rowwise = row_scale_rowwise;
      arguments.epilogue.column_scale = static_cast<const float*>(column_scale);
      arguments.epilogue.column_scale_rowwise = column_scale_rowwise;
      arguments.epilogue.bias = static_cast<const ElementD*>(args.bias);
    } else if constexpr (kRegisterEpilogue) {
      arguments.epilogue.thread = {static_cast<const float*>(row_scale), row_scale_rowwise,
                                   static_cast<const float*>(column_scale), column_scale_rowwise,
                                   static_cast<const ElementD*>(args.bias)};
    } else {
      typename Bias::Arguments bias{static_cast<const ElementD*>(args.bias), ElementD(0), {}};
      arguments.epilogue.thread = {
          {static_cast<const float*>(row_scale), 1.0f, {row_scale_rowwise, _0{}, int64_t(0)}},
          {{static_cast<const float*>(column_scale), 1.0f, {_0{}, column_scale_rowwise, int64_t(0)}}, {}, {}},
          bias,
          {}};
    }
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
    if constexpr (!FastAccum) {
      // counted in wgmma k-steps (32 FP8 elements each)
      arguments.mainloop.mma_promotion_interval = PromotionKBlocks * (TileK / 32);
    }
    arguments.hw_info.device_id = args.device;
    arguments.hw_info.sm_count = args.sm_count;
    arguments.scheduler.max_swizzle_size = Swizzle;
    if constexpr (RasterOrder != Raster::Auto) {
      using Options = cutlass::gemm::kernel::detail::RasterOrderOptions;
      bool kernel_along_m = (RasterOrder == Raster::AlongM) != SwapAB;
      arguments.scheduler.raster_order = kernel_along_m ? Options::AlongM : Options::AlongN;
    }
    if constexpr (L2PrefetchKBlocks > 0) {
      arguments.mainloop.hw_info = arguments.hw_info;
      arguments.mainloop.scheduler = arguments.scheduler;
      arguments.mainloop.l2_prefetch_k_blocks = L2PrefetchKBlocks;
    }
    if constexpr (!cute::is_same_v<Decomposition, DecomposePersistent> && !kDynamic) {
      arguments.scheduler.decomposition_mode = Decomposition::kMode;
      arguments.scheduler.splits = Splits;
    }
    return arguments;
  }

  // TMA needs 16-byte aligned base addresses and row strides; CUTLASS checks the extents.
  static bool tma_aligned(const cutlass_ext_fp8_args& args) {
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return aligned(args.a) && aligned(args.b) && aligned(args.d) && args.lda % kAlignmentAB == 0 &&
           args.ldb % kAlignmentAB == 0 && args.ldd % kAlignmentD == 0 &&
           (args.bias == nullptr || reinterpret_cast<uintptr_t>(args.bias) % 16 == 0);
  }

  static int can_implement(const cutlass_ext_fp8_args* args) {
    if (!tma_aligned(*args)) return int(cutlass::Status::kErrorMisalignedOperand);
    return implementable(Kernel::can_implement(arguments(*args)));
  }

  static size_t workspace_size(const cutlass_ext_fp8_args* args) {
    return Kernel::get_workspace_size(arguments(*args));
  }

#ifdef CUTLASS_ENABLE_GDC_FOR_SM90
  static constexpr bool kProgrammaticLaunch = true;
#else
  static constexpr bool kProgrammaticLaunch = false;  // a kernel without the wait must not start early
#endif
};

}  // namespace cutlass_ext

// One FP8 variant: its kernel (device half) or its launcher functions under C names prefixed with the variant's
// name (host half; cubin_launch.h).
#ifdef CUTLASS_EXT_DEVICE_CODE
#define CUTLASS_EXT_EXPORT_FP8_GEMM(NAME, ...) CUTLASS_EXT_CUBIN_KERNEL(NAME, __VA_ARGS__)
#define CUTLASS_EXT_EXPORT_FP8_LIBRARY()
#else
#define CUTLASS_EXT_EXPORT_FP8_GEMM(NAME, ...) \
  CUTLASS_EXT_CUBIN_LAUNCHERS(NAME, _fp8, cutlass_ext_fp8_args, __VA_ARGS__)
#define CUTLASS_EXT_EXPORT_FP8_LIBRARY() CUTLASS_EXT_EXPORT_ABI()  // once per library
#endif
