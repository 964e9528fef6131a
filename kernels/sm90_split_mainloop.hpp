// The Hopper corrected-SGEMM mainloop (seed 000 on wgmma): a CUTLASS 3.x collective that reads each operand as
// two planes, hi and lo, and multiplies hi·hi + (lo·hi + hi·lo) with lo·lo dropped. Modelled on CUTLASS's FP8
// mainloop with promotion (sm90_mma_tma_gmma_ss_warpspecialized_fp8.hpp, fp8_accumulation.hpp):
//  - hi·hi accumulates in its own Tensor Core fragment, which every `promotion_interval` k-tiles is added into
//    the FP32 accumulator with round-to-nearest FADDs and restarted: the Tensor Core's truncating accumulation
//    only ever sums one interval (the seed's "avoid RZ");
//  - the lo terms accumulate in a third fragment over the whole K (they are 2^-11 smaller, so its truncation
//    does not show) and are scaled by 2^LoScaleLog2 into the accumulator at the end (halfhalf: lo is stored
//    ·2^11, so -11);
//  - each k-tile issues the hi·hi batch first and the lo batch second, then waits for the first only: the
//    promotion's FADDs run while the Tensor Core works through the lo batch.
// The producer warp loads the four planes of a k-tile with TMA into one pipeline stage.
#pragma once

#include "cute/arch/cluster_sm90.hpp"
#include "cute/arch/copy_sm90.hpp"
#include "cute/atom/mma_atom.hpp"
#include "cute/algorithm/gemm.hpp"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/collective/collective_mma_decl.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/pipeline/pipeline.hpp"

namespace cutlass_ext {

// The dispatch policy that selects the collective below; schedules and stages as CUTLASS's own.
template <int Stages_, class ClusterShape_, class KernelSchedule, int LoScaleLog2_>
struct MainloopSm90SplitPrecision
    : cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<Stages_, ClusterShape_, KernelSchedule> {
  static constexpr int LoScaleLog2 = LoScaleLog2_;
};

}  // namespace cutlass_ext

namespace cutlass::gemm::collective {
using namespace cute;

template <int Stages, class ClusterShape, class KernelSchedule, int LoScaleLog2, class TileShape_, class ElementA_,
          class StrideA_, class ElementB_, class StrideB_, class TiledMma_, class GmemTiledCopyA_,
          class SmemLayoutAtomA_, class SmemCopyAtomA_, class TransformA_, class GmemTiledCopyB_,
          class SmemLayoutAtomB_, class SmemCopyAtomB_, class TransformB_>
struct CollectiveMma<cutlass_ext::MainloopSm90SplitPrecision<Stages, ClusterShape, KernelSchedule, LoScaleLog2>,
                     TileShape_, ElementA_, StrideA_, ElementB_, StrideB_, TiledMma_, GmemTiledCopyA_,
                     SmemLayoutAtomA_, SmemCopyAtomA_, TransformA_, GmemTiledCopyB_, SmemLayoutAtomB_,
                     SmemCopyAtomB_, TransformB_> {
  using DispatchPolicy = cutlass_ext::MainloopSm90SplitPrecision<Stages, ClusterShape, KernelSchedule, LoScaleLog2>;
  using TileShape = TileShape_;
  using ElementA = ElementA_;
  using StrideA = StrideA_;
  using ElementB = ElementB_;
  using StrideB = StrideB_;
  using TiledMma = TiledMma_;
  using ElementAccumulator = typename TiledMma::ValTypeC;
  using GmemTiledCopyA = GmemTiledCopyA_;
  using GmemTiledCopyB = GmemTiledCopyB_;
  using SmemLayoutAtomA = SmemLayoutAtomA_;
  using SmemLayoutAtomB = SmemLayoutAtomB_;
  using SmemCopyAtomA = SmemCopyAtomA_;
  using SmemCopyAtomB = SmemCopyAtomB_;
  using TransformA = TransformA_;
  using TransformB = TransformB_;
  using ArchTag = typename DispatchPolicy::ArchTag;

  using MainloopPipeline = cutlass::PipelineTmaAsync<DispatchPolicy::Stages>;
  using PipelineState = cutlass::PipelineState<DispatchPolicy::Stages>;
  using PipelineParams = typename MainloopPipeline::Params;
  static constexpr int NumProducerThreadEvents = 1;

  // Both operands K-major (TF32 wgmma reads nothing else): tile the atoms along K first.
  using SmemLayoutA = decltype(tile_to_shape(
      SmemLayoutAtomA{}, make_shape(shape<0>(TileShape{}), shape<2>(TileShape{}), Int<DispatchPolicy::Stages>{}),
      Step<_1, _2, _3>{}));
  using SmemLayoutB = decltype(tile_to_shape(
      SmemLayoutAtomB{}, make_shape(shape<1>(TileShape{}), shape<2>(TileShape{}), Int<DispatchPolicy::Stages>{}),
      Step<_1, _2, _3>{}));
  static_assert(::cutlass::gemm::detail::is_k_major<StrideA>() && ::cutlass::gemm::detail::is_k_major<StrideB>(),
                "the split planes are K-major");
  static_assert(DispatchPolicy::Stages >= 2, "at least two pipeline stages");
  static_assert(cute::is_base_of<cute::GMMA::DescriptorIterator, typename TiledMma::FrgTypeA>::value &&
                    cute::is_base_of<cute::GMMA::DescriptorIterator, typename TiledMma::FrgTypeB>::value,
                "both operands from shared memory");

  struct SharedStorage {
    struct TensorStorage : cute::aligned_struct<128, _0> {
      cute::array_aligned<typename TiledMma::ValTypeA, cute::cosize_v<SmemLayoutA>> smem_A_hi;
      cute::array_aligned<typename TiledMma::ValTypeA, cute::cosize_v<SmemLayoutA>> smem_A_lo;
      cute::array_aligned<typename TiledMma::ValTypeB, cute::cosize_v<SmemLayoutB>> smem_B_hi;
      cute::array_aligned<typename TiledMma::ValTypeB, cute::cosize_v<SmemLayoutB>> smem_B_lo;
    } tensors;
    using PipelineStorage = typename MainloopPipeline::SharedStorage;
    PipelineStorage pipeline;
  };
  using TensorStorage = typename SharedStorage::TensorStorage;
  using PipelineStorage = typename SharedStorage::PipelineStorage;

  struct Arguments {
    ElementA const* ptr_A_hi;
    ElementA const* ptr_A_lo;
    StrideA dA;
    ElementB const* ptr_B_hi;
    ElementB const* ptr_B_lo;
    StrideB dB;
    uint32_t promotion_interval = 1;  // k-tiles between promotions of hi·hi into the FP32 accumulator
  };

  struct Params {
    using TMA_A = decltype(make_tma_copy_A_sm90(
        GmemTiledCopyA{},
        make_tensor(static_cast<ElementA const*>(nullptr), repeat_like(StrideA{}, int32_t(0)), StrideA{}),
        SmemLayoutA{}(_, _, 0), TileShape{}, ClusterShape{}));
    using TMA_B = decltype(make_tma_copy_B_sm90(
        GmemTiledCopyB{},
        make_tensor(static_cast<ElementB const*>(nullptr), repeat_like(StrideB{}, int32_t(0)), StrideB{}),
        SmemLayoutB{}(_, _, 0), TileShape{}, ClusterShape{}));
    TMA_A tma_load_a_hi, tma_load_a_lo;
    TMA_B tma_load_b_hi, tma_load_b_lo;
    uint32_t tma_transaction_bytes = TmaTransactionBytes;
    uint32_t promotion_interval = 1;
  };

  static constexpr uint32_t TmaTransactionBytesMK = cutlass::bits_to_bytes(
      size<0>(SmemLayoutA{}) * size<1>(SmemLayoutA{}) * static_cast<uint32_t>(sizeof_bits<ElementA>::value));
  static constexpr uint32_t TmaTransactionBytesNK = cutlass::bits_to_bytes(
      size<0>(SmemLayoutB{}) * size<1>(SmemLayoutB{}) * static_cast<uint32_t>(sizeof_bits<ElementB>::value));
  static constexpr uint32_t TmaTransactionBytes = 2 * (TmaTransactionBytesMK + TmaTransactionBytesNK);

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                                  void* workspace) {
    (void)workspace;
    auto problem_shape_MNKL = append<4>(problem_shape, 1);
    auto M = get<0>(problem_shape_MNKL), N = get<1>(problem_shape_MNKL), K = get<2>(problem_shape_MNKL),
         L = get<3>(problem_shape_MNKL);  // not a structured binding: the lambdas below capture them
    auto tma_a = [&](ElementA const* ptr) {
      return make_tma_copy_A_sm90(GmemTiledCopyA{}, make_tensor(ptr, make_layout(make_shape(M, K, L), args.dA)),
                                  SmemLayoutA{}(_, _, cute::Int<0>{}), TileShape{}, ClusterShape{});
    };
    auto tma_b = [&](ElementB const* ptr) {
      return make_tma_copy_B_sm90(GmemTiledCopyB{}, make_tensor(ptr, make_layout(make_shape(N, K, L), args.dB)),
                                  SmemLayoutB{}(_, _, cute::Int<0>{}), TileShape{}, ClusterShape{});
    };
    return {tma_a(args.ptr_A_hi), tma_a(args.ptr_A_lo),    tma_b(args.ptr_B_hi),
            tma_b(args.ptr_B_lo), TmaTransactionBytes, args.promotion_interval};
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    constexpr int tma_alignment_bits = 128;
    auto [M, N, K, L] = append<4>(problem_shape, 1);
    constexpr int min_a = tma_alignment_bits / cutlass::sizeof_bits<ElementA>::value;
    constexpr int min_b = tma_alignment_bits / cutlass::sizeof_bits<ElementB>::value;
    return cutlass::detail::check_alignment<min_a>(cute::make_shape(M, K, L), args.dA) &&
           cutlass::detail::check_alignment<min_b>(cute::make_shape(N, K, L), args.dB) &&
           args.promotion_interval >= 1;
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    cute::prefetch_tma_descriptor(params.tma_load_a_hi.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_a_lo.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_b_hi.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_b_lo.get_tma_descriptor());
  }

  // The kernel layer's contract: (gA_mkl, gB_nkl) as TMA coordinate tensors; hi and lo share the coordinates.
  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    using X = Underscore;
    auto [M, N, K, L] = problem_shape_MNKL;
    Tensor mA_mkl = params.tma_load_a_hi.get_tma_tensor(make_shape(M, K, L));
    Tensor mB_nkl = params.tma_load_b_hi.get_tma_tensor(make_shape(N, K, L));
    Tensor gA_mkl = local_tile(mA_mkl, TileShape{}, make_coord(_, _, _), Step<_1, X, _1>{});  // (BLK_M,BLK_K,m,k,l)
    Tensor gB_nkl = local_tile(mB_nkl, TileShape{}, make_coord(_, _, _), Step<X, _1, _1>{});  // (BLK_N,BLK_K,n,k,l)
    return cute::make_tuple(gA_mkl, gB_nkl);
  }

  // Producer: one elected thread loads the four planes of each k-tile into a stage.
  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorB> const& load_inputs, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int thread_idx,
                           uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    if (!cute::elect_one_sync()) return;
    Tensor sA_hi = make_tensor(make_smem_ptr(shared_tensors.smem_A_hi.data()), SmemLayoutA{});
    Tensor sA_lo = make_tensor(make_smem_ptr(shared_tensors.smem_A_lo.data()), SmemLayoutA{});
    Tensor sB_hi = make_tensor(make_smem_ptr(shared_tensors.smem_B_hi.data()), SmemLayoutB{});
    Tensor sB_lo = make_tensor(make_smem_ptr(shared_tensors.smem_B_lo.data()), SmemLayoutB{});

    constexpr uint32_t cluster_shape_x = get<0>(ClusterShape());
    uint2 cluster_local_block_id = {block_rank_in_cluster % cluster_shape_x, block_rank_in_cluster / cluster_shape_x};
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    Tensor gA = get<0>(load_inputs)(_, _, m_coord, _, l_coord);  // (BLK_M,BLK_K,k)
    Tensor gB = get<1>(load_inputs)(_, _, n_coord, _, l_coord);  // (BLK_N,BLK_K,k)

    // hi and lo descriptors partition alike: one slice per operand gives the coordinates of both.
    auto block_tma_a = params.tma_load_a_hi.get_slice(cluster_local_block_id.y);
    auto block_tma_b = params.tma_load_b_hi.get_slice(cluster_local_block_id.x);
    Tensor tAgA = block_tma_a.partition_S(gA);  // (TMA,TMA_M,TMA_K,k)
    Tensor tAsA_hi = block_tma_a.partition_D(sA_hi);
    Tensor tAsA_lo = block_tma_a.partition_D(sA_lo);
    Tensor tBgB = block_tma_b.partition_S(gB);  // (TMA,TMA_N,TMA_K,k)
    Tensor tBsB_hi = block_tma_b.partition_D(sB_hi);
    Tensor tBsB_lo = block_tma_b.partition_D(sB_lo);

    uint16_t mcast_mask_a = 0, mcast_mask_b = 0;
    auto block_layout = Layout<typename DispatchPolicy::ClusterShape>{};  // (m,n) -> block_id
    if constexpr (cute::is_same_v<GmemTiledCopyA, SM90_TMA_LOAD_MULTICAST>) {
      for (int n = 0; n < size<1>(block_layout); ++n) {
        mcast_mask_a |= (uint16_t(1) << block_layout(cluster_local_block_id.x, n, Int<0>{}));
      }
    }
    if constexpr (cute::is_same_v<GmemTiledCopyB, SM90_TMA_LOAD_MULTICAST>) {
      for (int m = 0; m < size<0>(block_layout); ++m) {
        mcast_mask_b |= (uint16_t(1) << block_layout(m, cluster_local_block_id.y, Int<0>{}));
      }
    }

    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);
      auto* tma_barrier = pipeline.producer_get_barrier(smem_pipe_write);
      int stage = smem_pipe_write.index();
      auto k = *k_tile_iter;
      copy(params.tma_load_a_hi.with(*tma_barrier, mcast_mask_a), tAgA(_, _, _, k), tAsA_hi(_, _, _, stage));
      copy(params.tma_load_b_hi.with(*tma_barrier, mcast_mask_b), tBgB(_, _, _, k), tBsB_hi(_, _, _, stage));
      copy(params.tma_load_a_lo.with(*tma_barrier, mcast_mask_a), tAgA(_, _, _, k), tAsA_lo(_, _, _, stage));
      copy(params.tma_load_b_lo.with(*tma_barrier, mcast_mask_b), tBgB(_, _, _, k), tBsB_lo(_, _, _, stage));
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }

  // Keeps a CTA of a cluster from exiting while its peers may still multicast into it.
  CUTLASS_DEVICE void load_tail(MainloopPipeline pipeline, PipelineState smem_pipe_write) {
    if (cute::elect_one_sync()) pipeline.producer_tail(smem_pipe_write);
  }

  // Consumer: accum = Σ promotions of hi·hi (RN) + 2^LoScaleLog2 · Σ lo terms. Every stage but the last k-tile's
  // is released here; mma_tail releases that one.
  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const& params) {
    static_assert(is_rmem<FrgTensorC>::value, "C tensor must be rmem resident.");
    static_assert(cute::is_void_v<SmemCopyAtomA> && cute::is_void_v<SmemCopyAtomB>,
                  "SM90 GMMA mainloops cannot have a non-void copy atom for smem sourced instructions.");
    Tensor sA_hi = make_tensor(make_smem_ptr(shared_tensors.smem_A_hi.data()), SmemLayoutA{});
    Tensor sA_lo = make_tensor(make_smem_ptr(shared_tensors.smem_A_lo.data()), SmemLayoutA{});
    Tensor sB_hi = make_tensor(make_smem_ptr(shared_tensors.smem_B_hi.data()), SmemLayoutB{});
    Tensor sB_lo = make_tensor(make_smem_ptr(shared_tensors.smem_B_lo.data()), SmemLayoutB{});

    constexpr int MmaWarpGroups = size(TiledMma{}) / NumThreadsPerWarpGroup;
    Layout warp_group_thread_layout = make_layout(Int<MmaWarpGroups>{}, Int<NumThreadsPerWarpGroup>{});
    int warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / NumThreadsPerWarpGroup, 0);
    // Two MMAs with their own "first write zeroes" flag: hi·hi restarts at each promotion, the lo terms once.
    TiledMma mma_hh, mma_lo;
    auto thread_mma = mma_hh.get_slice(warp_group_thread_layout(warp_group_idx));
    Tensor tCrA_hi = thread_mma.make_fragment_A(thread_mma.partition_A(sA_hi));  // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCrA_lo = thread_mma.make_fragment_A(thread_mma.partition_A(sA_lo));
    Tensor tCrB_hi = thread_mma.make_fragment_B(thread_mma.partition_B(sB_hi));  // (MMA,MMA_N,MMA_K,PIPE)
    Tensor tCrB_lo = thread_mma.make_fragment_B(thread_mma.partition_B(sB_lo));
    CUTE_STATIC_ASSERT_V(size<1>(tCrA_hi) == size<1>(accum));
    CUTE_STATIC_ASSERT_V(size<1>(tCrB_hi) == size<2>(accum));

    Tensor hh = make_fragment_like(accum);  // hi·hi since the last promotion, in the Tensor Core
    Tensor lo = make_fragment_like(accum);  // lo·hi + hi·lo over the whole K, in the Tensor Core
    clear(accum);
    mma_hh.accumulate_ = GMMA::ScaleOut::Zero;
    mma_lo.accumulate_ = GMMA::ScaleOut::Zero;
    uint32_t tiles_since_promotion = 0;
    PipelineState smem_pipe_release = smem_pipe_read;
    bool release_previous = false;
    warpgroup_fence_operand(accum);

    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, barrier_token);
      int stage = smem_pipe_read.index();

      warpgroup_fence_operand(hh);
      warpgroup_fence_operand(lo);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA_hi); ++k_block) {
        cute::gemm(mma_hh, tCrA_hi(_, _, k_block, stage), tCrB_hi(_, _, k_block, stage), hh);
        mma_hh.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA_hi); ++k_block) {
        cute::gemm(mma_lo, tCrA_lo(_, _, k_block, stage), tCrB_hi(_, _, k_block, stage), lo);
        mma_lo.accumulate_ = GMMA::ScaleOut::One;
        cute::gemm(mma_lo, tCrA_hi(_, _, k_block, stage), tCrB_lo(_, _, k_block, stage), lo);
      }
      warpgroup_commit_batch();

      // This k-tile's hi·hi and the previous k-tile's lo batch are done; this k-tile's lo batch may still run.
      warpgroup_wait<1>();
      warpgroup_fence_operand(hh);
      if (++tiles_since_promotion == params.promotion_interval) {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(accum); ++i) accum(i) += hh(i);
        mma_hh.accumulate_ = GMMA::ScaleOut::Zero;
        tiles_since_promotion = 0;
      }
      if (release_previous) {
        pipeline.consumer_release(smem_pipe_release);
        ++smem_pipe_release;
      }
      release_previous = true;
      ++smem_pipe_read;
    }

    warpgroup_wait<0>();
    warpgroup_fence_operand(hh);
    warpgroup_fence_operand(lo);
    if (tiles_since_promotion > 0) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(accum); ++i) accum(i) += hh(i);
    }
    constexpr float lo_scale = LoScaleLog2 >= 0 ? float(1 << LoScaleLog2) : 1.0f / float(1 << -LoScaleLog2);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accum); ++i) accum(i) = fmaf(lo(i), lo_scale, accum(i));
    warpgroup_fence_operand(accum);
  }

  // Releases the last k-tile's stage (mma kept it until its lo batch was done).
  CUTLASS_DEVICE void mma_tail(MainloopPipeline pipeline, PipelineState smem_pipe_release, int k_tile_count) {
    if (k_tile_count <= 0) return;
    smem_pipe_release.advance(k_tile_count - 1);
    warpgroup_wait<0>();
    pipeline.consumer_release(smem_pipe_release);
  }
};

}  // namespace cutlass::gemm::collective
