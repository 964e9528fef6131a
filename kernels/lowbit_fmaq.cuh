// FMAq of the low-bit-accumulator GEMM (seed 002, eq. 2 and Fig. 1) and the STE predicates of its backward
// (seed 002 eqs. 6, 7, 17), as __host__ __device__ functions: the kernels use them and a host program can test
// them against cutlass_ext.lowbit.reference. The definition is the reference module's docstring.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "lowbit_abi.h"

#if defined(__CUDACC__)
#define LOWBIT_HD __host__ __device__ __forceinline__
#else
#define LOWBIT_HD inline
#endif

namespace cutlass_ext {
namespace lowbit {

// One FP32 operation rounded to nearest, never contracted into a fused multiply-add.
LOWBIT_HD float mul_rn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(x, y);
#else
  volatile float product = x * y;
  return product;
#endif
}

LOWBIT_HD float add_rn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(x, y);
#else
  volatile float sum = x + y;
  return sum;
#endif
}

LOWBIT_HD float sub_rn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(x, y);
#else
  volatile float difference = x - y;
  return difference;
#endif
}

LOWBIT_HD uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return bits;
#endif
}

LOWBIT_HD float float_of(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
#endif
}

// min / max that return NaN when either operand is NaN (torch.clamp's rule; PTX min.NaN is one instruction).
LOWBIT_HD float min_nan(float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float result;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(result) : "f"(x), "f"(y));
  return result;
#else
  return (x != x || y != y) ? float_of(0x7fffffffu) : (x < y ? x : y);
#endif
}

LOWBIT_HD float max_nan(float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float result;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(result) : "f"(x), "f"(y));
  return result;
#else
  return (x != x || y != y) ? float_of(0x7fffffffu) : (x > y ? x : y);
#endif
}

// Q(y; M, E, b) of one FP32 result (seed 002 eq. 2): mantissa truncated toward zero by the mask, |y| >= R_OF
// saturated to ±R_OF (clamping the masked value is the same: R_OF has M mantissa bits), and, with kUnderflow,
// |y| < R_UF flushed to +0.0. NaN stays NaN.
template <bool kUnderflow>
LOWBIT_HD float quantize(float y, uint32_t mask, float overflow, float underflow) {
  float q = min_nan(max_nan(float_of(bits_of(y) & mask), -overflow), overflow);
  if (kUnderflow) {
    q = fabsf(q) < underflow ? 0.0f : q;
  }
  return q;
}

// The format as the kernels read it: masks and thresholds of the product and accumulator quantizers.
struct Format {
  uint32_t acc_mask, prod_mask;
  float acc_overflow, acc_underflow, prod_overflow, prod_underflow;

  LOWBIT_HD static Format from(const cutlass_ext_lowbit_format& f) {
    return Format{f.acc_mask, f.prod_mask, f.acc_overflow, f.acc_underflow, f.prod_overflow, f.prod_underflow};
  }

  template <bool kUnderflow>
  LOWBIT_HD float q_prod(float y) const {
    return quantize<kUnderflow>(y, prod_mask, prod_overflow, prod_underflow);
  }

  template <bool kUnderflow>
  LOWBIT_HD float q_acc(float y) const {
    return quantize<kUnderflow>(y, acc_mask, acc_overflow, acc_underflow);
  }

  // FMAq(x, w, s) = Q_acc(Q_prod(x·w) + s) (seed 002 eq. 4).
  template <bool kUnderflow>
  LOWBIT_HD float fmaq(float x, float w, float s) const {
    return q_acc<kUnderflow>(add_rn(q_prod<kUnderflow>(mul_rn(x, w)), s));
  }

  // The OF STE of a sum y before Q_acc (seed 002 eq. 17): 1 while |y| < R_OF.
  LOWBIT_HD bool passes_overflow(float y) const { return fabsf(y) < acc_overflow; }
};

// One FMAq step with what the STEs read: the raw product x·w, the sum before Q_acc and the result.
struct Step {
  float product, sum, result;
};

template <bool kUnderflow>
LOWBIT_HD Step fmaq_step(const Format& format, float x, float w, float s) {
  Step step;
  step.product = mul_rn(x, w);
  step.sum = add_rn(format.q_prod<kUnderflow>(step.product), s);
  step.result = format.q_acc<kUnderflow>(step.sum);
  return step;
}

// The DIFF STE (seed 002 eq. 17) with each FP32 operation rounded once: |z − s| > ε2·(|x·w| + ε1).
LOWBIT_HD bool passes_diff(const Step& step, float s, float eps1, float eps2) {
  return fabsf(sub_rn(step.result, s)) > mul_rn(eps2, add_rn(fabsf(step.product), eps1));
}

}  // namespace lowbit
}  // namespace cutlass_ext
