// What every cubin library's host half needs (cubin_launch.h describes the two halves): the embedded cubin, loaded
// once; driver entry points by name; a kernel's parameter size; CUTLASS's statuses. No CuTe: a family whose
// launchers need none (the directly written block-scaled kernel) compiles its host half without CuTe's layout
// algebra, which takes most of a host half's compile time.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cutlass/cutlass.h"

namespace cutlass_ext {
// CUTLASS's device adapter's status for its kernel's can_implement.
inline int implementable(bool can) {
  return int(can ? cutlass::Status::kSuccess : cutlass::Status::kErrorInvalidProblem);
}
}  // namespace cutlass_ext

#ifndef CUTLASS_EXT_DEVICE_CODE

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>

extern "C" const char cutlass_ext_device_code[];  // the cubin, embedded by the link (device_code.S)

namespace cutlass_ext {
namespace {  // internal linkage: an inline function's statics would be one GNU-unique object across all libraries

// This library's cubin, loaded once per process and context-independent: its kernels run on every device.
cudaLibrary_t device_code(cudaError_t* error) {
  static cudaError_t load_error = cudaSuccess;
  static cudaLibrary_t library = [] {
    cudaLibrary_t handle = nullptr;
    load_error = cudaLibraryLoadData(&handle, cutlass_ext_device_code, nullptr, nullptr, 0, nullptr, nullptr, 0);
    return load_error == cudaSuccess ? handle : nullptr;
  }();
  *error = load_error;
  return library;
}

// A driver entry point by name (the runtime exposes no parameter layouts); null where the driver lacks it.
void* driver_function(const char* name, int version) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  cudaGetDriverEntryPointByVersion(name, &function, version, cudaEnableDefault, &found);
#else
  (void)version;
  cudaGetDriverEntryPoint(name, &function, cudaEnableDefault, &found);
#endif
  if (found != cudaDriverEntryPointSuccess) (void)cudaGetLastError();
  return found == cudaDriverEntryPointSuccess ? function : nullptr;
}

// The parameter layout the cubin's kernel was compiled with.
cudaError_t kernel_parameter_size(cudaKernel_t kernel, size_t* size) {
  using ParamInfo = CUresult (*)(CUkernel, size_t, size_t*, size_t*);
  static ParamInfo get = reinterpret_cast<ParamInfo>(driver_function("cuKernelGetParamInfo", 12040));
  if (get == nullptr) return cudaErrorNotSupported;  // a driver older than 12.4: nothing to check against
  size_t offset = 0;
  return get(reinterpret_cast<CUkernel>(kernel), 0, &offset, size) == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

// A kernel of this library's cubin, looked up by name once, and its dynamic shared-memory allowance, set once per
// device. `params`: the size of the launcher's first kernel parameter, checked against the cubin's parameter layout
// (0: unchecked).
class LibraryKernel {
 public:
  explicit LibraryKernel(const char* name, size_t params = 0) {
    cudaLibrary_t library = device_code(&error_);
    if (library != nullptr && (error_ = cudaLibraryGetKernel(&kernel_, library, name)) == cudaSuccess && params) {
      size_t size = 0;
      if (kernel_parameter_size(kernel_, &size) == cudaSuccess && size != params) {
        error_ = cudaErrorInvalidKernelImage;  // the two compilers disagree on the parameters: never launch it
      }
    }
    if (error_ != cudaSuccess) {  // every call of this variant will fail: say why, once
      (void)cudaGetLastError();     // and keep the runtime's sticky last error out of later, unrelated calls
      std::fprintf(stderr, "cutlass_ext: kernel %s cannot be loaded from its library: %s\n", name,
                   cudaGetErrorString(error_));
    }
  }

  cudaError_t error() const { return error_; }
  const void* function() const { return reinterpret_cast<const void*>(kernel_); }

  // Up to 48 KB of dynamic shared memory needs no allowance (for the kernels here, which declare no static shared
  // memory besides).
  cudaError_t allow_shared_memory(int device, int bytes) {
    const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
    if (bit != 0 && (allowed_.load(std::memory_order_acquire) & bit)) return cudaSuccess;
    if (bytes > (48 << 10)) {
#if CUDART_VERSION >= 12050
      cudaError_t error = cudaKernelSetAttributeForDevice(kernel_, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                          bytes, device);
#else  // the current device's, which is `device`
      cudaError_t error = cudaFuncSetAttribute(function(), cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
#endif
      if (error != cudaSuccess) return error;
    }
    allowed_.fetch_or(bit, std::memory_order_acq_rel);
    return cudaSuccess;
  }

 private:
  cudaKernel_t kernel_ = nullptr;
  cudaError_t error_ = cudaSuccess;
  std::atomic<uint64_t> allowed_{0};  // devices whose allowance is set (bit per device, < 64)
};

}  // namespace
}  // namespace cutlass_ext

#endif
