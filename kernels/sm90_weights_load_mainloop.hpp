// The producer loop of CUTLASS's sm90 TMA warp-specialized collectives (FP8 or not, they load alike), with the
// weights' loads ordered and hinted: WeightsFirst requests each k-block's weights before its activations,
// EvictFirstWeights hints the weights' loads evict-first (the L2-prefetching decode mainloop's choice:
// sm90_l2_prefetch_mainloop.hpp). Both off, it is CUTLASS's loop.
//
// Why weights first: the weights stream from DRAM, read once per call; the activations are a few MB that every CTA
// of a token tile re-reads from L2. CUTLASS issues A (here: the activations) first. Issued second, behind the
// weights' longer round trip, the activation requests of the CTAs that share a token tile reach L2 closer together
// and are merged there more often: at 256 x 57344 x 8192 (128x176 ping-pong tiles, weights multicast to 2-CTA
// clusters) the L2 read sectors per call fall from 31-32 M to 27-28 M, cuBLAS's count for the same layout, whose
// producer issues its weights first too, and the kernel runs ~1% faster, level with cuBLAS. It is a tuned knob,
// not the rule: compute-bound prefill tiles (16384 x 10240 promoted) ran 7-10% slower with it
// (docs/design-notes.md, L2 traffic at 256x57344x8192). The stage's barrier completes when both have landed either way.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"

namespace cutlass_ext {

// WeightsAreA: the weights are the kernel's A operand (swapped FP8 GEMM) rather than its B, and so come first
// whatever WeightsFirst says.
template <class Base, bool WeightsAreA, bool EvictFirstWeights, bool WeightsFirst>
struct WeightsLoadMainloop : Base {
  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(typename Base::Params const& params, typename Base::MainloopPipeline pipeline,
                           typename Base::PipelineState write_state, cute::tuple<TensorA, TensorB> const& load_inputs,
                           BlockCoord const& blk_coord, KTileIterator k_tile_iter, int k_tile_count, int /*thread_idx*/,
                           uint32_t block_rank_in_cluster, typename Base::TensorStorage& shared_tensors) {
    using namespace cute;
    using Hint = TMA::CacheHintSm90;
    constexpr Hint hint_weights = EvictFirstWeights ? Hint::EVICT_FIRST : Hint::EVICT_NORMAL;
    constexpr Hint hint_a = WeightsAreA ? hint_weights : Hint::EVICT_NORMAL;
    constexpr Hint hint_b = WeightsAreA ? Hint::EVICT_NORMAL : hint_weights;
    if (!elect_one_sync()) return;
    using ClusterShape_ = typename Base::DispatchPolicy::ClusterShape;
    constexpr uint32_t cluster_m = size<0>(ClusterShape_{});
    uint32_t cluster_x = block_rank_in_cluster % cluster_m, cluster_y = block_rank_in_cluster / cluster_m;
    auto tma_a = params.tma_load_a.get_slice(cluster_y);
    auto tma_b = params.tma_load_b.get_slice(cluster_x);
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    Tensor tAgA = tma_a.partition_S(get<0>(load_inputs)(_, _, m_coord, _, l_coord));  // (TMA, TMA_M, TMA_K, k)
    Tensor tBgB = tma_b.partition_S(get<1>(load_inputs)(_, _, n_coord, _, l_coord));  // (TMA, TMA_N, TMA_K, k)
    Tensor tAsA = tma_a.partition_D(
        make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), typename Base::SmemLayoutA{}));  // (..., PIPE)
    Tensor tBsB = tma_b.partition_D(
        make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), typename Base::SmemLayoutB{}));  // (..., PIPE)
    // A is multicast along the cluster's n (the CTAs that share its rows), B along its m.
    uint16_t mcast_a = 0, mcast_b = 0;
    auto block_layout = Layout<ClusterShape_>{};  // (m, n) -> block id
    if constexpr (is_same_v<typename Base::GmemTiledCopyA, SM90_TMA_LOAD_MULTICAST>) {
      for (int n = 0; n < size<1>(block_layout); ++n) mcast_a |= uint16_t(1) << block_layout(cluster_x, n, Int<0>{});
    }
    if constexpr (is_same_v<typename Base::GmemTiledCopyB, SM90_TMA_LOAD_MULTICAST>) {
      for (int m = 0; m < size<0>(block_layout); ++m) mcast_b |= uint16_t(1) << block_layout(m, cluster_y, Int<0>{});
    }
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count, ++k_tile_iter, ++write_state) {
      pipeline.producer_acquire(write_state);
      auto* barrier = pipeline.producer_get_barrier(write_state);
      int stage = write_state.index();
      auto load_a = [&] {
        copy(params.tma_load_a.with(*barrier, mcast_a, hint_a), tAgA(_, _, _, *k_tile_iter), tAsA(_, _, _, stage));
      };
      auto load_b = [&] {
        copy(params.tma_load_b.with(*barrier, mcast_b, hint_b), tBgB(_, _, _, *k_tile_iter), tBsB(_, _, _, stage));
      };
      if constexpr (WeightsAreA || !WeightsFirst) {  // CUTLASS's order: A, then B
        load_a();
        load_b();
      } else {
        load_b();
        load_a();
      }
    }
  }
};

}  // namespace cutlass_ext
