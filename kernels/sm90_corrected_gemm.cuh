// The Hopper corrected SGEMM (sm90a: TMA, wgmma, warp-specialized, persistent) behind the split launcher of
// launcher_abi.h. The operands arrive as hi/lo planes written by split_planes (halfhalf_operands.cuh); the
// mainloop is ours (sm90_split_mainloop.hpp), its atoms (TiledMma, shared-memory layouts, TMA copies) are the ones
// CUTLASS's CollectiveBuilder picks for the plane type, the kernel layer is CUTLASS's, the epilogue ours
// (sm90_corrected_epilogue.hpp).
#pragma once

#ifdef CUTLASS_EXT_OPERAND_PASS_CODE
// The library's third object (nvcc -c; cutlass_ext/cubin_build.py): the operand pass, whose kernels it compiles and
// launches itself, and no GEMM.
#include "halfhalf_operands.cuh"
#include "library_exports.h"
#define CUTLASS_EXT_EXPORT_SPLIT_LIBRARY() CUTLASS_EXT_EXPORT_SPLIT_PLANES()
#define CUTLASS_EXT_EXPORT_SPLIT_GEMM(NAME, ...)
#else

#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal_decl.h"
#include "cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp"
#include "cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_pingpong.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

#include "cubin_launch.h"
#include "launcher_abi.h"
#include "library_exports.h"
#include "sm90_corrected_epilogue.hpp"
#include "sm90_split_mainloop.hpp"

namespace cutlass_ext {

// What the planes hold. halfhalf's lo is stored ·2^11 and its rows of A and columns of B were scaled by 2^shift
// to fit FP16, so its epilogue multiplies by 2^-(row shift + column shift); tf32tf32 has FP32's range and none.
struct SplitTf32Tf32 {
  using Element = cutlass::tfloat32_t;
  static constexpr int kLoScaleLog2 = 0;
  static constexpr bool kScaled = false;
};
struct SplitHalfHalf {
  using Element = cutlass::half_t;
  static constexpr int kLoScaleLog2 = -11;
  static constexpr bool kScaled = true;
};

struct SplitCooperative {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
};
struct SplitPingpong {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
};

// PromotionInterval: k-tiles between promotions of hi·hi into the FP32 accumulator (a run-time argument: variants
// differing only in it, or in Swizzle, share the kernel). Bias: the epilogue computes alpha · product + bias (n)
// (alpha = 1 and no bias otherwise).
template <class Mode, int TileM, int TileN, int TileK, int ClusterM, int ClusterN, class Schedule, int Swizzle = 1,
          int PromotionInterval = 1, bool Bias = false>
struct Sm90SplitGemm {
  using Element = typename Mode::Element;
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::_1>;
  static constexpr int kAlignmentAB = 16 / int(sizeof(Element));  // elements: TMA moves 16-byte aligned rows
  static constexpr int kAlignmentD = 4;

  using Epilogue = Sm90CorrectedEpilogue<Mode::kScaled, Bias>;  // stored from registers

  // CUTLASS's own mainloop for one plane of each operand: ours takes its atoms.
  using Stock = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor, kAlignmentAB,
      Element, cutlass::layout::ColumnMajor, kAlignmentAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCount<2>, typename Schedule::Kernel>::CollectiveOp;

  // As many stages of four planes as shared memory holds beside the epilogue (and 512 bytes of barriers).
  static constexpr int kStageBytes = 2 * (TileM + TileN) * TileK * int(sizeof(Element));
  static constexpr int kStages = cute::min(8, (cutlass::gemm::collective::detail::sm90_smem_capacity_bytes -
                                               int(sizeof(typename Epilogue::SharedStorage)) - 512) /
                                                  kStageBytes);
  static_assert(kStages >= 2, "tile too large for two pipeline stages of four planes");

  using Mainloop = cutlass::gemm::collective::CollectiveMma<
      MainloopSm90SplitPrecision<kStages, ClusterShape, typename Schedule::Kernel, Mode::kLoScaleLog2>, TileShape,
      Element, typename Stock::StrideA, Element, typename Stock::StrideB, typename Stock::TiledMma,
      typename Stock::GmemTiledCopyA, typename Stock::SmemLayoutAtomA, typename Stock::SmemCopyAtomA,
      typename Stock::TransformA, typename Stock::GmemTiledCopyB, typename Stock::SmemLayoutAtomB,
      typename Stock::SmemCopyAtomB, typename Stock::TransformB>;

  // CUTLASS's stream-K scheduler, run as data-parallel or split-K (splits below): its deterministic fixup adds the
  // slices' FP32 partial sums in K order.
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::StreamKScheduler>;

  // Split-K where the output tiles leave SMs idle (small m and n, deep k): each slice's promotions form a shorter
  // FP32 chain (cuBLAS SGEMM splits such shapes too, and its accuracy is the bound) and idle SMs get work. Slices
  // keep at least kMinKTilesPerSplit k-tiles.
  static constexpr int64_t kMinKTilesPerSplit = 8;
  static int splits(const cutlass_ext_split_gemm_args& args) {
    auto tiles_of = [](int64_t extent, int64_t tile) { return (extent + tile - 1) / tile; };
    int64_t tiles = tiles_of(args.m, TileM) * tiles_of(args.n, TileN) * args.batch;
    if (tiles >= args.sm_count) return 1;
    int64_t by_occupancy = args.sm_count / tiles, by_depth = tiles_of(args.k, TileK) / kMinKTilesPerSplit;
    return int(cute::max(int64_t(1), cute::min(by_occupancy, by_depth)));
  }

  static typename Kernel::Arguments arguments(const cutlass_ext_split_gemm_args& args) {
    using cute::_0;
    using cute::_1;
    typename Kernel::Arguments arguments{};
    arguments.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    arguments.problem_shape = {int(args.m), int(args.n), int(args.k), int(args.batch)};
    arguments.mainloop.ptr_A_hi = static_cast<const Element*>(args.a_hi);
    arguments.mainloop.ptr_A_lo = static_cast<const Element*>(args.a_lo);
    arguments.mainloop.dA = cute::make_stride(args.lda, _1{}, args.batch_stride_a);
    arguments.mainloop.ptr_B_hi = static_cast<const Element*>(args.b_hi);
    arguments.mainloop.ptr_B_lo = static_cast<const Element*>(args.b_lo);
    arguments.mainloop.dB = cute::make_stride(args.ldb, _1{}, args.batch_stride_b);
    arguments.mainloop.promotion_interval = PromotionInterval;
    arguments.epilogue.thread = {static_cast<const int32_t*>(args.row_shift), args.row_shift_batch_stride,
                                 static_cast<const int32_t*>(args.column_shift), args.column_shift_batch_stride,
                                 Bias ? args.alpha : 1.0f, Bias ? static_cast<const float*>(args.bias) : nullptr};
    arguments.epilogue.ptr_C = nullptr;
    arguments.epilogue.dC = cute::make_stride(args.ldd, _1{}, args.batch_stride_d);
    arguments.epilogue.ptr_D = args.d;
    arguments.epilogue.dD = cute::make_stride(args.ldd, _1{}, args.batch_stride_d);
    arguments.hw_info.device_id = args.device;
    arguments.hw_info.sm_count = args.sm_count;
    arguments.scheduler.max_swizzle_size = Swizzle;
    arguments.scheduler.decomposition_mode = cutlass::gemm::kernel::detail::DecompositionMode::SplitK;
    arguments.scheduler.splits = splits(args);
    return arguments;
  }

  // TMA needs 16-byte aligned base addresses and strides; D (stored two floats at a time), the shifts and the
  // bias are held to the same, which our allocations meet.
  static bool aligned(const cutlass_ext_split_gemm_args& args) {
    auto at16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    bool planes = at16(args.a_hi) && at16(args.a_lo) && at16(args.b_hi) && at16(args.b_lo) &&
                  args.lda % kAlignmentAB == 0 && args.ldb % kAlignmentAB == 0 &&
                  args.batch_stride_a % kAlignmentAB == 0 && args.batch_stride_b % kAlignmentAB == 0;
    bool output = at16(args.d) && args.ldd % kAlignmentD == 0 && args.batch_stride_d % kAlignmentD == 0;
    bool shifts = args.column_shift == nullptr ||
                  (at16(args.column_shift) && args.column_shift_batch_stride % 4 == 0);
    bool bias = args.bias == nullptr || at16(args.bias);
    return planes && output && shifts && bias;
  }

  static int can_implement(const cutlass_ext_split_gemm_args* args) {
    if (!Bias && (args->bias != nullptr || args->alpha != 1.0f)) return int(cutlass::Status::kErrorNotSupported);
    if (!aligned(*args)) return int(cutlass::Status::kErrorMisalignedOperand);
    return implementable(Kernel::can_implement(arguments(*args)));
  }

  static size_t workspace_size(const cutlass_ext_split_gemm_args* args) {
    return Kernel::get_workspace_size(arguments(*args));
  }

  static constexpr bool kProgrammaticLaunch = false;
};

}  // namespace cutlass_ext

// One Hopper corrected variant: its kernel (device half) or its launcher functions under C names prefixed with the
// variant's name (host half; cubin_launch.h).
#ifdef CUTLASS_EXT_DEVICE_CODE
#define CUTLASS_EXT_EXPORT_SPLIT_GEMM(NAME, ...) CUTLASS_EXT_CUBIN_KERNEL(NAME, __VA_ARGS__)
#else
#define CUTLASS_EXT_EXPORT_SPLIT_GEMM(NAME, ...) \
  CUTLASS_EXT_CUBIN_LAUNCHERS(NAME, _split, cutlass_ext_split_gemm_args, __VA_ARGS__)
#endif

// Exported once per Hopper corrected kernel library, by its host half: the ABI and status strings (the operand
// pass by the third object, above).
#ifdef CUTLASS_EXT_DEVICE_CODE
#define CUTLASS_EXT_EXPORT_SPLIT_LIBRARY()
#else
#define CUTLASS_EXT_EXPORT_SPLIT_LIBRARY() CUTLASS_EXT_EXPORT_ABI()
#endif

#endif  // CUTLASS_EXT_OPERAND_PASS_CODE
