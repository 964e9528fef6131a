// The C interface of halfhalf's range-shift pass, exported by every kernel library that carries halfhalf's operand
// passes (kernels/halfhalf_operands.cuh) and called by the torch binding. Plain C types only.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// shift = clamp(15 - e, -126, 126) where max|x| = f·2^e, f in [0.5, 1) (frexp; e = 0 for a zero, Inf or NaN
// maximum), per row of `batch` (rows, columns) FP32 matrices with any strides (in elements), or per column when
// `per_column` is set. out: int32, dense, batch·rows (per row) or batch·columns (per column) values.
typedef struct {
  const float* x;
  int64_t batch, rows, columns;
  int64_t x_stride_batch, x_stride_row, x_stride_column;
  int32_t per_column;
  int32_t* out;
} cutlass_ext_range_shift_args;

// 0 or a cudaError_t; an empty problem launches nothing.
typedef int (*cutlass_ext_range_shift_fn)(const cutlass_ext_range_shift_args* args, void* cuda_stream);

#ifdef __cplusplus
}
#endif
