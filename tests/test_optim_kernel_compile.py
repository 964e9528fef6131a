"""The fused optimizer kernels without a GPU: one variant compiled by the build pipeline, and the kernels' element
arithmetic (kernels/optim_update.cuh, Philox included) compiled for the host and checked bit for bit against
cutlass_ext/optim/reference.py in every (optimizer, update, arithmetic)."""

import ctypes
import itertools
import json
import os
import shutil
import subprocess
import zlib

import pytest
import torch

from cutlass_ext import build, cache
from cutlass_ext.optim import reference
from cutlass_ext.optim.config import GRIDS, OptimConfig
from cutlass_ext.optim.kernel import _Constants, _Tensor
from cutlass_ext.toolchain import kernels_dir

have_nvcc = shutil.which("nvcc") is not None or os.path.exists("/usr/local/cuda/bin/nvcc")
have_cxx = shutil.which("g++") is not None

# Every mode's update_element behind one C entry point (what a thread of the kernel runs per element).
HARNESS = r"""
#include "optim_update.cuh"
using namespace cutlass_ext::optim;

template <Kind K, Update U, Arithmetic A>
void run(int64_t n, uint16_t* w, const uint16_t* g, uint16_t* s0, uint16_t* s1, uint16_t* c, const Constants& k,
         const Scalars& s, uint32_t key, int64_t offset) {
  PhiloxStream stream{k.seed_low, k.seed_high, key, uint32_t(s.step)};
  for (int64_t i = 0; i < n; ++i) {
    uint32_t random = stream.element(uint64_t(offset + i));
    w[i] = update_element<K, U, A>(w[i], g[i], s0[i], s1[i], c[i], random, k, s);
  }
}

template <Kind K, Update U>
void by_arithmetic(int a, int64_t n, uint16_t* w, const uint16_t* g, uint16_t* s0, uint16_t* s1, uint16_t* c,
                   const Constants& k, const Scalars& s, uint32_t key, int64_t offset) {
  if (a == 0) run<K, U, Arithmetic::kFp32>(n, w, g, s0, s1, c, k, s, key, offset);
  else run<K, U, Arithmetic::kBf16>(n, w, g, s0, s1, c, k, s, key, offset);
}

template <Kind K>
void by_update(int u, int a, int64_t n, uint16_t* w, const uint16_t* g, uint16_t* s0, uint16_t* s1, uint16_t* c,
               const Constants& k, const Scalars& s, uint32_t key, int64_t offset) {
  if (u == 0) by_arithmetic<K, Update::kNearest>(a, n, w, g, s0, s1, c, k, s, key, offset);
  else if (u == 1) by_arithmetic<K, Update::kStochastic>(a, n, w, g, s0, s1, c, k, s, key, offset);
  else by_arithmetic<K, Update::kKahan>(a, n, w, g, s0, s1, c, k, s, key, offset);
}

extern "C" void optim_host_step(int kind, int update, int arithmetic, int64_t n, uint16_t* w, const uint16_t* g,
                                uint16_t* s0, uint16_t* s1, uint16_t* c, const Constants* k, const float* scalars,
                                uint32_t key, int64_t offset) {
  Scalars s{scalars[0], scalars[1], scalars[2], scalars[3]};
  if (kind == 0) by_update<Kind::kSgd>(update, arithmetic, n, w, g, s0, s1, c, *k, s, key, offset);
  else by_update<Kind::kAdamW>(update, arithmetic, n, w, g, s0, s1, c, *k, s, key, offset);
}
"""


@pytest.fixture(scope="module")
def host_step(tmp_path_factory):
    if not have_cxx:
        pytest.skip("g++ not installed")
    folder = tmp_path_factory.mktemp("optim_host")
    (folder / "harness.cpp").write_text(HARNESS)
    library = folder / "harness.so"
    subprocess.run(
        [
            "g++",
            "-O2",
            "-std=c++17",
            "-ffp-contract=off",
            "-shared",
            "-fPIC",
            f"-I{kernels_dir()}",
            "-o",
            str(library),
            str(folder / "harness.cpp"),
        ],
        check=True,
    )
    function = ctypes.CDLL(str(library)).optim_host_step
    function.restype = None
    return function


def _pointer(tensor):
    return ctypes.c_void_p(tensor.data_ptr())


SGD_GROUP = {"lr": 0.02, "momentum": 0.9, "dampening": 0.1, "nesterov": False, "weight_decay": 1e-2}
NESTEROV_GROUP = {"lr": 0.02, "momentum": 0.9, "dampening": 0.0, "nesterov": True, "weight_decay": 0.0}
ADAMW_GROUP = {"lr": 3e-3, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 1e-2}


@pytest.mark.parametrize("kind, group", [("sgd", SGD_GROUP), ("sgd", NESTEROV_GROUP), ("adamw", ADAMW_GROUP)])
@pytest.mark.parametrize("update", reference.UPDATES)
@pytest.mark.parametrize("arithmetic", reference.ARITHMETICS)
@pytest.mark.parametrize("scale", [1.0, 1e-4, 1e3])
def test_kernel_arithmetic_matches_reference(host_step, kind, group, update, arithmetic, scale):
    n, seed, key, offset = 1027, 2**35 + 12345, 4242, 13
    g = torch.Generator().manual_seed(zlib.crc32(f"{kind}-{update}-{arithmetic}-{scale}".encode()))
    tensors = {name: (torch.randn(n, generator=g) * scale).to(torch.bfloat16) for name in ("w", "g", "s0", "c")}
    tensors["s1"] = (torch.rand(n, generator=g) * scale**2).to(torch.bfloat16)
    constants_type = reference.SgdConstants if kind == "sgd" else reference.AdamWConstants
    constants = constants_type.from_group(group, arithmetic)
    for step in (1, 5):
        scalars = reference.step_scalars(
            kind, group["lr"], torch.tensor([float(step)]), group.get("betas"), arithmetic
        )[0]
        ref = {name: t.clone() for name, t in tensors.items()}
        rounding = reference.Rounding(update, seed, key, offset)
        if kind == "sgd":
            reference.sgd_update(ref["w"], ref["g"], ref["s0"], ref["c"], scalars, constants, rounding, arithmetic)
        else:
            reference.adamw_update(
                ref["w"], ref["g"], ref["s0"], ref["s1"], ref["c"], scalars, constants, rounding, arithmetic
            )
        host = {name: t.clone() for name, t in tensors.items()}
        values = {
            "momentum": 0.0,
            "one_minus_dampening": 1.0,
            "weight_decay": 0.0,
            "beta1": 0.0,
            "beta2": 0.0,
            "one_minus_beta1": 0.0,
            "one_minus_beta2": 0.0,
            "eps": 0.0,
            "nesterov": 0,
        }
        values.update({k: v for k, v in vars(constants).items()})
        packed = _Constants(
            **{**values, "nesterov": int(values["nesterov"])}, seed_low=seed & 0xFFFFFFFF, seed_high=seed >> 32
        )
        host_step(
            ctypes.c_int(0 if kind == "sgd" else 1),
            ctypes.c_int(reference.UPDATES.index(update)),
            ctypes.c_int(reference.ARITHMETICS.index(arithmetic)),
            ctypes.c_int64(n),
            *(_pointer(host[name]) for name in ("w", "g", "s0", "s1", "c")),
            ctypes.byref(packed),
            _pointer(scalars.contiguous()),
            ctypes.c_uint32(key),
            ctypes.c_int64(offset),
        )
        changed = ("w", "s0") + (("s1",) if kind == "adamw" else ()) + (("c",) if update == "kahan" else ())
        for name in changed:
            assert torch.equal(host[name].view(torch.int16), ref[name].view(torch.int16)), (name, step)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    previous = os.environ.get(cache.CACHE_ENV)
    os.environ[cache.CACHE_ENV] = str(tmp_path_factory.mktemp("optim_compile_cache"))
    yield
    if previous is None:
        del os.environ[cache.CACHE_ENV]
    else:
        os.environ[cache.CACHE_ENV] = previous


@pytest.mark.skipif(not have_nvcc and not os.environ.get("CI"), reason="nvcc not installed")
def test_variants_build_unspilled_and_export_their_launchers(cache_dir):
    configs = [
        OptimConfig("adamw", "kahan", "fp32"),
        OptimConfig("adamw", "stochastic", "bf16"),
        OptimConfig("adamw", "kahan", "fp32", vectors_per_thread=2, grid="prefetch"),
    ]
    for config, result in zip(configs, build.build_libraries([(c,) for c in configs], "90a", verbose=False)):
        assert result.error is None, result.error
        exported = subprocess.run(
            ["nm", "-D", "--defined-only", str(result.library)], capture_output=True, text=True, check=True
        ).stdout
        assert f" T {config.name}_optim_step\n" in exported
        resource_usage = json.loads((result.library.parent / cache.MANIFEST).read_text())["resource_usage"]
        assert " 0 bytes spill stores" in resource_usage, resource_usage


def test_config_names_round_trip():
    for kind, update, arithmetic, grid in itertools.product(
        ("sgd", "adamw"), reference.UPDATES, reference.ARITHMETICS, GRIDS
    ):
        config = OptimConfig(kind, update, arithmetic, threads=128, vectors_per_thread=2, grid=grid)
        assert OptimConfig.from_name(config.name) == config
    with pytest.raises(ValueError, match="update"):
        OptimConfig(update="round")
    with pytest.raises(ValueError, match="threads"):
        OptimConfig(threads=96)
    with pytest.raises(ValueError, match="grid"):
        OptimConfig(grid="persistant")


@pytest.mark.skipif(not have_nvcc and not os.environ.get("CI"), reason="nvcc not installed")
def test_ctypes_structures_match_the_c_layout(tmp_path):
    """kernel.py's ctypes mirrors of cutlass_ext_optim_tensor and Constants: same size, same field offsets."""
    lines = []
    for structure, c_name in ((_Tensor, "cutlass_ext_optim_tensor"), (_Constants, "cutlass_ext::optim::Constants")):
        lines.append(f'  printf("%zu\\n", sizeof({c_name}));')
        lines += [f'  printf("%zu\\n", offsetof({c_name}, {name}));' for name, _ in structure._fields_]
    source = tmp_path / "layout.cu"
    source.write_text(
        '#include <cstddef>\n#include <cstdio>\n#include "optim_step.cuh"\nint main() {\n' + "\n".join(lines) + "\n}\n"
    )
    program = tmp_path / "layout"
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    subprocess.run([nvcc, "-std=c++17", f"-I{kernels_dir()}", "-o", str(program), str(source)], check=True)
    printed = [
        int(v) for v in subprocess.run([str(program)], capture_output=True, text=True, check=True).stdout.split()
    ]
    expected = []
    for structure in (_Tensor, _Constants):
        expected.append(ctypes.sizeof(structure))
        expected += [getattr(structure, name).offset for name, _ in structure._fields_]
    assert printed == expected
