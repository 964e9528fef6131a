// CUTLASS's sm90 FP8 mainloop with promotion every k-block, for cooperative tiles wider than three accumulator
// fragments allow: the two consumer warpgroups take turns at the Tensor Core, so that one's FADDs run while the
// other's wgmmas do.
//
// Why: sm90_fp8_overlapped_promotion.hpp hides a warpgroup's promotion behind its own next k-block, which needs
// three fragments per thread (FP32 totals and two partial sums): 128x144 is the widest cooperative tile that
// fits. cuBLAS's promoted kernels run wider tiles (144x128 at 8192³), and a wider tile reads fewer shared-memory
// and L2 bytes per flop. A warpgroup's wgmmas occupy the Tensor Cores of all four SM sub-partitions, so the
// overlap can come from the other warpgroup instead: each holds the totals and one partial (128x192: two
// fragments of 96 registers), and a pair of named barriers orders their k-blocks on the Tensor Core — warpgroup 0
// issues block i, then warpgroup 1 issues block i, then warpgroup 0 issues block i+1 — as CUTLASS's ping-pong
// kernel orders whole mainloops. While warpgroup 1's block i runs, warpgroup 0 waits for its own, adds it into its
// totals and issues block i+1 behind it. CUTLASS's stock FP8 mainloop is this without the order: both warpgroups
// issue together, finish together and promote together while the Tensor Core idles.
//
// The sums are the same FP32 additions in the same order as CUTLASS's with promotion every k-block (and as the
// overlapped mainloop's). Everything but `mma` is the stock collective (`Base`): loads, shared memory, pipeline and
// `mma_tail`, which releases the last stage.
#pragma once

#include "cute/algorithm/clear.hpp"
#include "cute/algorithm/gemm.hpp"
#include "cute/arch/mma_sm90_gmma.hpp"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"

namespace cutlass_ext {

template <class Base>
struct TurnTakingPromotionMainloop : Base {
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::Params;
  using typename Base::TensorStorage;
  using typename Base::TiledMma;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;

  // User named barriers (CUTLASS reserves the ids below its FirstUserBarrier and offsets these past them): each
  // is a hand-over, arrived at by the warpgroup whose turn ends and waited on by the one whose turn begins.
  static constexpr uint32_t kTurnOfFirst = 0;
  static constexpr uint32_t kTurnOfSecond = 1;

  // Consumer: accum = Σ over k-blocks of that block's Tensor Core sum, added in FP32 with round-to-nearest.
  // Every stage but the last is released here; the kernel's mma_tail releases the last.
  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const&) {
    using namespace cute;
    using cutlass::arch::NamedBarrier;
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M,BLK_K,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N,BLK_K,PIPE)
    constexpr int kWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
    static_assert(kWarpGroups == 2, "turns are taken by the two consumer warpgroups of a cooperative tile");
    constexpr uint32_t kBothWarpGroups = size(TiledMma{});
    Layout warp_group_thread_layout = make_layout(Int<kWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
    int warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_slice(warp_group_thread_layout(warp_group_idx));
    Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));  // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));  // (MMA,MMA_N,MMA_K,PIPE)
    CUTE_STATIC_ASSERT_V(size<1>(tCrA) == size<1>(accum));
    CUTE_STATIC_ASSERT_V(size<1>(tCrB) == size<2>(accum));

    clear(accum);
    if (k_tile_count <= 0) return;
    Tensor partial = make_fragment_like(accum);  // the Tensor Core's sum of the current k-block
    warpgroup_fence_operand(accum);
    bool first = warp_group_idx == 0;
    PipelineState smem_pipe_release = smem_pipe_read;

    CUTLASS_PRAGMA_NO_UNROLL
    for (int k_tile = 0; k_tile < k_tile_count; ++k_tile) {
      bool last = k_tile + 1 == k_tile_count;
      auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, barrier_token);
      // Wait for the turn: the first warpgroup after the second's previous block, the second after the first's
      // same block.
      if (!first) {
        NamedBarrier::sync(kBothWarpGroups, kTurnOfSecond);
      } else if (k_tile > 0) {
        NamedBarrier::sync(kBothWarpGroups, kTurnOfFirst);
      }
      int read_stage = smem_pipe_read.index();
      warpgroup_fence_operand(partial);
      warpgroup_arrive();
      tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
        cute::gemm(tiled_mma, tCrA(_, _, k_block, read_stage), tCrB(_, _, k_block, read_stage), partial);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      ++smem_pipe_read;
      // Hand the turn over once this block's wgmmas are queued ahead of the other warpgroup's.
      NamedBarrier::arrive(kBothWarpGroups, first ? kTurnOfSecond : kTurnOfFirst);
      // Promote while the other warpgroup's block runs on the Tensor Core.
      warpgroup_wait<0>();
      warpgroup_fence_operand(partial);
      if (!last) {
        pipeline.consumer_release(smem_pipe_release);
        ++smem_pipe_release;
      }
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(accum); ++i) accum(i) += partial(i);
    }
    // The second warpgroup's last hand-over, taken before the first can hand over again (next tile): every
    // hand-over is waited on before its barrier is arrived at again, whatever runs between the tiles.
    if (first) NamedBarrier::sync(kBothWarpGroups, kTurnOfFirst);
    warpgroup_fence_operand(accum);
  }
};

}  // namespace cutlass_ext
