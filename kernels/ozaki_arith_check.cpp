// Host check of ozaki_arith.cuh against cutlass_ext/ozaki/reference.py (tests/test_ozaki_compile.py drives it).
// stdin, one query per line; stdout, one answer per line:
//   shift <squares> <budget>            -> s
//   residues <count> <x> <shift>        -> the balanced residues of round(x·2^s), one per modulus
//   recombine <count> <balanced> <sa> <sb> <p...>  -> the float32 result's bits, in hex (balanced: p are
//                                        residues in [-128, 127], as the GEMM's epilogue writes them)
//   epilogue <x> <m>                    -> the GEMM epilogue's balanced residue of x modulo m
#include <cstdio>
#include <cstring>

#include "ozaki_arith.cuh"

using namespace cutlass_ext::ozaki;

template <int kCount>
void answer_residues(float x, int shift) {
  int r[kCount];
  const int64_t v = scaled_integer(x, pow2(shift));
  if (shift > -126 && v > -(int64_t(1) << 32) && v < (int64_t(1) << 32)) {  // the FP32 path's range (budgets ≤ 31)
    uint32_t bytes[kCount];
    residue_bytes<kCount>(scaled_float(x, FloatScale(shift)), bytes);
    for (int l = 0; l < kCount; ++l) r[l] = int(int8_t(uint8_t(bytes[l])));
  } else {
    residues<kCount>(v, r);
  }
  for (int l = 0; l < kCount; ++l) std::printf(l ? " %d" : "%d", r[l]);
  std::printf("\n");
}

template <int kCount>
void answer_recombine(int balanced, int shift_a, int shift_b) {
  int32_t products[kCount];
  for (int l = 0; l < kCount; ++l) std::scanf("%d", &products[l]);
  const float value = balanced ? recombine<kCount, true>(products, shift_a, shift_b)
                               : recombine<kCount, false>(products, shift_a, shift_b);
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  std::printf("%08x\n", bits);
}

template <int kCount = 3>
void dispatch(int count, bool residue_query, float x, int a, int b, int c) {
  if constexpr (kCount <= kMaxModuli) {
    if (count != kCount) return dispatch<kCount + 1>(count, residue_query, x, a, b, c);
    if (residue_query) answer_residues<kCount>(x, a);
    else answer_recombine<kCount>(a, b, c);
  }
}

int main() {
  char query[32];
  while (std::scanf("%31s", query) == 1) {
    if (!std::strcmp(query, "shift")) {
      double squares;
      int budget;
      std::scanf("%lf %d", &squares, &budget);
      std::printf("%d\n", shift_from_squares(squares, budget));
    } else if (!std::strcmp(query, "epilogue")) {
      int x, modulus;
      std::scanf("%d %d", &x, &modulus);
      std::printf("%d\n", balanced_residue_runtime(x, modulus));
    } else if (!std::strcmp(query, "residues")) {
      int count, shift;
      float x;
      std::scanf("%d %a %d", &count, &x, &shift);
      dispatch(count, true, x, shift, 0, 0);
    } else {
      int count, balanced, shift_a, shift_b;
      std::scanf("%d %d %d %d", &count, &balanced, &shift_a, &shift_b);
      dispatch(count, false, 0.0f, balanced, shift_a, shift_b);
    }
  }
  return 0;
}
