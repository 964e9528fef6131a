// A blockwise-scaled FP8 mainloop for programmatic dependent launch (PDL): the kernel may start while the grid
// before it drains, and before it waits for that grid (griddepcontrol.wait) it asks L2 for the first k-blocks of
// the weights its CTA's first tile reads.
//
// Why: at decode a call's time is mostly a fixed cost (H200, 128x128 weight blocks: ~5.6 µs plus ~0.17 µs per
// k-block a CTA runs, docs/design-notes.md §4.8): the launch, the prologue, then a DRAM round trip before the first
// stage lands. Launched early, the prologue overlaps the previous grid's tail, and the weights, which no earlier
// grid writes, are already on their way. Only L2 is touched before the wait (no shared memory), so what the TMA
// loads read after it is what a kernel without the prefetch reads (the per-tensor family's decode kernels do the
// same: sm90_l2_prefetch_mainloop.hpp).
//
// Every warp that reads global memory must wait first. CUTLASS 4.2's cooperative kernel waits in its operand and
// epilogue producers but not in the warp that loads the block scales (`load_auxiliary`; its ping-pong kernel does):
// the scales an earlier grid just wrote could be read stale. So this collective waits there, and in the consumers
// before their tiles (the epilogue's bias reads), where the wait costs nothing once the earlier grid is done.
// Everything else is `Base`'s (the stock, overlapped or 64-row-wave mainloop).
#pragma once

#include <utility>

#include "cutlass/arch/grid_dependency_control.h"
#include "cutlass/cutlass.h"

#include "sm90_l2_prefetch_mainloop.hpp"

namespace cutlass_ext::fp8_block {

// WeightsAreA: the weights are the kernel's A (swapped decode kernels), else its B. The arguments, parameters and
// the prefetch are the per-tensor decode mainloop's (L2PrefetchMainloop over this Base: it repeats the kernel's
// scheduler to find the CTA's first tile); its TMA loads with cache hints are not taken (Base's load stays).
template <class Base, class TileShape, class ClusterShape, bool WeightsAreA>
struct ProgrammaticMainloop : Base {
  using Prefetching = L2PrefetchMainloop<Base, TileShape, ClusterShape, WeightsAreA>;
  using Arguments = typename Prefetching::Arguments;
  using Params = typename Prefetching::Params;

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void* workspace) {
    return Prefetching::to_underlying_arguments(problem_shape, args, workspace);
  }

  // One thread, before the kernel's waits.
  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    Prefetching::prefetch_tma_descriptors(params);
  }

  template <class... Args>
  CUTLASS_DEVICE void load_auxiliary(Args&&... args) {
    cutlass::arch::wait_on_dependent_grids();
    Base::load_auxiliary(std::forward<Args>(args)...);
  }

  template <class... Args>
  CUTLASS_DEVICE void mma(Args&&... args) {
    cutlass::arch::wait_on_dependent_grids();
    Base::mma(std::forward<Args>(args)...);
  }
};

}  // namespace cutlass_ext::fp8_block
