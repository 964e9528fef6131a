"""The block-scaled FP8 kernel written directly on TMA and wgmma (kernels/sm90_fp8_block_direct.cuh): the same bits
as the CUTLASS-collective kernel it mirrors, within the FP64 bound, at odd shapes."""

import ctypes
import subprocess

import pytest
import torch

from cutlass_ext import fp8_block, toolchain
from cutlass_ext.fp8_block.kernel import _DenseArgs

from .test_fp8_block import check_close, quantized, seeded_bias

pytestmark = pytest.mark.gpu

TILINGS = [(64, 64, 13), (64, 32, 16), (64, 128, 8), (128, 128, 6)]
# The collective kernel whose promotion the direct one mirrors (every tile of it gives these bits).
STOCK = "fp8block_e4m3e4m3_bf16_64x128x128_c1x1_pp_sb128"
UNIT = """#include "sm90_fp8_block_direct.cuh"
{entries}
"""
ENTRY = """extern "C" int direct_{bm}x{bn}_s{stages}(const cutlass_ext_fp8_block_args* args, void* stream) {{
  return int(cutlass_ext::fp8_block_direct::run<{bm}, {bn}, {stages}>(*args, static_cast<cudaStream_t>(stream)));
}}"""


def compile_unit(folder, tilings):
    source = folder / "direct.cu"
    entries = "\n".join(ENTRY.format(bm=bm, bn=bn, stages=s) for bm, bn, s in tilings)
    source.write_text(UNIT.format(entries=entries))
    library = folder / "direct.so"
    includes = [f"-I{d}" for d in toolchain.include_dirs()]
    command = [toolchain.nvcc(), *toolchain.NVCC_FLAGS, toolchain.gencode("90a"), *includes, "-o", library, source]
    done = subprocess.run([str(c) for c in command], check=True, capture_output=True, text=True)
    return library, done.stdout + done.stderr


@pytest.fixture(scope="module")
def direct(tmp_path_factory):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU")
    library, _ = compile_unit(tmp_path_factory.mktemp("direct"), TILINGS)
    return ctypes.CDLL(str(library))


def run_direct(lib, tiling, a8, b8, scale_a, scale_b, bias=None, sync=True):
    m, k = a8.shape
    n = b8.shape[0]
    d = torch.empty(m, n, dtype=torch.bfloat16, device=a8.device)
    args = _DenseArgs(
        m=m, n=n, k=k, a=a8.data_ptr(), lda=a8.stride(0), b=b8.data_ptr(), ldb=b8.stride(0),
        scale_a=scale_a.data_ptr(), scale_a_row_stride=scale_a.stride(0), scale_a_block_stride=scale_a.stride(1),
        scale_b=scale_b.data_ptr(), scale_b_row_stride=scale_b.stride(0),
        bias=None if bias is None else bias.data_ptr(), d=d.data_ptr(), ldd=d.stride(0),
        device=a8.device.index or 0, sm_count=torch.cuda.get_device_properties(a8.device).multi_processor_count,
    )  # fmt: skip
    bm, bn, stages = tiling
    function = getattr(lib, f"direct_{bm}x{bn}_s{stages}")
    status = function(ctypes.byref(args), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    assert status == 0, f"launch failed: CUDA error {status}"
    if sync:
        torch.cuda.synchronize()  # a fault surfaces here, at the variant that caused it
    return d


@pytest.mark.parametrize("tiling", TILINGS, ids=lambda t: "{}x{}_s{}".format(*t))
@pytest.mark.parametrize(
    "m, n, k", [(1, 256, 256), (37, 384, 528), (64, 2112, 7168), (130, 2128, 1040), (257, 1024, 128), (1000, 1536, 768)]
)
@pytest.mark.parametrize("distribution", ["normal", "wide", "outliers"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_same_bits_as_the_collective_kernel(direct, tiling, m, n, k, distribution, with_bias):
    a8, b8, scale_a, scale_b = quantized(m, n, k, distribution, (128, 128), seed=m + n + k)
    bias = seeded_bias(n, m).bfloat16() * 10 if with_bias else None
    out = run_direct(direct, tiling, a8, b8, scale_a, scale_b, bias)
    stock = fp8_block.gemm_fp8_block(a8, b8, scale_a, scale_b, bias=bias, variant=STOCK)
    check_close(out, a8, b8, scale_a, scale_b, 128, bias)
    assert torch.equal(out, stock)
