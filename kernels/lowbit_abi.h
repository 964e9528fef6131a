// The C interface of the low-bit-accumulator GEMM libraries (seed 002): plain C types, no torch header.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Q_prod and Q_acc: uint32 masks keeping sign, exponent and the top M mantissa bits; R_OF and R_UF (FP32-exact).
typedef struct {
  uint32_t acc_mask, prod_mask;
  float acc_overflow, acc_underflow, prod_overflow, prod_underflow;
  int64_t chunk;
  int32_t underflow;
} cutlass_ext_lowbit_format;

// D = A·B by the chunked FMAq chain for `batch` problems; A (m, k), B (k, n), D (m, n), every stride in elements
// (any sign-free layout: transposed, strided, batch stride 0 for a shared operand). blocked: null, or an int32
// (batch, m, n) dense output holding, per element, the last chunk whose second-level add overflowed (−1 if
// none), which the recursive STE's backward reads.
typedef struct {
  int64_t m, n, k, batch;
  const float* a;
  int64_t a_batch_stride, a_row_stride, a_column_stride;
  const float* b;
  int64_t b_batch_stride, b_row_stride, b_column_stride;
  float* d;
  int64_t d_batch_stride, d_row_stride, d_column_stride;
  int32_t* blocked;
  cutlass_ext_lowbit_format format;
} cutlass_ext_lowbit_forward_args;

#define CUTLASS_EXT_LOWBIT_STE_RECURSIVE_OF 1
#define CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_OF 2
#define CUTLASS_EXT_LOWBIT_STE_IMMEDIATE_DIFF 3

// The gradient of the first operand X (rows, k) of the chain X·W, W (k, columns), under an STE:
// dX[r, k] = Σ_c (in increasing c) mask(r, c, k) · (G[r, c] · W[k, c]), each product and sum rounded once, the
// masked terms skipped. The gradient of W is this of the transposed problem (Wᵀ, Xᵀ, Gᵀ). blocked: the forward's
// (batch, rows, columns) output for the recursive STE (its strides here), unused by the others.
typedef struct {
  int64_t rows, columns, k, batch;
  const float* x;
  int64_t x_batch_stride, x_row_stride, x_column_stride;
  const float* w;
  int64_t w_batch_stride, w_row_stride, w_column_stride;
  const float* g;
  int64_t g_batch_stride, g_row_stride, g_column_stride;
  const int32_t* blocked;
  int64_t blocked_batch_stride, blocked_row_stride, blocked_column_stride;
  float* dx;
  int64_t dx_batch_stride, dx_row_stride, dx_column_stride;
  cutlass_ext_lowbit_format format;
  int32_t ste;
  float eps1, eps2;
} cutlass_ext_lowbit_grad_args;

// Every low-bit variant `<name>` exports `<name>_lowbit_forward` and `<name>_lowbit_grad`; 0 or a cudaError_t.
typedef int (*cutlass_ext_lowbit_forward_fn)(const cutlass_ext_lowbit_forward_args*, void* cuda_stream);
typedef int (*cutlass_ext_lowbit_grad_fn)(const cutlass_ext_lowbit_grad_args*, void* cuda_stream);

#ifdef __cplusplus
}
#endif
