// CUTLASS 3.x epilogue visitors that compute each output element from its accumulator and a few values read from
// global memory at the element's (m, n): the EVT interface without broadcast nodes, whose instantiation cost a
// Hopper variant ~7 s of its ~30 s of cicc on two cores (each broadcast template one of its own). L1 keeps a
// tile's few row and column values. A visitor derives from Sm90ElementwiseVisitor<Itself, ItsArguments> and
// defines ConsumerStoreCallbacks<Coordinates> (deriving from ElementwiseCallbacks) with its visit().
#pragma once

#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"

namespace cutlass_ext {

template <class Derived, class Arguments_>
struct Sm90ElementwiseVisitor {
  struct SharedStorage {};
  using Arguments = Arguments_;
  using Params = Arguments_;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) {
    return true;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE Sm90ElementwiseVisitor() {}
  CUTLASS_HOST_DEVICE Sm90ElementwiseVisitor(Params const& params, SharedStorage const&) : params(params) {}

  Params params;

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(cutlass::epilogue::fusion::ProducerLoadArgs<Args...> const&) {
    return cutlass::epilogue::fusion::EmptyProducerLoadCallbacks{};
  }

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(
      cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args);
};

// Where a thread's register elements sit in D, from what the collective epilogue hands the visitor: each element's
// coordinates relative to the thread's first (tCcD), and (M, N) less that first element's (residue_tCcD).
template <class CTensor>
struct ElementCoordinates {
  CTensor relative;  // (CPY, CPY_M, CPY_N, EPI_M, EPI_N)
  int first_m, first_n, last_m, last_n, batch;

  template <class... Args>
  CUTLASS_DEVICE explicit ElementCoordinates(cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args)
      : relative(args.tCcD) {
    int rows = int(cute::get<0>(args.problem_shape_mnkl)), columns = int(cute::get<1>(args.problem_shape_mnkl));
    first_m = rows - int(cute::get<0>(args.residue_tCcD));
    first_n = columns - int(cute::get<1>(args.residue_tCcD));
    last_m = rows - 1;
    last_n = columns - 1;
    batch = int(cute::get<3>(args.tile_coord_mnkl));
  }

  // (m, n) of the subtile's (epi_m, epi_n) register element `index`, clamped into D: an element outside D is not
  // stored, and reading its row's and column's values at the edge needs no branch (elements of one row or column
  // then share their loads).
  CUTLASS_DEVICE void at(int index, int epi_m, int epi_n, int& m, int& n) const {
    auto c = relative(cute::_, cute::_, cute::_, epi_m, epi_n)(index);
    m = cute::min(first_m + int(cute::get<0>(c)), last_m);
    n = cute::min(first_n + int(cute::get<1>(c)), last_n);
  }
};

// What a visitor's ConsumerStoreCallbacks hold: where its elements are, and the visitor's parameters.
template <class Coordinates, class Params>
struct ElementwiseCallbacks : cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks {
  CUTLASS_DEVICE ElementwiseCallbacks(Coordinates coordinates, Params const& params)
      : coordinates(coordinates), params(params) {}

  Coordinates coordinates;
  Params const& params;
};

template <class Derived, class Arguments>
template <bool ReferenceSrc, class... Args>
CUTLASS_DEVICE auto Sm90ElementwiseVisitor<Derived, Arguments>::get_consumer_store_callbacks(
    cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args) {
  using Coordinates = ElementCoordinates<decltype(args.tCcD)>;
  return typename Derived::template ConsumerStoreCallbacks<Coordinates>(Coordinates(args), params);
}

}  // namespace cutlass_ext
