// An sm90 epilogue that writes D into the shared memory of the tile's last mainloop stage and TMA-stores it from
// there, so that the mainloop's stages take (nearly) all of shared memory: a seventh 32 KB stage at 128x128x128 FP8.
//
// Why: at 256 x 57344 x 8192 the mainloop waits on its loads; a seventh stage gives them one more k-block of
// lookahead (~4.5% faster with the epilogue held equal), but CUTLASS's TMA epilogue needs 16 KB of its own and
// storing from registers costs more than the stage gains. The last stage of a tile is free once both warpgroups'
// wgmmas on it retire: 32 KB, exactly a 128x128 tile of 16-bit D. Measured: 2.3% faster under the board's power
// cap, bit for bit the same output as the EVT epilogue (docs/design-notes.md, FP8 epilogues).
//
// How: the mainloop keeps the tile's last stage instead of releasing it (HoldLastStageMainloop); the epilogue
// writes each warpgroup's 64 rows into that stage (warpgroup 0 into its A half, 1 into its B half) as 64x64 boxes
// with 128-byte swizzle, and one thread per warpgroup TMA-stores them. The next tile's mma releases the stage once
// that thread's stores have read it, after the next tile's first wgmmas are issued, so the Tensor Core is not idle
// meanwhile. The last tile's stage is never released: the producer's tail waits for all stages but that one.
// D = row_scale[m] · (column_scale[n] · acc) + bias[n] with the EVT's roundings (sm90_fp8_gemm.cuh); row-wise
// column scales and the bias pass through 1.5 KB of shared memory, one tile's worth per buffer.
//
// OwnBuffer: the same epilogue writing D into a tile-sized buffer of its own instead of a held stage (the
// mainloop keeps CUTLASS's stage count and releases every stage): the output of CUTLASS's TMA epilogue, bit for
// bit, in less than half its compile (18 s against 41 for a 128x128x128 kernel's device code on two cores). Each
// warpgroup's store thread waits for its previous tile's stores to have read the buffer before the tile's writes;
// they were issued a mainloop earlier.
#pragma once

#include "cute/arch/copy_sm90_tma.hpp"
#include "cute/atom/copy_traits_sm90_tma.hpp"
#include "cute/atom/mma_traits_sm90_gmma.hpp"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/detail.hpp"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/numeric_conversion.h"

#include "sm90_scale_bias_arguments.hpp"

namespace cutlass_ext {

namespace stage_epilogue {
// CUTLASS's user named barriers (it reserves the ids below them).
constexpr uint32_t kBothWarpGroupsBarrier = 0;
constexpr uint32_t kWarpGroupBarrier = 1;  // + the consumer warpgroup's index
// The thread of each consumer warpgroup that issues its TMA stores, and so is the one that can wait for them.
constexpr int kStoreThread = 0;

CUTLASS_DEVICE void warpgroup_sync(int thread_idx) {
  cutlass::arch::NamedBarrier::sync(cutlass::NumThreadsPerWarpGroup,
                                    kWarpGroupBarrier + thread_idx / cutlass::NumThreadsPerWarpGroup);
}
}  // namespace stage_epilogue

// The mainloop's shared memory as the kernel lays it out right after the epilogue's (empty) one:
// GemmUniversal's TensorStorage is { EpilogueTensorStorage epilogue; MainloopTensorStorage mainloop; }.
template <class EpilogueStorage, class MainloopStorage>
struct KernelTensorStorageMirror : cute::aligned_struct<128, cute::_1> {
  EpilogueStorage epilogue;
  MainloopStorage mainloop;
};

// The epilogue's own shared memory: a tile's row-wise column scales and bias, in two buffers (a warpgroup fills the
// next tile's before it waits for the other warpgroup, which may still read this tile's).
template <class ElementD, int TileN>
struct StageEpilogueColumns {
  float column_scale[2][TileN];
  ElementD bias[2][TileN];
};

// With a buffer of its own for D: 64x64 boxes, each 1024-byte aligned as TMA's 128-byte swizzle repeats.
template <class ElementD, int TileM, int TileN>
struct BufferEpilogueStorage : StageEpilogueColumns<ElementD, TileN> {
  alignas(1024) ElementD d[TileM * TileN];
};

template <class ElementD_, class TileShape, class MainloopStorage, int Stages, bool OwnBuffer = false>
class StageEpilogue {
 public:
  using EpilogueSchedule = cutlass::epilogue::NoSmemWarpSpecialized;
  using DispatchPolicy = EpilogueSchedule;
  using ElementC = void;
  using StrideC = cute::Stride<int64_t, cute::_1, int64_t>;
  using ElementD = ElementD_;
  using StrideD = StrideC;
  using ElementOutput = ElementD;
  using ElementAccumulator = float;
  using ElementCompute = float;
  using ElementScalar = float;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  using ThreadEpilogueOp = cutlass::epilogue::thread::LinearCombination<ElementD, 1, float, float>;  // a name only

  static constexpr int kTileM = cute::size<0>(TileShape{});
  static constexpr int kTileN = cute::size<1>(TileShape{});
  static constexpr int kTileK = cute::size<2>(TileShape{});
  using SharedStorage = cute::conditional_t<OwnBuffer, BufferEpilogueStorage<ElementD, kTileM, kTileN>,
                                            StageEpilogueColumns<ElementD, kTileN>>;
  using TensorStorage = SharedStorage;
  static_assert(sizeof(ElementD) == 2 && kTileM == 128 && kTileK == 128 && kTileN % 64 == 0 && kTileN <= 128,
                "a warpgroup's 64 rows of 16-bit D fit its half of one 128x128 FP8 stage");
  static constexpr int kStageBytesA = kTileM * kTileK;  // FP8
  static constexpr int kStageBytesB = kTileN * kTileK;
  static constexpr int kBoxBytes = 64 * 64 * int(sizeof(ElementD));

  // One 64x64 box of D as TMA stores it: rows of 128 bytes, 16-byte chunks swizzled by the row (SWIZZLE_128B).
  using SmemLayoutBox =
      decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<ElementD>{}, cute::Shape<cute::_64, cute::_64>{}));
  using TmaD = decltype(cute::make_tma_copy(
      cute::SM90_TMA_STORE{},
      cute::make_tensor(cute::make_gmem_ptr(static_cast<ElementD*>(nullptr)), cute::make_shape(int32_t(0), int32_t(0)),
                        cute::make_stride(int64_t(0), cute::_1{})),
      SmemLayoutBox{}));

  struct Arguments : ScaleBiasArguments<ElementD> {
    void const* ptr_C = nullptr;
    StrideC dC{};
    ElementD* ptr_D = nullptr;
    StrideD dD{};
  };
  struct Params {
    float const* row_scale;
    bool row_scale_rowwise;
    float const* column_scale;
    bool column_scale_rowwise;
    ElementD const* bias;
    TmaD tma_d;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void*) {
    auto [m, n, k, l] = cute::append<4>(problem_shape, 1);
    auto mD = cute::make_tensor(cute::make_gmem_ptr(args.ptr_D), cute::make_shape(int32_t(m), int32_t(n)),
                                cute::make_stride(cute::get<0>(args.dD), cute::_1{}));
    return {args.row_scale,   args.row_scale_rowwise, args.column_scale, args.column_scale_rowwise,
            args.bias,        cute::make_tma_copy(cute::SM90_TMA_STORE{}, mD, SmemLayoutBox{})};
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) { return 0; }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto [m, n, k, l] = cute::append<4>(problem_shape, 1);
    return l == 1 && reinterpret_cast<uintptr_t>(args.ptr_D) % 16 == 0 && cute::get<0>(args.dD) % 8 == 0;
  }

  // A reference to the kernel's parameters: TMA reads the descriptor there (it cannot be a local copy).
  // (No default SharedStorage argument: with OwnBuffer it is a 34 KB temporary.)
  CUTLASS_HOST_DEVICE explicit StageEpilogue(Params const& params_) : params(params_) {}
  CUTLASS_HOST_DEVICE StageEpilogue(Params const& params_, SharedStorage const&) : params(params_) {}
  CUTLASS_DEVICE bool is_source_needed() { return false; }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK, BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators, TiledMma, ResidueMNK,
                                 int thread_idx, char* epilogue_storage) {
    using namespace cute;
    int M = int(get<0>(problem_shape_mnkl));
    int N = int(get<1>(problem_shape_mnkl));
    int k_blocks = (int(get<2>(problem_shape_mnkl)) + kTileK - 1) / kTileK;
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;
    int warp_group = thread_idx / cutlass::NumThreadsPerWarpGroup;
    int t = thread_idx % cutlass::NumThreadsPerWarpGroup;
    int lane = t % 32, r = lane / 4, q = lane % 4;
    int row0 = 16 * (t / 32) + r;                    // this lane's rows within the warpgroup's 64: row0, row0 + 8
    int m0 = int(m_coord) * kTileM + 64 * warp_group;  // the warpgroup's first row of D
    int n0 = int(n_coord) * kTileN;
    // wgmma's fragment of a 64-row warpgroup tile: element v0 + 2 v1 + 4 g is row row0 + 8 v1, column 8 g + 2 q + v0.
    static_assert(size<0, 0>(FrgLayout{}) == 2 && size<0, 1>(FrgLayout{}) == 2, "wgmma accumulator fragment");
    constexpr int kGroups = size<0, 2>(FrgLayout{});
    static_assert(kGroups * 8 == kTileN && size<1>(FrgLayout{}) == 1 && size<2>(FrgLayout{}) == 1,
                  "one 64-row wgmma per warpgroup spans the tile's n");

    // Scales and bias, loaded before the barrier so that their latency overlaps it. A per-tensor scale is read
    // once per kernel (after the mainloop, so after the kernel's wait for the grid before it).
    if (!scalars_loaded) {
      row_one = params.row_scale_rowwise ? 1.f : *params.row_scale;
      column_one = params.column_scale_rowwise ? 1.f : *params.column_scale;
      scalars_loaded = true;
    }
    float row_scales[2] = {row_one, row_one};
    if (params.row_scale_rowwise) {
      CUTLASS_PRAGMA_UNROLL
      for (int v1 = 0; v1 < 2; ++v1) {
        int m = m0 + row0 + 8 * v1;
        row_scales[v1] = m < M ? params.row_scale[m] : 0.f;
      }
    }
    bool per_column = params.column_scale_rowwise || params.bias != nullptr;
    auto& columns = *reinterpret_cast<SharedStorage*>(epilogue_storage);
    int buffer = tiles_done % 2;
    if (per_column && t < kTileN) {  // warpgroup 0 loads the tile's column scales, 1 its bias
      int n = n0 + t;
      if (warp_group == 0 && params.column_scale_rowwise) {
        columns.column_scale[buffer][t] = n < N ? params.column_scale[n] : 0.f;
      }
      if (warp_group == 1 && params.bias != nullptr) columns.bias[buffer][t] = n < N ? params.bias[n] : ElementD(0);
    }

    // The previous tile's stores have read this warpgroup's half of the buffer (OwnBuffer; a held stage is
    // released only once they have).
    if (OwnBuffer && t == stage_epilogue::kStoreThread) cute::tma_store_wait<0>();
    // Both warpgroups' wgmmas on the last stage have retired (each waited for its own before the epilogue), and
    // the column values are in shared memory.
    cutlass::arch::NamedBarrier::sync(2 * cutlass::NumThreadsPerWarpGroup, stage_epilogue::kBothWarpGroupsBarrier);
    char* half;
    if constexpr (OwnBuffer) {
      half = reinterpret_cast<char*>(reinterpret_cast<SharedStorage*>(epilogue_storage)->d) +
             warp_group * (kTileN / 64) * kBoxBytes;
    } else {
      int stage = (tiles_done * k_blocks + k_blocks - 1) % Stages;
      auto& mainloop = reinterpret_cast<KernelTensorStorageMirror<SharedStorage, MainloopStorage>*>(
                           epilogue_storage)->mainloop;
      half = warp_group == 0 ? reinterpret_cast<char*>(mainloop.smem_A.data()) + stage * kStageBytesA
                             : reinterpret_cast<char*>(mainloop.smem_B.data()) + stage * kStageBytesB;
    }
    ++tiles_done;
    uint32_t half_address = cute::cast_smem_ptr_to_uint(half);
    if constexpr (!OwnBuffer) {
      cutlass::arch::fence_view_async_shared();  // the stage was last read by wgmma (the async proxy)
    }

    cutlass::NumericConverter<ElementD, float, cutlass::FloatRoundStyle::round_to_nearest> to_d;
    cutlass::NumericConverter<float, ElementD> from_d;
    CUTLASS_PRAGMA_UNROLL
    for (int g = 0; g < kGroups; ++g) {
      // this lane's two columns of group g (the same for both its rows)
      float column_scales[2] = {column_one, column_one};
      float biases[2] = {0.f, 0.f};
      if (per_column) {
        CUTLASS_PRAGMA_UNROLL
        for (int v0 = 0; v0 < 2; ++v0) {
          int column = 8 * g + 2 * q + v0;
          if (params.column_scale_rowwise) column_scales[v0] = columns.column_scale[buffer][column];
          if (params.bias != nullptr) biases[v0] = from_d(columns.bias[buffer][column]);
        }
      }
      CUTLASS_PRAGMA_UNROLL
      for (int v1 = 0; v1 < 2; ++v1) {
        int row = row0 + 8 * v1;
        cutlass::Array<ElementD, 2> pair;
        CUTLASS_PRAGMA_UNROLL
        for (int v0 = 0; v0 < 2; ++v0) {
          float acc = accumulators(v0 + 2 * v1 + 4 * g);
          pair[v0] = to_d(fmaf(row_scales[v1], column_scales[v0] * acc, biases[v0]));  // as the EVT rounds
        }
        // box g / 8, row `row`, 16-byte chunk g % 8, 4 bytes q; TMA's 128-byte swizzle XORs the chunk with bits 7-9
        // of the shared memory address (the stage need not start on a 1024-byte boundary)
        uint32_t address = half_address + (g / 8) * kBoxBytes + row * 128 + (g % 8) * 16 + q * 4;
        address ^= ((address >> 7) & 7) << 4;
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(address), "r"(reinterpret_cast<uint32_t const&>(pair)));
      }
    }
    cutlass::arch::fence_view_async_shared();  // the writes above, visible to the TMA store
    stage_epilogue::warpgroup_sync(thread_idx);
    if (t == stage_epilogue::kStoreThread) {
      Tensor mD = params.tma_d.get_tma_tensor(make_shape(M, N));
      CUTLASS_PRAGMA_UNROLL
      for (int box = 0; box < kTileN / 64; ++box) {
        Tensor sD = make_tensor(make_smem_ptr(reinterpret_cast<ElementD*>(half + box * kBoxBytes)), SmemLayoutBox{});
        Tensor gD = local_tile(mD, Shape<_64, _64>{}, make_coord(m0 / 64, n0 / 64 + box));
        auto cta_tma = params.tma_d.get_slice(Int<0>{});
        copy(params.tma_d, cta_tma.partition_S(sD), cta_tma.partition_D(gD));
      }
      tma_store_arrive();
    }
  }

 private:
  Params const& params;
  int tiles_done = 0;
  bool scalars_loaded = false;
  float row_one = 1.f, column_one = 1.f;
};

// The adapter CUTLASS's kernels take, and the kernel's last store drained before the CTA exits.
template <class Epilogue>
struct StageEpilogueAdapter : cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Epilogue> {
  using Base = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Epilogue>;
  using Base::Base;
  template <class... Args>
  CUTLASS_DEVICE auto store_tail(Args... args) {
    if (threadIdx.x % cutlass::NumThreadsPerWarpGroup == stage_epilogue::kStoreThread) cute::tma_store_wait<0>();
    return Base::store_tail(args...);
  }
};

// A mainloop that leaves each tile's last stage to the StageEpilogue and releases it during the next tile's mma.
template <class Base>
struct HoldLastStageMainloop : Base {
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  static constexpr int kStages = Base::DispatchPolicy::Stages;

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const& params) {
    auto release_held = [&] {
      if (!holding) return;
      if (thread_idx % cutlass::NumThreadsPerWarpGroup == stage_epilogue::kStoreThread) cute::tma_store_wait<0>();
      stage_epilogue::warpgroup_sync(thread_idx);  // the stores have read the stage
      pipeline.consumer_release(held);
      holding = false;
    };
    Base::mma(pipeline, smem_pipe_read, accum, k_tile_count, thread_idx, shared_tensors, params, release_held);
    held = smem_pipe_read;
    held.advance(k_tile_count - 1);
    holding = true;
  }

  // The last stage stays with the epilogue (mma already waited for every wgmma).
  CUTLASS_DEVICE void mma_tail(MainloopPipeline, PipelineState, int) {}

  // Waits for the consumers to release every stage but the last loaded one, which they keep (see above).
  CUTLASS_DEVICE void load_tail(MainloopPipeline pipeline, PipelineState smem_pipe_write) {
    if (cute::elect_one_sync()) {
      for (int count = 0; count < kStages - 1; ++count, ++smem_pipe_write) {
        while (pipeline.producer_try_acquire(smem_pipe_write) == cutlass::BarrierStatus::WaitAgain) {
        }
      }
    }
  }

 private:
  PipelineState held{};
  bool holding = false;
};

}  // namespace cutlass_ext
