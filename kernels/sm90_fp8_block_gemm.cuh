// Block-scaled FP8 GEMM for Hopper (sm90a) behind sm90_fp8_block_abi.h: CUTLASS 3.x's blockwise-scaled mainloop
// (TMA operand loads, cp.async scale loads, wgmma), which multiplies each 128-deep k-block's Tensor Core partial
// sums by scale_a[m, kb] · scale_b[n / ScaleN, kb] as it promotes them into FP32 registers (DeepSeek-V3's
// fine-grained quantization: 1x128 activation tiles, 128x128 or 1x128 weight blocks). The epilogue adds the bias.
#pragma once

#include <cuda_runtime.h>

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

template <class ElementA, class ElementB, class ElementD, int TileM, int TileN, int TileK, int ClusterM,
          int ClusterN, class Schedule, int ScaleN, class Decomposition, int Splits, bool ScaleAMajorM = false>
struct Sm90Fp8BlockGemm {
  static_assert(TileK == kScaleBlockK, "one k-tile per scale block");
  static_assert(TileN % ScaleN == 0, "a tile spans whole weight-scale blocks");
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::_1>;
  static constexpr int kAlignmentAB = 16;  // elements: TMA moves 16-byte rows of FP8
  static constexpr int kAlignmentD = 16 / int(sizeof(ElementD));
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
  using Scales = ScaleConfig<ScaleN, ScaleAMajorM>;
  using LayoutSFA = decltype(Scales::deduce_layoutSFA());
  using LayoutSFB = decltype(Scales::deduce_layoutSFB());

  // D = acc + bias[n]: the block scales are already in acc; a null bias reads as 0.
  using Bias = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, ElementD, float,
                                                           cute::Stride<cute::_0, cute::_1, int64_t>, kAlignmentD>;
  using Output = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::plus, ElementD, float, kRound>,
      cutlass::epilogue::fusion::Sm90AccFetch, Bias>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, kAlignmentD,
      ElementD, cutlass::layout::RowMajor, kAlignmentD, typename Schedule::Epilogue, Output>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA,
      cute::tuple<cutlass::layout::RowMajor, LayoutSFA>, kAlignmentAB, ElementB,
      cute::tuple<cutlass::layout::ColumnMajor, LayoutSFB>, kAlignmentAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<int(sizeof(typename Epilogue::SharedStorage))>,
      typename Schedule::Kernel>::CollectiveOp;

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
    arguments.problem_shape = {m, n, k, 1};
    arguments.mainloop.ptr_A = static_cast<const ElementA*>(args.a);
    arguments.mainloop.dA = cute::make_stride(args.lda, _1{}, int64_t(0));
    arguments.mainloop.ptr_B = static_cast<const ElementB*>(args.b);
    arguments.mainloop.dB = cute::make_stride(args.ldb, _1{}, int64_t(0));
    // (rows, k-blocks) of scales: ((1, m), (128, k_blocks)) in CUTLASS's blockwise layout, strides (row, 1), or
    // (1, k-block) M-major.
    arguments.mainloop.ptr_SFA = args.scale_a;
    auto sfa_shape =
        cute::make_shape(cute::make_shape(_1{}, m), cute::make_shape(cute::Int<kScaleBlockK>{}, k_blocks), 1);
    if constexpr (ScaleAMajorM) {
      arguments.mainloop.layout_SFA = cute::make_layout(
          sfa_shape, cute::make_stride(cute::make_stride(_0{}, _1{}),
                                       cute::make_stride(_0{}, int32_t(args.scale_a_block_stride)), int32_t(0)));
    } else {
      arguments.mainloop.layout_SFA = cute::make_layout(
          sfa_shape, cute::make_stride(cute::make_stride(_0{}, int32_t(args.scale_a_row_stride)),
                                       cute::make_stride(_0{}, _1{}), int32_t(0)));
    }
    arguments.mainloop.ptr_SFB = args.scale_b;
    arguments.mainloop.layout_SFB = cute::make_layout(
        cute::make_shape(cute::make_shape(cute::Int<ScaleN>{}, (n + ScaleN - 1) / ScaleN),
                         cute::make_shape(cute::Int<kScaleBlockK>{}, k_blocks), 1),
        cute::make_stride(cute::make_stride(_0{}, int32_t(args.scale_b_row_stride)), cute::make_stride(_0{}, _1{}),
                          int32_t(0)));
    typename Bias::Arguments bias{static_cast<const ElementD*>(args.bias), ElementD(0), {}};
    arguments.epilogue.thread = {{}, bias, {}};
    arguments.epilogue.ptr_C = nullptr;
    arguments.epilogue.dC = cute::make_stride(args.ldd, _1{}, int64_t(0));
    arguments.epilogue.ptr_D = static_cast<ElementD*>(args.d);
    arguments.epilogue.dD = cute::make_stride(args.ldd, _1{}, int64_t(0));
    arguments.hw_info.device_id = args.device;
    arguments.hw_info.sm_count = args.sm_count;
    if constexpr (!cute::is_same_v<Decomposition, DecomposePersistent>) {
      arguments.scheduler.decomposition_mode = Decomposition::kMode;
      arguments.scheduler.splits = Splits;
    }
    return arguments;
  }

  // TMA needs 16-byte aligned base addresses and row strides; CUTLASS checks the extents.
  static bool tma_aligned(const cutlass_ext_fp8_block_args& args) {
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return aligned(args.a) && aligned(args.b) && aligned(args.d) && args.lda % kAlignmentAB == 0 &&
           args.ldb % kAlignmentAB == 0 && args.ldd % kAlignmentD == 0 &&
           (args.bias == nullptr || aligned(args.bias));
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
    return int(gemm.run(cuda_stream));
  }
};

}  // namespace cutlass_ext::fp8_block
