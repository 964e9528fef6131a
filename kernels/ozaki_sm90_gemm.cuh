// The Ozaki-II INT8 GEMM on Hopper: one batched CUTLASS 3.x launch (TMA + wgmma, s8·s8→s32, cooperative
// warp-specialized, persistent) over every (modulus, batch) problem; exact while K < 2^17. With residue output the
// epilogue reduces each INT32 product modulo its problem's modulus to an INT8 balanced residue (a quarter of the
// bytes to write and for the recombination to read; the CRT needs nothing more).
#pragma once

#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

#include "ozaki_abi.h"
#include "ozaki_arith.cuh"

namespace cutlass_ext {
namespace ozaki {

// The epilogue's compute node: balanced residues of the products modulo the problem's modulus.
template <class T>
struct BalancedResidue {
  CUTLASS_HOST_DEVICE T operator()(T const& x, T const& modulus) const { return balanced_residue_runtime(x, modulus); }
};

template <class T, int N>
struct BalancedResidue<cutlass::Array<T, N>> {
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& x,
                                                      cutlass::Array<T, N> const& modulus) const {
    cutlass::Array<T, N> out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = BalancedResidue<T>{}(x[i], modulus[i]);
    return out;
  }
};

template <int TileM, int TileN, int TileK, int ClusterM, int ClusterN, int Swizzle, bool ResidueOutput>
struct Sm90ResidueGemm {
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::_1>;
  using ElementD = cute::conditional_t<ResidueOutput, int8_t, int32_t>;
  static constexpr int kAlignmentAB = 16;  // INT8 elements: TMA moves 16-byte rows
  static constexpr int kAlignmentD = 16 / int(sizeof(ElementD));

  // The problem's modulus, one int32 per batch index l of the launch.
  using ProblemModulus =
      cutlass::epilogue::fusion::Sm90ScalarBroadcast<int32_t, cute::Stride<cute::_0, cute::_0, int64_t>>;
  using Residue = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<BalancedResidue, int8_t, int32_t,
                                             cutlass::FloatRoundStyle::round_to_nearest>,
      cutlass::epilogue::fusion::Sm90AccFetch, ProblemModulus>;
  // int32 compute keeps the plain products exact (alpha = 1, no C).
  using Fusion = cute::conditional_t<ResidueOutput, Residue,
                                     cutlass::epilogue::fusion::LinearCombination<int32_t, int32_t, void, int32_t>>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, int32_t, int32_t, void, cutlass::layout::RowMajor,
      kAlignmentD, ElementD, cutlass::layout::RowMajor, kAlignmentD,
      cutlass::epilogue::TmaWarpSpecializedCooperative, Fusion>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, int8_t, cutlass::layout::RowMajor, kAlignmentAB, int8_t,
      cutlass::layout::ColumnMajor, kAlignmentAB, int32_t, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments arguments(const cutlass_ext_ozaki_gemm_args& args) {
    using cute::_1;
    typename Gemm::Arguments arguments{};
    arguments.mode = cutlass::gemm::GemmUniversalMode::kBatched;
    arguments.problem_shape = {int(args.m), int(args.n), int(args.k_pitch), int(args.problems)};
    arguments.mainloop.ptr_A = args.a;
    arguments.mainloop.dA = cute::make_stride(args.k_pitch, _1{}, args.m * args.k_pitch);
    arguments.mainloop.ptr_B = args.b;
    arguments.mainloop.dB = cute::make_stride(args.k_pitch, _1{}, args.n * args.k_pitch);
    if constexpr (ResidueOutput) {
      const auto per_problem = cute::make_stride(cute::_0{}, cute::_0{}, int64_t(1));
      arguments.epilogue.thread = {{}, {{}, {args.problem_moduli}, {per_problem}}, {}};
    } else {
      arguments.epilogue.thread.alpha = 1;
      arguments.epilogue.thread.beta = 0;
    }
    arguments.epilogue.ptr_C = nullptr;
    arguments.epilogue.dC = cute::make_stride(args.n, _1{}, args.m * args.n);
    arguments.epilogue.ptr_D = static_cast<ElementD*>(args.d);
    arguments.epilogue.dD = cute::make_stride(args.n, _1{}, args.m * args.n);
    arguments.hw_info.device_id = args.device;
    arguments.hw_info.sm_count = args.sm_count;
    arguments.scheduler.max_swizzle_size = Swizzle;
    return arguments;
  }

  static size_t workspace_size(const cutlass_ext_ozaki_gemm_args* args) {
    return Gemm::get_workspace_size(arguments(*args));
  }

  static int run(const cutlass_ext_ozaki_gemm_args* args, void* workspace, void* stream) {
    if (args->m == 0 || args->n == 0 || args->problems == 0) return 0;
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (!aligned(args->a) || !aligned(args->b) || !aligned(args->d) || args->k_pitch % kAlignmentAB ||
        args->n % kAlignmentD)
      return int(cutlass::Status::kErrorMisalignedOperand);
    Gemm gemm;
    auto cuda_stream = static_cast<cudaStream_t>(stream);
    const auto arguments_ = arguments(*args);
    cutlass::Status status = gemm.can_implement(arguments_);
    if (status != cutlass::Status::kSuccess) return int(status);
    status = gemm.initialize(arguments_, workspace, cuda_stream);
    if (status != cutlass::Status::kSuccess) return int(status);
    return int(gemm.run(cuda_stream));
  }
};

}  // namespace ozaki
}  // namespace cutlass_ext
