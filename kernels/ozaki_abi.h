// The C interface of the Ozaki-II GEMM libraries (FP32 products from INT8 residue GEMMs): plain C types only.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The operand pass over `batch` FP32 matrices x (rows, k), any strides in elements: per row, the shift s (int32,
// dense (batch, rows)) and the balanced residues of round(x·2^s) modulo each modulus, written as INT8 planes
// (modulus, batch, rows_pitch, k_pitch), K-major, zero from k to k_pitch and in rows from rows to rows_pitch (the
// GEMM's N must be a whole number of 16-byte output rows). norms: FP64 workspace of batch · rows · ceil(k / 1024)
// partial sums of squares.
typedef struct {
  int64_t rows, k, batch, k_pitch, rows_pitch;
  const float* x;
  int64_t x_batch_stride, x_row_stride, x_k_stride;
  int32_t* shifts;
  int8_t* planes;
  double* norms;
} cutlass_ext_ozaki_scale_args;

// The INT8 GEMM over moduli · batch problems: d[l] (m, n, row pitch n) = a[l] (m, k_pitch) · b[l] (n, k_pitch)ᵀ,
// both K-major INT8 planes as the operand pass writes them (n: the padded width, whole 16-byte rows of d). d holds
// the exact INT32 products, or (variants with residue output) their balanced residues modulo problem_moduli[l]
// as INT8.
typedef struct {
  int64_t m, n, k_pitch, problems;
  const int8_t* a;
  const int8_t* b;
  void* d;
  const int32_t* problem_moduli;
  int32_t device, sm_count;
} cutlass_ext_ozaki_gemm_args;

// The recombination: out (batch, m, n), any strides in elements, = C'·2^-(shift_a[row] + shift_b[column]) where
// C' ≡ products[l] (mod m_l) is rebuilt by the CRT (Garner's digits, Horner's rule in FP64); products as the GEMM
// writes them, shifts dense (batch, m) and (batch, n).
typedef struct {
  int64_t m, n, batch, n_pitch;
  const void* products;  // INT32 products or INT8 residues, as the variant's GEMM writes them
  const int32_t* shift_a;
  const int32_t* shift_b;
  float* out;
  int64_t out_batch_stride, out_row_stride, out_column_stride;
} cutlass_ext_ozaki_recombine_args;

// Every Ozaki variant `<name>` exports `<name>_ozaki_scale`, `<name>_ozaki_gemm`, `<name>_ozaki_gemm_workspace_size`
// and `<name>_ozaki_recombine`; each returns 0 or a cudaError_t / cutlass::Status code.
typedef int (*cutlass_ext_ozaki_scale_fn)(const cutlass_ext_ozaki_scale_args*, void* cuda_stream);
typedef size_t (*cutlass_ext_ozaki_gemm_workspace_size_fn)(const cutlass_ext_ozaki_gemm_args*);
typedef int (*cutlass_ext_ozaki_gemm_fn)(const cutlass_ext_ozaki_gemm_args*, void* workspace, void* cuda_stream);
typedef int (*cutlass_ext_ozaki_recombine_fn)(const cutlass_ext_ozaki_recombine_args*, void* cuda_stream);

#ifdef __cplusplus
}
#endif
