// Block-scaled FP8 GEMM (1x128 activation scales, 128x128 weight scales, bf16 out) written directly on Hopper's
// TMA and wgmma instructions, without CUTLASS's collectives: one variant compiles in seconds, where the blockwise
// collective's instantiation takes ~40 s. It computes what sm90_fp8_block_gemm.cuh's 128-deep promotion computes,
// in the same order (four k32 wgmmas from zero per k-block; total = fma(acc, scale_a · scale_b, total); D = bf16(total
// + bias)), so a variant of either with the same tile gives the same bits.
//
// A CTA is one producer warpgroup and BM / 64 math warpgroups (each 64 rows of the BM x BN tile), persistent over
// the tiles. Into each stage of a ring, one producer thread loads A's and B's k-block tiles by TMA and one producer
// warp copies the k-block's scales (the tile's BM activation scales, its weight scale) by cp.async, so the scales
// arrive with the operands, as far ahead as the ring reaches; the stage's full barrier waits for both.
//
// A library is built in two halves (cubin_launch.h): nvcc compiles the kernels alone (CUTLASS_EXT_DEVICE_CODE:
// sm90_fp8_block_direct_kernel.cuh), the host compiler the launchers (sm90_fp8_block_direct_launch.h), side by side;
// neither half parses the other's headers. This file holds what both need: the tiling and the ring's depth.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <utility>

#include "sm90_fp8_block_abi.h"

namespace cutlass_ext::fp8_block_direct {

constexpr int kBlockK = 128;  // the scales' k-block: one 128-byte row of FP8 per tile row, one TMA swizzle span
constexpr int kWgmmaK = 32;   // the k of one FP8 wgmma
constexpr int kWarpgroup = 128;
constexpr int kSharedCapacity = 232448;  // sm90's opt-in shared memory per block (227 KB)

// ColumnScales: the weight-gradient form's scales, 1x128 along K for both operands (a weight scale per column of
// the tile and k-block); otherwise one weight scale per tile and k-block (128 x 128 weight blocks).
template <int BM, int BN, int Stages, bool ColumnScales = false>
struct Tiling {
  static_assert(BM == 64 || BM == 128, "a tile is one or two math warpgroups of 64 rows");
  static_assert(BN == 16 || BN == 32 || BN == 64 || BN == 128, "a tile lies inside one 128-row weight-scale block");
  static_assert(Stages >= 2, "a math warpgroup holds two stages at once (one multiplying, one being promoted)");

  static constexpr int kMathGroups = BM / 64;
  static constexpr int kThreads = kWarpgroup * (1 + kMathGroups);
  static constexpr int kBytesA = BM * kBlockK;
  static constexpr int kBytesB = BN * kBlockK;
  static constexpr int kAccumulators = BN / 2;  // a thread's share of a 64 x BN wgmma
  static constexpr int kStages = Stages;
  static constexpr bool kColumnScales = ColumnScales;
  static constexpr int kScalesB = ColumnScales ? BN : 1;
  // The bf16 output tile goes out by TMA in boxes of 64 rows and kBoxColumns columns, each one swizzle span wide
  // (the column-scaled form writes FP32 from registers: no staging).
  static constexpr int kBoxColumns = BN < 64 ? BN : 64;
  static constexpr int kSwizzleBytes = kBoxColumns * 2;  // 32, 64 or 128
  static constexpr int kBoxBytes = 64 * kSwizzleBytes;
  static constexpr int kBoxes = ColumnScales ? 1 : kMathGroups * (BN / kBoxColumns);
  struct alignas(1024) Shared {
    uint8_t a[Stages][kBytesA];  // each a multiple of 1024 bytes: every stage starts on a swizzle atom
    uint8_t b[Stages][kBytesB];
    uint8_t d[kBoxes][ColumnScales ? 1024 : kBoxBytes];  // math warpgroup g's boxes from g * BN / kBoxColumns
    float scale_a[Stages][BM];
    float scale_b[Stages][kScalesB];
    uint64_t full[Stages];
    uint64_t empty[Stages];
  };
  static constexpr int kSharedBytes = int(sizeof(Shared)) + 1024;  // + the alignment of the dynamic base
};

// The most stages (up to 16) whose ring fits in shared memory.
template <int BM, int BN, bool ColumnScales = false, int S = 16>
constexpr int stages_that_fit() {
  if constexpr (S == 2 || Tiling<BM, BN, S, ColumnScales>::kSharedBytes <= kSharedCapacity) {
    return S;
  } else {
    return stages_that_fit<BM, BN, ColumnScales, S - 1>();
  }
}

}  // namespace cutlass_ext::fp8_block_direct

#ifdef CUTLASS_EXT_DEVICE_CODE
#include "sm90_fp8_block_direct_kernel.cuh"
#else
#include "sm90_fp8_block_direct_launch.h"
#endif
