// The C interface of the block-scaled FP8 GEMM libraries (sm90a): plain C types, no torch header.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// D = Σ_kb (scale_a[m, kb] · scale_b[n / scale_n, kb]) · (A·Bᵀ over k-block kb) + bias, each k-block of 128 elements
// scaled in FP32 registers as it is promoted out of the Tensor Core. A (m, k) and B (n, k) row-major FP8, D (m, n)
// row-major; lda, ldb, ldd are row strides in elements. scale_a: (m, ceil(k / 128)) floats with its row and
// k-block strides (one of them 1, as the variant reads it: K-major or M-major), scale_b: (ceil(n / scale_n),
// ceil(k / 128)) floats with unit stride along k-blocks and its own row stride.
// bias: n elements of D's type, or null. device, sm_count: the GPU and its SM count (the persistent grid's size).
typedef struct {
  int64_t m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  const float* scale_a;
  int64_t scale_a_row_stride, scale_a_block_stride;
  const float* scale_b;
  int64_t scale_b_row_stride;
  const void* bias;
  void* d;
  int64_t ldd;
  int32_t device, sm_count;
} cutlass_ext_fp8_block_args;

// The grouped form: `groups` products D_g = A_g · B_gᵀ sharing n and k, with block scales as above. The rows of
// group g are rows [start_g, start_g + rows_g) of A (m_total, k), scale_a (m_total, ceil(k / 128), row-major and
// dense) and D (m_total, n), read on the device (no host synchronisation):
//   contiguous (offsets != null): start_g = offsets[g - 1] (0 for g = 0), rows_g = offsets[g] - start_g, each end
//     clamped to m_total;
//   masked (counts != null): start_g = g · capacity, rows_g = min(counts[g], capacity).
// B_g is at b + g · b_group_stride, (n, k) row-major; scale_b_g at scale_b + g · scale_b_group_stride,
// (ceil(n / scale_n), ceil(k / 128)) row-major and dense.
typedef struct {
  int64_t groups, n, k, m_total, capacity;
  const int32_t* offsets;
  const int32_t* counts;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb, b_group_stride;
  const float* scale_a;
  const float* scale_b;
  int64_t scale_b_group_stride;
  void* d;
  int64_t ldd;
  int32_t device, sm_count;
} cutlass_ext_fp8_grouped_args;

// The weight-gradient form, grouped along K (a mixture-of-experts layer's dW_g = dY_gᵀ·X_g over the tokens each
// expert saw): `groups` products D_g (m, n) = C_g + Σ_kb scale_a[kb, i] · scale_b[kb, j] · (A_g·B_gᵀ)_kb, where
// group g owns columns [start_g, end_g) of A (m, k_total) and B (n, k_total), both row-major (K contiguous):
// start_g = offsets[g - 1] (0 for g = 0), end_g = offsets[g], read on the device. Scales are 1x128 along K for both
// operands, M- and N-contiguous: scale_a (ceil(k_total / 128), m) and scale_b (ceil(k_total / 128), n) row-major
// and dense, so a group's scales are the rows from start_g / 128 on. Every non-empty group must start at a
// multiple of 128 (the sizes multiples of 128 but the last non-empty one's): a group that does not, or whose offsets
// run backwards or past k_total, is written as NaN (no host synchronisation can report it); an empty group gives
// D_g = C_g (0 without C).
// C and D: (groups, m, n) with row stride ldd and group stride d_group_stride; c may be d (accumulate in place) or
// null (D_g = the product).
typedef struct {
  int64_t groups, m, n, k_total;
  const int32_t* offsets;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  const float* scale_a;
  const float* scale_b;
  const void* c;
  void* d;
  int64_t ldd, d_group_stride;
  int32_t device, sm_count;
} cutlass_ext_fp8_k_grouped_args;

// Every dense variant `<name>` exports `<name>_fp8_block_{can_implement,workspace_size,run}` over
// cutlass_ext_fp8_block_args, every grouped one `<name>_fp8_grouped_{...}` over cutlass_ext_fp8_grouped_args,
// every K-grouped one `<name>_fp8_k_grouped_{...}` over cutlass_ext_fp8_k_grouped_args;
// can_implement and run return 0 or a cutlass::Status code.

#ifdef __cplusplus
}
#endif
