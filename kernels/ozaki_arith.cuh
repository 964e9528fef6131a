// The Ozaki-II arithmetic shared by the operand pass and the recombination, as host-and-device functions so a
// host program can check them against cutlass_ext/ozaki/reference.py (its docstring is the definition).
#pragma once

#include <stdint.h>

#include <cmath>
#include <cstring>

#ifdef __CUDACC__
#define OZAKI_HD __host__ __device__ __forceinline__
#else
#define OZAKI_HD inline
#endif

namespace cutlass_ext {
namespace ozaki {

// The pairwise-coprime moduli ≤ 256 taken greedily from the top (reference.moduli).
constexpr int kMaxModuli = 14;
constexpr int kAllModuli[kMaxModuli] = {256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199};
constexpr int kNormSliceK = 1024;  // k per partial sum of squares in the operand pass's workspace

constexpr int inverse_mod(int a, int m) {
  int t = 0, new_t = 1, r = m, new_r = a % m;
  while (new_r != 0) {
    int q = r / new_r, next_t = t - q * new_t, next_r = r - q * new_r;
    t = new_t, new_t = next_t, r = new_r, new_r = next_r;
  }
  return t < 0 ? t + m : t;
}

// 2^e exactly, for e in [-1022, 1023] (no libm call on the device).
OZAKI_HD double pow2(int e) {
#ifdef __CUDA_ARCH__
  return __hiloint2double((e + 1023) << 20, 0);
#else
  return std::ldexp(1.0, e);
#endif
}

// The shift of a row or column holding Inf or NaN (reference.NON_FINITE_SHIFT): residues 0, outputs NaN.
constexpr int kNonFiniteShift = -2147483647 - 1;
constexpr uint32_t kNanBits = 0x7fc00000u;  // torch's NaN

// reference.row_shifts: s = budget − ⌈e/2⌉ for squares = f·2^e, f in [1/2, 1); budget for an all-zero row;
// kNonFiniteShift for a sum of squares that is Inf or NaN.
OZAKI_HD int shift_from_squares(double squares, int budget) {
  if (!(squares <= 1.7976931348623157e308)) return kNonFiniteShift;
  if (!(squares > 0.0)) return budget;
  int exponent;
  std::frexp(squares, &exponent);
  return budget - ((exponent + 1) >> 1);  // arithmetic shift: ⌈e/2⌉ for negative e too
}

// round-half-even(x·2^s) given scale = 2^s (exact: an FP32 value times a power of two within FP64's range).
OZAKI_HD int64_t scaled_integer(float x, double scale) {
#ifdef __CUDA_ARCH__
  return __double2ll_rn(double(x) * scale);
#else
  return static_cast<int64_t>(std::nearbyint(double(x) * scale));
#endif
}

// reference.balanced: v mod m in [-⌊m/2⌋, ⌈m/2⌉ − 1], for |v| < 2^56 (budgets above 31; residue_byte below
// serves the rest).
template <int kModulus>
OZAKI_HD int balanced_residue(int64_t v) {
  if constexpr (kModulus == 256) {
    return int(static_cast<int8_t>(static_cast<uint8_t>(v & 255)));  // two's complement wraps to [-128, 127]
  } else {
    static_assert(kModulus % 2 == 1, "moduli other than 256 are odd: balanced residues are symmetric");
    constexpr uint32_t kLowBits = 28;
    constexpr uint32_t kHighFactor = (1u << kLowBits) % kModulus;
    const uint64_t magnitude = v < 0 ? uint64_t(-v) : uint64_t(v);
    const uint32_t high = uint32_t(magnitude >> kLowBits), low = uint32_t(magnitude & ((1u << kLowBits) - 1));
    const uint32_t r = ((high % kModulus) * kHighFactor + low % kModulus) % kModulus;
    const int b = r > kModulus / 2 ? int(r) - kModulus : int(r);
    return v < 0 ? -b : b;
  }
}

// For shift budgets ≤ 31 (8 moduli): v = round-half-even(x·2^s) is itself an FP32 value (at most 24 significant
// bits, |v| < 2^32), so the operand pass stays on the FP32 pipe. The scale goes in two exact power-of-two factors
// (2^s alone may exceed FP32's range for rows of tiny values; x·2^min(s,127) is normal for every FP32 x). Shifts
// are ≥ budget − 138 > −126 (row norms stay below 2^137), where both factors are normal.
OZAKI_HD float float_bits_as_float(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

OZAKI_HD uint32_t float_as_bits(float value) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

OZAKI_HD float pow2f(int e) { return float_bits_as_float(uint32_t(e + 127) << 23); }  // e in [-126, 127]

struct FloatScale {
  float first, second;  // 2^min(s, 127) and 2^(s − min(s, 127))
  OZAKI_HD explicit FloatScale(int shift)
      : first(pow2f(shift < 127 ? shift : 127)), second(pow2f(shift < 127 ? 0 : shift - 127)) {}
};

OZAKI_HD float scaled_float(float x, FloatScale scale) {
#ifdef __CUDA_ARCH__
  return rintf(__fmul_rn(__fmul_rn(x, scale.first), scale.second));  // exact products; rintf: half to even
#else
  return std::nearbyint(x * scale.first * scale.second);
#endif
}

// The balanced residue of an integer-valued float |v| < 2^32: r ← r − m·rint(r/m) (fma: exact), twice for odd m
// (the first quotient from FP32's 1/m is off by at most 3; the second is exact: r/m is never near a half-integer);
// once for 256 (exact; a tie leaves ±128, the same byte). Returns the residue's two's-complement byte.
template <int kModulus>
OZAKI_HD uint32_t residue_byte(float v) {
  constexpr float kModulusF = float(kModulus), kInverse = 1.0f / float(kModulus);
#ifdef __CUDA_ARCH__
  float r = __fmaf_rn(-rintf(__fmul_rn(v, kInverse)), kModulusF, v);
  if constexpr (kModulus != 256) r = __fmaf_rn(-rintf(__fmul_rn(r, kInverse)), kModulusF, r);
  return __float_as_uint(__fadd_rn(r, 12582912.0f)) & 255u;  // 1.5·2^23 + r holds r in its low bits
#else
  float r = std::fma(-std::nearbyint(v * kInverse), kModulusF, v);
  if constexpr (kModulus != 256) r = std::fma(-std::nearbyint(r * kInverse), kModulusF, r);
  return float_as_bits(r + 12582912.0f) & 255u;
#endif
}

template <int kCount, int kIndex = 0>
OZAKI_HD void residue_bytes(float v, uint32_t (&out)[kCount]) {
  if constexpr (kIndex < kCount) {
    out[kIndex] = residue_byte<kAllModuli[kIndex]>(v);
    residue_bytes<kCount, kIndex + 1>(v, out);
  }
}

// The GEMM epilogue's reduction: x mod m in [-⌊m/2⌋, ⌈m/2⌉ - 1] for |x| < 2^31 and a runtime m ≤ 256.
// q = rint(x/m) is exact from the FP64 reciprocal: x/m is never within 2^-28 of a half-integer for odd m, and the
// product is exact for m = 256, where q rounds half to even and leaves r = 128 to fold.
OZAKI_HD int balanced_residue_runtime(int x, int modulus) {
#ifdef __CUDA_ARCH__
  const int q = __double2int_rn(double(x) * __drcp_rn(double(modulus)));
#else
  const int q = int(std::nearbyint(double(x) * (1.0 / double(modulus))));
#endif
  const int r = x - q * modulus;
  return r > (modulus - 1) / 2 ? r - modulus : r;
}

template <int kModulus>
OZAKI_HD int balanced_digit(uint32_t r) {  // r in [0, m)
  return int(r) >= kModulus - kModulus / 2 ? int(r) - kModulus : int(r);
}

template <int kModulus>
OZAKI_HD uint32_t nonnegative_residue(int32_t v) {
  if constexpr (kModulus == 256) {
    return uint32_t(v) & 255u;
  } else {
    const int r = v % kModulus;
    return uint32_t(r < 0 ? r + kModulus : r);
  }
}

template <int kCount, int kIndex = 0>
struct Garner {
  // Digit kIndex of C' from its residue and the lower digits: t ← (t − d_i)·m_i^-1 mod m_j
  // (reference.garner_digits).
  template <int kI = 0>
  OZAKI_HD static uint32_t reduce(uint32_t t, const int (&digits)[kCount]) {
    if constexpr (kI == kIndex) {
      return t;
    } else {
      constexpr int kModulus = kAllModuli[kIndex];
      constexpr uint32_t kInverse = uint32_t(inverse_mod(kAllModuli[kI] % kModulus, kModulus));
      const uint32_t shifted = uint32_t(int(t) - digits[kI] + kModulus);  // in (0, 2m + 128)
      return reduce<kI + 1>((shifted * kInverse) % uint32_t(kModulus), digits);
    }
  }

  OZAKI_HD static void digits(const int32_t (&products)[kCount], int (&digits)[kCount]) {
    if constexpr (kIndex < kCount) {
      constexpr int kModulus = kAllModuli[kIndex];
      digits[kIndex] = balanced_digit<kModulus>(reduce(nonnegative_residue<kModulus>(products[kIndex]), digits));
      Garner<kCount, kIndex + 1>::digits(products, digits);
    }
  }
};

// reference.horner: Σ d_l ∏_{i<l} m_i from the top digit, v ← v·m_j + d_j, each multiply and add rounded once.
template <int kCount, int kJ = kCount - 2>
OZAKI_HD double horner(const int (&digits)[kCount], double value) {
  if constexpr (kJ < 0) {
    return value;
  } else {
    constexpr double kModulus = double(kAllModuli[kJ]);
#ifdef __CUDA_ARCH__
    value = __dadd_rn(__dmul_rn(value, kModulus), double(digits[kJ]));  // no contraction into an FMA
#else
    volatile double product = value * kModulus;  // volatile: two roundings on any host compiler
    value = product + double(digits[kJ]);
#endif
    return horner<kCount, kJ - 1>(digits, value);
  }
}

// The product of the first kCount moduli, for kCount ≤ kMaxWrappedModuli (P < 2^64).
constexpr int kMaxWrappedModuli = 8;
template <int kCount>
constexpr uint64_t moduli_product() {
  uint64_t product = 1;
  for (int i = 0; i < kCount; ++i) product *= uint64_t(kAllModuli[i]);
  return product;
}

// (P / m_l)^-1 mod m_l: the CRT weight's inverse.
template <int kCount>
constexpr int crt_inverse(int l) {
  int cofactor = 1;
  for (int i = 0; i < kCount; ++i)
    if (i != l) cofactor = int((int64_t(cofactor) * kAllModuli[i]) % kAllModuli[l]);
  return inverse_mod(cofactor, kAllModuli[l]);
}

// reference.recombine for kCount ≤ 8: C' = Σ y_l·(P/m_l) − k·P exactly, in 64-bit arithmetic that wraps (|C'| <
// 2^63), with y_l ≡ r_l·(P/m_l)^-1 (mod m_l) in [0, m_l), and k = round(Σ y_l/m_l) from 2^-24 fixed point (error
// < 2^-14; |C'|/P stays 2^-13 below 1/2 by the shift budget). O(kCount) unsigned small-integer operations, where
// Garner's digits take O(kCount²). kBalanced: products are residues already in [-128, 127].
template <int kCount, bool kBalanced, int kIndex = 0>
OZAKI_HD void crt_terms(const int32_t (&products)[kCount], uint64_t& sum, uint32_t& fraction) {
  if constexpr (kIndex < kCount) {
    constexpr int kModulus = kAllModuli[kIndex];
    constexpr uint32_t kInverse = uint32_t(crt_inverse<kCount>(kIndex));
    constexpr uint64_t kWeight = moduli_product<kCount>() / uint64_t(kModulus);
    constexpr uint32_t kFraction = uint32_t(((1 << 24) + kModulus / 2) / kModulus);  // round(2^24 / m)
    // x + m > 0 for x in (-m, m): one unsigned remainder by a constant (a mask for 256).
    const int32_t x = kBalanced ? products[kIndex] : products[kIndex] % kModulus;
    const uint32_t y = (uint32_t(x + kModulus) * kInverse) % uint32_t(kModulus);
    fraction += y * kFraction;
    sum += uint64_t(y) * kWeight;
    crt_terms<kCount, kBalanced, kIndex + 1>(products, sum, fraction);
  }
}

template <int kCount, bool kBalanced>
OZAKI_HD int64_t crt_wrapped(const int32_t (&products)[kCount]) {
  static_assert(kCount <= kMaxWrappedModuli, "P must stay below 2^64");
  uint64_t sum = 0;
  uint32_t fraction = 0;  // < kCount · 2^24
  crt_terms<kCount, kBalanced>(products, sum, fraction);
  const uint32_t k = (fraction + (1u << 23)) >> 24;
  return int64_t(sum - uint64_t(k) * moduli_product<kCount>());
}

// reference.recombine for one element: float32(C'·2^-(shift_a + shift_b)), C' in FP64 (rounded once for
// kCount ≤ 8, Horner's rule above); NaN where either shift is kNonFiniteShift (chosen at the end: a branch around
// the CRT costs registers).
template <int kCount, bool kBalanced = false>
OZAKI_HD float recombine(const int32_t (&products)[kCount], int shift_a, int shift_b) {
  const bool finite = shift_a != kNonFiniteShift && shift_b != kNonFiniteShift;
  double value;
  if constexpr (kCount <= kMaxWrappedModuli) {
    value = double(crt_wrapped<kCount, kBalanced>(products));
  } else {
    int digits[kCount];
    Garner<kCount>::digits(products, digits);
    value = horner<kCount>(digits, double(digits[kCount - 1]));
  }
  value *= pow2(finite ? -(shift_a + shift_b) : 0);
#ifdef __CUDA_ARCH__
  const float result = __double2float_rn(value);
#else
  const float result = float(value);
#endif
  return finite ? result : float_bits_as_float(kNanBits);
}

// The balanced residues of v modulo the first kCount moduli.
template <int kCount, int kIndex = 0>
OZAKI_HD void residues(int64_t v, int (&out)[kCount]) {
  if constexpr (kIndex < kCount) {
    out[kIndex] = balanced_residue<kAllModuli[kIndex]>(v);
    residues<kCount, kIndex + 1>(v, out);
  }
}

}  // namespace ozaki
}  // namespace cutlass_ext
