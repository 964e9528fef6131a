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

LOWBIT_HD float fma_rn(float x, float y, float z) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(x, y, z);
#else
  return fmaf(x, y, z);
#endif
}

// x·y with FP32 subnormal inputs and results flushed to sign-preserving zero (PTX mul.ftz).
LOWBIT_HD float mul_ftz(float x, float y) {
#if defined(__CUDA_ARCH__)
  float result;
  asm("mul.rn.ftz.f32 %0, %1, %2;" : "=f"(result) : "f"(x), "f"(y));
  return result;
#else
  const float smallest_normal = float_of(0x00800000u);
  x = fabsf(x) < smallest_normal ? copysignf(0.0f, x) : x;
  const float product = mul_rn(x, y);
  return fabsf(product) < smallest_normal ? copysignf(0.0f, product) : product;
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

// One quantizer Q(·; M, E, b) with the constants of both ways to compute it. In SASS an FMAq of the fast form is
// 9 instructions (FMUL, FMNMX, LOP3, FMUL.FTZ, FFMA, FMNMX, LOP3, FMUL.FTZ, FMUL), 4 of them on the ALU pipe
// (half the FP32 pipe's rate); the general form's compare-and-select takes 12, 10 of them on the ALU pipe.
struct Quantizer {
  uint32_t mask;            // sign, exponent and top M mantissa bits
  uint32_t magnitude_mask;  // exponent and top M mantissa bits
  float overflow, underflow;  // R_OF, R_UF
  float clamp;              // the largest FP32 below 2^(e+1), R_OF = 2^e·(2 − 2^−M): mask(min(|y|, clamp)) = R_OF
  float down, up;           // 2^(b − 126) and 2^(126 − b): R_UF maps to FP32's smallest normal

  LOWBIT_HD static Quantizer from(uint32_t mask, float overflow, float underflow) {
    Quantizer q;
    q.mask = mask;
    q.magnitude_mask = mask & 0x7fffffffu;
    q.overflow = overflow;
    q.underflow = underflow;
    q.clamp = float_of(bits_of(ldexpf(1.0f, ilogbf(overflow) + 1)) - 1u);
    q.down = ldexpf(1.0f, -126 - ilogbf(underflow));
    q.up = ldexpf(1.0f, 126 + ilogbf(underflow));
    return q;
  }

  // The fast way holds for 0 <= b <= 126 and M <= 22: then `clamp`, `down` and `up` are normal FP32 values and
  // every M-bit value below R_UF scales exactly into FP32's subnormals, which mul.ftz flushes.
  LOWBIT_HD bool has_fast_form() const {
    const int b = -ilogbf(underflow);
    return b >= 0 && b <= 126 && (mask & 1u) == 0;
  }

  // mask(min(|y|, clamp)) with y's sign, in two instructions (min.NaN on |y|, one LOP3): where the magnitude mask
  // is 0 the bits come from y & ~a, which is y's sign at the sign bit and 0 below the kept mantissa bits (a and y
  // share those bits, or a = clamp has them all set).
  LOWBIT_HD float saturate_truncate(float y) const {
    const uint32_t a = bits_of(min_nan(fabsf(y), clamp));
    return float_of((a & magnitude_mask) | (bits_of(y) & ~a & ~magnitude_mask));
  }

  // The fast form's flush, left scaled by 2^(b − 126) (±0 for |q| < R_UF: a zero's sign never reaches a nonzero
  // result, and the kernels add +0.0 to what they store).
  LOWBIT_HD float flush_scaled(float q) const { return mul_ftz(q, down); }

  template <bool kUnderflow, bool kFast>
  LOWBIT_HD float operator()(float y) const {
    if (!kFast) return quantize<kUnderflow>(y, mask, overflow, underflow);
    const float q = saturate_truncate(y);
    return kUnderflow ? mul_rn(flush_scaled(q), up) : q;
  }
};

// The format as the kernels read it: the product and accumulator quantizers.
struct Format {
  Quantizer acc, prod;

  LOWBIT_HD static Format from(const cutlass_ext_lowbit_format& f) {
    return Format{Quantizer::from(f.acc_mask, f.acc_overflow, f.acc_underflow),
                  Quantizer::from(f.prod_mask, f.prod_overflow, f.prod_underflow)};
  }

  LOWBIT_HD bool has_fast_form() const { return acc.has_fast_form() && prod.has_fast_form(); }

  template <bool kUnderflow, bool kFast>
  LOWBIT_HD float q_acc(float y) const {
    return acc.operator()<kUnderflow, kFast>(y);
  }

  // Q_prod(x·w) + s, one rounding: the fast form unscales the flushed product inside the FMA (exact: 2^(126 − b)).
  template <bool kUnderflow, bool kFast>
  LOWBIT_HD float add_product(float product, float s) const {
    if (kFast && kUnderflow) return fma_rn(prod.flush_scaled(prod.saturate_truncate(product)), prod.up, s);
    return add_rn(prod.operator()<kUnderflow, kFast>(product), s);
  }

  // FMAq(x, w, s) = Q_acc(Q_prod(x·w) + s) (seed 002 eq. 4).
  template <bool kUnderflow, bool kFast>
  LOWBIT_HD float fmaq(float x, float w, float s) const {
    return q_acc<kUnderflow, kFast>(add_product<kUnderflow, kFast>(mul_rn(x, w), s));
  }

  // The OF STE of a sum y before Q_acc (seed 002 eq. 17): 1 while |y| < R_OF.
  LOWBIT_HD bool passes_overflow(float y) const { return fabsf(y) < acc.overflow; }
};

// One FMAq step with what the STEs read: the raw product x·w, the sum before Q_acc and the result.
struct Step {
  float product, sum, result;
};

template <bool kUnderflow, bool kFast>
LOWBIT_HD Step fmaq_step(const Format& format, float x, float w, float s) {
  Step step;
  step.product = mul_rn(x, w);
  step.sum = format.add_product<kUnderflow, kFast>(step.product, s);
  step.result = format.q_acc<kUnderflow, kFast>(step.sum);
  return step;
}

// The DIFF STE (seed 002 eq. 17) with each FP32 operation rounded once: |z − s| > ε2·(|x·w| + ε1).
LOWBIT_HD bool passes_diff(const Step& step, float s, float eps1, float eps2) {
  return fabsf(sub_rn(step.result, s)) > mul_rn(eps2, add_rn(fabsf(step.product), eps1));
}

}  // namespace lowbit
}  // namespace cutlass_ext
