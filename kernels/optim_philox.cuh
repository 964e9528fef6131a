// Philox4x32-10 and the BF16 roundings of the 16-bit optimizers, for host and device alike (the host build lets
// the CPU tests check this arithmetic against cutlass_ext/optim/reference.py, which defines it).
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#define OPTIM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define OPTIM_HOST_DEVICE inline
#endif

namespace cutlass_ext {
namespace optim {

// cuRAND's and torch's Philox constants (Salmon et al., SC'11).
constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
constexpr int kPhiloxRounds = 10;

struct PhiloxWords {
  uint32_t word[4];
};

OPTIM_HOST_DEVICE void mulhilo(uint32_t a, uint32_t b, uint32_t& high, uint32_t& low) {
#if defined(__CUDA_ARCH__)
  low = a * b;
  high = __umulhi(a, b);
#else
  uint64_t product = uint64_t(a) * uint64_t(b);
  low = uint32_t(product);
  high = uint32_t(product >> 32);
#endif
}

OPTIM_HOST_DEVICE PhiloxWords philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                            uint32_t k1) {
#pragma unroll
  for (int round = 0; round < kPhiloxRounds; ++round) {
    if (round) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    uint32_t high0, low0, high1, low1;
    mulhilo(kPhiloxM0, c0, high0, low0);
    mulhilo(kPhiloxM1, c2, high1, low1);
    uint32_t next0 = high1 ^ c1 ^ k0;
    uint32_t next2 = high0 ^ c3 ^ k1;
    c0 = next0;
    c1 = low1;
    c2 = next2;
    c3 = low0;
  }
  return PhiloxWords{{c0, c1, c2, c3}};
}

// One tensor's stochastic-rounding stream at one step: key = (seed low word, param key), counter =
// (block low, block high, step, seed high word) for block = element // 4 (reference.py's docstring).
struct PhiloxStream {
  uint32_t seed_low, seed_high, param_key, step;

  OPTIM_HOST_DEVICE PhiloxWords block(uint64_t block_index) const {
    return philox4x32_10(uint32_t(block_index), uint32_t(block_index >> 32), step, seed_high, seed_low, param_key);
  }

  OPTIM_HOST_DEVICE uint32_t element(uint64_t element_index) const {
    PhiloxWords words = block(element_index >> 2);
    // selects, not a dynamic index, keep the words in registers (no local-memory array)
    uint32_t lane = uint32_t(element_index & 3);
    uint32_t low = lane & 1 ? words.word[1] : words.word[0];
    uint32_t high = lane & 1 ? words.word[3] : words.word[2];
    return lane & 2 ? high : low;
  }
};

OPTIM_HOST_DEVICE uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  union { float f; uint32_t u; } value{x};
  return value.u;
#endif
}

OPTIM_HOST_DEVICE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  union { uint32_t u; float f; } value{u};
  return value.f;
#endif
}

OPTIM_HOST_DEVICE float bf16_to_float(uint16_t bits) { return bits_float(uint32_t(bits) << 16); }

OPTIM_HOST_DEVICE bool is_finite_bits(uint32_t bits) { return (bits & 0x7F800000u) != 0x7F800000u; }

// Round to nearest even, NaN to 0x7FC0: torch's c10::BFloat16 conversion.
OPTIM_HOST_DEVICE uint16_t round_nearest(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // one cvt.rn.bf16.f32; its NaN (0x7FFF) replaced by torch's
  return x != x ? uint16_t(0x7FC0u) : __bfloat16_as_ushort(__float2bfloat16_rn(x));
#endif
  uint32_t bits = float_bits(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t(0x7FC0u);
  return uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// Seed 004 section 3.2: away from zero with probability (dropped bits) / 2^16, from the low 16 random bits.
OPTIM_HOST_DEVICE uint16_t round_stochastic(float x, uint32_t random) {
  uint32_t bits = float_bits(x);
  if (!is_finite_bits(bits)) return round_nearest(x);
  return uint16_t((bits + (random & 0xFFFFu)) >> 16);
}

}  // namespace optim
}  // namespace cutlass_ext
