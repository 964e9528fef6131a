// CUTLASS 2.x GEMM (mma.sync, sm80 and later) behind the C launcher interface of launcher_abi.h.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/device/gemm_universal.h"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
// After cutlass::gemm is declared: the visitors name gemm::GemmCoord beside a `using namespace cute` (cute::gemm).
#include "cutlass/epilogue/threadblock/fusion/visitors.hpp"
#include "cutlass/gemm/kernel/default_gemm_universal_with_visitor.h"

#include "halfhalf_operands.cuh"
#include "sm80_optional_load.hpp"
#include "launcher_abi.h"
#include "library_exports.h"
#include "split_mma.h"

namespace cutlass_ext {

// How each mode feeds the Tensor Core; the mode's MathOperator picks the warp-level MMA.
// kMaxSliceK: the longest K one output tile sums in sequence before serial split-K adds the slices in FP32 RN
// (0: no limit). tf32tf32's error grows with that chain: on exp_rand Types 1 and 4 it passed 1.1x cuBLAS
// SGEMM's relres with chains up to 2048 and failed with 4096 (1.12-1.77x; docs/design-notes.md, corrected SGEMM
// on sm80+).
struct ModeTf32 {
  // float operands rounded to TF32 (RNA, CUTLASS's round_half_ulp_truncate), accumulated inside the Tensor Core.
  using MathOperator = cutlass::arch::OpMultiplyAdd;
  static constexpr int kMaxSliceK = 0;
};
struct ModeTf32Tf32 {
  using MathOperator = OpMultiplyAddSplit<SchemeTf32Tf32>;
  static constexpr int kMaxSliceK = 2048;
};
struct ModeHalfHalf {
  using MathOperator = OpMultiplyAddSplit<SchemeHalfHalf>;
  static constexpr int kMaxSliceK = 0;
};
// FP16 hi and lo·2^11 already split and packed in each 32-bit word by halfhalf_pack (halfhalf_operands.cuh).
struct ModeHalfHalfPacked {
  using MathOperator = OpMultiplyAddSplit<SchemeHalfHalfPacked>;
  static constexpr int kMaxSliceK = 0;
};
struct ModeMarkidis {
  using MathOperator = OpMultiplyAddSplit<SchemeMarkidis>;
  static constexpr int kMaxSliceK = 0;
};
// CUTLASS's own 3xTF32 (big·big + big·small + small·big, all inside the Tensor Core's accumulator): the
// benchmarks' peer, example 27's kernel.
struct ModeCutlass3xTf32 {
  using MathOperator = cutlass::arch::OpMultiplyAddFastF32;
  static constexpr int kMaxSliceK = 0;
};

template <typename Mode, typename LayoutA, typename LayoutB, int BlockM, int BlockN, int BlockK, int WarpM, int WarpN,
          int WarpK, int InstM, int InstN, int InstK, int Stages, int Alignment, int Swizzle = 1>
struct Sm80Gemm {
  using ModeTag = Mode;
  using ThreadblockShape = cutlass::gemm::GemmShape<BlockM, BlockN, BlockK>;
  using WarpShape = cutlass::gemm::GemmShape<WarpM, WarpN, WarpK>;
  using InstructionShape = cutlass::gemm::GemmShape<InstM, InstN, InstK>;
  using Swizzler = cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<Swizzle>;
  static constexpr int kStages = Stages, kAlignment = Alignment;
  using LayoutC = cutlass::layout::RowMajor;
  using Epilogue = cutlass::epilogue::thread::LinearCombination<float, Alignment, float, float>;
  using Gemm = cutlass::gemm::device::GemmUniversal<
      float, LayoutA, float, LayoutB, float, LayoutC, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      cutlass::gemm::GemmShape<BlockM, BlockN, BlockK>, cutlass::gemm::GemmShape<WarpM, WarpN, WarpK>,
      cutlass::gemm::GemmShape<InstM, InstN, InstK>, Epilogue,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<Swizzle>, Stages, Alignment, Alignment,
      typename Mode::MathOperator>;

  // Slices of K for serial split-K when the output tiles alone leave SMs idle, each keeping at least
  // kMinSliceIterations mainloop iterations so the pipeline fills; and at least enough slices that none sums more
  // than the mode's kMaxSliceK (shorter sequential sums cut rounding error).
  static constexpr int kMinSliceIterations = 8;

  static int split_k_slices(const cutlass_ext_gemm_args& args) {
    if (args.split_k > 0) return int(args.split_k);
    if (args.batch > 1) return 1;
    int device = 0, sms = 1;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    int64_t tiles = ((args.m + BlockM - 1) / BlockM) * ((args.n + BlockN - 1) / BlockN);
    int64_t by_occupancy = sms / tiles;
    int64_t by_depth = args.k / (int64_t(BlockK) * kMinSliceIterations);
    int64_t by_accuracy = Mode::kMaxSliceK ? (args.k + Mode::kMaxSliceK - 1) / Mode::kMaxSliceK : 1;
    return int(std::max<int64_t>({1, std::min(by_occupancy, by_depth), by_accuracy}));
  }

  static typename Gemm::Arguments arguments(const cutlass_ext_gemm_args& args) {
    auto mode = args.batch > 1 ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm;
    int batch_or_slices = args.batch > 1 ? int(args.batch) : split_k_slices(args);
    cutlass::gemm::GemmCoord problem(int(args.m), int(args.n), int(args.k));
    // A C of row stride 0 is a bias read for every row (CUTLASS example 12); serial split-K's later slices read D.
    const bool own_c = args.c != nullptr;
    return typename Gemm::Arguments(mode, problem, batch_or_slices, {args.alpha, args.beta}, args.a, args.b,
                                    own_c ? args.c : args.d, args.d, args.batch_stride_a, args.batch_stride_b,
                                    own_c ? args.batch_stride_c : args.batch_stride_d, args.batch_stride_d, args.lda,
                                    args.ldb, own_c ? args.ldc : args.ldd, args.ldd);
  }

  // CUTLASS checks only the problem extents; vector loads also need aligned pointers, strides and batch strides.
  static bool vector_aligned(const cutlass_ext_gemm_args& args) {
    auto pointer_ok = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % (Alignment * sizeof(float)) == 0; };
    auto stride_ok = [](int64_t s) { return s % Alignment == 0; };
    bool c_ok = args.c == nullptr ||
                (pointer_ok(args.c) && stride_ok(args.ldc) && stride_ok(args.batch_stride_c));
    return pointer_ok(args.a) && pointer_ok(args.b) && pointer_ok(args.d) && stride_ok(args.lda) &&
           stride_ok(args.ldb) && stride_ok(args.ldd) && stride_ok(args.batch_stride_a) &&
           stride_ok(args.batch_stride_b) && stride_ok(args.batch_stride_d) && c_ok;
  }

  static int can_implement(const cutlass_ext_gemm_args* args) {
    if (!vector_aligned(*args)) return int(cutlass::Status::kErrorMisalignedOperand);
    return int(Gemm::can_implement(arguments(*args)));
  }

  static size_t workspace_size(const cutlass_ext_gemm_args* args) { return Gemm::get_workspace_size(arguments(*args)); }

  static int layouts() {
    bool a_columns = cutlass::platform::is_same<LayoutA, cutlass::layout::ColumnMajor>::value;
    bool b_columns = cutlass::platform::is_same<LayoutB, cutlass::layout::ColumnMajor>::value;
    return (a_columns ? CUTLASS_EXT_A_COLUMN_MAJOR : 0) | (b_columns ? CUTLASS_EXT_B_COLUMN_MAJOR : 0);
  }

  static int run(const cutlass_ext_gemm_args* args, void* workspace, void* stream) {
    Gemm gemm;
    auto cuda_stream = static_cast<cudaStream_t>(stream);
    cutlass::Status status = gemm.initialize(arguments(*args), workspace, cuda_stream);
    if (status != cutlass::Status::kSuccess) return int(status);
    return int(gemm.run(cuda_stream));
  }
};

// acc · 2^-(row shift + column shift), then alpha · that + beta · C (unscaled_epilogue, halfhalf_operands.cuh).
template <class T>
struct UnscaledEpilogue;
template <int N>
struct UnscaledEpilogue<cutlass::Array<float, N>> {
  using Fragment = cutlass::Array<float, N>;
  CUTLASS_DEVICE Fragment operator()(Fragment const& acc, Fragment const& row_shift, Fragment const& column_shift,
                                     Fragment const& source, Fragment const& alpha, Fragment const& beta) const {
    Fragment out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      out[i] = unscaled_epilogue(acc[i], int(row_shift[i]) + int(column_shift[i]), source[i], alpha[i], beta[i]);
    }
    return out;
  }
};

// A packed halfhalf variant with halfhalf's unscaling and gemm's epilogue in its epilogue (CUTLASS 2.x epilogue
// visitor tree): the same mainloop as Plain's, one launch fewer than Plain's kernel and the unscaling pass. The
// visitor kernel has no serial split-K, so it declines the problems Plain would split; other modes decline all.
template <class Plain, bool Packed = cutlass::platform::is_same<typename Plain::ModeTag, ModeHalfHalfPacked>::value>
struct Sm80UnscaledGemm {
  static int can_implement(const cutlass_ext_unscaled_gemm_args*) { return int(cutlass::Status::kErrorNotSupported); }
  static size_t workspace_size(const cutlass_ext_unscaled_gemm_args*) { return 0; }
  static int run(const cutlass_ext_unscaled_gemm_args*, void*, void*) {
    return int(cutlass::Status::kErrorNotSupported);
  }
};

template <class Plain>
struct Sm80UnscaledGemm<Plain, true> {
  static constexpr int kAlignment = Plain::kAlignment;
  using ThreadMap = cutlass::epilogue::threadblock::OutputTileThreadLayout<
      typename Plain::ThreadblockShape, typename Plain::WarpShape, float, kAlignment, 1>;
  using RowShift = cutlass::epilogue::threadblock::VisitorColBroadcast<ThreadMap, int32_t,
                                                                        cute::Stride<cute::_1, cute::_0, int64_t>>;
  using ColumnShift = cutlass::epilogue::threadblock::VisitorRowBroadcast<ThreadMap, int32_t,
                                                                           cute::Stride<cute::_0, cute::_1, int64_t>>;
  using Source = VisitorOptionalLoad<ThreadMap, float, cute::Stride<int64_t, cute::_1, int64_t>>;
  using Scalar = cutlass::epilogue::threadblock::VisitorScalarBroadcast<float>;
  using Compute = cutlass::epilogue::threadblock::Sm80EVT<
      cutlass::epilogue::threadblock::VisitorCompute<UnscaledEpilogue, float, float,
                                                     cutlass::FloatRoundStyle::round_to_nearest>,
      cutlass::epilogue::threadblock::VisitorAccFetch, RowShift, ColumnShift, Source, Scalar, Scalar>;
  using Store = cutlass::epilogue::threadblock::VisitorAuxStore<ThreadMap, float,
                                                                cutlass::FloatRoundStyle::round_to_nearest,
                                                                cute::Stride<int64_t, cute::_1, int64_t>>;
  using Callbacks = cutlass::epilogue::threadblock::Sm80EVT<Store, Compute>;
  using Kernel = typename cutlass::gemm::kernel::DefaultGemmWithVisitor<
      float, typename Plain::Gemm::LayoutA, cutlass::ComplexTransform::kNone, kAlignment, float,
      typename Plain::Gemm::LayoutB, cutlass::ComplexTransform::kNone, kAlignment, float, cutlass::layout::RowMajor,
      kAlignment, float, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, typename Plain::ThreadblockShape,
      typename Plain::WarpShape, typename Plain::InstructionShape, Callbacks, typename Plain::Swizzler,
      Plain::kStages, typename ModeHalfHalfPacked::MathOperator, 1>::GemmKernel;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments arguments(const cutlass_ext_unscaled_gemm_args& args) {
    using cute::_0;
    using cute::_1;
    const cutlass_ext_gemm_args& g = args.gemm;
    // Without C (or with beta = 0) the source visitor is given no pointer and reads nothing.
    const bool own_c = g.c != nullptr && g.beta != 0.0f;
    float* source = own_c ? static_cast<float*>(const_cast<void*>(g.c)) : nullptr;
    typename Callbacks::Arguments callbacks{
        {{},
         {args.row_shift, 0, {_1{}, _0{}, args.row_shift_batch_stride}},
         {args.column_shift, 0, {_0{}, _1{}, args.column_shift_batch_stride}},
         {source, 0.0f, {own_c ? g.ldc : 0, _1{}, own_c ? g.batch_stride_c : 0}},
         {{g.alpha}},
         {{own_c ? g.beta : 0.0f}},
         {}},
        {static_cast<float*>(g.d), {g.ldd, _1{}, g.batch_stride_d}}};
    auto mode = g.batch > 1 ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm;
    cutlass::gemm::GemmCoord problem(int(g.m), int(g.n), int(g.k));
    return typename Gemm::Arguments(mode, problem, int(g.batch > 1 ? g.batch : 1), callbacks, g.a, g.b, nullptr,
                                    nullptr, g.batch_stride_a, g.batch_stride_b, 0, 0, g.lda, g.ldb, 0, 0);
  }

  // Plain's alignment of A, B, C and D, and 16-byte vectors of column shifts.
  static bool aligned(const cutlass_ext_unscaled_gemm_args& args) {
    auto pointer_ok = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % (kAlignment * 4) == 0; };
    return Plain::vector_aligned(args.gemm) && pointer_ok(args.column_shift) &&
           args.column_shift_batch_stride % kAlignment == 0;
  }

  static int can_implement(const cutlass_ext_unscaled_gemm_args* args) {
    if (Plain::split_k_slices(args->gemm) > 1) return int(cutlass::Status::kErrorNotSupported);
    if (!aligned(*args)) return int(cutlass::Status::kErrorMisalignedOperand);
    return int(Gemm::can_implement(arguments(*args)));
  }

  static size_t workspace_size(const cutlass_ext_unscaled_gemm_args* args) {
    return Gemm::get_workspace_size(arguments(*args));
  }

  static int run(const cutlass_ext_unscaled_gemm_args* args, void* workspace, void* stream) {
    Gemm gemm;
    auto cuda_stream = static_cast<cudaStream_t>(stream);
    cutlass::Status status = gemm.initialize(arguments(*args), workspace, cuda_stream);
    if (status != cutlass::Status::kSuccess) return int(status);
    return int(gemm.run(cuda_stream));
  }
};

}  // namespace cutlass_ext

// Exports one variant's launcher functions under C names prefixed with the variant's name.
#define CUTLASS_EXT_EXPORT_GEMM(NAME, ...)                                                          \
  extern "C" int NAME##_layouts() { return __VA_ARGS__::layouts(); }                               \
  CUTLASS_EXT_EXPORT_LAUNCHERS(NAME, , cutlass_ext_gemm_args, __VA_ARGS__)                         \
  CUTLASS_EXT_EXPORT_LAUNCHERS(NAME, _unscaled, cutlass_ext_unscaled_gemm_args,                    \
                               cutlass_ext::Sm80UnscaledGemm<__VA_ARGS__>)

// Exported once per kernel library.
#define CUTLASS_EXT_EXPORT_LIBRARY() \
  CUTLASS_EXT_EXPORT_ABI()           \
  CUTLASS_EXT_EXPORT_HALFHALF_OPERANDS()
