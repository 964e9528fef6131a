// A CUTLASS sm90 mainloop collective whose producer lets the next kernel launch (programmatic dependent launch:
// griddepcontrol.launch_dependents) as soon as it has issued its CTA's last TMA load.
//
// Why: a decode GEMM streams its weights from DRAM and is done with DRAM once its last stages are on the way; what
// follows (those loads landing, the last wgmmas, the epilogue, the grid's exit and flush) leaves DRAM idle unless the
// next kernel's CTAs are already resident and reading. CUTLASS's kernels signal after their consumers' last mainloop,
// later than that. With CTAs small enough that two share an SM (Sm90Fp8Gemm's CtasPerSm = 2), the next GEMM's CTAs
// start beside this one's, ask L2 for their first k-blocks of weights (sm90_l2_prefetch_mainloop.hpp) and wait
// (griddepcontrol.wait) for this grid to finish and flush before anything else: the signal changes only when the next
// kernel starts, never what it reads.
//
// For kernels with one tile per CTA (CUTLASS's KernelTmaWarpSpecialized): a persistent CTA's producer runs `load`
// once per tile. Everything but the signal is the stock collective (`Base`).
#pragma once

#include "cutlass/arch/grid_dependency_control.h"
#include "cutlass/cutlass.h"

namespace cutlass_ext {

template <class Base>
struct EarlyDependentLaunchMainloop : Base {
  template <class... Args>
  CUTLASS_DEVICE void load(Args&&... args) {
    Base::load(static_cast<Args&&>(args)...);
    cutlass::arch::launch_dependent_grids();  // once per CTA takes effect; a no-op without programmatic launch
  }
};

}  // namespace cutlass_ext
