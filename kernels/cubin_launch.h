// Launching the kernels of a library built in two halves: nvcc compiles the translation unit's device code alone
// (-cubin: cicc and ptxas, no host front end) and the host compiler its launchers alone; the link embeds the cubin
// (device_code.S). A cold build then waits for the longer of cicc and the host compile instead of nvcc's two front
// ends (cudafe++, which instantiates the whole kernel for the host too, then the host compile after cicc).
//
// The translation unit is the same text on both sides: CUTLASS_EXT_DEVICE_CODE (nvcc) or CUTLASS_EXT_HOST_CODE (the
// host compiler) says which half it is, and CUTLASS_EXT_CUBIN_KERNEL / CUTLASS_EXT_CUBIN_LAUNCHERS expand to the
// kernel entry or to the host launchers. The kernel's Params crosses between the two compilers; its size is
// checked against the cubin's parameter layout when the kernel is first loaded.
#pragma once

#include "cubin_library.h"

#ifdef CUTLASS_EXT_DEVICE_CODE

// One variant's kernel under a C name, as CUTLASS's device_kernel<Kernel>; the rest names the variant's launcher
// class, whose Kernel it is.
#define CUTLASS_EXT_CUBIN_KERNEL(NAME, ...)                                                             \
  extern "C" __global__ void __launch_bounds__(__VA_ARGS__::Kernel::MaxThreadsPerBlock,                 \
                                               __VA_ARGS__::Kernel::MinBlocksPerMultiprocessor)         \
      NAME##_kernel(CUTLASS_GRID_CONSTANT typename __VA_ARGS__::Kernel::Params const params) {         \
    extern __shared__ __align__(1024) char smem[]; /* TMA's 128-byte swizzle repeats every 1024 bytes */ \
    typename __VA_ARGS__::Kernel op;                                                                    \
    op(params, smem);                                                                                   \
  }

#else  // the host half

#include "cute/layout.hpp"

namespace cutlass_ext {
namespace {  // internal linkage (cubin_library.h)

// One variant's CUTLASS kernel from the cubin, launched as CUTLASS's device adapter launches it.
template <class Kernel>
class CubinKernel {
 public:
  explicit CubinKernel(const char* name) : kernel_(name, sizeof(typename Kernel::Params)) {}

  int run(typename Kernel::Arguments const& arguments, void* workspace, cudaStream_t stream, bool programmatic) {
    if (kernel_.error() != cudaSuccess) return int(cutlass::Status::kErrorInternal);
    cutlass::Status status = Kernel::initialize_workspace(arguments, workspace, stream, nullptr);
    if (status != cutlass::Status::kSuccess) return int(status);
    typename Kernel::Params params = Kernel::to_underlying_arguments(arguments, workspace);
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        kernel_.allow_shared_memory(device, int(Kernel::SharedStorageSize)) != cudaSuccess) {
      (void)cudaGetLastError();
      return int(cutlass::Status::kErrorInternal);
    }
    using Cluster = typename Kernel::DispatchPolicy::ClusterShape;
    cudaLaunchAttribute attributes[2];
    cudaLaunchConfig_t config{};
    config.gridDim = Kernel::get_grid_shape(params);
    config.blockDim = Kernel::get_block_shape();
    config.dynamicSmemBytes = Kernel::SharedStorageSize;
    config.stream = stream;
    config.attrs = attributes;
    if constexpr (cute::size(Cluster{}) > 1) {  // as CUTLASS's ClusterLauncher; 1x1x1 launches without
      cudaLaunchAttribute& cluster = attributes[config.numAttrs++];
      cluster.id = cudaLaunchAttributeClusterDimension;
      cluster.val.clusterDim.x = cute::size<0>(Cluster{});
      cluster.val.clusterDim.y = cute::size<1>(Cluster{});
      cluster.val.clusterDim.z = cute::size<2>(Cluster{});
    }
    if (programmatic) {
      cudaLaunchAttribute& early = attributes[config.numAttrs++];
      early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      early.val.programmaticStreamSerializationAllowed = 1;
    }
    void* kernel_arguments[] = {&params};
    if (cudaLaunchKernelExC(&config, kernel_.function(), kernel_arguments) != cudaSuccess) {
      (void)cudaGetLastError();  // as CUTLASS's adapter: the failure is this call's status, not the next call's
      return int(cutlass::Status::kErrorInternal);
    }
    return int(cutlass::Status::kSuccess);
  }

 private:
  LibraryKernel kernel_;
};

}  // namespace
}  // namespace cutlass_ext

// One variant's launchers (as CUTLASS_EXT_EXPORT_LAUNCHERS), the kernel from the cubin. LAUNCHER is a class with
// Kernel, arguments(ARGS), can_implement(const ARGS*), workspace_size(const ARGS*) and kProgrammaticLaunch.
#define CUTLASS_EXT_CUBIN_LAUNCHERS(NAME, FAMILY, ARGS, ...)                                            \
  extern "C" int NAME##FAMILY##_can_implement(const ARGS* args) { return __VA_ARGS__::can_implement(args); } \
  extern "C" size_t NAME##FAMILY##_workspace_size(const ARGS* args) {                                   \
    return __VA_ARGS__::workspace_size(args);                                                           \
  }                                                                                                     \
  extern "C" int NAME##FAMILY##_run(const ARGS* args, void* workspace, void* stream) {                  \
    static cutlass_ext::CubinKernel<typename __VA_ARGS__::Kernel> kernel(#NAME "_kernel");              \
    return kernel.run(__VA_ARGS__::arguments(*args), workspace, static_cast<cudaStream_t>(stream),      \
                      __VA_ARGS__::kProgrammaticLaunch);                                                \
  }

#endif
