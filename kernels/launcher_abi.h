// The C interface between generated kernel libraries and the torch binding. Plain C types only: kernel
// translation units include no torch header, so they compile once per toolchain and arch, not per torch version.
#pragma once

#include <stddef.h>
#include <stdint.h>

#define CUTLASS_EXT_ABI_VERSION 7

#ifdef __cplusplus
extern "C" {
#endif

// D = alpha * A·B + beta * C for `batch` problems; A is (m, k), B is (k, n), C and D are (m, n) row-major. A and
// B are row- or column-major as the variant's layouts say; lda / ldb are the strides between their rows
// (row-major) or columns (column-major). C may broadcast: ldc = 0 reads one row (a bias) for every row,
// batch_stride_c = 0 one matrix for every batch; a null c reads D. Leading dimensions and batch strides are in
// elements. split_k: slices of K summed in turn into D (serial split-K, batch 1 only); 0 lets the launcher choose
// from the SM count.
typedef struct {
  int64_t m, n, k, batch;
  const void* a;
  int64_t lda, batch_stride_a;
  const void* b;
  int64_t ldb, batch_stride_b;
  void* d;
  int64_t ldd, batch_stride_d;
  const void* c;
  int64_t ldc, batch_stride_c;
  float alpha, beta;
  int64_t split_k;
} cutlass_ext_gemm_args;

// Every variant `<name>` in a kernel library exports these four; 0 is success, other values are
// cutlass::Status codes, spelled out by the library's cutlass_ext_status_string. `layouts` tells which operands
// the variant reads column-major (A (m, k) with unit stride down its rows, or B likewise).
#define CUTLASS_EXT_A_COLUMN_MAJOR 1
#define CUTLASS_EXT_B_COLUMN_MAJOR 2
typedef int (*cutlass_ext_layouts_fn)(void);
typedef int (*cutlass_ext_can_implement_fn)(const cutlass_ext_gemm_args*);
typedef size_t (*cutlass_ext_workspace_size_fn)(const cutlass_ext_gemm_args*);
typedef int (*cutlass_ext_run_fn)(const cutlass_ext_gemm_args*, void* workspace, void* cuda_stream);

// A packed halfhalf variant `<name>` also exports `<name>_unscaled_can_implement`, `_workspace_size` and `_run`: its
// product from the operand pass's packed operands with the unscaling in its epilogue, D = alpha · A·B ·
// 2^-(row_shift[m] + column_shift[n]) + beta · C (beta = 0 reads no C), what halfhalf_unscale then computes.
// Shifts are int32, dense per batch (batch strides 0 where shared). Other variants' entries decline every problem.
typedef struct {
  cutlass_ext_gemm_args gemm;
  const int32_t* row_shift;
  int64_t row_shift_batch_stride;
  const int32_t* column_shift;
  int64_t column_shift_batch_stride;
} cutlass_ext_unscaled_gemm_args;

// Every kernel library exports these once.
typedef int (*cutlass_ext_abi_version_fn)(void);
typedef const char* (*cutlass_ext_status_string_fn)(int status);

// halfhalf's operand pass: out = pack(x · 2^shift) for x of `batch` (rows, columns) matrices with any strides
// (in elements); out is written row-major and dense. Each 32-bit word of out holds FP16 hi in its low half and
// FP16 lo·2^11 in its high half. shift (int32) is indexed by its three strides (0 where it is broadcast).
typedef struct {
  const float* x;
  int64_t batch, rows, columns;
  int64_t x_stride_batch, x_stride_row, x_stride_column;
  const int32_t* shift;
  int64_t shift_stride_batch, shift_stride_row, shift_stride_column;
  void* out;
} cutlass_ext_pack_args;

// out = alpha · (c · 2^-(row_shift + column_shift)) + beta · source for `batch` row-major (m, n) matrices c, the
// unscaled product rounded once; source (null: none) is read through its three strides (0 where it broadcasts).
// out may be c.
typedef struct {
  const float* c;
  float* out;
  int64_t batch, m, n;
  const int32_t* row_shift;
  int64_t row_shift_batch_stride, row_shift_stride;
  const int32_t* column_shift;
  int64_t column_shift_batch_stride, column_shift_stride;
  const float* source;
  int64_t source_batch_stride, source_row_stride, source_column_stride;
  float alpha, beta;
} cutlass_ext_unscale_args;

// halfhalf's fused operand pass, both operands in one launch: per slice (a row of A, a column of B) the range
// shift of range_shift_abi.h, then pack(x · 2^shift) as halfhalf_pack writes it. x: `batch` (rows, columns)
// matrices with any strides (in elements); shift: int32, dense, batch·rows (per row) or batch·columns (per column)
// values; packed: (batch, rows, columns) row-major, dense.
typedef struct {
  const float* x;
  int64_t batch, rows, columns;
  int64_t x_stride_batch, x_stride_row, x_stride_column;
  int32_t per_column;
  int32_t* shift;
  void* packed;
} cutlass_ext_operand_pass;
typedef struct {
  cutlass_ext_operand_pass a, b;  // A per row, B per column
} cutlass_ext_halfhalf_operands_args;

// All return 0 or a cudaError_t.
typedef int (*cutlass_ext_halfhalf_operands_fn)(const cutlass_ext_halfhalf_operands_args* args, void* cuda_stream);
typedef int (*cutlass_ext_halfhalf_pack_fn)(const cutlass_ext_pack_args* args, void* cuda_stream);
typedef int (*cutlass_ext_halfhalf_unscale_fn)(const cutlass_ext_unscale_args* args, void* cuda_stream);

// FP8 GEMM (sm90a): D = scale_a · scale_b · A·Bᵀ + bias, A (m, k) and B (n, k) row-major FP8, D (m, n)
// row-major; lda, ldb, ldd are row strides in elements. A scale is one float (per tensor) or, where its
// `rowwise` flag is set, a contiguous vector: m floats for scale_a, n for scale_b. bias: n elements of D's type,
// or null. device, sm_count: the GPU the launch runs on and its SM count (the persistent grid's size).
typedef struct {
  int64_t m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* d;
  int64_t ldd;
  const float* scale_a;
  int32_t scale_a_rowwise;
  const float* scale_b;
  int32_t scale_b_rowwise;
  const void* bias;
  int32_t device, sm_count;
} cutlass_ext_fp8_args;

// Every FP8 variant `<name>` exports `<name>_fp8_can_implement`, `_fp8_workspace_size` and `_fp8_run`.
typedef int (*cutlass_ext_fp8_can_implement_fn)(const cutlass_ext_fp8_args*);
typedef size_t (*cutlass_ext_fp8_workspace_size_fn)(const cutlass_ext_fp8_args*);
typedef int (*cutlass_ext_fp8_run_fn)(const cutlass_ext_fp8_args*, void* workspace, void* cuda_stream);

// The Hopper corrected SGEMM's operand pass: x · 2^shift (shift null: no scaling) for x of `batch` (rows, columns)
// matrices with any strides, split into two planes, hi and lo, each (batch, rows, ld) row-major, columns from
// `columns` to `ld` written as zeros: `format` TF32
// (hi and lo TF32 values in FP32 words, both rounded to nearest, ties away) or HALF (FP16 hi and lo·2^11).
#define CUTLASS_EXT_PLANES_TF32 0
#define CUTLASS_EXT_PLANES_HALF 1
typedef struct {
  const float* x;
  int64_t batch, rows, columns;
  int64_t x_stride_batch, x_stride_row, x_stride_column;
  const int32_t* shift;
  int64_t shift_stride_batch, shift_stride_row, shift_stride_column;
  void* hi;
  void* lo;
  int64_t ld;
  int32_t format;
} cutlass_ext_planes_args;
typedef int (*cutlass_ext_split_planes_fn)(const cutlass_ext_planes_args* args, void* cuda_stream);

// Hopper corrected SGEMM (sm90a): D = alpha · (hi_a·hi_b + lo terms) · 2^-(row_shift[m] + column_shift[n]) +
// bias[n] for `batch` problems, from the planes of split_planes: A's (m, k) and B's (n, k), both K-major, rows
// lda / ldb apart; D (m, n) row-major FP32. A null shift reads as 0, a null bias as 0; alpha and bias need a
// variant with the bias epilogue (others take alpha = 1 and no bias). device, sm_count: the GPU and its SM count.
typedef struct {
  int64_t m, n, k, batch;
  const void* a_hi;
  const void* a_lo;
  int64_t lda, batch_stride_a;
  const void* b_hi;
  const void* b_lo;
  int64_t ldb, batch_stride_b;
  float* d;
  int64_t ldd, batch_stride_d;
  const int32_t* row_shift;
  int64_t row_shift_batch_stride;
  const int32_t* column_shift;
  int64_t column_shift_batch_stride;
  const float* bias;
  float alpha;
  int32_t device, sm_count;
} cutlass_ext_split_gemm_args;

// Every Hopper corrected variant `<name>` exports `<name>_split_can_implement`, `_split_workspace_size` and
// `_split_run`; its library exports cutlass_ext_split_planes.
typedef int (*cutlass_ext_split_can_implement_fn)(const cutlass_ext_split_gemm_args*);
typedef size_t (*cutlass_ext_split_workspace_size_fn)(const cutlass_ext_split_gemm_args*);
typedef int (*cutlass_ext_split_run_fn)(const cutlass_ext_split_gemm_args*, void* workspace, void* cuda_stream);

#ifdef __cplusplus
}
#endif
