// A C interface over GEMMul8 (RIKEN-RCCS/GEMMul8, Ozaki scheme II on INT8), the benchmark's peer: built by
// python/ozaki_gemmul8.py against its library object, loaded with ctypes. Column-major, as cuBLAS.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "gemmul8.hpp"

static cublasHandle_t handle() {
  static cublasHandle_t created = [] {
    cublasHandle_t h = nullptr;
    cublasCreate(&h);
    return h;
  }();
  return created;
}

extern "C" size_t gemmul8_sgemm_workspace_size(size_t m, size_t n, size_t k, unsigned moduli) {
  return gemmul8::workSize<false, gemmul8::Backend::INT8>(m, n, k, moduli);
}

// C (m, n) = A (m, k) · B (k, n), column-major with leading dimensions; fast: GEMMul8's "fast" scaling (else its
// accurate mode, which bounds the products with one more INT8 GEMM).
extern "C" int gemmul8_sgemm(size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b, size_t ldb,
                             float* c, size_t ldc, unsigned moduli, int fast, void* workspace, void* stream) {
  if (cublasSetStream(handle(), static_cast<cudaStream_t>(stream)) != CUBLAS_STATUS_SUCCESS) return -1;
  const float one = 1.0f, zero = 0.0f;
  gemmul8::gemm<float, gemmul8::Backend::INT8>(handle(), CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, lda, b, ldb,
                                               &zero, c, ldc, moduli, fast != 0, workspace);
  return int(cudaGetLastError());
}
