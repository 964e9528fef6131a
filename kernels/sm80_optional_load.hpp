// C in the packed halfhalf kernel's epilogue: CUTLASS's VisitorAuxLoad that reads nothing when it is given no
// pointer (no C, or beta = 0). Its registers stay cleared, so the epilogue reads no memory it does not use (the
// plain visitor has no null source: a stand-in pointer would be read uninitialized, as compute-sanitizer's
// initcheck reports).
#pragma once

#include <utility>

#include "cutlass/epilogue/threadblock/fusion/visitor_load.hpp"

namespace cutlass_ext {

template <class ThreadMap, class Element, class StrideMNL>
struct VisitorOptionalLoad : cutlass::epilogue::threadblock::VisitorAuxLoad<ThreadMap, Element, StrideMNL> {
  using Base = cutlass::epilogue::threadblock::VisitorAuxLoad<ThreadMap, Element, StrideMNL>;
  using Base::Base;

  template <class GTensor, class RTensor, class CTensor, class ProblemShape>
  struct Callbacks : Base::template Callbacks<GTensor, RTensor, CTensor, ProblemShape> {
    using Loading = typename Base::template Callbacks<GTensor, RTensor, CTensor, ProblemShape>;
    using Loading::Loading;

    CUTLASS_DEVICE void begin_step(int step_idx) {
      if (this->params_ptr->ptr_aux == nullptr) {
        cute::clear(this->tC_rAux(cute::_, cute::_, cute::_, step_idx % Base::Stages));
        return;
      }
      Loading::begin_step(step_idx);
    }
  };

  template <class ProblemShape>
  CUTLASS_DEVICE auto get_callbacks(cutlass::gemm::GemmCoord threadblock_tile_offset, int thread_idx,
                                    ProblemShape problem_shape) {
    auto loading = Base::get_callbacks(threadblock_tile_offset, thread_idx, problem_shape);
    return Callbacks<decltype(loading.tC_gAux), decltype(loading.tC_rAux), decltype(loading.tC_cAux), ProblemShape>(
        std::move(loading.tC_gAux), std::move(loading.tC_rAux), std::move(loading.tC_cAux), problem_shape,
        loading.params_ptr);
  }
};

}  // namespace cutlass_ext
