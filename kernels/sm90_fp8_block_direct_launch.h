// The directly written block-scaled FP8 kernel's host half (sm90_fp8_block_direct.cuh: the host compiler compiles
// it alone): TMA maps, the cubin's kernels loaded by name, grids and the launchers under the ABI's C names.
#pragma once

#include "cubin_library.h"
#include "library_exports.h"

namespace cutlass_ext::fp8_block_direct {
namespace {  // internal linkage, as cubin_library.h's: each library keeps its own

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiled encode_tiled() {
  static EncodeTiled found = reinterpret_cast<EncodeTiled>(driver_function("cuTensorMapEncodeTiled", 12000));
  return found;
}

// A (rows, k) row-major FP8 operand read in (box_rows, 128) tiles with the 128-byte swizzle; zeros past its edges.
inline bool operand_map(CUtensorMap* map, const void* base, int64_t rows, int64_t k, int64_t ld, int box_rows) {
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(ld)};  // bytes: one FP8 element each
  const cuuint32_t box[2] = {cuuint32_t(kBlockK), cuuint32_t(box_rows)};
  const cuuint32_t unit[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The groups' B, (groups, n, k) FP8 with row stride ld and group stride group_ld (bytes), read in (1, box_rows, 128)
// tiles with the 128-byte swizzle; zeros past n within a group.
inline bool grouped_operand_map(CUtensorMap* map, const void* base, int64_t groups, int64_t rows, int64_t k,
                                int64_t ld, int64_t group_ld, int box_rows) {
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[3] = {cuuint64_t(k), cuuint64_t(rows), cuuint64_t(groups)};
  const cuuint64_t strides[2] = {cuuint64_t(ld), cuuint64_t(group_ld)};
  const cuuint32_t box[3] = {cuuint32_t(kBlockK), cuuint32_t(box_rows), 1};
  const cuuint32_t unit[3] = {1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(base), dims, strides, box, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// D, (m, n) row-major bf16, written in (64, box_columns) boxes with the swizzle one box row spans.
inline bool output_map(CUtensorMap* map, void* base, int64_t rows, int64_t cols, int64_t ld, int box_columns) {
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(ld * 2)};
  const cuuint32_t box[2] = {cuuint32_t(box_columns), 64};
  const cuuint32_t unit[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, dims, strides, box, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE,
                box_columns == 64   ? CU_TENSOR_MAP_SWIZZLE_128B
                : box_columns == 32 ? CU_TENSOR_MAP_SWIZZLE_64B
                                    : CU_TENSOR_MAP_SWIZZLE_32B,
                CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// One variant's kernel in this library's cubin (cubin_library.h), launched on persistent clusters.
class LoadedKernel {
 public:
  // The first parameter is A's TMA map: its size is checked against the cubin's.
  LoadedKernel(const char* name, int shared_bytes) : kernel_(name, sizeof(CUtensorMap)), shared_bytes_(shared_bytes) {}

  // Persistent CTAs in clusters of `cluster` along x: one cluster per unit of work, up to as many as fit at once
  // on the current device (a GPC may leave an SM without a partner: asked of the runtime once per device; else
  // sm_count / cluster).
  cudaError_t launch(int64_t units, int cluster, int threads, int sm_count, cudaStream_t stream, void** arguments) {
    if (kernel_.error() != cudaSuccess) return kernel_.error();
    int device = 0;
    cudaError_t error = cudaGetDevice(&device);
    if (error == cudaSuccess) error = kernel_.allow_shared_memory(device, shared_bytes_);
    if (error != cudaSuccess) return error;
    const int64_t clusters = resident_clusters(device, sm_count, cluster, threads);
    const int grid = int(units < clusters ? units : clusters) * cluster;
    if (grid == 0) return cudaSuccess;
    cudaLaunchAttribute attribute;
    const cudaLaunchConfig_t config = launch_config(grid, cluster, threads, stream, &attribute);
    return cudaLaunchKernelExC(&config, kernel_.function(), arguments);
  }

 private:
  int64_t resident_clusters(int device, int sm_count, int cluster, int threads) {
    const int64_t fallback = sm_count / cluster > 0 ? sm_count / cluster : 1;
    if (cluster == 1 || device >= kDevices) return fallback;
    int known = resident_[device].load(std::memory_order_acquire);
    if (known == 0) {
      cudaLaunchAttribute attribute;
      const cudaLaunchConfig_t config = launch_config(int(fallback) * cluster, cluster, threads, nullptr, &attribute);
      if (cudaOccupancyMaxActiveClusters(&known, kernel_.function(), &config) != cudaSuccess ||
          known < 1) {
        (void)cudaGetLastError();
        known = int(fallback);
      }
      resident_[device].store(known, std::memory_order_release);
    }
    return known < fallback ? known : fallback;
  }

  cudaLaunchConfig_t launch_config(int grid, int cluster, int threads, cudaStream_t stream,
                                   cudaLaunchAttribute* attribute) const {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(grid);
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = shared_bytes_;
    config.stream = stream;
    if (cluster > 1) {
      *attribute = cudaLaunchAttribute{};
      attribute->id = cudaLaunchAttributeClusterDimension;
      attribute->val.clusterDim.x = cluster;
      attribute->val.clusterDim.y = 1;
      attribute->val.clusterDim.z = 1;
      config.attrs = attribute;
      config.numAttrs = 1;
    }
    return config;
  }

  static constexpr int kDevices = 64;
  LibraryKernel kernel_;
  int shared_bytes_;
  std::atomic<int> resident_[kDevices] = {};  // clusters resident at once, per device (0: not asked yet)
};

// Launches a cluster per unit of work (`tiles_m` rows of units, each `Cluster` tiles along N) up to as many as fit
// at once (persistent CTAs), D stored by TMA where its base and rows are 16-byte aligned (else from registers).
template <int BM, int BN, int Stages, int Cluster, bool ColumnScales = false, class Args>
cudaError_t launch_persistent(LoadedKernel& kernel, CUtensorMap& map_a, CUtensorMap& map_b, Args& args, int64_t rows,
                              int64_t tiles_m, cudaStream_t stream) {
  using T = Tiling<BM, BN, Stages, ColumnScales>;
  CUtensorMap map_d{};  // bf16 D only (the column-scaled form's FP32 D goes out from registers)
  bool store_by_tma = !ColumnScales && reinterpret_cast<uintptr_t>(args.d) % 16 == 0 && args.ldd % 8 == 0 &&
                      output_map(&map_d, args.d, rows, args.n, args.ldd, T::kBoxColumns);
  const int64_t units = tiles_m * ((args.n + BN * Cluster - 1) / (BN * Cluster));
  void* arguments[] = {&map_a, &map_b, &map_d, &store_by_tma, &args};
  const cudaError_t error = kernel.launch(units, Cluster, T::kThreads, args.sm_count, stream, arguments);
  if (error != cudaSuccess) (void)cudaGetLastError();  // the failure is this call's status, not the next call's
  return error;
}

// Runs D = the block-scaled product on `stream`. The caller has checked what the API checks (e4m3 operands with
// 16-byte-aligned rows, 128 x 128 weight scales, bf16 D). Returns the launch's error.
template <int BM, int BN, int Stages, int Cluster>
cudaError_t run(LoadedKernel& kernel, cutlass_ext_fp8_block_args args, cudaStream_t stream) {
  CUtensorMap map_a, map_b;  // in a cluster, each CTA loads BM / Cluster rows of A
  if (!operand_map(&map_a, args.a, args.m, args.k, args.lda, BM / Cluster) ||
      !operand_map(&map_b, args.b, args.n, args.k, args.ldb, BN))
    return cudaErrorInvalidValue;
  return launch_persistent<BM, BN, Stages, Cluster>(kernel, map_a, map_b, args, args.m, (args.m + BM - 1) / BM,
                                                    stream);
}

// Runs the grouped form on `stream` (the API has checked what it checks: e4m3 operands, dense K-major activation
// scales, 128 x 128 weight blocks, bf16 D). The grid covers the most units the groups can have: their rows are
// read on the device.
template <int BM, int BN, int Stages, int Cluster>
cudaError_t run_grouped(LoadedKernel& kernel, cutlass_ext_fp8_grouped_args args, cudaStream_t stream) {
  if (args.m_total == 0) return cudaSuccess;  // no rows: nothing to compute (a map cannot have 0 rows)
  CUtensorMap map_a, map_b;
  if (!operand_map(&map_a, args.a, args.m_total, args.k, args.lda, BM / Cluster) ||
      !grouped_operand_map(&map_b, args.b, args.groups, args.n, args.k, args.ldb, args.b_group_stride, BN))
    return cudaErrorInvalidValue;
  // Each group's tiles: ceil(rows / BM), together at most ceil(m_total / BM) + groups (contiguous) or
  // groups * ceil(capacity / BM) (masked).
  const int64_t tiles_m = args.offsets != nullptr ? (args.m_total + BM - 1) / BM + args.groups
                                                  : args.groups * ((args.capacity + BM - 1) / BM);
  return launch_persistent<BM, BN, Stages, Cluster>(kernel, map_a, map_b, args, args.m_total, tiles_m, stream);
}

// Runs the weight-gradient form on `stream` (the API has checked what it checks: e4m3 operands, 1x128 scales along K
// for both, M- and N-contiguous, FP32 D): every group's tiles over (m, n).
template <int BM, int BN, int Stages, int Cluster>
cudaError_t run_k_grouped(LoadedKernel& kernel, cutlass_ext_fp8_k_grouped_args args, cudaStream_t stream) {
  CUtensorMap map_a, map_b;
  // No columns: every group is empty (D = C or 0) or refused (NaN), and no map is read; a map cannot have 0 columns,
  // so both describe one k-block of D's memory instead.
  const bool columns = args.k_total > 0;
  const int64_t k = columns ? args.k_total : kBlockK;
  if (!operand_map(&map_a, columns ? args.a : args.d, columns ? args.m : 1, k, columns ? args.lda : kBlockK,
                   BM / Cluster) ||
      !operand_map(&map_b, columns ? args.b : args.d, columns ? args.n : 1, k, columns ? args.ldb : kBlockK, BN))
    return cudaErrorInvalidValue;
  return launch_persistent<BM, BN, Stages, Cluster, true>(kernel, map_a, map_b, args, args.m,
                                                          args.groups * ((args.m + BM - 1) / BM), stream);
}

// What the forms' launchers share: the ring's depth, the shared memory it takes, CUTLASS's statuses.
template <int BM, int BN, bool ColumnScales = false>
struct DirectLaunchers {
  static constexpr int kStages = stages_that_fit<BM, BN, ColumnScales>();
  static constexpr int kSharedBytes = Tiling<BM, BN, kStages, ColumnScales>::kSharedBytes;
  static int status(cudaError_t error) {
    return int(error == cudaSuccess ? cutlass::Status::kSuccess : cutlass::Status::kErrorInternal);
  }
};

// The variant's launchers as the block family's libraries export them (library_exports.h): statuses are CUTLASS's.
template <int BM, int BN, int Cluster>
struct Sm90Fp8BlockDirectGemm : DirectLaunchers<BM, BN> {
  using Base = DirectLaunchers<BM, BN>;

  static int can_implement(const cutlass_ext_fp8_block_args* args) {
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    // TMA: 16-byte aligned bases and row strides; the bf16 pairs the epilogue stores fall back to single stores.
    if (!aligned(args->a) || !aligned(args->b) || args->lda % 16 || args->ldb % 16)
      return int(cutlass::Status::kErrorMisalignedOperand);
    if (args->m < 1 || args->n < 1 || args->k < 1 || args->m > (int64_t(1) << 31) - 256 ||
        args->n >= (int64_t(1) << 31) || args->k >= (int64_t(1) << 31))
      return int(cutlass::Status::kErrorInvalidProblem);
    return int(cutlass::Status::kSuccess);
  }

  static int run(LoadedKernel& kernel, const cutlass_ext_fp8_block_args* args, void* stream) {
    return Base::status(fp8_block_direct::run<BM, BN, Base::kStages, Cluster>(kernel, *args,
                                                                             static_cast<cudaStream_t>(stream)));
  }
};

// The grouped form's launchers.
template <int BM, int BN, int Cluster>
struct Sm90Fp8GroupedDirectGemm : DirectLaunchers<BM, BN> {
  using Base = DirectLaunchers<BM, BN>;

  static int can_implement(const cutlass_ext_fp8_grouped_args* args) {
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (!aligned(args->a) || !aligned(args->b) || args->lda % 16 || args->ldb % 16 || args->b_group_stride % 16)
      return int(cutlass::Status::kErrorMisalignedOperand);
    // Row arithmetic is 32-bit: a tile's rows (up to a group's start + 255) stay below 2^31.
    constexpr int64_t kLimit = int64_t(1) << 31, kRowLimit = kLimit - 256;
    if (args->groups < 1 || args->n < 1 || args->k < 1 || args->m_total < 0 || args->groups >= kLimit ||
        args->n >= kLimit || args->k >= kLimit || args->m_total > kRowLimit || args->capacity < 0 ||
        (args->offsets == nullptr) == (args->counts == nullptr))
      return int(cutlass::Status::kErrorInvalidProblem);
    // Masked: every group's capacity of rows lies inside A and D.
    if (args->counts != nullptr && args->capacity > args->m_total / args->groups)
      return int(cutlass::Status::kErrorInvalidProblem);
    return int(cutlass::Status::kSuccess);
  }

  static int run(LoadedKernel& kernel, const cutlass_ext_fp8_grouped_args* args, void* stream) {
    return Base::status(fp8_block_direct::run_grouped<BM, BN, Base::kStages, Cluster>(
        kernel, *args, static_cast<cudaStream_t>(stream)));
  }
};

// The weight-gradient form's launchers.
template <int BM, int BN, int Cluster>
struct Sm90Fp8KGroupedDirectGemm : DirectLaunchers<BM, BN, true> {
  using Base = DirectLaunchers<BM, BN, true>;

  static int can_implement(const cutlass_ext_fp8_k_grouped_args* args) {
    auto aligned = [](const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
    const bool columns = args->k_total > 0;  // without any, A and B are not read
    if ((columns && (!aligned(args->a, 16) || !aligned(args->b, 16) || args->lda % 16 || args->ldb % 16)) ||
        !aligned(args->d, 16) || (args->c != nullptr && !aligned(args->c, 4)))
      return int(cutlass::Status::kErrorMisalignedOperand);
    constexpr int64_t kLimit = int64_t(1) << 31, kRowLimit = kLimit - 256;
    if (args->offsets == nullptr || args->groups < 1 || args->m < 1 || args->n < 1 || args->k_total < 0 ||
        args->groups >= kLimit || args->m > kRowLimit || args->n >= kLimit || args->k_total >= kLimit ||
        args->ldd < args->n || (args->m + BM - 1) / BM * ((args->n + BN - 1) / BN) >= kLimit / args->groups)
      return int(cutlass::Status::kErrorInvalidProblem);
    return int(cutlass::Status::kSuccess);
  }

  static int run(LoadedKernel& kernel, const cutlass_ext_fp8_k_grouped_args* args, void* stream) {
    return Base::status(fp8_block_direct::run_k_grouped<BM, BN, Base::kStages, Cluster>(
        kernel, *args, static_cast<cudaStream_t>(stream)));
  }
};

}  // namespace
}  // namespace cutlass_ext::fp8_block_direct

// One variant's launchers under the block family's C names (library_exports.h), the kernel from the cubin: SUFFIX
// and ARGS the ABI's form, GEMM the launcher class.
#define CUTLASS_EXT_DIRECT_LAUNCHERS(NAME, SUFFIX, ARGS, ...)                                                \
  extern "C" int NAME##SUFFIX##_can_implement(const ARGS* args) { return __VA_ARGS__::can_implement(args); } \
  extern "C" size_t NAME##SUFFIX##_workspace_size(const ARGS*) { return 0; }                                 \
  extern "C" int NAME##SUFFIX##_run(const ARGS* args, void*, void* stream) {                                 \
    static cutlass_ext::fp8_block_direct::LoadedKernel kernel(#NAME "_kernel", __VA_ARGS__::kSharedBytes);    \
    return __VA_ARGS__::run(kernel, args, stream);                                                           \
  }
#define CUTLASS_EXT_EXPORT_FP8_BLOCK_DIRECT(NAME, BM, BN, CLUSTER)             \
  CUTLASS_EXT_DIRECT_LAUNCHERS(NAME, _fp8_block, cutlass_ext_fp8_block_args, \
                               cutlass_ext::fp8_block_direct::Sm90Fp8BlockDirectGemm<BM, BN, CLUSTER>)
#define CUTLASS_EXT_EXPORT_FP8_GROUPED_DIRECT(NAME, BM, BN, CLUSTER)               \
  CUTLASS_EXT_DIRECT_LAUNCHERS(NAME, _fp8_grouped, cutlass_ext_fp8_grouped_args, \
                               cutlass_ext::fp8_block_direct::Sm90Fp8GroupedDirectGemm<BM, BN, CLUSTER>)
#define CUTLASS_EXT_EXPORT_FP8_K_GROUPED_DIRECT(NAME, BM, BN, CLUSTER)                 \
  CUTLASS_EXT_DIRECT_LAUNCHERS(NAME, _fp8_k_grouped, cutlass_ext_fp8_k_grouped_args, \
                               cutlass_ext::fp8_block_direct::Sm90Fp8KGroupedDirectGemm<BM, BN, CLUSTER>)
#define CUTLASS_EXT_EXPORT_FP8_BLOCK_DIRECT_LIBRARY() CUTLASS_EXT_EXPORT_ABI()  // once per library
