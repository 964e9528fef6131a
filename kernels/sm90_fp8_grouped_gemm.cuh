// Grouped block-scaled FP8 GEMM for mixture-of-experts layers (sm90a) behind sm90_fp8_block_abi.h: one persistent
// CUTLASS 3.x pointer-array kernel runs every expert's product, its tiles shared out by the group tile scheduler.
// The experts' row counts never reach the host: a small kernel before it (one thread per group) turns the device's
// offsets (tokens sorted by expert) or valid counts (fixed capacity per expert) into the per-group problem shapes,
// pointers and strides that the grouped kernel reads, so a launch is CUDA-graph capturable.
#pragma once

#include "sm90_fp8_block_gemm.cuh"
#include "sm90_fp8_grouped_rows.h"

namespace cutlass_ext::fp8_block {

// `bytes` bytes of `value` at `base` (16-byte aligned), the threads of the whole grid side by side.
__device__ inline void fill_bytes(void* base, size_t bytes, unsigned char value) {
  size_t thread = size_t(blockIdx.x) * blockDim.x + threadIdx.x, threads = size_t(gridDim.x) * blockDim.x;
  uint32_t word = 0x01010101u * value;
  auto* words = static_cast<uint4*>(base);
  for (size_t i = thread; i < bytes / sizeof(uint4); i += threads) words[i] = make_uint4(word, word, word, word);
  auto* tail = static_cast<unsigned char*>(base) + bytes / sizeof(uint4) * sizeof(uint4);
  if (thread < bytes % sizeof(uint4)) tail[thread] = value;
}

// Blocks of kFillThreads threads for a writer kernel: one thread per group, and enough to fill `bytes` 16 at a time.
constexpr int kFillThreads = 128;
inline int fill_blocks(int64_t groups, size_t bytes) {
  int64_t fill = int64_t((bytes / sizeof(uint4) + kFillThreads - 1) / kFillThreads);
  int64_t group = (groups + kFillThreads - 1) / kFillThreads;
  int64_t blocks = group > fill ? group : fill;
  return int(blocks > 0 ? blocks : 1);
}

// Graph capture takes programmatic launches from CUDA 12.3 on; before, the GEMM launches plainly.
constexpr bool kProgrammaticGroups = CUDART_VERSION >= 12030;

// A pointer-array kernel launched programmatically after the kernel that writes its group arrays: it may start
// while that kernel runs, so every thread waits for it (griddepcontrol.wait, written out: CUTLASS's helper
// compiles to nothing without CUTLASS_ENABLE_GDC_FOR_SM90) before CUTLASS's kernel, whose tile scheduler reads
// the problem shapes at once and which has no wait of its own. What this saves is the launch between the two.
template <class Base>
struct AfterGroupArrays : Base {
  CUTLASS_DEVICE void operator()(typename Base::Params const& params, char* smem) {
#if defined(__CUDA_ARCH__)
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    Base::operator()(params, smem);
  }
};

// Lets the kernel launched after this one (programmatically) start now; it waits for this one's writes.
__device__ inline void launch_dependents() {
#if defined(__CUDA_ARCH__)
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Arrays carved one after another out of the front of a workspace, each on a 128-byte boundary; from a null base
// only the sizes count (the host never dereferences them).
struct WorkspaceCursor {
  static constexpr size_t kAlign = 128;
  char* base;
  size_t used = 0;

  template <class T>
  T* take(size_t count) {
    T* start = reinterpret_cast<T*>(base + used);
    used += (count * sizeof(T) + kAlign - 1) / kAlign * kAlign;
    return start;
  }
};

// The device arrays the grouped kernel reads, one entry per group, carved out of the front of the workspace.
template <class Gemm>
struct GroupArrays {
  using Kernel = typename Gemm::GemmKernel;
  using ProblemShape = typename Kernel::ProblemShape::UnderlyingProblemShape;
  using ElementA = typename Kernel::ElementA;
  using ElementB = typename Kernel::ElementB;
  using ElementD = typename Kernel::CollectiveEpilogue::ElementD;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;

  ProblemShape* problem_shapes;
  const ElementA** a;
  StrideA* stride_a;
  const ElementB** b;
  StrideB* stride_b;
  const float** scale_a;
  const float** scale_b;
  ElementD** d;
  StrideD* stride_d;
  size_t size;  // bytes of workspace the arrays take

  static size_t bytes(int64_t groups) { return carve(nullptr, groups).size; }

  // The arrays at `base` (any address when only sizes are asked).
  static GroupArrays carve(void* base, int64_t groups) {
    size_t g = size_t(groups);
    WorkspaceCursor cursor{static_cast<char*>(base)};
    GroupArrays arrays;
    arrays.problem_shapes = cursor.take<ProblemShape>(g);
    arrays.a = cursor.take<const ElementA*>(g);
    arrays.stride_a = cursor.take<StrideA>(g);
    arrays.b = cursor.take<const ElementB*>(g);
    arrays.stride_b = cursor.take<StrideB>(g);
    arrays.scale_a = cursor.take<const float*>(g);
    arrays.scale_b = cursor.take<const float*>(g);
    arrays.d = cursor.take<ElementD*>(g);
    arrays.stride_d = cursor.take<StrideD>(g);
    arrays.size = cursor.used;
    return arrays;
  }
};

// What both grouped kernels' arguments share: the problem shapes read on the device (no host copy), each group's
// operands, scales and output through the device arrays, D = the product (no C).
template <class Gemm, class Arrays>
typename Gemm::Arguments grouped_arguments(int64_t groups, const Arrays& arrays, int device, int sm_count) {
  typename Gemm::Arguments arguments{};
  arguments.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  arguments.problem_shape = {int(groups), arrays.problem_shapes, nullptr};
  arguments.mainloop.ptr_A = arrays.a;
  arguments.mainloop.dA = arrays.stride_a;
  arguments.mainloop.ptr_B = arrays.b;
  arguments.mainloop.dB = arrays.stride_b;
  arguments.mainloop.ptr_SFA = arrays.scale_a;
  arguments.mainloop.layout_SFA = nullptr;
  arguments.mainloop.ptr_SFB = arrays.scale_b;
  arguments.mainloop.layout_SFB = nullptr;
  arguments.epilogue.thread.alpha = 1.0f;
  arguments.epilogue.thread.beta = 0.0f;
  arguments.epilogue.ptr_C = nullptr;
  arguments.epilogue.dC = arrays.stride_d;
  arguments.epilogue.ptr_D = arrays.d;
  arguments.epilogue.dD = arrays.stride_d;
  arguments.hw_info.device_id = device;
  arguments.hw_info.sm_count = sm_count;
  return arguments;
}

// One thread per group, and the grid zeroes the GEMM's workspace: CUTLASS's grouped kernel keeps per-SM TMA
// descriptors there and reads them before its first writes (compute-sanitizer initcheck), so nothing it reads is
// undefined; here rather than in a memset before, which cost the call a graph node.
template <class Gemm>
__global__ void write_group_arrays(cutlass_ext_fp8_grouped_args args, GroupArrays<Gemm> arrays, void* gemm_workspace,
                                   size_t gemm_workspace_bytes) {
  using Arrays = GroupArrays<Gemm>;
  launch_dependents();
  fill_bytes(gemm_workspace, gemm_workspace_bytes, 0);
  int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= args.groups) return;
  int64_t offset_before = 0, offset_end = 0, count = 0;
  if (args.offsets != nullptr) {
    offset_before = g == 0 ? 0 : args.offsets[g - 1];
    offset_end = args.offsets[g];
  } else {
    count = args.counts[g];
  }
  GroupRows rows = group_rows(args, g, offset_before, offset_end, count);
  int64_t k_blocks = (args.k + kScaleBlockK - 1) / kScaleBlockK;
  arrays.problem_shapes[g] = typename Arrays::ProblemShape(int(rows.rows), int(args.n), int(args.k));
  arrays.a[g] = static_cast<const typename Arrays::ElementA*>(args.a) + rows.start * args.lda;
  arrays.b[g] = static_cast<const typename Arrays::ElementB*>(args.b) + g * args.b_group_stride;
  arrays.scale_a[g] = args.scale_a + rows.start * k_blocks;
  arrays.scale_b[g] = args.scale_b + g * args.scale_b_group_stride;
  arrays.d[g] = static_cast<typename Arrays::ElementD*>(args.d) + rows.start * args.ldd;
  typename Arrays::StrideA stride_a{};
  cute::get<0>(stride_a) = args.lda;
  arrays.stride_a[g] = stride_a;
  typename Arrays::StrideB stride_b{};
  cute::get<0>(stride_b) = args.ldb;
  arrays.stride_b[g] = stride_b;
  typename Arrays::StrideD stride_d{};
  cute::get<0>(stride_d) = args.ldd;
  arrays.stride_d[g] = stride_d;
}

template <class ElementA, class ElementB, class ElementD, int TileM, int TileN, int TileK, int ClusterM,
          int ClusterN, class Schedule, int ScaleN>
struct Sm90Fp8GroupedGemm {
  static_assert(TileK == kScaleBlockK, "one k-tile per scale block");
  static_assert(TileN % ScaleN == 0, "a tile spans whole weight-scale blocks");
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::_1>;
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
  static constexpr int kAlignmentAB = 16;
  static constexpr int kAlignmentD = 16 / int(sizeof(ElementD));
  using Scales = ScaleConfig<ScaleN>;
  using LayoutSFA = decltype(Scales::deduce_layoutSFA());
  using LayoutSFB = decltype(Scales::deduce_layoutSFB());

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor*, kAlignmentD,
      ElementD, cutlass::layout::RowMajor*, kAlignmentD, typename Schedule::GroupedEpilogue,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;

  // The grouped mainloop derives each group's scale layout from its problem shape: dense K-major blocks.
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA,
      cute::tuple<cutlass::layout::RowMajor*, LayoutSFA*>, kAlignmentAB, ElementB,
      cute::tuple<cutlass::layout::ColumnMajor*, LayoutSFB*>, kAlignmentAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<int(sizeof(typename Epilogue::SharedStorage))>,
      typename Schedule::GroupedKernel>::CollectiveOp;

  using Kernel = AfterGroupArrays<cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using Arrays = GroupArrays<Gemm>;

  static typename Gemm::Arguments arguments(const cutlass_ext_fp8_grouped_args& args, const Arrays& arrays) {
    return grouped_arguments<Gemm>(args.groups, arrays, args.device, args.sm_count);
  }

  static bool tma_aligned(const cutlass_ext_fp8_grouped_args& args) {
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return aligned(args.a) && aligned(args.b) && aligned(args.d) && args.lda % kAlignmentAB == 0 &&
           args.ldb % kAlignmentAB == 0 && args.b_group_stride % kAlignmentAB == 0 && args.ldd % kAlignmentD == 0 &&
           args.n % kAlignmentD == 0 && args.k % kAlignmentAB == 0;
  }

  static int can_implement(const cutlass_ext_fp8_grouped_args* args) {
    if (!tma_aligned(*args)) return int(cutlass::Status::kErrorMisalignedOperand);
    if ((args->offsets == nullptr) == (args->counts == nullptr)) return int(cutlass::Status::kErrorInvalidProblem);
    return int(Gemm::can_implement(arguments(*args, Arrays::carve(nullptr, args->groups))));
  }

  static size_t workspace_size(const cutlass_ext_fp8_grouped_args* args) {
    return Arrays::bytes(args->groups) +
           Gemm::get_workspace_size(arguments(*args, Arrays::carve(nullptr, args->groups)));
  }

  // Two launches: the group arrays' kernel, then the GEMM, programmatically (AfterGroupArrays).
  static int run(const cutlass_ext_fp8_grouped_args* args, void* workspace, void* stream) {
    if (reinterpret_cast<uintptr_t>(workspace) % alignof(uint4) != 0) return int(cutlass::Status::kErrorInvalidProblem);
    auto cuda_stream = static_cast<cudaStream_t>(stream);
    Arrays arrays = Arrays::carve(workspace, args->groups);
    void* gemm_workspace = static_cast<char*>(workspace) + Arrays::bytes(args->groups);
    size_t gemm_workspace_bytes = workspace_size(args) - Arrays::bytes(args->groups);
    write_group_arrays<Gemm><<<fill_blocks(args->groups, gemm_workspace_bytes), kFillThreads, 0, cuda_stream>>>(
        *args, arrays, gemm_workspace, gemm_workspace_bytes);
    cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) return int(error);
    Gemm gemm;
    cutlass::Status status = gemm.initialize(arguments(*args, arrays), gemm_workspace, cuda_stream);
    if (status != cutlass::Status::kSuccess) return int(status);
    return int(gemm.run(cuda_stream, /*cuda_adapter=*/nullptr, /*launch_with_pdl=*/kProgrammaticGroups));
  }
};

}  // namespace cutlass_ext::fp8_block
