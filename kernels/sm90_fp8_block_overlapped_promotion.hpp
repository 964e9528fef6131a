// CUTLASS's blockwise-scaled FP8 mainloop with promotion that does not drain the Tensor Core.
//
// Why: CUTLASS's mainloop (sm90_mma_tma_gmma_ss_warpspecialized_fp8_blockwise_scaling.hpp) issues a k-block's
// wgmmas into the one partial fragment the next k-block also writes, so it waits for all of them
// (`warpgroup_wait<0>`) before it multiplies the sums by the block scales and adds them into the FP32 totals: the
// Tensor Core idles while each warpgroup scales, adds, releases its stage and issues again — every 128 k elements.
//
// Here k-blocks alternate between two partial fragments (and two sets of scale registers): block i+1's wgmmas are
// issued into one before block i's, in the other, are waited for (`warpgroup_wait<1>`), scaled and added, so the
// FFMAs run while the Tensor Core works. Each total gets the same FP32 operations in the same order as in CUTLASS's
// mainloop (scales combined and applied by its expressions: sm90_fp8_block_promotion_common.hpp), so the output is
// the same bit for bit.
//
// Everything but `mma` is the stock collective (`Base`, from CUTLASS's CollectiveBuilder): loads of operands and
// scales, shared memory, pipeline and `mma_tail`, which releases the last stage. Costs one more accumulator
// fragment of registers (three in all): 128x128 cooperative and 64x128 ping-pong tiles fit.
#pragma once

#include "cute/algorithm/clear.hpp"
#include "cute/algorithm/copy.hpp"
#include "cute/algorithm/gemm.hpp"
#include "cute/arch/mma_sm90_gmma.hpp"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"

#include "sm90_fp8_block_promotion_common.hpp"

namespace cutlass_ext::fp8_block {

template <class Base>
struct OverlappedBlockScaledMainloop : Base {
  using typename Base::ElementBlockScale;
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using typename Base::TiledMma;
  static constexpr int kScaleMs = Base::ScaleMsPerTile;  // distinct scales along the tile's rows, columns
  static constexpr int kScaleNs = Base::ScaleNsPerTile;

  // Consumer: accum = Σ over k-blocks of scale · (that block's Tensor Core sum), in FP32. Every stage but the
  // last is released here; the kernel's mma_tail releases the last.
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

    clear(accum);
    if (k_tile_count <= 0) return;

    // Per parity: the Tensor Core's sum of k-blocks 0, 2, 4, ... (or 1, 3, 5, ...) and that block's scales.
    Tensor even = make_fragment_like(accum);
    Tensor odd = make_fragment_like(accum);
    Tensor sfa_even = make_tensor_like<ElementBlockScale>(tCsSFA(_, _, _, _0{}));  // (MMA,MMA_M,MMA_N)
    Tensor sfb_even = make_tensor_like<ElementBlockScale>(tCsSFB(_, _, _, _0{}));
    Tensor sfa_odd = make_tensor_like<ElementBlockScale>(tCsSFA(_, _, _, _0{}));
    Tensor sfb_odd = make_tensor_like<ElementBlockScale>(tCsSFB(_, _, _, _0{}));
    warpgroup_fence_operand(accum);

    // Waits for the stage at smem_pipe_read, reads its scales and issues its k-block into `partial` (from zero),
    // then combines the scales as the stock mainloop does (in the wgmmas' shadow) and moves to the next stage.
    auto issue = [&](auto& partial, auto& sfa, auto& sfb) {
      auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, barrier_token);
      int read_stage = smem_pipe_read.index();
      copy(tCsSFA(_, _, _, make_coord(_0{}, read_stage)), sfa);
      copy(tCsSFB(_, _, _, make_coord(_0{}, read_stage)), sfb);
      warpgroup_fence_operand(partial);
      warpgroup_arrive();
      tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
        cute::gemm(tiled_mma, tCrA(_, _, k_block, read_stage), tCrB(_, _, k_block, read_stage), partial);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      warpgroup_fence_operand(partial);
      combine_scales<kScaleMs, kScaleNs>(sfa, sfb);  // in the wgmmas' shadow
      ++smem_pipe_read;
    };
    auto promote_all = [&](auto& partial, auto& sfa, auto& sfb) {
      warpgroup_fence_operand(partial);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(accum); ++i) promote<kScaleMs, kScaleNs>(accum(i), partial(i), sfa, sfb, i);
    };
    // After the next k-block is issued: wait for the one before it, promote it and free its stage.
    PipelineState smem_pipe_release = smem_pipe_read;
    auto retire = [&](auto& partial, auto& sfa, auto& sfb) {
      warpgroup_wait<1>();
      promote_all(partial, sfa, sfb);
      pipeline.consumer_release(smem_pipe_release);
      ++smem_pipe_release;
    };
    auto drain = [&](auto& partial, auto& sfa, auto& sfb) {
      warpgroup_wait<0>();
      promote_all(partial, sfa, sfb);
      warpgroup_fence_operand(accum);
    };

    // Two k-blocks per trip, so that which fragment a block uses is known at compile time (the loop shape that
    // ptxas keeps asynchronous: sm90_fp8_overlapped_promotion.hpp).
    issue(even, sfa_even, sfb_even);
    CUTLASS_PRAGMA_NO_UNROLL
    for (int remaining = k_tile_count - 1; remaining > 0; remaining -= 2) {
      issue(odd, sfa_odd, sfb_odd);
      retire(even, sfa_even, sfb_even);
      if (remaining == 1) return drain(odd, sfa_odd, sfb_odd);
      issue(even, sfa_even, sfb_even);
      retire(odd, sfa_odd, sfb_odd);
    }
    drain(even, sfa_even, sfb_even);
  }
};

}  // namespace cutlass_ext::fp8_block
