// What the block-scaled mainloops that replace CUTLASS's `mma` share with it: its view of the scales in shared
// memory, how it combines a k-block's A and B scales, and how it promotes a scaled partial sum. Used through these
// helpers, a mainloop's outputs equal the stock one's bit for bit.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"

namespace cutlass_ext::fp8_block {

// The scales of every stage broadcast over the tile, (BLK_M,BLK_N,(BLK_K,PIPE)) each, as CUTLASS's mainloop views
// them (so that partition_C gives each accumulator element its scales).
template <class Base>
CUTLASS_DEVICE auto broadcast_scales(typename Base::TensorStorage& shared_tensors) {
  using namespace cute;
  using SmemLayoutSFA = typename Base::SmemLayoutSFA;
  using SmemLayoutSFB = typename Base::SmemLayoutSFB;
  using TileShape = typename Base::TileShape;
  Tensor sSFA = make_tensor(
      make_smem_ptr(shared_tensors.smem_SFA.data()),
      make_layout(make_shape(get<0>(shape(SmemLayoutSFA{})), get<1>(TileShape{}),
                             make_shape(get<1>(shape(SmemLayoutSFA{})), get<2>(shape(SmemLayoutSFA{})))),
                  make_stride(get<0>(stride(SmemLayoutSFA{})), _0{},
                              make_stride(get<1>(stride(SmemLayoutSFA{})), get<2>(stride(SmemLayoutSFA{}))))));
  Tensor sSFB = make_tensor(
      make_smem_ptr(shared_tensors.smem_SFB.data()),
      make_layout(make_shape(get<0>(TileShape{}), get<0>(shape(SmemLayoutSFB{})),
                             make_shape(get<1>(shape(SmemLayoutSFB{})), get<2>(shape(SmemLayoutSFB{})))),
                  make_stride(_0{}, get<0>(stride(SmemLayoutSFB{})),
                              make_stride(get<1>(stride(SmemLayoutSFB{})), get<2>(stride(SmemLayoutSFB{}))))));
  return make_tuple(sSFA, sSFB);
}

// A consumer thread's views of the pipeline's shared memory as CUTLASS's mainloop partitions them: its warpgroup's
// wgmma descriptors of A and B, (MMA,MMA_M,MMA_K,PIPE) and (MMA,MMA_N,MMA_K,PIPE), and its accumulator elements'
// scales, (MMA,MMA_M,MMA_N,(MMA_K,PIPE)) each.
template <class Base, class TiledMma, class FrgTensorC>
CUTLASS_DEVICE auto consumer_views(TiledMma const& tiled_mma, FrgTensorC const& accum, int thread_idx,
                                   typename Base::TensorStorage& shared_tensors) {
  using namespace cute;
  Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), typename Base::SmemLayoutA{});
  Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), typename Base::SmemLayoutB{});
  auto scales = broadcast_scales<Base>(shared_tensors);
  constexpr int kWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
  Layout warp_group_thread_layout = make_layout(Int<kWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
  int warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
  auto thread_mma = tiled_mma.get_slice(warp_group_thread_layout(warp_group_idx));
  Tensor tCsSFA = tiled_mma.get_slice(thread_idx).partition_C(get<0>(scales));
  Tensor tCsSFB = tiled_mma.get_slice(thread_idx).partition_C(get<1>(scales));
  Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));
  Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));
  CUTE_STATIC_ASSERT_V(size<1>(tCrA) == size<1>(accum));
  CUTE_STATIC_ASSERT_V(size<1>(tCrB) == size<2>(accum));
  static_assert(Base::ScalePromotionInterval == decltype(size<2>(tCrA))::value,
                "one scale block per k-tile: every k-tile's sum is scaled and promoted");
  return make_tuple(tCrA, tCrB, tCsSFA, tCsSFB);
}

// A k-block's scales (register copies of the broadcast views) combined as the stock mainloop combines them: the
// distinct side's scales times the other side's one (kScaleMs, kScaleNs: distinct scales along rows, columns).
template <int kScaleMs, int kScaleNs, class ScalesA, class ScalesB>
CUTLASS_DEVICE void combine_scales(ScalesA& sfa, ScalesB& sfb) {
  using cute::_0;
  using cute::filter_zeros;
  if constexpr (kScaleMs == 1 && kScaleNs == 1) {
    sfa(_0{}) = sfa(_0{}) * sfb(_0{});
  }
  if constexpr (kScaleMs > 1 && kScaleNs == 1) {
    auto scale_b = sfb(_0{});
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < cute::size(filter_zeros(sfa)); i++) filter_zeros(sfa)(i) = filter_zeros(sfa)(i) * scale_b;
  }
  if constexpr (kScaleMs == 1 && kScaleNs > 1) {
    auto scale_a = sfa(_0{});
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < cute::size(filter_zeros(sfb)); i++) filter_zeros(sfb)(i) = filter_zeros(sfb)(i) * scale_a;
  }
}

// total += partial · scale for the accumulator element at `coord` (its index in the register tensors), given the
// k-block's combined scales: the expressions of CUTLASS's GmmaFP8Accumulation::scale_core, except with
// kProductFirst, where per-row and per-column scales multiply each other before the partial sum.
template <int kScaleMs, int kScaleNs, bool kProductFirst = false, class ScalesA, class ScalesB, class... Coord>
CUTLASS_DEVICE void promote(float& total, float partial, ScalesA const& sfa, ScalesB const& sfb, Coord... coord) {
  if constexpr (kScaleMs == 1 && kScaleNs == 1) {
    total += partial * sfa(cute::_0{});
  }
  if constexpr (kScaleMs > 1 && kScaleNs == 1) {
    total += partial * sfa(coord...);
  }
  if constexpr (kScaleMs == 1 && kScaleNs > 1) {
    total += partial * sfb(coord...);
  }
  if constexpr (kScaleMs > 1 && kScaleNs > 1 && kProductFirst) {
    total += partial * (sfa(coord...) * sfb(coord...));
  }
  if constexpr (kScaleMs > 1 && kScaleNs > 1 && !kProductFirst) {
    total += partial * sfa(coord...) * sfb(coord...);
  }
}

}  // namespace cutlass_ext::fp8_block
