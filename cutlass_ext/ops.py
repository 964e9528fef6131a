"""Op schemas and fake kernels, registered at import so torch.compile can trace before anything is built.

The CUDA implementations come from the torch binding (kernels/torch_binding.cpp), loaded at first use.
"""

from __future__ import annotations

import torch

from . import registry

_library = torch.library.Library("cutlass_ext", "DEF")
# variants: kernel variant names in order of preference; the first that can run the problem runs it.
_library.define("gemm(Tensor a, Tensor b, str[] variants) -> Tensor")
# halfhalf's passes around its GEMM (kernels/halfhalf_operands.cuh): x·2^shift split into FP16 hi and lo·2^11,
# packed per 32-bit word (float32-typed, row-major whatever x's strides); and c·2^-(row_shift + column_shift).
_library.define("halfhalf_pack(Tensor x, Tensor shift) -> Tensor")
_library.define("halfhalf_unscale(Tensor c, Tensor row_shift, Tensor column_shift) -> Tensor")
# FP8 (sm90a): a (m, k) and b (n, k) K-major; scales of 1 value (per tensor) or m / n values (per row); bias (n).
_library.define(
    "gemm_fp8(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias, ScalarType out_dtype, "
    "str[] variants) -> Tensor"
)


@torch.library.register_fake("cutlass_ext::gemm")
def _gemm_fake(a: torch.Tensor, b: torch.Tensor, variants: list[str]) -> torch.Tensor:
    # A compiled graph calls the real op later: have its kernels ready by then.
    if torch.cuda.is_available():
        registry.ensure_names_registered(variants, a.device)
    batch = a.shape[:-2] or b.shape[:-2]
    return a.new_empty((*batch, a.shape[-2], b.shape[-1]))


def gemm(a: torch.Tensor, b: torch.Tensor, variants: list[str]) -> torch.Tensor:
    return torch.ops.cutlass_ext.gemm(a, b, variants)


@torch.library.register_fake("cutlass_ext::gemm_fp8")
def _gemm_fp8_fake(a, b, scale_a, scale_b, bias, out_dtype, variants):
    if torch.cuda.is_available():
        registry.ensure_names_registered(variants, a.device)
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


def gemm_fp8(a, b, scale_a, scale_b, bias, out_dtype: torch.dtype, variants: list[str]) -> torch.Tensor:
    return torch.ops.cutlass_ext.gemm_fp8(a, b, scale_a, scale_b, bias, out_dtype, variants)


@torch.library.register_fake("cutlass_ext::halfhalf_pack")
def _halfhalf_pack_fake(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape)  # row-major, whatever x's strides


@torch.library.register_fake("cutlass_ext::halfhalf_unscale")
def _halfhalf_unscale_fake(c: torch.Tensor, row_shift: torch.Tensor, column_shift: torch.Tensor) -> torch.Tensor:
    return c.new_empty(c.shape)


def halfhalf_pack(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    return torch.ops.cutlass_ext.halfhalf_pack(x, shift)


def halfhalf_unscale(c: torch.Tensor, row_shift: torch.Tensor, column_shift: torch.Tensor) -> torch.Tensor:
    return torch.ops.cutlass_ext.halfhalf_unscale(c, row_shift, column_shift)
