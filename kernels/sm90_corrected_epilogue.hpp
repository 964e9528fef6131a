// The Hopper corrected SGEMM's epilogue, stored from registers (sm90_register_epilogue.hpp): halfhalf's unscaling
// acc · 2^-(row_shift[m] + column_shift[n]) (one rounding: the factor is exact in FP64) and, in the variants with a
// bias, alpha · that + bias[n] (one rounding); FP32 D, row-major.
#pragma once

#include <cstdint>

#include "sm90_register_epilogue.hpp"

namespace cutlass_ext {

struct CorrectedEpilogueArguments {
  int32_t const* row_shift = nullptr;  // halfhalf: per row of A, per batch row_shift_batch_stride apart
  int64_t row_shift_batch_stride = 0;
  int32_t const* column_shift = nullptr;  // per column of B
  int64_t column_shift_batch_stride = 0;
  float alpha = 1.f;            // with a bias
  float const* bias = nullptr;  // (n), every batch; null reads as 0
};

template <bool Scaled, bool Bias>
struct CorrectedFusion {
  using Arguments = CorrectedEpilogueArguments;

  struct Tile {
    // the shifts hold int32 values: read as words, converted after (a null shift reads as 0)
    float const* row_shift;
    float const* column_shift;
    float alpha;
    float const* bias;

    CUTLASS_DEVICE Tile(Arguments const& args, int64_t batch)
        : row_shift(shifts(args.row_shift, batch * args.row_shift_batch_stride)),
          column_shift(shifts(args.column_shift, batch * args.column_shift_batch_stride)),
          alpha(args.alpha),
          bias(args.bias) {}

    CUTLASS_DEVICE float operator()(float acc, int m, int n) const {
      float x = acc;
      if constexpr (Scaled) {
        int exponent = __float_as_int(read_or_zero(row_shift, m)) + __float_as_int(read_or_zero(column_shift, n));
        x = float(double(x) * __longlong_as_double((long long)(1023 - exponent) << 52));
      }
      if constexpr (Bias) x = fmaf(alpha, x, read_or_zero(bias, n));
      return x;
    }

    static CUTLASS_DEVICE float const* shifts(int32_t const* base, int64_t offset) {
      return base != nullptr ? reinterpret_cast<float const*>(base + offset) : nullptr;
    }
  };
};

template <bool Scaled, bool Bias>
using Sm90CorrectedEpilogue =
    Sm90RegisterEpilogue<CorrectedFusion<Scaled, Bias>, float, cute::Stride<int64_t, cute::_1, int64_t>>;

}  // namespace cutlass_ext
