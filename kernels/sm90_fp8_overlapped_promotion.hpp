// CUTLASS's sm90 FP8 mainloop with promotion that does not drain the Tensor Core.
//
// Why: FP8 wgmma keeps ~22 mantissa bits in its accumulator, so promoted accumulation adds the Tensor Core's
// partial sums into FP32 registers every k-block (128 k elements: the span the accuracy bound needs). CUTLASS's
// mainloop (sm90_mma_tma_gmma_ss_warpspecialized_fp8.hpp) promotes from the one fragment the next k-block's wgmmas
// write into, so it waits for every wgmma (`warpgroup_wait<0>`) before each promotion: the Tensor Core idles while
// each warpgroup adds, releases its stage and issues again (0.77x of fast accumulation at 8192³).
//
// Here the k-blocks alternate between two partial fragments: block i+1's wgmmas are issued into one before block
// i's sum, in the other, is waited for (`warpgroup_wait<1>`) and added, so the FADDs run while the Tensor Core
// works. The sums are the same FP32 additions in the same order as CUTLASS's with promotion every k-block.
//
// A 256- or 512-deep k-block (one pipeline stage, loaded as one) is issued and promoted in slices of 128: the
// promotion span stays 128 k elements while each stage carries more bytes. Decode streams its weights faster
// through few deep stages, as fast accumulation's 64x16x256 tiles do (0.2-1 µs of 24-80;
// docs/design-notes.md, FP8 promotion).
//
// Everything but `mma` is the stock collective (`Base`, from CUTLASS's CollectiveBuilder): loads, shared memory,
// pipeline and `mma_tail`, which releases the last stage as it does for CUTLASS's own (one k-block in flight).
// Costs one more accumulator fragment of registers: cooperative tiles up to 128x144 and ping-pong ones up to 64x144
// fit (sweeps/filters_fp8.py).
#pragma once

#include "cute/algorithm/clear.hpp"
#include "cute/algorithm/gemm.hpp"
#include "cute/arch/mma_sm90_gmma.hpp"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"

namespace cutlass_ext {

// f(Int<I>{}) for each I of the sequence, in order (unrolled at compile time).
template <int... I, class F>
CUTLASS_DEVICE void for_each_slice(cute::integer_sequence<int, I...>, F&& f) {
  (f(cute::Int<I>{}), ...);
}

template <class Base>
struct OverlappedPromotionMainloop : Base {
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::Params;
  using typename Base::TensorStorage;
  using typename Base::TiledMma;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::TileShape;

  static constexpr int kPromotionK = 128;  // k elements the Tensor Core sums between two promotions

  struct Nothing {
    CUTLASS_DEVICE void operator()() const {}
  };

  // Consumer: accum = Σ over k-blocks of that block's Tensor Core sum, added in FP32 with round-to-nearest.
  // Every stage but the last is released here; the kernel's mma_tail releases the last. after_first_issue runs
  // once the tile's first wgmmas are issued (sm90_stage_epilogue.hpp releases the last tile's stage there).
  template <class FrgTensorC, class AfterFirstIssue = Nothing>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const&,
                          AfterFirstIssue&& after_first_issue = {}) {
    using namespace cute;
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M,BLK_K,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N,BLK_K,PIPE)
    constexpr int kWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
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
    // A k-block in slices of kPromotionK, promoted one by one. Slices alternate between two partial fragments, so
    // with an even number of slices per k-block slice i always goes into the same one (i % 2).
    constexpr int kSlices = size<2>(TileShape{}) / kPromotionK;
    static_assert(kSlices == 1 || kSlices % 2 == 0, "k-blocks of 128 FP8 elements or an even number of them");
    constexpr int kStepsPerSlice = size<2>(tCrA) / kSlices;  // wgmma k-steps in one slice
    Tensor even = make_fragment_like(accum);  // the Tensor Core's sum of slices 0, 2, 4, ... (in k order)
    Tensor odd = make_fragment_like(accum);   // ... and of slices 1, 3, 5, ...
    auto fragment = [&](auto parity) -> auto& {
      if constexpr (decltype(parity)::value == 0) return even; else return odd;
    };
    warpgroup_fence_operand(accum);

    // Issues a slice (of the k-block at smem_pipe_read) into `partial`, starting it from zero; its first slice
    // waits for the stage to fill, its last moves on to the next stage.
    auto issue = [&](auto& partial, auto slice) {
      constexpr int kSlice = decltype(slice)::value;
      if constexpr (kSlice == 0) {
        auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
        pipeline.consumer_wait(smem_pipe_read, barrier_token);
      }
      int read_stage = smem_pipe_read.index();
      warpgroup_fence_operand(partial);
      warpgroup_arrive();
      tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
      CUTLASS_PRAGMA_UNROLL
      for (int step = 0; step < kStepsPerSlice; ++step) {
        int k_block = kSlice * kStepsPerSlice + step;
        cute::gemm(tiled_mma, tCrA(_, _, k_block, read_stage), tCrB(_, _, k_block, read_stage), partial);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      if constexpr (kSlice == kSlices - 1) ++smem_pipe_read;
    };
    // Adds a finished slice's sum into the FP32 accumulator.
    auto promote = [&](auto& partial) {
      warpgroup_fence_operand(partial);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(accum); ++i) accum(i) += partial(i);
    };
    // After the next slice is issued: wait for the one before it, promote it and, after a k-block's last slice,
    // free its stage.
    PipelineState smem_pipe_release = smem_pipe_read;
    auto retire = [&](auto& partial, auto slice) {
      warpgroup_wait<1>();
      promote(partial);
      if constexpr (decltype(slice)::value == kSlices - 1) {
        pipeline.consumer_release(smem_pipe_release);
        ++smem_pipe_release;
      }
    };
    auto drain = [&](auto& partial) {
      warpgroup_wait<0>();
      promote(partial);
      warpgroup_fence_operand(accum);
    };

    issue(even, Int<0>{});
    after_first_issue();
    // Whole k-blocks per trip, two when a k-block is one slice, so that which fragment a slice uses is known at
    // compile time. (ptxas serializes every wgmma of the kernel for other loop shapes tried: an unconditional loop
    // counting k-blocks, or a k-block's last slice drained after the loop instead of inside.)
    constexpr int kSlicesPerTrip = kSlices == 1 ? 2 : kSlices;
    CUTLASS_PRAGMA_NO_UNROLL
    for (int remaining = k_tile_count * kSlices - 1; remaining > 0; remaining -= kSlicesPerTrip) {
      for_each_slice(make_int_range<1, kSlicesPerTrip>{}, [&](auto position) {
        constexpr int kPosition = decltype(position)::value;
        issue(fragment(Int<kPosition % 2>{}), Int<kPosition % kSlices>{});
        retire(fragment(Int<(kPosition - 1) % 2>{}), Int<(kPosition - 1) % kSlices>{});
      });
      if (remaining == kSlicesPerTrip - 1) return drain(odd);
      issue(even, Int<0>{});
      retire(odd, Int<kSlices - 1>{});
    }
    drain(even);
  }
};

}  // namespace cutlass_ext
