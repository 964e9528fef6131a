// The fused multi-tensor step of the 16-bit optimizers: one launch updates up to kMaxTensors BF16 tensors (the
// launcher batches longer lists), in chunks of threads · vectors · 8 elements with 16-byte loads and stores.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include "optim_update.cuh"

extern "C" {

// One BF16 tensor of a step (cutlass_ext/optim/kernel.py mirrors this layout). Unused states are null. scalars:
// the tensor's four FP32 step scalars in device memory (optim_update.cuh's Scalars).
typedef struct {
  void* param;
  const void* grad;
  void* state0;
  void* state1;
  void* compensation;
  int64_t numel;
  int64_t element_offset;
  const float* scalars;
  uint32_t param_key;
} cutlass_ext_optim_tensor;

// Every optimizer variant `<name>` exports `<name>_optim_step(tensors, count, constants, stream)`; it returns 0 or
// a cudaError_t.
typedef int (*cutlass_ext_optim_step_fn)(const cutlass_ext_optim_tensor* tensors, int32_t count,
                                         const cutlass_ext::optim::Constants* constants, void* cuda_stream);
}

namespace cutlass_ext {
namespace optim {

constexpr int kVectorElements = 8;  // BF16 values per 16-byte access

struct alignas(16) Vector {
  uint16_t element[kVectorElements];
};

// kPerChunk: one block per chunk. kPersistent: the blocks the device keeps resident stride over the chunks.
// kPrefetch: kPersistent with the next chunk's loads issued before the current chunk's arithmetic.
enum class Grid { kPerChunk, kPersistent, kPrefetch };

template <Kind kKind, Update kUpdate, Arithmetic kArithmetic, int kThreads, int kVectorsPerThread, Grid kGrid>
struct OptimStep {
  static constexpr int kThreadsPerBlock = kThreads;
  // Threads resident per SM whose registers hold a thread's loads unspilled: 768 (85 registers a thread) up to
  // 2 vectors per thread, 512 (128) for 4, 256 (255) for more; the bytes in flight per SM grow with the vectors.
  // Prefetching holds two chunks and their addresses (4 times the vectors' registers, by ptxas's counts).
  static constexpr int kVectorsHeld = kVectorsPerThread * (kGrid == Grid::kPrefetch ? 4 : 1);
  static constexpr int kResidentThreads = kVectorsHeld <= 2 ? 768 : kVectorsHeld == 4 ? 512 : 256;
  static constexpr int kMinBlocksPerSm = kThreads >= kResidentThreads ? 1 : kResidentThreads / kThreads;
  static constexpr int64_t kChunk = int64_t(kThreads) * kVectorsPerThread * kVectorElements;
  static constexpr int kMaxTensors = 40;  // keeps the batch within the 4 KB kernel-parameter space of every arch
  static constexpr bool kHasState1 = kKind == Kind::kAdamW;
  static constexpr bool kHasCompensation = kUpdate == Update::kKahan;
  static constexpr Grid kGridKind = kGrid;

  struct Batch {
    cutlass_ext_optim_tensor tensors[kMaxTensors];
    int32_t chunk_start[kMaxTensors + 1];  // the first chunk of each tensor, then the total
  };

  // The random words of elements index..index+7 (index = the whole tensor's element index): two Philox blocks
  // when they line up with a block, else one block per element.
  __device__ static void random_words(const PhiloxStream& stream, uint64_t index, uint32_t (&random)[8]) {
    if ((index & 3) == 0) {
      PhiloxWords low = stream.block(index >> 2), high = stream.block((index >> 2) + 1);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        random[k] = low.word[k];
        random[k + 4] = high.word[k];
      }
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) random[k] = stream.element(index + k);
    }
  }

  struct Registers {
    Vector weight, grad, state0, state1, compensation;
  };

  __device__ static void load(const cutlass_ext_optim_tensor& t, int64_t i, bool has_state0, Registers& r) {
    r.weight = *reinterpret_cast<const Vector*>(static_cast<const uint16_t*>(t.param) + i);
    r.grad = *reinterpret_cast<const Vector*>(static_cast<const uint16_t*>(t.grad) + i);
    if (has_state0) r.state0 = *reinterpret_cast<const Vector*>(static_cast<const uint16_t*>(t.state0) + i);
    if (kHasState1) r.state1 = *reinterpret_cast<const Vector*>(static_cast<const uint16_t*>(t.state1) + i);
    if (kHasCompensation) {
      r.compensation = *reinterpret_cast<const Vector*>(static_cast<const uint16_t*>(t.compensation) + i);
    }
  }

  __device__ static void compute_store(const cutlass_ext_optim_tensor& t, int64_t i, bool has_state0,
                                       Registers& r, const PhiloxStream& stream, const Constants& c,
                                       const Scalars& s) {
    uint32_t random[8] = {};
    if (kUpdate == Update::kStochastic) random_words(stream, uint64_t(t.element_offset + i), random);
#pragma unroll
    for (int k = 0; k < kVectorElements; ++k) {
      r.weight.element[k] = update_element<kKind, kUpdate, kArithmetic>(
          r.weight.element[k], r.grad.element[k], r.state0.element[k], r.state1.element[k],
          r.compensation.element[k], random[k], c, s);
    }
    *reinterpret_cast<Vector*>(static_cast<uint16_t*>(t.param) + i) = r.weight;
    if (has_state0) *reinterpret_cast<Vector*>(static_cast<uint16_t*>(t.state0) + i) = r.state0;
    if (kHasState1) *reinterpret_cast<Vector*>(static_cast<uint16_t*>(t.state1) + i) = r.state1;
    if (kHasCompensation) *reinterpret_cast<Vector*>(static_cast<uint16_t*>(t.compensation) + i) = r.compensation;
  }

  __device__ static void update_scalar(const cutlass_ext_optim_tensor& t, int64_t i, bool has_state0,
                                       const PhiloxStream& stream, const Constants& c, const Scalars& s) {
    uint16_t* param = static_cast<uint16_t*>(t.param) + i;
    uint16_t state0 = has_state0 ? static_cast<uint16_t*>(t.state0)[i] : uint16_t(0);
    uint16_t state1 = kHasState1 ? static_cast<uint16_t*>(t.state1)[i] : uint16_t(0);
    uint16_t compensation = kHasCompensation ? static_cast<uint16_t*>(t.compensation)[i] : uint16_t(0);
    uint32_t random = kUpdate == Update::kStochastic ? stream.element(uint64_t(t.element_offset + i)) : 0u;
    *param = update_element<kKind, kUpdate, kArithmetic>(*param, static_cast<const uint16_t*>(t.grad)[i], state0,
                                                          state1, compensation, random, c, s);
    if (has_state0) static_cast<uint16_t*>(t.state0)[i] = state0;
    if (kHasState1) static_cast<uint16_t*>(t.state1)[i] = state1;
    if (kHasCompensation) static_cast<uint16_t*>(t.compensation)[i] = compensation;
  }

  static __device__ bool is_whole(const cutlass_ext_optim_tensor& t, int64_t chunk) {
    uintptr_t addresses = uintptr_t(t.param) | uintptr_t(t.grad) | uintptr_t(t.state0) | uintptr_t(t.state1) |
                          uintptr_t(t.compensation);
    return (addresses & 15) == 0 && (chunk + 1) * kChunk <= t.numel;
  }

  // A whole chunk's loads of this thread (is_whole), all issued before any arithmetic.
  __device__ static void load_whole(const cutlass_ext_optim_tensor& t, int64_t chunk,
                                    Registers (&r)[kVectorsPerThread]) {
    const bool has_state0 = t.state0 != nullptr;
#pragma unroll
    for (int v = 0; v < kVectorsPerThread; ++v) {
      load(t, chunk * kChunk + (int64_t(v) * kThreads + threadIdx.x) * kVectorElements, has_state0, r[v]);
    }
  }

  __device__ static void compute_store_whole(const cutlass_ext_optim_tensor& t, int64_t chunk,
                                             Registers (&r)[kVectorsPerThread], const Constants& c) {
    const Scalars s{t.scalars[0], t.scalars[1], t.scalars[2], t.scalars[3]};
    const PhiloxStream stream{c.seed_low, c.seed_high, t.param_key, uint32_t(s.step)};
    const bool has_state0 = t.state0 != nullptr;
#pragma unroll
    for (int v = 0; v < kVectorsPerThread; ++v) {
      compute_store(t, chunk * kChunk + (int64_t(v) * kThreads + threadIdx.x) * kVectorElements, has_state0, r[v],
                    stream, c, s);
    }
  }

  // One chunk (elements chunk · kChunk onward) of tensor t.
  __device__ static void run_chunk(const cutlass_ext_optim_tensor& t, int64_t chunk, const Constants& c) {
    if (is_whole(t, chunk)) {
      // Every load of the thread issued before the first store (the states may alias nothing, but the compiler
      // cannot know it).
      Registers r[kVectorsPerThread];
      load_whole(t, chunk, r);
      compute_store_whole(t, chunk, r, c);
      return;
    }
    const Scalars s{t.scalars[0], t.scalars[1], t.scalars[2], t.scalars[3]};
    const PhiloxStream stream{c.seed_low, c.seed_high, t.param_key, uint32_t(s.step)};
    const bool has_state0 = t.state0 != nullptr;
    const int64_t begin = chunk * kChunk;
    const int64_t end = begin + kChunk < t.numel ? begin + kChunk : t.numel;
    uintptr_t addresses = uintptr_t(t.param) | uintptr_t(t.grad) | uintptr_t(t.state0) | uintptr_t(t.state1) |
                          uintptr_t(t.compensation);
    int64_t scalar_begin = begin;
    if ((addresses & 15) == 0) {
      const int64_t vector_end = begin + (end - begin) / kVectorElements * kVectorElements;
      for (int64_t i = begin + int64_t(threadIdx.x) * kVectorElements; i < vector_end;
           i += int64_t(kThreads) * kVectorElements) {
        Registers r;
        load(t, i, has_state0, r);
        compute_store(t, i, has_state0, r, stream, c, s);
      }
      scalar_begin = vector_end;
    }
    for (int64_t i = scalar_begin + threadIdx.x; i < end; i += kThreads) update_scalar(t, i, has_state0, stream, c, s);
  }

  // The batch's chunks (numbered across its tensors in order) from blockIdx.x on, gridDim.x apart: one block per
  // chunk, or a persistent grid of resident blocks whose warps go on to their next chunk without waiting for the
  // block's other warps (no block retires and relaunches per chunk). Which thread updates an element changes no
  // bit: the update and its Philox words depend on the element alone.
  __device__ static void run(const Batch& batch, int32_t chunks, const Constants& c) {
    if (kGrid == Grid::kPrefetch) return run_prefetched(batch, chunks, c);
    int tensor_index = 0;
    for (int32_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
      while (chunk >= batch.chunk_start[tensor_index + 1]) ++tensor_index;
      run_chunk(batch.tensors[tensor_index], chunk - batch.chunk_start[tensor_index], c);
    }
  }

  // The persistent grid with the loads of a thread's next whole chunk issued before the current chunk's
  // arithmetic, so a warp keeps bytes in flight while it computes (twice the registers). Chunks of different
  // tensors are disjoint, so the next chunk's loads may pass the current one's stores.
  __device__ static void run_prefetched(const Batch& batch, int32_t chunks, const Constants& c) {
    int tensor_index = 0;
    Registers r[kVectorsPerThread];
    bool loaded = false;  // r holds the current chunk's loads
    for (int32_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
      while (chunk >= batch.chunk_start[tensor_index + 1]) ++tensor_index;
      const cutlass_ext_optim_tensor& t = batch.tensors[tensor_index];
      const int64_t local = chunk - batch.chunk_start[tensor_index];
      if (!is_whole(t, local)) {
        run_chunk(t, local, c);
        loaded = false;
        continue;
      }
      if (!loaded) load_whole(t, local, r);
      loaded = false;
      Registers next[kVectorsPerThread];
      const int32_t next_chunk = chunk + int32_t(gridDim.x);
      if (next_chunk < chunks) {
        int next_index = tensor_index;
        while (next_chunk >= batch.chunk_start[next_index + 1]) ++next_index;
        const cutlass_ext_optim_tensor& u = batch.tensors[next_index];
        const int64_t next_local = next_chunk - batch.chunk_start[next_index];
        if (is_whole(u, next_local)) {
          load_whole(u, next_local, next);
          loaded = true;
        }
      }
      compute_store_whole(t, local, r, c);
      if (loaded) {
#pragma unroll
        for (int v = 0; v < kVectorsPerThread; ++v) r[v] = next[v];
      }
    }
  }

  static int launch(const cutlass_ext_optim_tensor* tensors, int32_t count, const Constants* constants,
                    void* cuda_stream);
};

template <class Step>
__global__ void __launch_bounds__(Step::kThreadsPerBlock, Step::kMinBlocksPerSm) optim_step_kernel(
    const typename Step::Batch batch, const int32_t chunks, const Constants constants) {
  Step::run(batch, chunks, constants);
}

// The blocks of one launch: one per chunk, or (persistent) as many as the device keeps resident at once (one per
// chunk where the occupancy cannot be read; the grid changes no result).
template <class Step>
int64_t grid_blocks(int64_t chunks) {
  static int resident[64];  // per device ordinal; every thread that fills an entry writes the same value
  int device = 0;
  if (Step::kGridKind == Grid::kPerChunk || cudaGetDevice(&device) != cudaSuccess || device >= 64) return chunks;
  if (resident[device] == 0) {
    int processors = 0, per_processor = 0;
    if (cudaDeviceGetAttribute(&processors, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_processor, optim_step_kernel<Step>,
                                                      Step::kThreadsPerBlock, 0) != cudaSuccess) {
      return chunks;
    }
    resident[device] = processors * per_processor;
  }
  return resident[device] > 0 && resident[device] < chunks ? resident[device] : chunks;
}

template <Kind kKind, Update kUpdate, Arithmetic kArithmetic, int kThreads, int kVectorsPerThread, Grid kGrid>
int OptimStep<kKind, kUpdate, kArithmetic, kThreads, kVectorsPerThread, kGrid>::launch(
    const cutlass_ext_optim_tensor* tensors, int32_t count, const Constants* constants, void* cuda_stream) {
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  Batch batch;
  int batched = 0;
  int64_t blocks = 0;
  auto flush = [&]() -> int {
    if (batched == 0) return 0;
    batch.chunk_start[batched] = int32_t(blocks);
    optim_step_kernel<OptimStep>
        <<<unsigned(grid_blocks<OptimStep>(blocks)), kThreads, 0, stream>>>(batch, int32_t(blocks), *constants);
    batched = 0;
    blocks = 0;
    return int(cudaGetLastError());
  };
  for (int32_t i = 0; i < count; ++i) {
    if (tensors[i].numel <= 0) continue;
    const int64_t chunks = (tensors[i].numel + kChunk - 1) / kChunk;
    if (chunks > INT32_MAX / 2) return int(cudaErrorInvalidValue);
    if (batched == kMaxTensors || blocks + chunks > INT32_MAX / 2) {
      if (int status = flush()) return status;
    }
    batch.tensors[batched] = tensors[i];
    batch.chunk_start[batched] = int32_t(blocks);
    blocks += chunks;
    ++batched;
  }
  return flush();
}

}  // namespace optim
}  // namespace cutlass_ext
