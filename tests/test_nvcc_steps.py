"""nvcc's compilation cut into host, device and link steps (nvcc_steps.py) builds what nvcc builds whole."""

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from cutlass_ext import nvcc_steps, toolchain

have_nvcc = shutil.which("nvcc") is not None or os.path.exists("/usr/local/cuda/bin/nvcc")
pytestmark = pytest.mark.skipif(not have_nvcc and not os.environ.get("CI"), reason="nvcc not installed")

SOURCE = r"""
#include <cuda_runtime.h>
namespace { __device__ int hits; }  // internal linkage: named after the module id on both sides
template <int N> __global__ void scale(float* x) { x[threadIdx.x] *= N; atomicAdd(&hits, 1); }
extern "C" int launch(float* x, cudaStream_t stream) {
  scale<3><<<1, 32, 0, stream>>>(x);
  return int(cudaGetLastError());
}
"""
ARGUMENTS = ["-O3", "-std=c++17", "-Xcompiler=-fPIC", "-shared", "--resource-usage", toolchain.gencode("80")]


def _section(library, tmp_path):
    out = tmp_path / f"{library.name}.fatbin"
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", str(library), str(out)], check=True)
    return out.read_bytes()


def _exports(library):
    listing = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True)
    return sorted(line.split()[-1] for line in listing.stdout.splitlines())


def test_the_steps_build_the_library_nvcc_builds_whole(tmp_path):
    source = tmp_path / "kernel.cu"
    source.write_text(SOURCE)
    whole = tmp_path / "whole.so"
    subprocess.run([toolchain.nvcc(), *ARGUMENTS, str(source), "-o", str(whole)], check=True, cwd=tmp_path)

    split = tmp_path / "split.so"
    steps = nvcc_steps.split(toolchain.nvcc(), [*ARGUMENTS, str(source)], split, tmp_path / "work", cwd=tmp_path)
    assert steps is not None, "nvcc's --dryrun listing was not recognised"
    assert "cudafe++" in steps.host and "cicc" not in steps.host
    assert "cicc" in steps.device and "cudafe++" not in steps.device and "ptxas" in steps.device
    assert "nvlink" in steps.link or "g++" in steps.link

    def run(text):
        return subprocess.run(["bash", "-c", text], capture_output=True, text=True)

    with ThreadPoolExecutor(2) as pool:  # the two front ends at once, as ninja runs them
        host, device = pool.map(run, (steps.host, steps.device))
    assert host.returncode == 0, host.stderr
    assert device.returncode == 0, device.stderr
    assert "registers" in device.stderr  # ptxas's resource usage, which the build keeps, comes from the device step
    link = run(steps.link)
    assert link.returncode == 0, link.stderr
    work = tmp_path / "work"
    module_ids = sorted(p.name for p in work.iterdir() if "module_id" in p.name)
    assert len(module_ids) == 2 and (work / module_ids[0]).read_text() == (work / module_ids[1]).read_text()

    assert _exports(split) == _exports(whole)
    assert _section(split, tmp_path) == _section(whole, tmp_path)  # the same device code, bit for bit


def test_a_listing_without_both_front_ends_is_not_cut(tmp_path):
    source = tmp_path / "kernel.cu"
    source.write_text(SOURCE)
    arguments = ["-O3", "-std=c++17", "-cubin", toolchain.gencode("80"), str(source)]  # device only: no cudafe++
    assert nvcc_steps.split(toolchain.nvcc(), arguments, tmp_path / "k.cubin", tmp_path / "work", cwd=tmp_path) is None
