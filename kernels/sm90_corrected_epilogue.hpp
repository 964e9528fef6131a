// The Hopper corrected SGEMM's epilogue: halfhalf's unscaling acc · 2^-(row_shift[m] + column_shift[n]) (one
// rounding: the factor is exact in FP64), then, in the variants with a bias, alpha · that + bias[n] in one
// rounding; neither, the accumulator as it is (sm90_elementwise_visitor.hpp: why not an EVT).
#pragma once

#include <cstdint>

#include "sm90_elementwise_visitor.hpp"

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
struct Sm90CorrectedEpilogue : Sm90ElementwiseVisitor<Sm90CorrectedEpilogue<Scaled, Bias>, CorrectedEpilogueArguments> {
  using Sm90ElementwiseVisitor<Sm90CorrectedEpilogue, CorrectedEpilogueArguments>::Sm90ElementwiseVisitor;
  using Params = CorrectedEpilogueArguments;

  template <class Coordinates>
  struct ConsumerStoreCallbacks : ElementwiseCallbacks<Coordinates, Params> {
    using ElementwiseCallbacks<Coordinates, Params>::ElementwiseCallbacks;
    using ElementwiseCallbacks<Coordinates, Params>::coordinates;
    using ElementwiseCallbacks<Coordinates, Params>::params;

    int32_t const* row_shift = nullptr;  // this tile's batch's (halfhalf)
    int32_t const* column_shift = nullptr;

    CUTLASS_DEVICE void begin() {
      int64_t batch = coordinates.batch;
      if (params.row_shift != nullptr) row_shift = params.row_shift + batch * params.row_shift_batch_stride;
      if (params.column_shift != nullptr) column_shift = params.column_shift + batch * params.column_shift_batch_stride;
    }

    template <class ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<float, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const& accumulators, int epi_v, int epi_m, int epi_n) {
      cutlass::Array<float, FragmentSize> out;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) {
        float x = float(accumulators[i]);
        if constexpr (Scaled || Bias) {
          int m, n;
          coordinates.at(epi_v * FragmentSize + i, epi_m, epi_n, m, n);
          if constexpr (Scaled) {  // a null shift reads as 0
            int exponent = (row_shift != nullptr ? __ldg(row_shift + m) : 0) +
                           (column_shift != nullptr ? __ldg(column_shift + n) : 0);
            x = float(double(x) * __longlong_as_double((long long)(1023 - exponent) << 52));
          }
          if constexpr (Bias) x = fmaf(params.alpha, x, params.bias != nullptr ? __ldg(params.bias + n) : 0.f);
        }
        out[i] = x;
      }
      return out;
    }
  };
};

}  // namespace cutlass_ext
