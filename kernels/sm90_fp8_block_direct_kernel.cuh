// The directly written block-scaled FP8 kernel's device half (sm90_fp8_block_direct.cuh: nvcc -cubin compiles it
// alone): the producer and math warpgroups, the dense and grouped problems, and the kernels under C names.
#pragma once

#include <cuda_bf16.h>

#include <cute/arch/cluster_sm90.hpp>
#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90_desc.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "sm90_fp8_block_direct_walk.h"

namespace cutlass_ext::fp8_block_direct {

// The L2 policy TMA loads carry (its cache-hint operand is a policy, not a flag: 0 names none).
constexpr uint64_t kEvictNormal = uint64_t(cute::TMA::CacheHintSm90::EVICT_NORMAL);

template <int N>
struct Wgmma;  // m64nNk32, e4m3 x e4m3 -> f32, both operands K-major in shared memory
template <>
struct Wgmma<16> {
  using Op = cute::SM90::GMMA::MMA_64x16x32_F32E4M3E4M3_SS_TN<>;
};
template <>
struct Wgmma<32> {
  using Op = cute::SM90::GMMA::MMA_64x32x32_F32E4M3E4M3_SS_TN<>;
};
template <>
struct Wgmma<64> {
  using Op = cute::SM90::GMMA::MMA_64x64x32_F32E4M3E4M3_SS_TN<>;
};
template <>
struct Wgmma<128> {
  using Op = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>;
};

template <class Op, int... I>
__device__ __forceinline__ void wgmma(uint64_t desc_a, uint64_t desc_b, float* d, bool accumulate,
                                      std::integer_sequence<int, I...>) {
  Op::fma(desc_a, desc_b, d[I]..., accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}

// A wgmma operand descriptor for a tile of 128-byte K-major rows written by TMA with the 128-byte swizzle: 8-row
// core-matrix groups 1024 bytes apart; the leading offset is unused by swizzled K-major layouts.
__device__ __forceinline__ uint64_t operand_descriptor(const void* smem) {
  cute::GmmaDescriptor desc;
  desc.bitfield.start_address_ = static_cast<uint16_t>(cute::cast_smem_ptr_to_uint(smem) >> 4);
  desc.bitfield.leading_byte_offset_ = 0;
  desc.bitfield.stride_byte_offset_ = 1024 >> 4;
  desc.bitfield.base_offset_ = 0;
  desc.bitfield.layout_type_ = 1;  // SWIZZLE_128B
  return desc.desc_;
}

// A 4-byte cp.async, or zeros where `valid` is false (its source then unread).
__device__ __forceinline__ void copy_scale(float* smem, const float* global, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(cute::cast_smem_ptr_to_uint(smem)),
               "l"(global), "r"(valid ? 4 : 0));
}

// The barrier counts one arrival of this thread once its earlier cp.asyncs have landed.
__device__ __forceinline__ void arrive_when_copied(uint64_t* barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(cute::cast_smem_ptr_to_uint(barrier)));
}

// Where the output goes: D (rows, n) bf16 with row stride ldd, and the bias (n bf16, or null) added first.
struct Output {
  void* d;
  int64_t ldd;
  const void* bias;
  int64_t rows, n;
};

__device__ __forceinline__ float bias_at(const Output& o, int col) {
  return o.bias != nullptr ? __bfloat162float(static_cast<const __nv_bfloat16*>(o.bias)[col]) : 0.f;
}

// Stores rows below row_end only (a group's last tile may reach into the rows of the group after it).
__device__ __forceinline__ void store_pair(const Output& o, int row, int row_end, int col, float v0, float v1) {
  if (row >= row_end || row >= o.rows || col >= o.n) return;
  __nv_bfloat16* at = static_cast<__nv_bfloat16*>(o.d) + row * o.ldd + col;
  if (col + 1 < o.n && (reinterpret_cast<uintptr_t>(at) & 3) == 0) {
    *reinterpret_cast<__nv_bfloat162*>(at) = __floats2bfloat162_rn(v0 + bias_at(o, col), v1 + bias_at(o, col + 1));
  } else {
    at[0] = __float2bfloat16_rn(v0 + bias_at(o, col));
    if (col + 1 < o.n) at[1] = __float2bfloat16_rn(v1 + bias_at(o, col + 1));
  }
}

// Where a math warpgroup stands in the ring: the stage it issues from next, and the oldest stage it still holds.
struct Ring {
  int issue = 0, release = 0;
  uint32_t phase = 0;
};

// A k-block multiplied but not yet promoted: its accumulators and its two rows' combined scales.
template <int N>
struct Pending {
  float acc[N];
  float scale0, scale1;
};

// Zeroes columns `from` on of a stage's A and B tiles (the columns of a k-block past its group's last, which TMA
// brought from the next columns of A and B): each math warpgroup its 64 rows of A and its share of B's rows, then
// every math warpgroup waits for the others before any wgmma reads the stage. Byte (r, c) of a 128-byte-swizzled
// tile sits at r * 128 + ((c / 16) ^ (r mod 8)) * 16 + c mod 16.
template <class T, int BN>
__device__ __forceinline__ void clear_columns(typename T::Shared& s, int stage, int from, int group) {
  const int thread = threadIdx.x % kWarpgroup;
  const int first_chunk = (from + 15) / 16, chunks = kBlockK / 16 - first_chunk, bytes = first_chunk * 16 - from;
  auto clear = [&](uint8_t* tile, int rows) {
    for (int i = thread; i < rows * chunks; i += kWarpgroup) {  // whole 16-byte chunks
      const int r = i / chunks, c = first_chunk + i % chunks;
      *reinterpret_cast<uint4*>(tile + r * kBlockK + ((c ^ (r & 7)) << 4)) = make_uint4(0, 0, 0, 0);
    }
    for (int i = thread; i < rows * bytes; i += kWarpgroup) {  // the chunk `from` falls inside, byte by byte
      const int r = i / bytes, c = from + i % bytes;
      tile[r * kBlockK + (((c >> 4) ^ (r & 7)) << 4) + (c & 15)] = 0;
    }
  };
  constexpr int kRowsB = BN / T::kMathGroups;  // a multiple of 8: each share starts on a swizzle atom
  clear(s.a[stage] + 64 * group * kBlockK, 64);
  clear(s.b[stage] + group * kRowsB * kBlockK, kRowsB);
  cutlass::arch::fence_view_async_shared();  // the zeros become visible to wgmma
  asm volatile("bar.sync 3, %0;\n" ::"n"(kWarpgroup * T::kMathGroups));
}

// Waits for the ring's next stage, reads its scales and issues its four wgmmas (from zero) into `into`. Columns
// `zero_from` on of the k-block are zeroed first (kBlockK: none).
template <class T, int BN>
__device__ __forceinline__ void issue(typename T::Shared& s, Ring& ring, Pending<T::kAccumulators>& into, int group,
                                      int scale_row, int zero_from = kBlockK) {
  using Full = cutlass::arch::ClusterTransactionBarrier;
  using Op = typename Wgmma<BN>::Op;
  Full::wait(&s.full[ring.issue], ring.phase);
  if constexpr (T::kColumnScales) {
    if (zero_from < kBlockK) clear_columns<T, BN>(s, ring.issue, zero_from, group);
  }
  const uint64_t desc_a = operand_descriptor(s.a[ring.issue] + 64 * group * kBlockK);
  const uint64_t desc_b = operand_descriptor(s.b[ring.issue]);
#pragma unroll
  for (int i = 0; i < T::kAccumulators; ++i) cute::warpgroup_fence_operand(into.acc[i]);
  cute::warpgroup_arrive();
#pragma unroll
  for (int j = 0; j < kBlockK / kWgmmaK; ++j)  // the descriptor's address is in 16-byte units
    wgmma<Op>(desc_a + j * (kWgmmaK / 16), desc_b + j * (kWgmmaK / 16), into.acc, j > 0,
              std::make_integer_sequence<int, T::kAccumulators>{});
  cute::warpgroup_commit_batch();
  const float sb = T::kColumnScales ? 1.0f : s.scale_b[ring.issue][0];  // column scales: read at promotion
  into.scale0 = T::kColumnScales ? s.scale_a[ring.issue][scale_row] : s.scale_a[ring.issue][scale_row] * sb;
  into.scale1 = T::kColumnScales ? s.scale_a[ring.issue][scale_row + 8] : s.scale_a[ring.issue][scale_row + 8] * sb;
  if (++ring.issue == T::kStages) ring.issue = 0, ring.phase ^= 1;
}

// Waits for the wgmmas of `current` (all but the newest `InFlight` batches), hands its stage back to the producer
// and adds its scaled products into `total`: total = fma(acc, scale_a * scale_b, total), or with a weight scale per
// column (read from the stage before it is handed back) total = fma(acc * scale_a, scale_b, total), as CUTLASS's
// blockwise accumulation computes `total += acc * scale_a * scale_b`.
template <class T, int InFlight, int Cluster>
__device__ __forceinline__ void promote(typename T::Shared& s, Ring& ring, Pending<T::kAccumulators>& current,
                                        float* total, int lane) {
  using Empty = cutlass::arch::ClusterBarrier;
  cute::warpgroup_wait<InFlight>();
#pragma unroll
  for (int i = 0; i < T::kAccumulators; ++i) cute::warpgroup_fence_operand(current.acc[i]);
  if constexpr (T::kColumnScales) {
    const float* scale_b = s.scale_b[ring.release];
#pragma unroll
    for (int j = 0; j < T::kAccumulators / 4; ++j) {
      const int col = 8 * j + 2 * (lane % 4);
      const float2 b = *reinterpret_cast<const float2*>(scale_b + col);  // one 8-byte read: col is even
      const float b0 = b.x, b1 = b.y;
      total[4 * j] = fmaf(__fmul_rn(current.acc[4 * j], current.scale0), b0, total[4 * j]);
      total[4 * j + 1] = fmaf(__fmul_rn(current.acc[4 * j + 1], current.scale0), b1, total[4 * j + 1]);
      total[4 * j + 2] = fmaf(__fmul_rn(current.acc[4 * j + 2], current.scale1), b0, total[4 * j + 2]);
      total[4 * j + 3] = fmaf(__fmul_rn(current.acc[4 * j + 3], current.scale1), b1, total[4 * j + 3]);
    }
  }
  // The stage's operands are read and its scales are in registers: the producer may refill it. The warp
  // converges first, so lane 0's release orders every lane's scale reads. In a cluster, lane i releases the
  // stage of CTA i too: the other CTA's producer writes half of this CTA's A into it.
  __syncwarp();
  if constexpr (Cluster == 1) {
    if (lane == 0) Empty::arrive(&s.empty[ring.release]);
  } else {
    Empty::arrive(&s.empty[ring.release], uint32_t(lane), lane < Cluster);
  }
  if (++ring.release == T::kStages) ring.release = 0;
  if constexpr (!T::kColumnScales) {
#pragma unroll
    for (int i = 0; i < T::kAccumulators; i += 4) {
      total[i] = fmaf(current.acc[i], current.scale0, total[i]);
      total[i + 1] = fmaf(current.acc[i + 1], current.scale0, total[i + 1]);
      total[i + 2] = fmaf(current.acc[i + 2], current.scale1, total[i + 2]);
      total[i + 3] = fmaf(current.acc[i + 3], current.scale1, total[i + 3]);
    }
  }
}

// Adds the bias, rounds to bf16 and stores a math warpgroup's 64 x BN tile (rows below row_end) by TMA through its
// staging buffer in shared memory (the swizzled layout the map reads), or straight from registers where D does not
// suit TMA or the warpgroup's rows end inside D before row_end's group does.
template <class T, int BN>
__device__ __forceinline__ void store_tile(typename T::Shared& s, const CUtensorMap* map_d, const Output& o,
                                           const float* total, int group, int w, int lane, int m0, int row_end,
                                           int n0) {
  const int row = 16 * w + lane / 4;  // within the warpgroup's 64 rows; the thread's second row is row + 8
  const int row0 = m0 + 64 * group + row;
  const bool whole = m0 + 64 * group + 64 <= row_end || row_end >= o.rows;  // TMA clips at D's last row only
  if (map_d == nullptr || !whole) {
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int col = n0 + 8 * j + 2 * (lane % 4);
      store_pair(o, row0, row_end, col, total[4 * j], total[4 * j + 1]);
      store_pair(o, row0 + 8, row_end, col, total[4 * j + 2], total[4 * j + 3]);
    }
    return;
  }
  const bool leader = w == 0 && lane == 0;
  const int barrier = 1 + group;  // a named barrier per math warpgroup (0 is __syncthreads')
  // The buffer's previous tile must have left shared memory before it is overwritten.
  if (leader) cute::tma_store_wait<0>();
  asm volatile("bar.sync %0, 128;\n" ::"r"(barrier));
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int col = 8 * j + 2 * (lane % 4);
    // Columns past n are clipped by the store; their bias is not read.
    const float b0 = n0 + col < o.n ? bias_at(o, n0 + col) : 0.f;
    const float b1 = n0 + col + 1 < o.n ? bias_at(o, n0 + col + 1) : 0.f;
    uint8_t* box = s.d[group * (BN / T::kBoxColumns) + col / T::kBoxColumns];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = row + 8 * half;
      // The TMA swizzle: 16-byte chunk c of a row r goes to chunk c ^ (r mod 8) (128-byte rows), c ^ (r / 2 mod 4)
      // (64-byte rows) or c ^ (r / 4 mod 2) (32-byte rows): the address bits 7 up, masked to the span's chunks,
      // flip bits 4 up.
      const uint32_t offset = r * T::kSwizzleBytes + (col % T::kBoxColumns) * 2;
      const uint32_t swizzled = offset ^ (((offset >> 7) & (T::kSwizzleBytes / 16 - 1)) << 4);
      *reinterpret_cast<__nv_bfloat162*>(box + swizzled) =
          __floats2bfloat162_rn(total[4 * j + 2 * half] + b0, total[4 * j + 2 * half + 1] + b1);
    }
  }
  cutlass::arch::fence_view_async_shared();  // the writes become visible to TMA
  asm volatile("bar.sync %0, 128;\n" ::"r"(barrier));
  if (leader) {
#pragma unroll
    for (int b = 0; b < BN / T::kBoxColumns; ++b)
      cute::SM90_TMA_STORE_2D::copy(map_d, s.d[group * (BN / T::kBoxColumns) + b], n0 + b * T::kBoxColumns,
                                    m0 + 64 * group);
    cute::tma_store_arrive();
  }
}

// The k-blocks a tile multiplies: `count` from `first`, columns `zero_from` on of the last one zeroed (kBlockK:
// none); `valid` false: its output is NaN (the weight-gradient form's invalid groups).
struct KRange {
  int first, count, zero_from;
  bool valid;
};

// What the dense and grouped forms share: every k-block, a weight scale per tile and k-block, bf16 D stored by TMA
// (or from registers where it must), bias where the form has one.
template <class Derived, int BN>
struct RowScaledProblem {
  static constexpr bool kColumnScales = false;
  template <class T>
  __device__ __forceinline__ void store(typename T::Shared& s, const CUtensorMap* map_d, float* total,
                                        int group, int w, int lane, const TileAt& t, const KRange&) const {
    const Derived& self = static_cast<const Derived&>(*this);
    store_tile<T, BN>(s, map_d, self.output(), total, group, w, lane, t.m0, t.row_end, t.n0);
  }
  __device__ __forceinline__ KRange k_range(const TileAt&) const {
    const Derived& self = static_cast<const Derived&>(*this);
    return {0, int((self.p.k + kBlockK - 1) / kBlockK), kBlockK, true};
  }
};

// The dense problem: tiles over (m, n), in clusters of `Cluster` neighbouring tiles along N.
template <int BM, int BN, int Cluster>
struct DenseProblem : RowScaledProblem<DenseProblem<BM, BN, Cluster>, BN> {
  const cutlass_ext_fp8_block_args& p;
  int units;

  __device__ __forceinline__ explicit DenseProblem(const cutlass_ext_fp8_block_args& args)
      : p(args), units(int((args.m + BM - 1) / BM) * int((args.n + BN * Cluster - 1) / (BN * Cluster))) {}
  __device__ __forceinline__ int64_t n() const { return p.n; }
  __device__ __forceinline__ bool find(int unit) { return unit < units; }
  __device__ __forceinline__ TileAt tile(int unit, int rank) const {
    return dense_tile<BM, BN, Cluster>(unit, rank, p.m, p.n);
  }
  __device__ __forceinline__ const float* scale_a(int row, int kb) const {
    return p.scale_a + row * p.scale_a_row_stride + kb * p.scale_a_block_stride;
  }
  // The tile's weight block's scale of k-block kb; a tile past n reads the first block's (finite: they multiply
  // B's zeros there).
  __device__ __forceinline__ const float* scale_b(const TileAt& t, int, int kb) const {
    return p.scale_b + int64_t((t.n0 < p.n ? t.n0 : 0) / kBlockK) * p.scale_b_row_stride + kb;
  }
  __device__ __forceinline__ void load_b(const CUtensorMap& map, uint64_t* full, void* smem, int kb,
                                         const TileAt& t) const {
    cute::SM90_TMA_LOAD_2D::copy(&map, full, kEvictNormal, smem, kb * kBlockK, t.n0);
  }
  __device__ __forceinline__ Output output() const { return {p.d, p.ldd, p.bias, p.m, p.n}; }
};

// The grouped problem (a mixture-of-experts layer, sm90_fp8_block_abi.h): every thread walks the groups forward as
// its units advance (sm90_fp8_block_direct_walk.h), the groups' rows read on the device.
template <int BM, int BN, int Cluster>
struct GroupedProblem : RowScaledProblem<GroupedProblem<BM, BN, Cluster>, BN> {
  const cutlass_ext_fp8_grouped_args& p;
  GroupWalk<BM, BN, Cluster> walk;
  int k_blocks;

  __device__ __forceinline__ explicit GroupedProblem(const cutlass_ext_fp8_grouped_args& args)
      : p(args), walk(args), k_blocks(int((args.k + kBlockK - 1) / kBlockK)) {}
  __device__ __forceinline__ int64_t n() const { return p.n; }
  __device__ __forceinline__ bool find(int unit) { return walk.find(unit); }
  __device__ __forceinline__ TileAt tile(int unit, int rank) const { return walk.tile(unit, rank); }
  __device__ __forceinline__ const float* scale_a(int row, int kb) const {
    return p.scale_a + int64_t(row) * k_blocks + kb;
  }
  __device__ __forceinline__ const float* scale_b(const TileAt& t, int, int kb) const {
    return p.scale_b + t.group * p.scale_b_group_stride + int64_t((t.n0 < p.n ? t.n0 : 0) / kBlockK) * k_blocks +
           kb;
  }
  // B as (groups, n, k): the group's rows only (past n: zeros, not the next group's weights).
  __device__ __forceinline__ void load_b(const CUtensorMap& map, uint64_t* full, void* smem, int kb,
                                         const TileAt& t) const {
    cute::SM90_TMA_LOAD_3D::copy(&map, full, kEvictNormal, smem, kb * kBlockK, t.n0, t.group);
  }
  __device__ __forceinline__ Output output() const { return {p.d, p.ldd, nullptr, p.m_total, p.n}; }
};

// The weight-gradient form (sm90_fp8_block_abi.h: groups cut along K, each D_g (m, n) = C_g + its columns'
// product): every group's tiles over (m, n), a tile multiplying its group's k-blocks only; scales 1x128 along K for
// both operands, M- and N-contiguous; D FP32, stored from registers (each warp's store fills whole sectors).
template <int BM, int BN, int Cluster>
struct KGroupedProblem {
  static constexpr bool kColumnScales = true;
  const cutlass_ext_fp8_k_grouped_args& p;
  int tiles_m, units_n, group_units;

  __device__ __forceinline__ explicit KGroupedProblem(const cutlass_ext_fp8_k_grouped_args& args)
      : p(args),
        tiles_m(int((args.m + BM - 1) / BM)),
        units_n(int((args.n + BN * Cluster - 1) / (BN * Cluster))),
        group_units(tiles_m * units_n) {}
  __device__ __forceinline__ int64_t n() const { return p.n; }
  __device__ __forceinline__ bool find(int unit) { return unit < p.groups * group_units; }
  __device__ __forceinline__ TileAt tile(int unit, int rank) const {
    const int g = unit / group_units;
    const TileCoord at = tile_coord(unit - g * group_units, tiles_m, units_n, raster_width<BN>() / Cluster);
    return {at.m * BM, int(p.m), (at.n * Cluster + rank) * BN, g};
  }
  // The group's k-blocks from its columns (valid ones start on a k-block). A partial last one is zeroed past the
  // group's end unless that is A's and B's end (TMA gave zeros there).
  __device__ __forceinline__ KRange k_range(const TileAt& t) const {
    const int64_t before = t.group > 0 ? p.offsets[t.group - 1] : 0;
    const fp8_block::GroupColumns columns = fp8_block::group_columns(p.k_total, before, p.offsets[t.group]);
    if (!columns.valid) return {0, 0, kBlockK, false};
    const int tail = int(columns.columns % kBlockK);
    const bool inside = columns.start + columns.columns < p.k_total;
    return {int(columns.start / kBlockK), int((columns.columns + kBlockK - 1) / kBlockK),
            tail != 0 && inside ? tail : kBlockK, true};
  }
  __device__ __forceinline__ const float* scale_a(int row, int kb) const {
    return p.scale_a + int64_t(kb) * p.m + row;
  }
  __device__ __forceinline__ const float* scale_b(const TileAt&, int col, int kb) const {
    return p.scale_b + int64_t(kb) * p.n + col;
  }
  __device__ __forceinline__ void load_b(const CUtensorMap& map, uint64_t* full, void* smem, int kb,
                                         const TileAt& t) const {
    cute::SM90_TMA_LOAD_2D::copy(&map, full, kEvictNormal, smem, kb * kBlockK, t.n0);
  }
  // D_g = C_g + the product, rounded once as CUTLASS's epilogue does; NaN for an invalid group. An interior tile
  // (every row and column inside D, 8-byte-aligned pairs) loads its C whole before adding, with no branch between
  // the loads, so they are in flight together (the accumulator sets' registers are free by now); a load followed by
  // its add one at a time costs a round trip each. Edge tiles go element by element.
  template <class T>
  __device__ __forceinline__ void store(typename T::Shared&, const CUtensorMap*, float* total, int group, int w,
                                        int lane, const TileAt& t, const KRange& range) const {
    const int row0 = t.m0 + 64 * group + 16 * w + lane / 4;
    float* d = static_cast<float*>(p.d) + t.group * p.d_group_stride;
    const float* c = p.c != nullptr ? static_cast<const float*>(p.c) + t.group * p.d_group_stride : nullptr;
    if (!range.valid) {
      const float nan = __int_as_float(0x7fffffff);  // the NaN the GPU's arithmetic gives (the collective's)
#pragma unroll
      for (int i = 0; i < T::kAccumulators; ++i) total[i] = nan;
      c = nullptr;
    }
    const bool interior = t.m0 + T::kMathGroups * 64 <= p.m && t.n0 + BN <= p.n && p.ldd % 2 == 0 &&
                          p.d_group_stride % 2 == 0 && reinterpret_cast<uintptr_t>(p.d) % 8 == 0 &&
                          reinterpret_cast<uintptr_t>(p.c) % 8 == 0;  // columns start even: 8j + 2 (lane % 4)
    const int64_t first = int64_t(row0) * p.ldd + t.n0 + 2 * (lane % 4);
    if (interior) {
      if (c != nullptr) {
        float2 from[BN / 4];
#pragma unroll
        for (int i = 0; i < BN / 4; ++i)  // pair i: column block j = i / 2, row half i % 2
          from[i] = *reinterpret_cast<const float2*>(c + first + (i % 2) * 8 * p.ldd + (i / 2) * 8);
#pragma unroll
        for (int i = 0; i < BN / 4; ++i) {
          total[2 * i] = __fadd_rn(from[i].x, total[2 * i]);
          total[2 * i + 1] = __fadd_rn(from[i].y, total[2 * i + 1]);
        }
      }
#pragma unroll
      for (int i = 0; i < BN / 4; ++i)
        *reinterpret_cast<float2*>(d + first + (i % 2) * 8 * p.ldd + (i / 2) * 8) =
            make_float2(total[2 * i], total[2 * i + 1]);
      return;
    }
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int col = t.n0 + 8 * j + 2 * (lane % 4);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row0 + 8 * half;
        float* v = total + 4 * j + 2 * half;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (row >= p.m || col + e >= p.n) continue;
          const int64_t at = row * p.ldd + col + e;
          d[at] = c != nullptr ? __fadd_rn(c[at], v[e]) : v[e];
        }
      }
    }
  }
};

// The kernel's body; the maps are the kernel's __grid_constant__ parameters (TMA reads them where they are).
// Cluster 2: the two CTAs of a cluster take neighbouring tiles along N, and each loads half of their shared A tile
// by TMA multicast into both, so A crosses from L2 once for the two.
template <int BM, int BN, int Stages, int Cluster, class Problem>
__device__ __forceinline__ void gemm(const CUtensorMap& map_a, const CUtensorMap& map_b, const CUtensorMap& map_d,
                                     bool store_by_tma, Problem problem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using T = Tiling<BM, BN, Stages, Problem::kColumnScales>;
  using Full = cutlass::arch::ClusterTransactionBarrier;
  using Empty = cutlass::arch::ClusterBarrier;
  extern __shared__ uint8_t raw[];
  // Offset from `raw` itself (not a cast integer) so the compiler keeps shared-memory loads for what it reads.
  const uint32_t misalignment = cute::cast_smem_ptr_to_uint(raw) & 1023;
  auto& s = *reinterpret_cast<typename T::Shared*>(raw + (misalignment == 0 ? 0 : 1024 - misalignment));

  static_assert(Cluster == 1 || Cluster == 2, "a tile alone, or two sharing A");
  // A clustered kernel launched without its cluster would multicast to a CTA that does not exist.
  if (Cluster > 1 && cute::cluster_shape().x != Cluster) __trap();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // The cluster's units of work: `Cluster` neighbouring tiles along N (a last odd one past n: its CTA still loads
  // its half of A for the other, multiplies zeros and stores nothing).
  const int rank = Cluster == 1 ? 0 : int(cute::block_rank_in_cluster());
  const int first_unit = int(blockIdx.x) / Cluster, unit_step = int(gridDim.x) / Cluster;

  if (threadIdx.x == 0) {
    cute::prefetch_tma_descriptor(&map_a);
    cute::prefetch_tma_descriptor(&map_b);
    if (store_by_tma) cute::prefetch_tma_descriptor(&map_d);
    for (int i = 0; i < Stages; ++i) {
      Full::init(&s.full[i], 1 + 32);  // the TMA thread's and the scale warp's arrivals
      Empty::init(&s.empty[i], 4 * T::kMathGroups * Cluster);  // every math warp of the cluster's CTAs
    }
    cutlass::arch::fence_barrier_init();
  }
  if constexpr (Cluster > 1) {
    cute::cluster_sync();  // both CTAs' barriers exist before either signals the other's
  } else {
    __syncthreads();
  }

  if (warp < 4) {  // producer
    // The weight-gradient form's producer computes each group's k-blocks and copies a scale per column: 56
    // registers up to 64-wide tiles (math warpgroups 224); a 128-wide tile's two accumulator sets and sums need the
    // math warpgroups' 240, which leaves the producer 24 (it spills a few values outside its copy loop).
    cutlass::arch::warpgroup_reg_dealloc<!T::kColumnScales ? 40 : BN < 128 ? 56 : 24>();
    if (warp > 1 || (warp == 0 && lane != 0)) return;
    int stage = 0;
    uint32_t phase = 0;
    for (int unit = first_unit; problem.find(unit); unit += unit_step) {
      const TileAt t = problem.tile(unit, rank);
      const KRange range = problem.k_range(t);
      for (int kb = range.first; kb < range.first + range.count; ++kb) {
        Empty::wait(&s.empty[stage], phase ^ 1);
        if (warp == 0) {
          Full::arrive_and_expect_tx(&s.full[stage], T::kBytesA + T::kBytesB);  // out-of-bounds boxes count whole
          if constexpr (Cluster == 1) {
            cute::SM90_TMA_LOAD_2D::copy(&map_a, &s.full[stage], kEvictNormal, s.a[stage], kb * kBlockK, t.m0);
          } else {  // this CTA's half of A's rows, into both CTAs at the same offset (and both full barriers)
            constexpr int kRows = BM / Cluster;
            cute::SM90_TMA_LOAD_MULTICAST_2D::copy(&map_a, &s.full[stage], uint16_t((1 << Cluster) - 1),
                                                   kEvictNormal, s.a[stage] + rank * kRows * kBlockK,
                                                   kb * kBlockK, t.m0 + rank * kRows);
          }
          problem.load_b(map_b, &s.full[stage], s.b[stage], kb, t);
        } else {
          // Rows past the tile's own (past m, or another group's) get scale 0, read from row 0: nothing stores them.
          for (int r = lane; r < BM; r += 32) {
            const bool own = t.m0 + r < t.row_end;
            copy_scale(&s.scale_a[stage][r], problem.scale_a(own ? t.m0 + r : 0, kb), own);
          }
          if constexpr (T::kColumnScales) {  // the tile's columns' scales; past n: 0, read from column 0
            for (int c = lane; c < BN; c += 32) {
              const bool inside = t.n0 + c < problem.n();
              copy_scale(&s.scale_b[stage][c], problem.scale_b(t, inside ? t.n0 + c : 0, kb), inside);
            }
          } else if (lane == 0) {
            copy_scale(&s.scale_b[stage][0], problem.scale_b(t, 0, kb), true);
          }
          arrive_when_copied(&s.full[stage]);
        }
        if (++stage == Stages) stage = 0, phase ^= 1;
      }
    }
    if (warp == 1) asm volatile("cp.async.wait_all;\n" ::: "memory");  // no copy outlives the warp that issued it
    if constexpr (Cluster > 1) {
      // The other CTA's warps release this CTA's stages remotely: once every stage is released by both, nothing
      // more arrives here, and the CTA may end.
      if (warp == 0) {
        for (int i = 0; i < Stages; ++i) {
          Empty::wait(&s.empty[stage], phase ^ 1);
          if (++stage == Stages) stage = 0, phase ^= 1;
        }
      }
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<T::kMathGroups == 1 ? 240 : !T::kColumnScales ? 232 : BN < 128 ? 224 : 240>();
  const int group = __shfl_sync(0xffffffff, warp / 4 - 1, 0);  // which 64 rows of the tile (warp-uniform)
  const int w = warp % 4;
  // wgmma's accumulator layout: thread (w, lane) holds rows 16w + lane/4 and that + 8 of its 64, columns
  // 8j + 2(lane % 4) and the next, for j < BN / 8 (registers 4j, 4j+1 the first row, 4j+2, 4j+3 the second).
  const int scale_row = 64 * group + 16 * w + lane / 4;
  Ring ring;
  float total[T::kAccumulators];
  Pending<T::kAccumulators> a[2];  // two k-blocks in flight: one being promoted while the next multiplies
  for (int unit = first_unit; problem.find(unit); unit += unit_step) {
    const TileAt t = problem.tile(unit, rank);
    const KRange range = problem.k_range(t);
    const int k_blocks = range.count;
    // The last k-block's columns past the group's end are zeroed (the weight-gradient form's partial block).
    auto zero_from = [&](int kb) { return kb == k_blocks - 1 ? range.zero_from : kBlockK; };
#pragma unroll
    for (int i = 0; i < T::kAccumulators; ++i) total[i] = 0.f;
    // k-block kb multiplies into a[kb % 2] and is promoted once k-block kb + 1 is issued, so the tensor cores run
    // while the CUDA cores scale and add (the order of the adds into `total` is unchanged). The loop carries one
    // batch in flight, always in a[0], so the accumulators keep their registers from one turn to the next.
    if (k_blocks > 0) {
      issue<T, BN>(s, ring, a[0], group, scale_row, zero_from(0));
      int kb = 0;
      for (; kb + 2 < k_blocks; kb += 2) {
        issue<T, BN>(s, ring, a[1], group, scale_row, zero_from(kb + 1));
        promote<T, 1, Cluster>(s, ring, a[0], total, lane);
        issue<T, BN>(s, ring, a[0], group, scale_row, zero_from(kb + 2));
        promote<T, 1, Cluster>(s, ring, a[1], total, lane);
      }
      if (kb + 1 < k_blocks) {
        issue<T, BN>(s, ring, a[1], group, scale_row, zero_from(kb + 1));
        promote<T, 1, Cluster>(s, ring, a[0], total, lane);
        promote<T, 0, Cluster>(s, ring, a[1], total, lane);
      } else {
        promote<T, 0, Cluster>(s, ring, a[0], total, lane);
      }
    }
    if (t.n0 < problem.n())
      problem.template store<T>(s, store_by_tma ? &map_d : nullptr, total, group, w, lane, t, range);
  }
  if (store_by_tma && w == 0 && lane == 0) cute::tma_store_wait<0>();  // shared memory outlives the last store
#endif
}

}  // namespace cutlass_ext::fp8_block_direct

// One variant's kernel under a C name, which the host half looks up in the cubin: ARGS the ABI's argument struct,
// PROBLEM the problem type reading it.
#define CUTLASS_EXT_DIRECT_KERNEL(NAME, BM, BN, CLUSTER, ARGS, PROBLEM)                                      \
  extern "C" __global__ void __launch_bounds__(cutlass_ext::fp8_block_direct::Tiling<BM, BN, 2>::kThreads, 1) \
      NAME##_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,    \
                    const __grid_constant__ CUtensorMap map_d, bool store_by_tma, const ARGS p) {            \
    using Problem = cutlass_ext::fp8_block_direct::PROBLEM<BM, BN, CLUSTER>;                                 \
    constexpr int kStages = cutlass_ext::fp8_block_direct::stages_that_fit<BM, BN, Problem::kColumnScales>(); \
    cutlass_ext::fp8_block_direct::gemm<BM, BN, kStages, CLUSTER>(map_a, map_b, map_d, store_by_tma,         \
                                                                  Problem(p));                               \
  }
#define CUTLASS_EXT_EXPORT_FP8_BLOCK_DIRECT(NAME, BM, BN, CLUSTER) \
  CUTLASS_EXT_DIRECT_KERNEL(NAME, BM, BN, CLUSTER, cutlass_ext_fp8_block_args, DenseProblem)
// The grouped form: B read through a (groups, n, k) map.
#define CUTLASS_EXT_EXPORT_FP8_GROUPED_DIRECT(NAME, BM, BN, CLUSTER) \
  CUTLASS_EXT_DIRECT_KERNEL(NAME, BM, BN, CLUSTER, cutlass_ext_fp8_grouped_args, GroupedProblem)
// The weight-gradient form: groups cut along K.
#define CUTLASS_EXT_EXPORT_FP8_K_GROUPED_DIRECT(NAME, BM, BN, CLUSTER) \
  CUTLASS_EXT_DIRECT_KERNEL(NAME, BM, BN, CLUSTER, cutlass_ext_fp8_k_grouped_args, KGroupedProblem)
#define CUTLASS_EXT_EXPORT_FP8_BLOCK_DIRECT_LIBRARY()
