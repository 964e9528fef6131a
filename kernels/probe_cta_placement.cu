// Prints the SM each CTA of a 132-CTA grid (one per SM, all resident at once) runs on, with and without 2-CTA
// clusters, in the grid and cluster shapes our FP8 kernels and cuBLAS's launch at 256 x 57344 x 8192: which CTAs
// share a TPC (SMs 2t and 2t+1) and in what order the hardware fills SMs (NOTES.md, twentieth session).
// Build: nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a kernels/probe_cta_placement.cu -o probe_cta_placement
// Output: a "## label grid cluster" line per launch, then blockIdx.x blockIdx.y smid cluster-rank per CTA.
#include <cstdio>
#include <cooperative_groups.h>
#include <cuda_runtime.h>
namespace cg = cooperative_groups;

__global__ void where(int* out) {
  extern __shared__ char smem[];
  unsigned smid, nsmid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  asm volatile("mov.u32 %0, %%nsmid;" : "=r"(nsmid));
  unsigned rank = cg::this_cluster().block_rank();
  if (threadIdx.x == 0) {
    int b = blockIdx.x + blockIdx.y * gridDim.x;
    out[4 * b + 0] = blockIdx.x;
    out[4 * b + 1] = blockIdx.y;
    out[4 * b + 2] = smid;
    out[4 * b + 3] = rank;
    smem[0] = 1;
  }
  // stay resident a while so the whole grid is co-resident
  long long t0 = clock64();
  while (clock64() - t0 < 2000000) {}
}

void run(const char* label, dim3 grid, dim3 cluster) {
  int n = grid.x * grid.y;
  int* d; cudaMalloc(&d, 16 * n);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid; cfg.blockDim = dim3(128); cfg.dynamicSmemBytes = 200 * 1024;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster.x; attr[0].val.clusterDim.y = cluster.y; attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr; cfg.numAttrs = 1;
  cudaFuncSetAttribute(where, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  cudaFuncSetAttribute(where, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaError_t e = cudaLaunchKernelEx(&cfg, where, d);
  cudaDeviceSynchronize();
  int* h = new int[4 * n];
  cudaMemcpy(h, d, 16 * n, cudaMemcpyDeviceToHost);
  printf("## %s grid (%d,%d) cluster (%d,%d): %s\n", label, grid.x, grid.y, cluster.x, cluster.y, cudaGetErrorString(e));
  for (int b = 0; b < n; ++b) printf("%d %d %d %d\n", h[4*b], h[4*b+1], h[4*b+2], h[4*b+3]);
  cudaFree(d); delete[] h;
}

int main() {
  run("c1x1", dim3(132, 1), dim3(1, 1));
  run("c2x1", dim3(132, 1), dim3(2, 1));
  run("c1x2", dim3(66, 2), dim3(1, 2));
  run("swap_c2x1", dim3(2, 66), dim3(2, 1));
  return 0;
}
