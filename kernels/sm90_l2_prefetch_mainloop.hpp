// A CUTLASS sm90 mainloop collective that, before the kernel waits for the grid before it (programmatic dependent
// launch: griddepcontrol.wait), asks L2 for the first k-blocks of the weights its CTA's first tile reads.
//
// Why: a memory-bound GEMM (decode: a few tokens times a large weight matrix) pays a fixed cost per call that its
// weight stream cannot hide: the wait for the previous grid to finish and flush, then a DRAM round trip before the
// first stage lands in shared memory. The weights do not depend on the previous grid, so their first bytes can be on
// the way while it drains. Only an L2 prefetch is issued early (no shared memory is written): the TMA loads that
// feed the Tensor Cores still come after the wait, and L2 is where the previous grid's writes land, so what they
// read is what a kernel without the prefetch would read.
//
// The producer's TMA loads also mark the weights evict-first (sm90_weights_load_mainloop.hpp): each weight byte is
// read once per call, so it should be the first line L2 gives up, not the tokens, the lines prefetched for the next
// tile or what other kernels keep there. Measured on an H100 (docs/design-notes.md, FP8 decode): 0.7-1.7 µs
// faster per decode call at N = K = 8192, with the same DRAM bytes per call when the inputs rotate through 8 sets.
//
// Everything else is the stock collective (`Base`, from CUTLASS's CollectiveBuilder). The kernel calls
// `prefetch_tma_descriptors` from one thread before it waits; the CTA's first tile comes from the same persistent
// tile scheduler, built from the same arguments, that the kernel uses.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/kernel_hardware_info.hpp"
#include "sm90_weights_load_mainloop.hpp"

namespace cutlass_ext {

// An L2 prefetch of a TMA-tiled global tensor through any sm90 TMA load's descriptor (multicast ones included:
// CuTe's own prefetch(atom, tensor) knows only the plain TMA load).
template <class Op, class NumBits, class... Args, class T, class Engine, class Layout>
CUTE_DEVICE void prefetch_to_l2(cute::Copy_Atom<cute::Copy_Traits<Op, NumBits, Args...>, T> const& tma,
                                cute::Tensor<Engine, Layout> const& tile) {
  using Prefetch = cute::Copy_Atom<cute::Copy_Traits<cute::SM90_TMA_LOAD::PREFETCH, NumBits>, T>;
  Prefetch prefetch{tma};
  auto ignored = cute::make_tensor(cute::make_smem_ptr<T>(nullptr), cute::shape(tile));
  cute::copy(prefetch, tile, ignored);
}

// WeightsAreA: the weights are the kernel's A operand (swapped FP8 GEMM) rather than its B. WeightsFirst: the
// producer requests each k-block's weights before its activations.
template <class Base, class TileShape, class ClusterShape, bool WeightsAreA, bool WeightsFirst = false>
struct L2PrefetchMainloop : WeightsLoadMainloop<Base, WeightsAreA, /*EvictFirstWeights=*/true, WeightsFirst> {
  using TileScheduler = typename cutlass::gemm::kernel::detail::TileSchedulerSelector<
      cutlass::gemm::PersistentScheduler, cutlass::arch::Sm90, TileShape, ClusterShape>::Scheduler;

  // The kernel's hardware info and scheduler arguments, repeated here: the collective builds the same scheduler
  // parameters as the kernel does, to know its CTA's first tile.
  struct Arguments : Base::Arguments {
    cutlass::KernelHardwareInfo hw_info{};
    typename TileScheduler::Arguments scheduler{};
    int l2_prefetch_k_blocks = 0;
  };

  struct Params : Base::Params {
    typename TileScheduler::Params scheduler;
    int m, n, k, l;
    int l2_prefetch_k_blocks;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void* workspace) {
    auto problem_shape_mnkl = cute::append<4>(problem_shape, 1);
    auto [m, n, k, l] = problem_shape_mnkl;
    // the kernel passes the scheduler its hardware info with max_active_clusters at 0 when not given
    cutlass::KernelHardwareInfo hw_info{args.hw_info.device_id, args.hw_info.sm_count,
                                        args.hw_info.max_active_clusters > 0 ? args.hw_info.max_active_clusters : 0};
    return {Base::to_underlying_arguments(problem_shape, args, workspace),
            TileScheduler::to_underlying_arguments(problem_shape_mnkl, TileShape{}, ClusterShape{}, hw_info,
                                                   args.scheduler),
            int(m),
            int(n),
            int(k),
            int(l),
            args.l2_prefetch_k_blocks};
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    using namespace cute;
    Base::prefetch_tma_descriptors(params);
    if (params.l2_prefetch_k_blocks <= 0) return;
    TileScheduler scheduler{params.scheduler};
    auto work = scheduler.initial_work_tile_info(ClusterShape{});
    if (!work.is_valid()) return;
    // As the collective's load() partitions its operands: A sliced by the CTA's cluster column, B by its row.
    uint32_t rank = block_rank_in_cluster();
    constexpr uint32_t cluster_m = size<0>(ClusterShape{});
    if constexpr (WeightsAreA) {
      Tensor weights = params.tma_load_a.get_tma_tensor(make_shape(params.m, params.k, params.l));
      Tensor tile = local_tile(weights, TileShape{}, make_coord(_, _, _), Step<_1, Underscore, _1>{})(
          _, _, work.M_idx, _, work.L_idx);  // (BLK_M, BLK_K, k)
      Tensor blocks = params.tma_load_a.get_slice(rank / cluster_m).partition_S(tile);
      int count = min(params.l2_prefetch_k_blocks, int(size<3>(blocks)));
      for (int kb = 0; kb < count; ++kb) prefetch_to_l2(params.tma_load_a, blocks(_, _, _, kb));
    } else {
      Tensor weights = params.tma_load_b.get_tma_tensor(make_shape(params.n, params.k, params.l));
      Tensor tile = local_tile(weights, TileShape{}, make_coord(_, _, _), Step<Underscore, _1, _1>{})(
          _, _, work.N_idx, _, work.L_idx);  // (BLK_N, BLK_K, k)
      Tensor blocks = params.tma_load_b.get_slice(rank % cluster_m).partition_S(tile);
      int count = min(params.l2_prefetch_k_blocks, int(size<3>(blocks)));
      for (int kb = 0; kb < count; ++kb) prefetch_to_l2(params.tma_load_b, blocks(_, _, _, kb));
    }
  }
};

}  // namespace cutlass_ext
