// FP32-accurate GEMM on Tensor Cores (seed 000): a warp-level MMA that splits FP32 fragments into hi + lo in
// registers after the shared-memory load and corrects the product. Modelled on CUTLASS's MmaTensorOpFastF32
// (3xTF32); everything above the warp level is stock CUTLASS.
#pragma once

#include <cuda_fp16.h>

#include "cutlass/arch/mma.h"
#include "cutlass/arch/mma_sm75.h"
#include "cutlass/arch/mma_sm80.h"
#include "cutlass/gemm/warp/default_mma_tensor_op.h"
#include "cutlass/gemm/warp/mma_tensor_op_policy.h"
#include "cutlass/gemm/warp/mma_tensor_op_tile_iterator.h"
#include "cutlass/gemm/warp/mma_tensor_op_tile_iterator_sm80.h"

namespace cutlass_ext {

// seed 3.3: TF32 hi/lo, both rounded RNA; same exponent range as FP32, no scaling, so each MMA step's three
// products chain inside the Tensor Core in one fresh accumulator, added to the running sum in FP32 RN.
struct SchemeTf32Tf32 {
  static constexpr bool kPacked = false;  // FP32 operands, split here
  using Element = cutlass::tfloat32_t;
  static constexpr bool kCorrected = true;
  static constexpr float kLoScale = 1.0f;
  // RNA by adding half a TF32 ulp to the bits (a carry rounds into the exponent); the Tensor Core ignores the
  // low 13 bits, and hi keeps them zero so that x - hi is exact. Integer ops, not the slow conversion unit.
  CUTLASS_DEVICE static Element round(float x) { return Element::bitcast(__float_as_uint(x) + 0x1000u); }
  CUTLASS_DEVICE static float exact(float x) { return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u); }
};

// seed eqs. 19-22: FP16 hi/lo, RN; lo scaled by 2^11 against underflow. The lo terms get their own fresh
// accumulator each MMA step and are folded in with C += fma(lo, 2^-11, hi·hi).
struct SchemeHalfHalf {
  static constexpr bool kPacked = false;  // FP32 operands, split here
  using Element = cutlass::half_t;
  static constexpr bool kCorrected = true;
  static constexpr float kLoScale = 2048.0f;
};

// SchemeHalfHalf with the split done once per element in memory (halfhalf_pack): each 32-bit fragment element
// holds FP16 hi (low half) and lo·2^11 (high half), so the warp only regroups halves (one byte permute per
// register) instead of converting every element it loads. Measured: the in-register split was the kernel's
// largest cost: 73 -> 104 TFLOP/s at 8192^3 once removed (docs/design-notes.md, corrected SGEMM on sm80+).
struct SchemeHalfHalfPacked : SchemeHalfHalf {
  static constexpr bool kPacked = true;
};

// seed eqs. 2-6: FP16 hi/lo, RN, unscaled; all four products accumulated inside the Tensor Core (baseline).
struct SchemeMarkidis {
  static constexpr bool kPacked = false;  // FP32 operands, split here
  using Element = cutlass::half_t;
  static constexpr bool kCorrected = false;
  static constexpr float kLoScale = 1.0f;
};

// Math-operator tag that routes CUTLASS's DefaultMmaTensorOp to MmaTensorOpSplit.
template <typename Scheme>
struct OpMultiplyAddSplit {};

// The Tensor Core instruction each scheme computes with, FP32 accumulators: TF32 m16n8k8, FP16 m16n8k16.
template <typename Element>
constexpr int kSplitInstructionK = sizeof(Element) == 2 ? 16 : 8;

template <typename Element>
using SplitInstruction =
    cutlass::arch::Mma<cutlass::gemm::GemmShape<16, 8, kSplitInstructionK<Element>>, 32, Element,
                       cutlass::layout::RowMajor, Element, cutlass::layout::ColumnMajor, float,
                       cutlass::layout::RowMajor, cutlass::arch::OpMultiplyAdd>;

// Where CUTLASS's FP32 shared-memory iterators put each (row, k) of a k16 fragment, as the FP16 m16n8k16 operand
// registers want it (measured for each operand layout by a probe kernel that wrote out each lane's fragment indices).
// The FP32 fragment of one m-tile holds rows g, g+8 at k = t, t+4, t+8, t+12 (g = lane / 4, t = lane % 4); FP16
// registers pair k = {2t, 2t+1} and {2t+8, 2t+9}. Reading k = t, t+4 as 2t, 2t+1 (and t+8, t+12 as 2t+8, 2t+9) permutes
// k the same way for A and B, which leaves A·B unchanged. Row-major A orders the fragment (g,t) (g,t+4) (g,t+8)
// (g,t+12) (g+8,t)...; column-major A (g,t) (g+8,t) (g,t+4) (g+8,t+4)...; B is (t) (t+4) (t+8) (t+12) in both.
template <typename SmemLayout>
struct IsRowMajorCrosswise : cutlass::platform::false_type {};
template <int ElementSize, int Crosswise>
struct IsRowMajorCrosswise<cutlass::layout::RowMajorTensorOpMultiplicandCrosswise<ElementSize, Crosswise>>
    : cutlass::platform::true_type {};

// The FP32 fragment element that goes to `position` of the FP16 operand, for A's shared-memory layout:
template <typename SmemLayoutA>
CUTLASS_HOST_DEVICE constexpr int fragment_index_a(int position) {
  constexpr int kRowMajorSource[8] = {0, 1, 4, 5, 2, 3, 6, 7};
  constexpr int kColumnMajorSource[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  return IsRowMajorCrosswise<SmemLayoutA>::value ? kRowMajorSource[position] : kColumnMajorSource[position];
}
CUTLASS_HOST_DEVICE constexpr int fragment_index_b(int position) { return position; }

// Warp-level D = A·B + C for FP32 A, B read from shared memory by CUTLASS's FP32 fragment iterators (with the
// instruction's k), split in registers into the scheme's hi and lo, multiplied in TF32 or FP16.
template <typename Shape_, typename LayoutA_, typename LayoutB_, typename LayoutC_, typename Policy_, typename Scheme,
          int PartitionsK_ = 1, bool AccumulatorsInRowMajor = false>
class MmaTensorOpSplit {
 public:
  using Shape = Shape_;
  using ElementA = float;
  using LayoutA = LayoutA_;
  using ElementB = float;
  using LayoutB = LayoutB_;
  using ElementC = float;
  using LayoutC = LayoutC_;
  using Policy = Policy_;
  using ArchMmaOperator = typename Policy::Operator;
  using MathInstruction = ArchMmaOperator;
  using MathOperator = OpMultiplyAddSplit<Scheme>;
  using ArchTag = typename ArchMmaOperator::ArchTag;
  using OperatorClass = cutlass::arch::OpClassTensorOp;
  using InstructionShape = typename ArchMmaOperator::Shape;
  static cutlass::ComplexTransform const kTransformA = cutlass::ComplexTransform::kNone;
  static cutlass::ComplexTransform const kTransformB = cutlass::ComplexTransform::kNone;
  static int const kThreadCount = 32;
  static int const kPartitionsK = PartitionsK_;

  using IteratorA = cutlass::gemm::warp::MmaTensorOpMultiplicandTileIterator<
      cutlass::MatrixShape<Shape::kM, Shape::kK>, cutlass::gemm::Operand::kA, ElementA, LayoutA,
      cutlass::MatrixShape<ArchMmaOperator::Shape::kM, ArchMmaOperator::Shape::kK>, Policy::OpDelta::kRow,
      kThreadCount, kPartitionsK>;
  using FragmentA = typename IteratorA::Fragment;
  // hi for every element of FragmentA, then lo for every element, in the math instruction's operand order.
  using TransformedFragmentA = cutlass::Array<typename Scheme::Element, FragmentA::kElements * 2>;

  using IteratorB = cutlass::gemm::warp::MmaTensorOpMultiplicandTileIterator<
      cutlass::MatrixShape<Shape::kK, Shape::kN>, cutlass::gemm::Operand::kB, ElementB, LayoutB,
      cutlass::MatrixShape<ArchMmaOperator::Shape::kK, ArchMmaOperator::Shape::kN>, Policy::OpDelta::kRow,
      kThreadCount, kPartitionsK>;
  using FragmentB = typename IteratorB::Fragment;
  using TransformedFragmentB = cutlass::Array<typename Scheme::Element, FragmentB::kElements * 2>;

  using IteratorC = cutlass::gemm::warp::MmaTensorOpAccumulatorTileIterator<
      cutlass::MatrixShape<Shape::kM, Shape::kN>, ElementC, LayoutC, typename ArchMmaOperator::Shape,
      typename Policy::OpDelta>;
  using FragmentC = typename IteratorC::Fragment;

  using MmaIterations = cutlass::MatrixShape<(Shape::kM + ArchMmaOperator::Shape::kM - 1) / ArchMmaOperator::Shape::kM,
                                             (Shape::kN + ArchMmaOperator::Shape::kN - 1) / ArchMmaOperator::Shape::kN>;

  static_assert(FragmentA::kElements == MmaIterations::kRow * MathInstruction::FragmentA::kElements,
                "one instruction operand of A per m-tile");
  static_assert(FragmentB::kElements == MmaIterations::kColumn * MathInstruction::FragmentB::kElements,
                "one instruction operand of B per n-tile");

  CUTLASS_DEVICE
  MmaTensorOpSplit() {}

  CUTLASS_DEVICE
  void operator()(FragmentC &D, TransformedFragmentA const &A, TransformedFragmentB const &B,
                  FragmentC const &C) const {
    using OperandA = typename MathInstruction::FragmentA;
    using OperandB = typename MathInstruction::FragmentB;
    using Accumulator = typename MathInstruction::FragmentC;
    OperandA const *a_hi = reinterpret_cast<OperandA const *>(&A);
    OperandA const *a_lo = a_hi + MmaIterations::kRow;
    OperandB const *b_hi = reinterpret_cast<OperandB const *>(&B);
    OperandB const *b_lo = b_hi + MmaIterations::kColumn;
    Accumulator const *c = reinterpret_cast<Accumulator const *>(&C);
    Accumulator *d = reinterpret_cast<Accumulator *>(&D);
    MathInstruction mma;
    Accumulator zero;
    zero.clear();
    constexpr int kTiles = MmaIterations::kColumn;

    // mma.sync is issued in program order (asm volatile), so loop product-major over one m-row of tiles:
    // a product's MMA waits on the previous product of its tile, kTiles independent MMAs back.
    CUTLASS_PRAGMA_UNROLL
    for (int m = 0; m < MmaIterations::kRow; ++m) {
      auto tile = [m](int n) {
        return AccumulatorsInRowMajor ? n + m * MmaIterations::kColumn : m + n * MmaIterations::kRow;
      };
      if constexpr (Scheme::kCorrected && Scheme::kLoScale == 1.0f) {
        // seed 3.2: this step's products in a fresh accumulator, so the Tensor Core's RZ never touches the
        // running sum; lo·lo dropped (seed 3.4)
        Accumulator step[kTiles];
        CUTLASS_PRAGMA_UNROLL
        for (int n = 0; n < kTiles; ++n) mma(step[n], a_lo[m], b_hi[n], zero);
        CUTLASS_PRAGMA_UNROLL
        for (int n = 0; n < kTiles; ++n) mma(step[n], a_hi[m], b_lo[n], step[n]);
        CUTLASS_PRAGMA_UNROLL
        for (int n = 0; n < kTiles; ++n) mma(step[n], a_hi[m], b_hi[n], step[n]);
        CUTLASS_PRAGMA_UNROLL
        for (int n = 0; n < kTiles; ++n) {
          CUTLASS_PRAGMA_UNROLL
          for (int e = 0; e < Accumulator::kElements; ++e) d[tile(n)][e] = c[tile(n)][e] + step[n][e];
        }
      } else if constexpr (Scheme::kCorrected) {
        // seed 3.2: hi·hi in a fresh accumulator; seed 3.4: lo·hi + hi·lo in their own, lo·lo dropped
        Accumulator hi_hi[kTiles], lo_terms[kTiles];
        CUTLASS_PRAGMA_UNROLL
        for (int n = 0; n < kTiles; ++n) mma(lo_terms[n], a_lo[m], b_hi[n], zero);
        CUTLASS_PRAGMA_UNROLL
        for (int n = 0; n < kTiles; ++n) mma(hi_hi[n], a_hi[m], b_hi[n], zero);
        CUTLASS_PRAGMA_UNROLL
        for (int n = 0; n < kTiles; ++n) mma(lo_terms[n], a_hi[m], b_lo[n], lo_terms[n]);
        CUTLASS_PRAGMA_UNROLL
        for (int n = 0; n < kTiles; ++n) {
          CUTLASS_PRAGMA_UNROLL
          for (int e = 0; e < Accumulator::kElements; ++e) {
            // FP32 RN outside the Tensor Core; seed eq. 24's 2^-11 applied to this step's lo terms
            d[tile(n)][e] = c[tile(n)][e] + fmaf(lo_terms[n][e], 1.0f / Scheme::kLoScale, hi_hi[n][e]);
          }
        }
      } else {
        Accumulator accumulator[kTiles];
        CUTLASS_PRAGMA_UNROLL
        for (int n = 0; n < kTiles; ++n) accumulator[n] = c[tile(n)];
        CUTLASS_PRAGMA_UNROLL  // seed Code 2's order, all four products inside the Tensor Core
        for (int n = 0; n < kTiles; ++n) mma(accumulator[n], a_lo[m], b_lo[n], accumulator[n]);
        CUTLASS_PRAGMA_UNROLL
        for (int n = 0; n < kTiles; ++n) mma(accumulator[n], a_lo[m], b_hi[n], accumulator[n]);
        CUTLASS_PRAGMA_UNROLL
        for (int n = 0; n < kTiles; ++n) mma(accumulator[n], a_hi[m], b_lo[n], accumulator[n]);
        CUTLASS_PRAGMA_UNROLL
        for (int n = 0; n < kTiles; ++n) mma(accumulator[n], a_hi[m], b_hi[n], accumulator[n]);
        CUTLASS_PRAGMA_UNROLL
        for (int n = 0; n < kTiles; ++n) d[tile(n)] = accumulator[n];
      }
    }
  }

  // Split FP32 fragments into hi and lo (seed 3.5: in registers, not as extra copies in memory), or regroup
  // the halves of packed ones.
  CUTLASS_DEVICE
  void transform(TransformedFragmentA &dst_A, TransformedFragmentB &dst_B, FragmentA const &A,
                 FragmentB const &B) const {
    if constexpr (sizeof(typename Scheme::Element) == 4) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentA::kElements; ++i) split_tf32(A[i], dst_A[i], dst_A[FragmentA::kElements + i]);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentB::kElements; ++i) split_tf32(B[i], dst_B[i], dst_B[FragmentB::kElements + i]);
    } else {
      constexpr int kPerTileA = MathInstruction::FragmentA::kElements;
      constexpr int kPerTileB = MathInstruction::FragmentB::kElements;
      __half2 *a_hi = reinterpret_cast<__half2 *>(&dst_A);
      __half2 *a_lo = a_hi + FragmentA::kElements / 2;
      CUTLASS_PRAGMA_UNROLL
      for (int tile = 0; tile < MmaIterations::kRow; ++tile) {
        CUTLASS_PRAGMA_UNROLL
        for (int pair = 0; pair < kPerTileA / 2; ++pair) {
          int reg = tile * kPerTileA / 2 + pair;
          split_pair(A[tile * kPerTileA + fragment_index_a<LayoutA>(2 * pair)],
                     A[tile * kPerTileA + fragment_index_a<LayoutA>(2 * pair + 1)], a_hi[reg], a_lo[reg]);
        }
      }
      __half2 *b_hi = reinterpret_cast<__half2 *>(&dst_B);
      __half2 *b_lo = b_hi + FragmentB::kElements / 2;
      CUTLASS_PRAGMA_UNROLL
      for (int tile = 0; tile < MmaIterations::kColumn; ++tile) {
        CUTLASS_PRAGMA_UNROLL
        for (int pair = 0; pair < kPerTileB / 2; ++pair) {
          int reg = tile * kPerTileB / 2 + pair;
          split_pair(B[tile * kPerTileB + fragment_index_b(2 * pair)],
                     B[tile * kPerTileB + fragment_index_b(2 * pair + 1)], b_hi[reg], b_lo[reg]);
        }
      }
    }
  }

 private:
  // Infinite or NaN hi: the remainder is 0, so that Inf times a finite value stays Inf instead of Inf - Inf.
  CUTLASS_DEVICE
  static float remainder(float x, float hi) { return fabsf(hi) < INFINITY ? x - hi : 0.0f; }

  template <typename Element>
  CUTLASS_DEVICE static void split_tf32(float x, Element &hi, Element &lo) {
    hi = Scheme::round(x);
    lo = Scheme::round(remainder(x, Scheme::exact(x)));
  }

  // Two elements at once into FP16 pairs (x0 in the low half, as the instruction's k order wants).
  CUTLASS_DEVICE
  static void split_pair(float x0, float x1, __half2 &hi, __half2 &lo) {
    if constexpr (Scheme::kPacked) {
      uint32_t w0 = __float_as_uint(x0), w1 = __float_as_uint(x1);
      uint32_t hi_bits = __byte_perm(w0, w1, 0x5410), lo_bits = __byte_perm(w0, w1, 0x7632);
      hi = *reinterpret_cast<__half2 *>(&hi_bits);
      lo = *reinterpret_cast<__half2 *>(&lo_bits);
    } else {
      // one packed conversion per pair keeps the split off the slow conversion unit
      hi = __floats2half2_rn(x0, x1);
      float2 hi_values = __half22float2(hi);
      lo = __floats2half2_rn(remainder(x0, hi_values.x) * Scheme::kLoScale,
                             remainder(x1, hi_values.y) * Scheme::kLoScale);
    }
  }
};

}  // namespace cutlass_ext

namespace cutlass {
namespace gemm {
namespace warp {

// FP32 operands with an OpMultiplyAddSplit math operator: FP32 fragments of the scheme's instruction shape,
// multiplied by MmaTensorOpSplit.
template <typename WarpShape_, typename InstructionShape_, typename LayoutA, typename LayoutB, typename LayoutC,
          typename Scheme, int PartitionsK, bool AccumulatorsInRowMajor>
struct DefaultMmaTensorOp<WarpShape_, InstructionShape_, float, LayoutA, float, LayoutB, float, LayoutC,
                          cutlass_ext::OpMultiplyAddSplit<Scheme>, PartitionsK, AccumulatorsInRowMajor> {
  using Instruction = cutlass_ext::SplitInstruction<typename Scheme::Element>;
  static_assert(InstructionShape_::kM == 16 && InstructionShape_::kN == 8 &&
                    InstructionShape_::kK == Instruction::Shape::kK,
                "KernelConfig's instruction shape must be the scheme's: m16n8k8 for TF32, m16n8k16 for FP16");
  using Policy = cutlass::gemm::warp::MmaTensorOpPolicy<Instruction, cutlass::MatrixShape<1, 1>>;
  using Type = cutlass_ext::MmaTensorOpSplit<WarpShape_, LayoutA, LayoutB, LayoutC, Policy, Scheme, PartitionsK,
                                             AccumulatorsInRowMajor>;
};

}  // namespace warp
}  // namespace gemm
}  // namespace cutlass
