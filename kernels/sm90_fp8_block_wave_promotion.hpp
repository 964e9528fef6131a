// CUTLASS's blockwise-scaled FP8 mainloop for 256-row cooperative tiles: each warpgroup's 128 rows are multiplied
// and promoted 64 rows (one wgmma m) at a time, so the partial sums take 64 registers instead of 128.
//
// Why: a tile's operands go through shared memory once per k-block, and wgmma reads them from there again for
// every 64 rows; at large M the shared-memory traffic per FLOP is what 128x128 tiles pay for (DeepGEMM's tiles
// there are 256x128). CUTLASS's mainloop keeps a partial-sum fragment as large as the accumulators, so a 256x128
// tile would need 2 x 128 registers per thread for them and spill. Here one k-block's sums for the first 64 rows
// of a warpgroup's 128 are issued, waited for, scaled and added, then the next 64 (the other warpgroup's wgmmas
// keep the Tensor Core busy meanwhile). Every total gets the same FP32 operations as in CUTLASS's mainloop
// (scales combined and applied by its expressions, sm90_fp8_block_promotion_common.hpp; k-blocks in the same
// order), so the output equals a 128-row tile's bit for bit.
//
// It also runs 128-row tiles that cut across 128-row weight blocks (176 or 192 wide, one wave per warpgroup), whose
// weight scales come expanded to groups of 4 or 8 rows. With ProductFirst, the scale of a total is sfa · sfb
// formed first, as the 128-wide tiles' combined scales are, so the outputs equal theirs bit for bit (CUTLASS's
// expression for per-row and per-column scales is (partial · sfa) · sfb).
//
// Everything but `mma` is the stock collective (`Base`, from CUTLASS's CollectiveBuilder).
#pragma once

#include "cute/algorithm/clear.hpp"
#include "cute/algorithm/copy.hpp"
#include "cute/algorithm/gemm.hpp"
#include "cute/arch/mma_sm90_gmma.hpp"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"

#include "sm90_fp8_block_promotion_common.hpp"

namespace cutlass_ext::fp8_block {

template <class Base, bool ProductFirst = false>
struct WaveBlockScaledMainloop : Base {
  using typename Base::ElementBlockScale;
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using typename Base::TiledMma;
  static constexpr int kScaleMs = Base::ScaleMsPerTile;  // distinct scales along the tile's rows, columns
  static constexpr int kScaleNs = Base::ScaleNsPerTile;

  // Consumer: accum = Σ over k-blocks of scale · (that block's Tensor Core sum), in FP32, one wgmma m (64 rows)
  // at a time. Every stage but the last is released here; the kernel's mma_tail releases the last.
  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const&) {
    using namespace cute;
    TiledMma tiled_mma;
    auto views = consumer_views<Base>(tiled_mma, accum, thread_idx, shared_tensors);
    Tensor tCrA = get<0>(views);    // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCrB = get<1>(views);    // (MMA,MMA_N,MMA_K,PIPE)
    Tensor tCsSFA = get<2>(views);  // (MMA,MMA_M,MMA_N,(MMA_K,PIPE))
    Tensor tCsSFB = get<3>(views);
    constexpr int kWaves = decltype(size<1>(accum))::value;  // wgmma m-blocks of 64 rows per warpgroup
    constexpr int kColumns = decltype(size<2>(accum))::value;

    clear(accum);
    if (k_tile_count <= 0) return;

    // One wave's Tensor Core sums: (MMA,MMA_N), and the k-block's scales over the warpgroup's rows.
    Tensor partial = make_fragment_like(accum(_, _0{}, _));
    Tensor sfa = make_tensor_like<ElementBlockScale>(tCsSFA(_, _, _, _0{}));  // (MMA,MMA_M,MMA_N)
    Tensor sfb = make_tensor_like<ElementBlockScale>(tCsSFB(_, _, _, _0{}));
    warpgroup_fence_operand(accum);

    PipelineState smem_pipe_release = smem_pipe_read;
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, barrier_token);
      int read_stage = smem_pipe_read.index();
      copy(tCsSFA(_, _, _, make_coord(_0{}, read_stage)), sfa);
      copy(tCsSFB(_, _, _, make_coord(_0{}, read_stage)), sfb);
      combine_scales<kScaleMs, kScaleNs>(sfa, sfb);
      CUTLASS_PRAGMA_UNROLL
      for (int wave = 0; wave < kWaves; ++wave) {
        warpgroup_fence_operand(partial);
        warpgroup_arrive();
        tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
        CUTLASS_PRAGMA_UNROLL
        for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
          CUTLASS_PRAGMA_UNROLL
          for (int n = 0; n < kColumns; ++n) {
            cute::gemm(tiled_mma, tCrA(_, wave, k_block, read_stage), tCrB(_, n, k_block, read_stage),
                       partial(_, n));
          }
          tiled_mma.accumulate_ = GMMA::ScaleOut::One;
        }
        warpgroup_commit_batch();
        warpgroup_wait<0>();
        warpgroup_fence_operand(partial);
        CUTLASS_PRAGMA_UNROLL
        for (int n = 0; n < kColumns; ++n) {
          CUTLASS_PRAGMA_UNROLL
          for (int i = 0; i < size<0>(accum); ++i) {
            promote<kScaleMs, kScaleNs, ProductFirst>(accum(i, wave, n), partial(i, n), sfa, sfb, i, wave, n);
          }
        }
      }
      warpgroup_fence_operand(accum);
      ++smem_pipe_read;
      if (k_tile_count > 1) {  // the last stage is mma_tail's to release
        pipeline.consumer_release(smem_pipe_release);
        ++smem_pipe_release;
      }
    }
  }
};

}  // namespace cutlass_ext::fp8_block
