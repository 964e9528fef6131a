// Weight-scale loading for block-scaled tiles that cut across 128-row weight blocks (176 or 192 wide).
//
// Such a tile reads the weight scales expanded to g rows each (g = 4 or 8, kernels/sm90_fp8_block_gemm.cuh), so
// it holds n / g distinct scales per k-block (44 or 24). CUTLASS's scale-loading warp partitions the tile's n
// *columns* over its 32 lanes and lets only lanes below n / g copy: with several columns per scale, the lanes
// that would own some scales are masked off and those scales are never loaded. Here each lane copies every 32nd
// distinct scale of the tile (a zero-filled copy past N), so all n / g land; the activation scales go as CUTLASS
// copies them (or by TMA in `load`, M-major). Every lane arrives on the stage's barrier, as the stock loader does.
//
// Everything but `load_auxiliary` is the stock collective (`Base`).
#pragma once

#include "cute/arch/copy_sm80.hpp"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"

namespace cutlass_ext::fp8_block {

template <class Base>
struct AcrossBlockScaleLoad : Base {
  using typename Base::CopyAtomSFA;
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutSFA;
  using typename Base::SmemLayoutSFB;
  using typename Base::TensorStorage;
  using typename Base::TileShape;
  static constexpr int kScaleNs = Base::ScaleNsPerTile;  // distinct weight scales per tile and k-block
  static_assert(!Base::IsTmaLoadSFB, "the weight scales of a 128-row tile are copied, not loaded by TMA");

  template <class TensorA, class TensorB, class TensorScaleA, class TensorScaleB, class KTileIterator,
            class BlockCoord>
  CUTLASS_DEVICE void load_auxiliary(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                                     cute::tuple<TensorA, TensorB, TensorScaleA, TensorScaleB> const& load_inputs,
                                     BlockCoord const& blk_coord, KTileIterator k_tile_iter, int k_tile_count,
                                     int thread_idx, uint32_t, TensorStorage& shared_tensors) {
    using namespace cute;
    using X = Underscore;
    Tensor sSFA = make_tensor(make_smem_ptr(shared_tensors.smem_SFA.data()), SmemLayoutSFA{});
    Tensor sSFB = make_tensor(make_smem_ptr(shared_tensors.smem_SFB.data()), SmemLayoutSFB{});
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;

    // Activation scales: CUTLASS's partitioning (one row of the tile per lane and copy).
    Tensor mSFA_mkl = get<2>(load_inputs);
    Tensor iSFA_mkl = make_identity_tensor(shape(params.layout_SFA));
    Tensor gSFA_k = local_tile(mSFA_mkl, TileShape{}, make_coord(_, _, _), Step<_1, X, _1>{})(_, _, m_coord, _, l_coord);
    Tensor cSFA_k = local_tile(iSFA_mkl, TileShape{}, make_coord(_, _, _), Step<_1, X, _1>{})(_, _, m_coord, _, l_coord);
    TiledCopy scale_copy_a = make_tiled_copy(CopyAtomSFA{}, Layout<Shape<_32>>{}, Layout<Shape<_1>>{});
    ThrCopy thr_scale_copy_a = scale_copy_a.get_slice(thread_idx);
    Tensor tSFAgSFA_k = thr_scale_copy_a.partition_S(gSFA_k);
    Tensor tSFAcSFA_k = thr_scale_copy_a.partition_S(cSFA_k);
    Tensor tSFAsSFA = thr_scale_copy_a.partition_D(sSFA);
    Tensor tSFApSFA = make_tensor<bool>(shape(filter_zeros(tSFAsSFA(_, _, _, _0{}))));
    auto sfa_shape = shape(params.layout_SFA);

    // Weight scales: (g, rows) x (128, k-blocks) with zero strides inside each mode's first part.
    Tensor mSFB_nkl = get<3>(load_inputs);
    int const scale_rows = size<0, 1>(params.layout_SFB);  // ceil(N / g)
    int const first_row = int(n_coord) * kScaleNs;

    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);
      int const write_stage = smem_pipe_write.index();
      int const k_block = *k_tile_iter;  // k-tiles are the 128-deep scale blocks
      if constexpr (!Base::IsTmaLoadSFA) {
        bool load_sfa = thread_idx < Base::ScaleMsPerTile;
        Tensor tSFAcSFA_compact = filter_zeros(tSFAcSFA_k(_, _, _, *k_tile_iter));
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(tSFApSFA); ++i) {
          tSFApSFA(i) = load_sfa && elem_less(tSFAcSFA_compact(i), sfa_shape);
        }
        copy_if(scale_copy_a, tSFApSFA, filter_zeros(tSFAgSFA_k(_, _, _, *k_tile_iter)),
                filter_zeros(tSFAsSFA(_, _, _, write_stage)));
      }
      CUTLASS_PRAGMA_UNROLL
      for (int s = thread_idx; s < kScaleNs; s += 32) {
        int const row = first_row + s;
        bool const inside = row < scale_rows;
        auto const& source = mSFB_nkl(make_coord(0, inside ? row : 0), make_coord(0, k_block), l_coord);
        auto& target = sSFB(make_coord(0, s), make_coord(0, 0), write_stage);
        SM80_CP_ASYNC_CACHEALWAYS_ZFILL<float>::copy(source, target, inside);
      }
      pipeline.producer_commit(smem_pipe_write, cutlass::arch::cpasync_barrier_arrive_noinc);
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }
};

}  // namespace cutlass_ext::fp8_block
