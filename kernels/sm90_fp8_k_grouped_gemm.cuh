// The weight-gradient form of the grouped block-scaled FP8 GEMM (sm90a) behind sm90_fp8_block_abi.h: groups cut
// along K (each expert's tokens), one persistent CUTLASS 3.x pointer-array kernel over every group's (m, n) output.
// As in the grouped form, a small kernel before it (one thread per group) turns the device's offsets into the
// per-group problem shapes, pointers and strides, so nothing reaches the host and a launch is graph capturable.
// Both operands' scales are 1x128 along K and M-/N-contiguous: a group's scales are then whole rows of the
// (k-blocks, m) and (k-blocks, n) arrays, the dense per-group layout the grouped mainloop derives from its shape.
#pragma once

#include "sm90_fp8_grouped_gemm.cuh"
#include "sm90_fp8_grouped_rows.h"

namespace cutlass_ext::fp8_block {

// 1x128 scales along K for both operands, M- and N-contiguous.
using KGroupedScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, 1, kScaleBlockK, cute::GMMA::Major::MN,
                                                                      cute::GMMA::Major::MN>;

template <class Gemm>
struct KGroupArrays {
  using Kernel = typename Gemm::GemmKernel;
  using ProblemShape = typename Kernel::ProblemShape::UnderlyingProblemShape;
  using ElementA = typename Kernel::ElementA;
  using ElementB = typename Kernel::ElementB;
  using ElementC = typename Kernel::CollectiveEpilogue::ElementC;
  using ElementD = typename Kernel::CollectiveEpilogue::ElementD;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideC = typename Kernel::InternalStrideC;
  using StrideD = typename Kernel::InternalStrideD;

  ProblemShape* problem_shapes;
  const ElementA** a;
  StrideA* stride_a;
  const ElementB** b;
  StrideB* stride_b;
  const float** scale_a;
  const float** scale_b;
  const ElementC** c;
  StrideC* stride_c;
  ElementD** d;
  StrideD* stride_d;
  // Operands for a group with nothing to add: kScaleBlockK FP8 zeros per row of the larger side, then as many
  // float zeros (its scales) in the same bytes; and NaN scales for a group whose offsets are invalid.
  uint8_t* zeros;
  float* nans;
  size_t size;  // bytes of workspace the arrays take

  CUTLASS_HOST_DEVICE static size_t zero_bytes(int64_t rows) { return size_t(rows) * kScaleBlockK; }
  CUTLASS_HOST_DEVICE static size_t nan_bytes(int64_t rows) { return size_t(rows) * sizeof(float); }
  static size_t bytes(int64_t groups, int64_t rows) { return carve(nullptr, groups, rows).size; }

  // The arrays at `base` (any address when only sizes are asked).
  static KGroupArrays carve(void* base, int64_t groups, int64_t rows) {
    size_t g = size_t(groups);
    WorkspaceCursor cursor{static_cast<char*>(base)};
    KGroupArrays arrays;
    arrays.problem_shapes = cursor.take<ProblemShape>(g);
    arrays.a = cursor.take<const ElementA*>(g);
    arrays.stride_a = cursor.take<StrideA>(g);
    arrays.b = cursor.take<const ElementB*>(g);
    arrays.stride_b = cursor.take<StrideB>(g);
    arrays.scale_a = cursor.take<const float*>(g);
    arrays.scale_b = cursor.take<const float*>(g);
    arrays.c = cursor.take<const ElementC*>(g);
    arrays.stride_c = cursor.take<StrideC>(g);
    arrays.d = cursor.take<ElementD*>(g);
    arrays.stride_d = cursor.take<StrideD>(g);
    arrays.zeros = cursor.take<uint8_t>(zero_bytes(rows));
    arrays.nans = cursor.take<float>(size_t(rows));
    arrays.size = cursor.used;
    return arrays;
  }
};

// One thread per group, and the grid fills the rest of the workspace first: the empty groups' zero operands and
// the invalid ones' NaN scales, and zeros over the GEMM's part (its TMA descriptors: see write_group_arrays).
template <class Gemm>
__global__ void write_k_group_arrays(cutlass_ext_fp8_k_grouped_args args, KGroupArrays<Gemm> arrays, int64_t rows,
                                     void* gemm_workspace, size_t gemm_workspace_bytes) {
  using Arrays = KGroupArrays<Gemm>;
  launch_dependents();
  fill_bytes(arrays.zeros, Arrays::zero_bytes(rows), 0);
  fill_bytes(arrays.nans, Arrays::nan_bytes(rows), 0xFF);
  fill_bytes(gemm_workspace, gemm_workspace_bytes, 0);
  int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= args.groups) return;
  GroupColumns columns = group_columns(args.k_total, g == 0 ? 0 : args.offsets[g - 1], args.offsets[g]);
  typename Arrays::StrideA stride_a{};
  typename Arrays::StrideB stride_b{};
  if (columns.valid && columns.columns > 0) {
    int64_t block = columns.start / kScaleBlockK;
    arrays.problem_shapes[g] = typename Arrays::ProblemShape(int(args.m), int(args.n), int(columns.columns));
    arrays.a[g] = static_cast<const typename Arrays::ElementA*>(args.a) + columns.start;
    arrays.b[g] = static_cast<const typename Arrays::ElementB*>(args.b) + columns.start;
    arrays.scale_a[g] = args.scale_a + block * args.m;
    arrays.scale_b[g] = args.scale_b + block * args.n;
    cute::get<0>(stride_a) = args.lda;
    cute::get<0>(stride_b) = args.ldb;
  } else {
    // One k-block of zeros, scaled by 0 (an empty group: D_g = C_g) or by NaN (invalid offsets: D_g is NaN).
    arrays.problem_shapes[g] = typename Arrays::ProblemShape(int(args.m), int(args.n), int(kScaleBlockK));
    arrays.a[g] = reinterpret_cast<const typename Arrays::ElementA*>(arrays.zeros);
    arrays.b[g] = reinterpret_cast<const typename Arrays::ElementB*>(arrays.zeros);
    const float* scales = columns.valid ? reinterpret_cast<const float*>(arrays.zeros) : arrays.nans;
    arrays.scale_a[g] = scales;
    arrays.scale_b[g] = scales;
    cute::get<0>(stride_a) = kScaleBlockK;
    cute::get<0>(stride_b) = kScaleBlockK;
  }
  arrays.stride_a[g] = stride_a;
  arrays.stride_b[g] = stride_b;
  auto* d = static_cast<typename Arrays::ElementD*>(args.d) + g * args.d_group_stride;
  arrays.d[g] = d;
  // Without C the epilogue reads none (beta = 0); its pointers still name D's memory.
  arrays.c[g] = args.c != nullptr
                    ? static_cast<const typename Arrays::ElementC*>(args.c) + g * args.d_group_stride
                    : reinterpret_cast<const typename Arrays::ElementC*>(d);
  typename Arrays::StrideC stride_c{};
  cute::get<0>(stride_c) = args.ldd;
  arrays.stride_c[g] = stride_c;
  typename Arrays::StrideD stride_d{};
  cute::get<0>(stride_d) = args.ldd;
  arrays.stride_d[g] = stride_d;
}

template <class ElementA, class ElementB, class ElementD, int TileM, int TileN, int TileK, int ClusterM,
          int ClusterN, class Schedule, int ScaleN>
struct Sm90Fp8KGroupedGemm {
  static_assert(TileK == kScaleBlockK, "one k-tile per scale block");
  static_assert(ScaleN == 1, "1x128 scales along K for both operands");
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::_1>;
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
  using ElementC = ElementD;
  static constexpr int kAlignmentAB = 16;
  static constexpr int kAlignmentD = 16 / int(sizeof(ElementD));
  using LayoutSFA = decltype(KGroupedScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(KGroupedScaleConfig::deduce_layoutSFB());

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementC, cutlass::layout::RowMajor*,
      kAlignmentD, ElementD, cutlass::layout::RowMajor*, kAlignmentD, typename Schedule::GroupedEpilogue,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, ElementC, float>>::CollectiveOp;

  // The grouped mainloop derives each group's scale layout from its problem shape: dense, M-/N-contiguous.
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA,
      cute::tuple<cutlass::layout::RowMajor*, LayoutSFA*>, kAlignmentAB, ElementB,
      cute::tuple<cutlass::layout::ColumnMajor*, LayoutSFB*>, kAlignmentAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<int(sizeof(typename Epilogue::SharedStorage))>,
      typename Schedule::GroupedKernel>::CollectiveOp;

  using Kernel = AfterGroupArrays<cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using Arrays = KGroupArrays<Gemm>;

  static int64_t zero_rows(const cutlass_ext_fp8_k_grouped_args& args) { return args.m > args.n ? args.m : args.n; }

  static typename Gemm::Arguments arguments(const cutlass_ext_fp8_k_grouped_args& args, const Arrays& arrays) {
    auto arguments = grouped_arguments<Gemm>(args.groups, arrays, args.device, args.sm_count);
    arguments.epilogue.thread.beta = args.c != nullptr ? 1.0f : 0.0f;  // D = C + the product when accumulating
    arguments.epilogue.ptr_C = arrays.c;
    arguments.epilogue.dC = arrays.stride_c;
    return arguments;
  }

  static bool tma_aligned(const cutlass_ext_fp8_k_grouped_args& args) {
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return aligned(args.a) && aligned(args.b) && aligned(args.d) && (args.c == nullptr || aligned(args.c)) &&
           args.lda % kAlignmentAB == 0 && args.ldb % kAlignmentAB == 0 && args.ldd % kAlignmentD == 0 &&
           args.d_group_stride % kAlignmentD == 0 && args.n % kAlignmentD == 0;
  }

  static int can_implement(const cutlass_ext_fp8_k_grouped_args* args) {
    if (!tma_aligned(*args)) return int(cutlass::Status::kErrorMisalignedOperand);
    if (args->offsets == nullptr || args->m <= 0 || args->n <= 0) return int(cutlass::Status::kErrorInvalidProblem);
    return int(Gemm::can_implement(arguments(*args, Arrays::carve(nullptr, args->groups, zero_rows(*args)))));
  }

  static size_t workspace_size(const cutlass_ext_fp8_k_grouped_args* args) {
    return Arrays::bytes(args->groups, zero_rows(*args)) +
           Gemm::get_workspace_size(arguments(*args, Arrays::carve(nullptr, args->groups, zero_rows(*args))));
  }

  // Two launches, as the grouped form's: the arrays' kernel, then the GEMM programmatically (AfterGroupArrays).
  static int run(const cutlass_ext_fp8_k_grouped_args* args, void* workspace, void* stream) {
    if (reinterpret_cast<uintptr_t>(workspace) % alignof(uint4) != 0) return int(cutlass::Status::kErrorInvalidProblem);
    auto cuda_stream = static_cast<cudaStream_t>(stream);
    int64_t rows = zero_rows(*args);
    Arrays arrays = Arrays::carve(workspace, args->groups, rows);
    void* gemm_workspace = static_cast<char*>(workspace) + Arrays::bytes(args->groups, rows);
    size_t gemm_workspace_bytes = workspace_size(args) - Arrays::bytes(args->groups, rows);
    size_t fill = Arrays::zero_bytes(rows) > gemm_workspace_bytes ? Arrays::zero_bytes(rows) : gemm_workspace_bytes;
    write_k_group_arrays<Gemm><<<fill_blocks(args->groups, fill), kFillThreads, 0, cuda_stream>>>(
        *args, arrays, rows, gemm_workspace, gemm_workspace_bytes);
    cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) return int(error);
    Gemm gemm;
    cutlass::Status status = gemm.initialize(arguments(*args, arrays), gemm_workspace, cuda_stream);
    if (status != cutlass::Status::kSuccess) return int(status);
    return int(gemm.run(cuda_stream, /*cuda_adapter=*/nullptr, /*launch_with_pdl=*/kProgrammaticGroups));
  }
};

}  // namespace cutlass_ext::fp8_block
