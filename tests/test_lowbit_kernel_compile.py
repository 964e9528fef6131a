"""The low-bit GEMM kernels without a GPU: the rendered translation unit compiles with nvcc and exports its
launchers, and the kernels' arithmetic (kernels/lowbit_fmaq.cuh, the backward's per-thread work in
kernels/lowbit_grad.cuh), compiled into a host program, equals the reference and the STE reference bit for bit."""

import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch

from cutlass_ext import build, cache, codegen, toolchain
from cutlass_ext.lowbit.format import LowbitFormat
from cutlass_ext.lowbit.kernel import DEFAULT_CONFIG
from cutlass_ext.lowbit.reference import lowbit_matmul_fmt
from cutlass_ext.lowbit.ste import grad_reference

have_nvcc = shutil.which("nvcc") is not None or os.path.exists("/usr/local/cuda/bin/nvcc")
have_cxx = shutil.which("g++") is not None

# A host program: the forward chain through Format::fmaq / q_acc (as the forward kernel's threads run it) and the
# backward through grads_window for every window: each row's recomputed chains give dA and the dB terms, which
# are summed over the rows in increasing order (as the gradient kernel's CTAs do, one row block after another).
_HOST_PROGRAM = r"""
#include <cstdio>
#include <string>
#include <vector>
#include "lowbit_grad.cuh"
using namespace cutlass_ext::lowbit;

template <class T> std::vector<T> read(const char* dir, const char* name, size_t count) {
  std::vector<T> v(count);
  std::string path = std::string(dir) + "/" + name;
  FILE* f = fopen(path.c_str(), "rb");
  if (fread(v.data(), sizeof(T), count, f) != count) { fprintf(stderr, "short %s\n", name); }
  fclose(f);
  return v;
}
template <class T> void write(const char* dir, const char* name, const std::vector<T>& v) {
  std::string path = std::string(dir) + "/" + name;
  FILE* f = fopen(path.c_str(), "wb");
  fwrite(v.data(), sizeof(T), v.size(), f);
  fclose(f);
}

template <int kSte, bool kUf, bool kFast>
void grads(const cutlass_ext_lowbit_grads_args& args) {
  for (int64_t window = 0; window * 16 < args.k; ++window) grads_window<16, kSte, kUf, kFast>(args, 0, window);
}

template <bool kUf, bool kFast>
void run(const char* dir, long long m, long long n, long long k, const cutlass_ext_lowbit_format& f, int ste,
         float eps1, float eps2) {
  const Format format = Format::from(f);
  auto a = read<float>(dir, "a.bin", m * k), b = read<float>(dir, "b.bin", k * n), g = read<float>(dir, "g.bin", m * n);
  std::vector<float> d(m * n);
  std::vector<int32_t> blocked(m * n);
  for (long long i = 0; i < m; ++i)
    for (long long j = 0; j < n; ++j) {
      float s = 0.0f, t = 0.0f;
      int32_t last = -1, last_failed = -1;
      bool failed = false;
      for (long long kk = 0; kk < k; ++kk) {
        const Step step = fmaq_step<kUf, kFast>(format, a[i * k + kk], b[kk * n + j], s);
        failed = failed || !format.passes_overflow(step.sum);
        s = step.result;
        if ((kk + 1) % f.chunk == 0 || kk + 1 == k) {
          const float v = add_rn(t, s);
          if (!format.passes_overflow(v)) last = int32_t(kk / f.chunk);
          if (failed) last_failed = int32_t(kk / f.chunk);
          failed = false;
          t = format.q_acc<kUf, kFast>(v);
          s = 0.0f;
        }
      }
      d[i * n + j] = add_rn(t, 0.0f);
      blocked[i * n + j] = ChainRecord::encode(last, last_failed, ChainRecord::packed(k, f.chunk));
    }
  write(dir, "d.bin", d);
  std::vector<float> da(m * k), db(k * n);
  cutlass_ext_lowbit_grads_args args{m, n, k, 1, a.data(), 0, k, 1, b.data(), 0, n, 1, g.data(), 0, n, 1,
                                     blocked.data(), 0, n, 1, da.data(), 0, k, 1, db.data(), 0, n, 1, nullptr,
                                     f, ste, eps1, eps2};
  // the transposed orientation (the kernel's rows = B's columns): X = Bᵀ, W = Aᵀ, Gᵀ, blockedᵀ, into dBᵀ and dAᵀ
  std::vector<float> da_t(m * k), db_t(k * n);
  cutlass_ext_lowbit_grads_args args_t{n, m, k, 1, b.data(), 0, 1, n, a.data(), 0, 1, k, g.data(), 0, 1, n,
                                       blocked.data(), 0, 1, n, db_t.data(), 0, 1, n, da_t.data(), 0, 1, k,
                                       nullptr, f, ste, eps1, eps2};
  for (const auto* each : {&args, &args_t}) {
    if (ste == 1) grads<1, kUf, kFast>(*each);
    if (ste == 2) grads<2, kUf, kFast>(*each);
    if (ste == 3) grads<3, kUf, kFast>(*each);
  }
  write(dir, "da.bin", da);
  write(dir, "db.bin", db);
  write(dir, "da_t.bin", da_t);
  write(dir, "db_t.bin", db_t);
}

int main(int argc, char** argv) {
  const char* dir = argv[1];
  long long m, n, k, chunk; unsigned acc_mask, prod_mask, bits[6]; int uf, ste;
  FILE* meta = fopen((std::string(dir) + "/meta.txt").c_str(), "r");
  fscanf(meta, "%lld %lld %lld %lld %u %u %u %u %u %u %u %u %d %d", &m, &n, &k, &chunk, &acc_mask, &prod_mask,
         &bits[0], &bits[1], &bits[2], &bits[3], &bits[4], &bits[5], &uf, &ste);
  fclose(meta);
  cutlass_ext_lowbit_format f{acc_mask, prod_mask, float_of(bits[0]), float_of(bits[1]), float_of(bits[2]),
                              float_of(bits[3]), chunk, uf};
  const bool fast = Format::from(f).has_fast_form();
  const float eps1 = float_of(bits[4]), eps2 = float_of(bits[5]);
  if (uf && fast) run<true, true>(dir, m, n, k, f, ste, eps1, eps2);
  if (uf && !fast) run<true, false>(dir, m, n, k, f, ste, eps1, eps2);
  if (!uf && fast) run<false, true>(dir, m, n, k, f, ste, eps1, eps2);
  if (!uf && !fast) run<false, false>(dir, m, n, k, f, ste, eps1, eps2);
  printf("%s\n", fast ? "fast" : "general");
  return 0;
}
"""
_STE_CODES = {"recursive-of": 1, "immediate-of": 2, "immediate-diff": 3}


@pytest.fixture(scope="module")
def host_program(tmp_path_factory):
    directory = tmp_path_factory.mktemp("lowbit_host")
    source = directory / "check.cpp"
    source.write_text(_HOST_PROGRAM)
    program = directory / "check"
    subprocess.run(
        [
            "g++",
            "-O2",
            "-std=c++17",
            "-ffp-contract=off",
            f"-I{toolchain.kernels_dir()}",
            str(source),
            "-o",
            str(program),
        ],
        check=True,
    )
    return program


def _bits(value: float) -> int:
    return int(np.array(value, dtype=np.float32).view(np.uint32))


def _run_host(program, directory, a, b, g, fmt, ste, eps1, eps2):
    m, k = a.shape
    n = b.shape[1]
    for name, t in (("a", a), ("b", b), ("g", g)):
        t.contiguous().numpy().tofile(directory / f"{name}.bin")
    values = (fmt.acc_overflow, fmt.acc_underflow, fmt.prod_overflow, fmt.prod_underflow, eps1, eps2)
    (directory / "meta.txt").write_text(
        " ".join(
            str(v)
            for v in (
                m,
                n,
                k,
                fmt.chunk,
                fmt.acc_mask,
                fmt.prod_mask,
                *map(_bits, values),
                int(fmt.underflow),
                _STE_CODES[ste],
            )
        )
    )
    form = subprocess.run([str(program), str(directory)], check=True, capture_output=True, text=True).stdout.strip()

    def load(name, shape):
        return torch.from_numpy(np.fromfile(directory / name, dtype=np.float32).reshape(shape))

    grads = [
        load(f"{name}.bin", shape)
        for name, shape in (("da", (m, k)), ("db", (k, n)), ("da_t", (m, k)), ("db_t", (k, n)))
    ]
    return form, load("d.bin", (m, n)), grads


def _same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    return torch.equal(x.view(torch.int32), y.view(torch.int32))


@pytest.mark.skipif(not have_cxx, reason="g++ not installed")
@pytest.mark.parametrize("ste", list(_STE_CODES))
@pytest.mark.parametrize(
    "shape, fmt",
    [
        ((5, 40, 7), LowbitFormat.make(7, 4, chunk=16)),
        ((6, 37, 4), LowbitFormat.make(4, 3, acc_bias=2, prod_bias=3, chunk=5)),  # chunks across windows
        ((3, 70, 5), LowbitFormat.make(3, 3, acc_bias=1, prod_bias=2, chunk=24, underflow=False)),
        ((4, 33, 3), LowbitFormat.make(5, 4, acc_bias=4, prod_bias=6, chunk=1)),
        ((3, 1, 2), LowbitFormat.make(7, 4, chunk=16)),
        # windows inside one chunk that start mid-chunk (the kernel's in-chunk path, two columns at a time)
        ((5, 83, 6), LowbitFormat.make(4, 3, acc_bias=2, prod_bias=3, chunk=32)),
        ((4, 100, 7), LowbitFormat.make(3, 3, acc_bias=1, prod_bias=2, chunk=48, underflow=False)),
        # the general form: a negative bias, 23 mantissa bits, a bias past 126
        ((4, 29, 3), LowbitFormat.make(3, 3, acc_bias=-3, prod_bias=-2, chunk=4)),
        ((3, 21, 4), LowbitFormat.make(23, 5, acc_bias=14, prod_bias=16, chunk=3)),
        ((3, 18, 2), LowbitFormat.make(9, 8, acc_bias=130, prod_bias=132, chunk=4)),
    ],
)
def test_host_arithmetic_equals_references(host_program, tmp_path, ste, shape, fmt):
    m, k, n = shape
    generator = torch.Generator().manual_seed(m * 1000 + k * 10 + n)
    # Magnitudes over several binades, so that products and sums overflow, underflow and swamp.
    a = torch.randn(m, k, generator=generator) * 2.0 ** torch.randint(-6, 6, (m, k), generator=generator)
    b = torch.randn(k, n, generator=generator) * 2.0 ** torch.randint(-6, 6, (k, n), generator=generator)
    g = torch.randn(m, n, generator=generator)
    form, d, (da, db, da_t, db_t) = _run_host(host_program, tmp_path, a, b, g, fmt, ste, 1e-12, 1e-3)
    # the kernels' two forms of Q: the fast one (0 <= b <= 126, M <= 22 in both formats) and the general one
    fast = all(0 <= bias <= 126 and man <= 22 for bias, man in ((fmt.acc_bias, fmt.man), (fmt.prod_bias, fmt.prod_man)))
    assert form == ("fast" if fast else "general")
    assert _same_bits(d, lowbit_matmul_fmt(a, b, fmt))
    grad_a, grad_b = grad_reference(a, b, g, fmt, ste, 1e-12, 1e-3)
    assert _same_bits(da, grad_a) and _same_bits(da_t, grad_a)
    assert _same_bits(db, grad_b) and _same_bits(db_t, grad_b)


@pytest.mark.skipif(not have_nvcc and not os.environ.get("CI"), reason="nvcc not installed")
def test_library_compiles_and_exports_launchers(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    (result,) = build.build_libraries([(DEFAULT_CONFIG,)], "90a", verbose=False)
    assert result.error is None, result.error
    exported = subprocess.run(
        ["nm", "-D", "--defined-only", str(result.library)], capture_output=True, text=True, check=True
    ).stdout
    for function in ("lowbit_forward", "lowbit_grads", "lowbit_grads_workspace"):
        assert f" T {DEFAULT_CONFIG.name}_{function}\n" in exported
    # Compiled from seven units side by side: each STE's gradient kernels, with and without underflow, come from
    # their own (the launchers' unit only declares them), and all six are in the library.
    sources = codegen.render_parts([DEFAULT_CONFIG])
    assert [s.splitlines()[0] for s in sources] == [f"#define CUTLASS_EXT_LIBRARY_PART {p}" for p in range(7)]
    for ste in (1, 2, 3):  # CUTLASS_EXT_LOWBIT_STE_*
        for underflow in (0, 1):
            assert re.search(rf"W _ZN11cutlass_ext6lowbit12launch_grads\S*Li{ste}ELb{underflow}EEEv", exported)


def test_config_names_parse_back():
    from cutlass_ext import variants
    from cutlass_ext.lowbit.kernel import LowbitKernelConfig

    config = LowbitKernelConfig(block=(128, 64, 16), thread=(8, 4), window=8)
    assert config.name == "lowbit_128x64x16_t8x4_w8"
    assert variants.from_name(config.name) == config


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"block": (64, 64, 32), "thread": (3, 4)}, "must divide"),
        ({"block": (256, 256, 8), "thread": (1, 1)}, "at most 1024"),
        ({"window": 33}, "window="),
        ({"family": "sm80"}, "family="),
    ],
)
def test_bad_configs_name_the_field(fields, match):
    from cutlass_ext.lowbit.kernel import LowbitKernelConfig

    with pytest.raises(ValueError, match=match):
        LowbitKernelConfig(**fields)


def test_matmul_rejects_cpu_and_non_float_operands():
    from cutlass_ext.lowbit.kernel import matmul

    fmt = LowbitFormat.make(7, 4)
    with pytest.raises(ValueError, match="a must be a CUDA tensor"):
        matmul(torch.zeros(2, 3), torch.zeros(3, 2), fmt)
    with pytest.raises(TypeError, match="a must be float32"):
        matmul(torch.zeros(2, 3, dtype=torch.float16), torch.zeros(3, 2), fmt)


def test_the_ste_numbers_are_the_ones_the_library_parts_map_onto():
    """kernels/lowbit_gemm.cuh: library part p (1-6) instantiates the STE numbered (p + 1) / 2, so the numbers
    must be 1, 2 and 3 (that every part holds its kernels is the symbol check of the compile test above)."""
    abi = (toolchain.kernels_dir() / "lowbit_abi.h").read_text()
    numbers = dict(re.findall(r"#define CUTLASS_EXT_LOWBIT_STE_(\w+) (\d+)", abi))
    assert {numbers[name] for name in ("RECURSIVE_OF", "IMMEDIATE_OF", "IMMEDIATE_DIFF")} == {"1", "2", "3"}
