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
// (batch, m, n) dense output holding, per element, the chain's record for the recursive STE's backward
// (lowbit_grad.cuh, ChainRecord): the last chunk whose second-level add overflowed and the last chunk with a
// first-level overflow, where the backward must recompute the chain.
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

// Both STE gradients of D = A·B (A (m, k), B (k, n), dD = G (m, n)) from one recomputation of the chain:
// dA[i, k] = Σ_j (in increasing j) mask(i, j, k) · (G[i, j] · B[k, j]),
// dB[k, j] = Σ_i (in increasing i) mask(i, j, k) · (G[i, j] · A[i, k]),
// each product and sum rounded once, the masked terms skipped. da or db null: that gradient is not formed.
// blocked: the forward's (batch, m, n) output for the recursive STE (its strides here), unused by the others.
// workspace: `<name>_lowbit_grads_workspace(args)` bytes of device memory, which the launcher clears on the stream.
typedef struct {
  int64_t m, n, k, batch;
  const float* a;
  int64_t a_batch_stride, a_row_stride, a_column_stride;
  const float* b;
  int64_t b_batch_stride, b_row_stride, b_column_stride;
  const float* g;
  int64_t g_batch_stride, g_row_stride, g_column_stride;
  const int32_t* blocked;
  int64_t blocked_batch_stride, blocked_row_stride, blocked_column_stride;
  float* da;
  int64_t da_batch_stride, da_row_stride, da_column_stride;
  float* db;
  int64_t db_batch_stride, db_row_stride, db_column_stride;
  int32_t* workspace;
  cutlass_ext_lowbit_format format;
  int32_t ste;
  float eps1, eps2;
} cutlass_ext_lowbit_grads_args;

// Every low-bit variant `<name>` exports `<name>_lowbit_forward` and `<name>_lowbit_grads` (0 or a cudaError_t)
// and `<name>_lowbit_grads_workspace` (bytes).
typedef int (*cutlass_ext_lowbit_forward_fn)(const cutlass_ext_lowbit_forward_args*, void* cuda_stream);
typedef int (*cutlass_ext_lowbit_grads_fn)(const cutlass_ext_lowbit_grads_args*, void* cuda_stream);
typedef int64_t (*cutlass_ext_lowbit_grads_workspace_fn)(const cutlass_ext_lowbit_grads_args*);

#ifdef __cplusplus
}
#endif
