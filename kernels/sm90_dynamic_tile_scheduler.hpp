// A persistent tile scheduler for CUTLASS's sm90 warp-specialized cooperative kernel that hands out output tiles
// in the order the CTAs come for them, from a counter in global memory, instead of CUTLASS's fixed stride (CTA i
// runs tiles i, i + grid, i + 2·grid, ...).
//
// Why: under the fixed stride every CTA runs the same number of tiles whatever its speed, so the kernel ends with
// its slowest SM. At 8192³ (4096 tiles of 128x128 over 132 CTAs) ncu showed the SMs idle for 7.6% of the kernel's
// span while the last CTAs finished, though the mainloop itself needed fewer cycles than cuBLAS's. Taken from a
// counter, a tile goes to whichever CTA is free first, and the CTAs finish within about one tile of each other.
//
// How: the kernel already runs a dynamic scheduler on its producer warpgroup's second warp (written for sm100's
// cluster launch control), through the interface below: that warp claims the next tile (`advance_to_next_work`,
// here an atomicAdd) once the mainloop's load warp has started the CTA's current tile (the throttle pipeline), and
// posts its index in shared memory; the load warp, both MMA warpgroups and the scheduler warp itself read it
// (`fetch_next_work`). Each CTA's first tile is the one CUTLASS's stride gives it, so the counter starts at 0 for
// the second round: a 4-byte workspace that `initialize_workspace` zeroes before each launch (a memset in the
// same stream, captured with the kernel in a CUDA graph). The tile order (raster, swizzle) is CUTLASS's: only the
// assignment of tiles to CTAs is dynamic.
//
// One CTA per cluster only: a cluster's CTAs share TMA multicasts and must run paired tiles, which would take the
// claim to be shared across the cluster through distributed shared memory.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/pipeline/sm90_pipeline.hpp"
#include "cutlass/workspace.h"

namespace cutlass_ext {

// The tag that selects DynamicTileSchedulerSm90 in CUTLASS's GemmUniversal.
struct DynamicScheduler {};

// The pipeline that carries claimed tile indices from the scheduler warp to the CTA's other warps: CUTLASS's
// PipelineAsync (a store to shared memory and an mbarrier arrive per index), with the two parameters the kernel
// sets for sm100's hardware responses, which have no use here (the producer is this CTA, and nothing counts bytes).
template <uint32_t Stages>
class TileIndexPipeline : public cutlass::PipelineAsync<Stages> {
  using Base = cutlass::PipelineAsync<Stages>;

 public:
  struct Params : Base::Params {
    uint32_t producer_blockid = 0;
    uint32_t transaction_bytes = 0;
  };

  CUTLASS_DEVICE TileIndexPipeline(typename Base::SharedStorage& storage, Params const& params)
      : Base(storage, params) {}
};

class DynamicTileSchedulerSm90 : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90 {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90;

 public:
  static constexpr bool IsDynamicPersistent = true;
  // Claimed tiles in flight per CTA: the scheduler warp claims one tile ahead of the load warp, whose tile is
  // one ahead of the MMA warpgroups'.
  static constexpr uint32_t Stages = 2;

  struct CLCResponse {  // the kernel's name for one posted claim
    uint32_t linear_idx;
  };
  using Pipeline = TileIndexPipeline<Stages>;
  using PipelineStorage = typename Pipeline::SharedStorage;
  using ThrottlePipeline = cutlass::PipelineAsync<Stages>;
  using ThrottlePipelineStorage = typename ThrottlePipeline::SharedStorage;

  class SharedStorage {
   public:
    CUTLASS_DEVICE PipelineStorage& pipeline() { return pipeline_; }
    CUTLASS_DEVICE ThrottlePipelineStorage& throttle_pipeline() { return throttle_pipeline_; }
    CUTLASS_DEVICE CLCResponse* data() { return responses_; }

   private:
    alignas(16) PipelineStorage pipeline_;
    alignas(16) ThrottlePipelineStorage throttle_pipeline_;
    alignas(16) CLCResponse responses_[Stages];
  };

  using Arguments = Base::Arguments;
  struct Params : Base::Params {
    uint32_t* tile_counter = nullptr;  // tiles claimed after each CTA's first (the workspace)
  };

  template <class ProblemShapeMNKL, class TileShape, class ClusterShape>
  static Params to_underlying_arguments(ProblemShapeMNKL problem_shape_mnkl, TileShape tile_shape,
                                        ClusterShape cluster_shape, cutlass::KernelHardwareInfo const& hw_info,
                                        Arguments const& arguments, void* workspace = nullptr,
                                        uint32_t epilogue_subtile = 1, uint32_t ktile_start_alignment_count = 1u) {
    static_assert(cute::size(ClusterShape{}) == 1, "the dynamic tile scheduler runs one CTA per cluster");
    Params params;
    static_cast<Base::Params&>(params) =
        Base::to_underlying_arguments(problem_shape_mnkl, tile_shape, cluster_shape, hw_info, arguments, workspace,
                                      epilogue_subtile, ktile_start_alignment_count);
    params.tile_counter = static_cast<uint32_t*>(workspace);
    return params;
  }

  template <class ProblemShape, class ElementAccumulator>
  static size_t get_workspace_size(Arguments const&, ProblemShape, cutlass::KernelHardwareInfo const&, uint32_t,
                                   const uint32_t = 1, uint32_t = 1) {
    return sizeof(uint32_t);
  }

  template <class ProblemShape, class ElementAccumulator>
  static cutlass::Status initialize_workspace(Arguments const&, void* workspace, cudaStream_t stream, ProblemShape,
                                              cutlass::KernelHardwareInfo const&, uint32_t, const uint32_t = 1,
                                              uint32_t = 1, cutlass::CudaHostAdapter* cuda_adapter = nullptr) {
    return cutlass::zero_workspace(workspace, sizeof(uint32_t), stream, cuda_adapter);
  }

  CUTLASS_DEVICE explicit DynamicTileSchedulerSm90(Params const& params)
      : Base(params), tile_counter_(params.tile_counter) {
#if defined(__CUDA_ARCH__)
    first_claimed_idx_ = uint32_t(gridDim.x) * gridDim.y * gridDim.z;  // the grid's first tiles are not claimed
#endif
  }

  CUTLASS_DEVICE void set_data_ptr(CLCResponse* responses) { responses_ = responses; }

  // Scheduler warp: claims the CTA's next tile and posts its index. Called by the whole warp.
  template <class TileSchedulerPipeline, class TileSchedulerPipelineState>
  CUTLASS_DEVICE TileSchedulerPipelineState advance_to_next_work(TileSchedulerPipeline& pipeline,
                                                                 TileSchedulerPipelineState state) {
    if (cute::elect_one_sync()) {
      pipeline.producer_acquire(state);
      responses_[state.index()].linear_idx = first_claimed_idx_ + atomicAdd(tile_counter_, 1u);
      pipeline.producer_commit(state);  // the arrive releases the store to the CTA's readers
    }
    __syncwarp();
    ++state;
    return state;
  }

  // Every warp that runs tiles: the next posted tile (invalid past the last), read by each of its threads.
  template <class TileSchedulerPipeline, class TileSchedulerPipelineState>
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo, TileSchedulerPipeline& pipeline,
                                      TileSchedulerPipelineState state) {
    pipeline.consumer_wait(state);
    uint32_t linear_idx = responses_[state.index()].linear_idx;
    pipeline.consumer_release(state);
    return cute::make_tuple(get_current_work_for_linear_idx(linear_idx), true);
  }

  // The kernel asks this only for warpgroups without work in a tile, which this scheduler never makes.
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo) { return cute::make_tuple(WorkTileInfo::invalid_work_tile(), true); }

  // Which tile is a CTA's last is not known until it claims past the end, so the early launch of the next grid
  // (programmatic dependent launch) waits for this one's end.
  CUTLASS_DEVICE bool is_last_tile(WorkTileInfo const&, uint32_t = 1) const { return false; }

 private:
  uint32_t* tile_counter_ = nullptr;
  uint32_t first_claimed_idx_ = 0;
  CLCResponse* responses_ = nullptr;
};

}  // namespace cutlass_ext

namespace cutlass::gemm::kernel::detail {

template <class TileShape, class ClusterShape, uint32_t SchedulerPipelineStageCount>
struct TileSchedulerSelector<cutlass_ext::DynamicScheduler, arch::Sm90, TileShape, ClusterShape,
                             SchedulerPipelineStageCount> {
  using Scheduler = cutlass_ext::DynamicTileSchedulerSm90;
};

}  // namespace cutlass::gemm::kernel::detail
