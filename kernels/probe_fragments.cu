// Prints which (row, k) of a shared-memory tile each register of the split MMA's FP32 fragments holds, for the
// FP16 m16n8k16 configuration: the measurement behind fragment_index_a / fragment_index_b in split_mma.h.
// Build: nvcc -std=c++17 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -I<cutlass>/include
//        -Ikernels kernels/probe_fragments.cu -o probe_fragments
#include <cstdio>

#include "cutlass/gemm/threadblock/default_mma_core_sm80.h"
#include "split_mma.h"

constexpr int kM = 128, kN = 128, kK = 32;
constexpr int kShownA = 16, kShownB = 8;  // two m-tiles of A, two n-tiles of B

template <typename LayoutA, typename LayoutB>
using Core = cutlass::gemm::threadblock::DefaultMmaCore<
    cutlass::gemm::GemmShape<kM, kN, kK>, cutlass::gemm::GemmShape<32, 64, kK>, cutlass::gemm::GemmShape<16, 8, 16>,
    float, LayoutA, float, LayoutB, float, cutlass::layout::RowMajor, cutlass::arch::OpClassTensorOp, 3,
    cutlass_ext::OpMultiplyAddSplit<cutlass_ext::SchemeHalfHalf>>;

template <typename LayoutA, typename LayoutB>
__global__ void probe(float *a_out, float *b_out) {
  using MmaCore = Core<LayoutA, LayoutB>;
  using WarpMma = typename MmaCore::MmaPolicy::Operator;
  __shared__ float smem_a[kM * kK];
  __shared__ float smem_b[kK * kN];
  auto layout_a = MmaCore::SmemLayoutA::packed({kM, kK});
  auto layout_b = MmaCore::SmemLayoutB::packed({kK, kN});
  for (int i = threadIdx.x; i < kM * kK; i += blockDim.x) smem_a[layout_a({i / kK, i % kK})] = (i / kK) * 100 + i % kK;
  for (int i = threadIdx.x; i < kK * kN; i += blockDim.x) smem_b[layout_b({i / kN, i % kN})] = (i / kN) * 1000 + i % kN;
  __syncthreads();
  if (threadIdx.x < 32) {
    typename WarpMma::IteratorA iterator_a({smem_a, layout_a}, threadIdx.x);
    typename WarpMma::IteratorB iterator_b({smem_b, layout_b}, threadIdx.x);
    typename WarpMma::FragmentA fragment_a;
    typename WarpMma::FragmentB fragment_b;
    iterator_a.load(fragment_a);
    iterator_b.load(fragment_b);
    for (int i = 0; i < kShownA; ++i) a_out[threadIdx.x * kShownA + i] = fragment_a[i];
    for (int i = 0; i < kShownB; ++i) b_out[threadIdx.x * kShownB + i] = fragment_b[i];
  }
}

template <typename LayoutA, typename LayoutB>
int report(const char *label) {
  float *device_a, *device_b, a[32 * kShownA], b[32 * kShownB];
  cudaMalloc(&device_a, sizeof(a));
  cudaMalloc(&device_b, sizeof(b));
  probe<LayoutA, LayoutB><<<1, 256>>>(device_a, device_b);
  if (cudaMemcpy(a, device_a, sizeof(a), cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(b, device_b, sizeof(b), cudaMemcpyDeviceToHost) != cudaSuccess) {
    std::printf("probe failed: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  std::printf("== %s\n", label);
  for (int lane : {0, 1, 4, 5}) {
    std::printf("lane %2d (g=%d t=%d) A (row,k):", lane, lane / 4, lane % 4);
    for (int i = 0; i < kShownA; ++i) std::printf(" (%d,%d)", int(a[lane * kShownA + i]) / 100, int(a[lane * kShownA + i]) % 100);
    std::printf("\n        B (k,n):");
    for (int i = 0; i < kShownB; ++i) std::printf(" (%d,%d)", int(b[lane * kShownB + i]) / 1000, int(b[lane * kShownB + i]) % 1000);
    std::printf("\n");
  }
  return 0;
}

int main() {
  using cutlass::layout::ColumnMajor;
  using cutlass::layout::RowMajor;
  return report<RowMajor, RowMajor>("A row-major, B row-major") | report<ColumnMajor, RowMajor>("A column-major") |
         report<RowMajor, ColumnMajor>("B column-major");
}
