"""The low-bit gradient kernel's CTA logic without a GPU: kernels/lowbit_gemm.cuh's `LowbitGemm::grads`, compiled
into a host program that runs each CTA's 64 threads as std::threads (shared memory as statics, __syncthreads as a
barrier, CTAs one after another in their counter order), equals the STE reference bit for bit: G and B staged per
step, four chains per thread, the dB terms summed over row blocks through the turnstile, both orientations."""

import itertools
import shutil
import subprocess

import numpy as np
import pytest
import torch

from cutlass_ext import toolchain
from cutlass_ext.lowbit.format import LowbitFormat
from cutlass_ext.lowbit.reference import _chunk_sums, _q_acc
from cutlass_ext.lowbit.ste import _masks, grad_reference

pytestmark = [pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed"), pytest.mark.slow]

# What the kernel takes from CUDA, for a host program whose threads are a CTA's.
_SHIM = r"""
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>
struct Dim { unsigned x = 0, y = 0, z = 0; };
inline thread_local Dim threadIdx;
inline Dim blockIdx, gridDim;
inline std::barrier<>* cta_barrier = nullptr;
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __align__(x)
#define __syncthreads() cta_barrier->arrive_and_wait()
#define __nanosleep(x) ((void)0)
template <class T> T __ldg(const T* p) { return *p; }
template <class T> T __ldcg(const T* p) { return *p; }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
"""

_PROGRAM = r"""
#include "shim.h"
#include "lowbit_gemm.cuh"
using namespace cutlass_ext::lowbit;
using Gemm = LowbitGemm<64, 64, 32, 4, 4, WINDOW>;

template <class T> std::vector<T> read(const std::string& path, size_t count) {
  std::vector<T> v(count);
  FILE* f = fopen(path.c_str(), "rb");
  if (fread(v.data(), sizeof(T), count, f) != count) fprintf(stderr, "short %s\n", path.c_str());
  fclose(f);
  return v;
}

template <int kSte, bool kUf, bool kFast, int kSpan>
void run(const cutlass_ext_lowbit_grads_args& args) {
  const int group = Gemm::grads_group(args);
  const int64_t ctas = Gemm::grads_ctas(args, group);
  for (int64_t cta = 0; cta < ctas; ++cta) {
    std::barrier<> barrier(Gemm::kGradThreads);
    cta_barrier = &barrier;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < unsigned(Gemm::kGradThreads); ++t)
      threads.emplace_back([&, t] { threadIdx.x = t; Gemm::template grads<kSte, kUf, kFast, kSpan>(args, group); });
    for (auto& thread : threads) thread.join();
  }
}

template <int kSte>
void dispatch(const cutlass_ext_lowbit_grads_args& args, bool fast, int span) {
  const bool uf = args.format.underflow;
  auto spans = [&](auto underflow, auto fast_form) {
    constexpr bool kUf = decltype(underflow)::value, kFast = decltype(fast_form)::value;
    if (span == kSpanChunk) run<kSte, kUf, kFast, kSpanChunk>(args);
    if (span == kSpanInChunk) run<kSte, kUf, kFast, kSpanInChunk>(args);
    if (span == kSpanAcross) run<kSte, kUf, kFast, kSpanAcross>(args);
  };
  if (uf && fast) spans(std::true_type{}, std::true_type{});
  if (uf && !fast) spans(std::true_type{}, std::false_type{});
  if (!uf && fast) spans(std::false_type{}, std::true_type{});
  if (!uf && !fast) spans(std::false_type{}, std::false_type{});
}

int main(int argc, char** argv) {
  const std::string dir = argv[1];
  long long m, n, k, chunk, transposed;
  unsigned acc_mask, prod_mask, bits[6];
  int uf, ste;
  FILE* meta = fopen((dir + "/meta.txt").c_str(), "r");
  if (fscanf(meta, "%lld %lld %lld %lld %u %u %u %u %u %u %u %u %d %d %lld", &m, &n, &k, &chunk, &acc_mask,
             &prod_mask, &bits[0], &bits[1], &bits[2], &bits[3], &bits[4], &bits[5], &uf, &ste, &transposed) != 15)
    return 2;
  fclose(meta);
  const cutlass_ext_lowbit_format f{acc_mask, prod_mask, float_of(bits[0]), float_of(bits[1]), float_of(bits[2]),
                                    float_of(bits[3]), chunk, uf};
  auto a = read<float>(dir + "/a.bin", m * k), b = read<float>(dir + "/b.bin", k * n);
  auto g = read<float>(dir + "/g.bin", m * n);
  auto blocked = read<int32_t>(dir + "/blocked.bin", m * n);
  std::vector<float> da(m * k, NAN), db(k * n, NAN);
  std::vector<int32_t> workspace(1 << 16, 0);
  const float eps1 = float_of(bits[4]), eps2 = float_of(bits[5]);
  // the kernel's rows: A's (dB summed over them), or Bᵀ's when transposed (dA summed over them)
  const cutlass_ext_lowbit_grads_args args =
      transposed ? cutlass_ext_lowbit_grads_args{n, m, k, 1, b.data(), 0, 1, n, a.data(), 0, 1, k, g.data(), 0, 1, n,
                                                 blocked.data(), 0, 1, n, db.data(), 0, 1, n, da.data(), 0, 1, k,
                                                 workspace.data(), f, ste, eps1, eps2}
                 : cutlass_ext_lowbit_grads_args{m, n, k, 1, a.data(), 0, k, 1, b.data(), 0, n, 1, g.data(), 0, n, 1,
                                                 blocked.data(), 0, n, 1, da.data(), 0, k, 1, db.data(), 0, n, 1,
                                                 workspace.data(), f, ste, eps1, eps2};
  const bool fast = Format::from(f).has_fast_form();
  const int span = window_span(chunk, WINDOW);
  if (ste == 1) dispatch<1>(args, fast, span);
  if (ste == 2) dispatch<2>(args, fast, span);
  if (ste == 3) dispatch<3>(args, fast, span);
  FILE* out = fopen((dir + "/da.bin").c_str(), "wb");
  fwrite(da.data(), sizeof(float), da.size(), out);
  fclose(out);
  out = fopen((dir + "/db.bin").c_str(), "wb");
  fwrite(db.data(), sizeof(float), db.size(), out);
  fclose(out);
  return 0;
}
"""
_STE_CODES = {"recursive-of": 1, "immediate-of": 2, "immediate-diff": 3}
FORMATS = [
    LowbitFormat.make(7, 4, chunk=16),  # windows of 16 in one chunk
    LowbitFormat.make(5, 4, acc_bias=5, prod_bias=6, chunk=5),  # chunks across windows
    LowbitFormat.make(4, 3, acc_bias=3, prod_bias=4, chunk=32),  # windows starting mid-chunk
    LowbitFormat.make(3, 3, acc_bias=1, prod_bias=2, chunk=24, underflow=False),
    LowbitFormat.make(6, 4, acc_bias=6, prod_bias=8, chunk=48),  # pairs of windows a chain runs through
]


@pytest.fixture(scope="module", params=[16, 8], ids=lambda w: f"window{w}")
def program(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp(f"lowbit_grads_w{request.param}")
    (directory / "shim.h").write_text(_SHIM)
    (directory / "emulation.cpp").write_text(_PROGRAM)
    binary = directory / "emulation"
    command = ["g++", "-O1", "-std=c++20", "-ffp-contract=off", f"-DWINDOW={request.param}", "-pthread"]
    command += [f"-I{toolchain.kernels_dir()}", f"-I{directory}", str(directory / "emulation.cpp"), "-o", str(binary)]
    subprocess.run(command, check=True)
    return binary


def _bits(value: float) -> int:
    return int(np.array(value, dtype=np.float32).view(np.uint32))


def _record(a: torch.Tensor, b: torch.Tensor, fmt: LowbitFormat, first_level: str) -> torch.Tensor:
    """The forward's ChainRecord per output (kernels/lowbit_grad.cuh): L2, the last chunk whose second-level add
    overflowed, and L1, the last chunk with a first-level overflow (−1: none), packed as (L1 + 1) << 16 | (L2 + 1).
    first_level: "exact" (the output's own L1), "tile" (the latest of its 4x4 tile of outputs, as a forward thread
    records it) or "unknown" (the last chunk: every chain recomputed, as before the record held L1)."""
    total = torch.zeros(a.shape[0], b.shape[1])
    last_blocked = torch.full(total.shape, -1, dtype=torch.int64)
    for c, chunk_sum in enumerate(_chunk_sums(a, b.T.contiguous(), fmt, None)):
        v = total + chunk_sum
        last_blocked[~(v.abs() < fmt.acc_overflow)] = c
        total = _q_acc(v.clone(), fmt)
    chunks = -(-a.shape[1] // fmt.chunk)
    step_passes = _masks(a, b, fmt, "immediate-of", torch.tensor(0.0), torch.tensor(0.0))  # (M, N, K): |u| < R_OF
    failing_chunk = torch.where(~step_passes, torch.arange(a.shape[1]) // fmt.chunk, -1)
    last_failed = failing_chunk.amax(dim=2)
    if first_level == "tile":
        tiles = torch.nn.functional.max_pool2d(last_failed[None, None].double(), 4, ceil_mode=True)[0, 0].long()
        last_failed = tiles.repeat_interleave(4, 0).repeat_interleave(4, 1)[: total.shape[0], : total.shape[1]]
    elif first_level == "unknown":
        last_failed = torch.full_like(last_failed, chunks - 1)
    return (((last_failed + 1) << 16) | (last_blocked + 1)).to(torch.int32)


@pytest.mark.parametrize("shape", [(150, 37, 40), (37, 150, 40), (130, 17, 33)])
def test_cta_logic_equals_the_ste_reference(program, tmp_path, shape):
    """The recursive STE also with records whose first-level chunk is later than the output's own (a forward
    thread's, for its 4x4 outputs) or the last (every chain recomputed): the gradients may not depend on it."""
    m, n, k = shape
    cases = [(fmt, ste, transposed, "exact") for fmt, ste, transposed in itertools.product(FORMATS, _STE_CODES, (0, 1))]
    cases += [(fmt, "recursive-of", 1, level) for fmt in FORMATS for level in ("tile", "unknown")]
    for fmt, ste, transposed, first_level in cases:
        generator = torch.Generator().manual_seed(m + n + k + fmt.chunk)
        a = torch.randn(m, k, generator=generator) * 2.0 ** torch.randint(-6, 6, (m, k), generator=generator)
        b = torch.randn(k, n, generator=generator) * 2.0 ** torch.randint(-6, 6, (k, n), generator=generator)
        g = torch.randn(m, n, generator=generator)
        record = _record(a, b, fmt, first_level) if ste == "recursive-of" else torch.zeros(m, n, dtype=torch.int32)
        for name, t in (("a", a), ("b", b), ("g", g), ("blocked", record)):
            t.numpy().tofile(tmp_path / f"{name}.bin")
        thresholds = (fmt.acc_overflow, fmt.acc_underflow, fmt.prod_overflow, fmt.prod_underflow, 1e-12, 1e-3)
        fields = (m, n, k, fmt.chunk, fmt.acc_mask, fmt.prod_mask, *map(_bits, thresholds), int(fmt.underflow))
        (tmp_path / "meta.txt").write_text(" ".join(map(str, (*fields, _STE_CODES[ste], int(transposed)))))
        subprocess.run([str(program), str(tmp_path)], check=True)
        da = torch.from_numpy(np.fromfile(tmp_path / "da.bin", dtype=np.float32).reshape(m, k))
        db = torch.from_numpy(np.fromfile(tmp_path / "db.bin", dtype=np.float32).reshape(k, n))
        grad_a, grad_b = grad_reference(a, b, g, fmt, ste)
        case = f"{fmt.name} {ste} transposed={transposed} first level {first_level}"
        assert torch.equal(da.view(torch.int32), grad_a.view(torch.int32)), case
        assert torch.equal(db.view(torch.int32), grad_b.view(torch.int32)), case
