// Which rows (or, in the weight-gradient form, columns) of the stacked operands each group of the grouped
// block-scaled FP8 GEMM owns (sm90_fp8_block_abi.h), apart from the kernels so that a host program can test it.
#pragma once

#include "sm90_fp8_block_abi.h"

#ifdef __CUDACC__
#define CUTLASS_EXT_HOST_DEVICE __host__ __device__
#else
#define CUTLASS_EXT_HOST_DEVICE
#endif

namespace cutlass_ext::fp8_block {

struct GroupRows {
  int64_t start, rows;
};

// Group g's first row and row count from its offsets (contiguous: the end of the group before and its own end) or
// its valid count (masked). Offsets past m_total or running backwards, and negative counts, give empty groups
// rather than reads out of bounds.
CUTLASS_EXT_HOST_DEVICE inline GroupRows group_rows(const cutlass_ext_fp8_grouped_args& args, int64_t g,
                                                int64_t offset_before, int64_t offset_end, int64_t count) {
  if (args.offsets != nullptr) {
    int64_t start = offset_before < 0 ? 0 : (offset_before > args.m_total ? args.m_total : offset_before);
    int64_t end = offset_end > args.m_total ? args.m_total : offset_end;
    return {start, end > start ? end - start : 0};
  }
  int64_t rows = count < 0 ? 0 : (count > args.capacity ? args.capacity : count);
  return {g * args.capacity, rows};
}

// The K-grouped (weight-gradient) form: group g's columns of A and B from its offsets (the end of the group before
// and its own end). Valid when they run forwards within k_total and the group starts on a scale block (its scales
// are whole rows from start / 128 on) or is empty (nothing read: empty experts after a partial last one are fine);
// an invalid group's output is written as NaN.
struct GroupColumns {
  int64_t start, columns;
  bool valid;
};

constexpr int64_t kKGroupAlignment = 128;  // one scale block

CUTLASS_EXT_HOST_DEVICE inline GroupColumns group_columns(int64_t k_total, int64_t offset_before,
                                                      int64_t offset_end) {
  bool valid = offset_before >= 0 && offset_end >= offset_before && offset_end <= k_total &&
               (offset_before % kKGroupAlignment == 0 || offset_end == offset_before);
  return valid ? GroupColumns{offset_before, offset_end - offset_before, true} : GroupColumns{0, 0, false};
}

}  // namespace cutlass_ext::fp8_block
