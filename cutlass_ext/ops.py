"""Op schemas and fake kernels, registered at import so torch.compile can trace before anything is built.

The CUDA implementations come from the torch binding (kernels/torch_binding.cpp), loaded at first use. The Python
wrappers' alpha and beta default to ints: torch.compile(dynamic=True) traces a float default as a symbolic float,
which an op's float argument makes it restart the compilation to specialize.
"""

from __future__ import annotations

import functools

import torch

from . import cublas, registry

_library = torch.library.Library("cutlass_ext", "DEF")
# alpha·A·B + beta·c, c (bias (n,), or a tensor) broadcast to the product and read as the kernels' C operand.
# variants: kernel variant names in order of preference; the first that can run the problem runs it (last, so
# that registry.call_loading_fallbacks appends them).
_library.define("gemm(Tensor a, Tensor b, Tensor? c, float alpha, float beta, str[] variants) -> Tensor")
# halfhalf's passes around its GEMM (kernels/halfhalf_operands.cuh): x·2^shift split into FP16 hi and lo·2^11,
# packed per 32-bit word (float32-typed, row-major whatever x's strides); and c·2^-(row_shift + column_shift).
_library.define("halfhalf_pack(Tensor x, Tensor shift) -> Tensor")
_library.define("halfhalf_unscale(Tensor c, Tensor row_shift, Tensor column_shift) -> Tensor")
# FP8 (sm90a): a (m, k) and b (n, k) K-major; scales of 1 value (per tensor) or m / n values (per row); bias (n).
_library.define(
    "gemm_fp8(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias, ScalarType out_dtype, "
    "str[] variants) -> Tensor"
)
# The Hopper corrected SGEMM (kernels/sm90_corrected_gemm.cuh): x (…, rows, k)·2^shift split into hi and lo
# planes of `format` (0: TF32 in float32 words, 1: FP16 hi and lo·2^11), (…, rows, k') with k rounded up to 16
# bytes and zeros after k; and the product of A's planes (…, m, k') with Bᵀ's (…, n, k'), unscaled by halfhalf's
# shifts.
_library.define("split_planes(Tensor x, Tensor? shift, int format) -> (Tensor, Tensor)")
# bias (n) and alpha: alpha · product + bias, for the variants with the bias epilogue.
_library.define(
    "gemm_split(Tensor a_hi, Tensor a_lo, Tensor b_hi, Tensor b_lo, Tensor? row_shift, Tensor? column_shift, "
    "str[] variants, Tensor? bias=None, float alpha=1.0) -> Tensor"
)
PLANES_TF32, PLANES_HALF = 0, 1
# halfhalf's range shifts, int32: one per row of x (dim -1: (…, rows, 1)) or per column (dim -2: (…, 1, columns)),
# as scaling.fp16_range_shift computes them; and halfhalf's whole sm80 path (shifts, packing, product, unscaling
# with gemm's epilogue) in one call.
_library.define("range_shift(Tensor x, int dim) -> Tensor")
_library.define("halfhalf_gemm(Tensor a, Tensor b, Tensor? c, float alpha, float beta, str[] variants) -> Tensor")
# gemm's product of kernel operands (2-D, or 3-D with one batch size) in `mode`, with its epilogue: what torch.compile
# traces. Its implementation (cutlass_ext/gemm.py) picks the kernels with the concrete sizes when it runs, so a
# graph with symbolic sizes holds this one op.
_library.define("product(Tensor a, Tensor b, Tensor? c, float alpha, float beta, str mode) -> Tensor")
# IEEE SGEMM (cuBLAS, FP32 compute pinned per call: cutlass_ext/cublas.py), with gemm's epilogue.
_library.define("sgemm(Tensor a, Tensor b, Tensor? c, float alpha, float beta) -> Tensor")
_library.impl("sgemm", cublas.sgemm, "CUDA")


@torch.library.register_fake("cutlass_ext::gemm")
def _gemm_fake(a: torch.Tensor, b: torch.Tensor, c, alpha: float, beta: float, variants: list[str]) -> torch.Tensor:
    # A compiled graph calls the real op later: have its kernels ready by then.
    if torch.cuda.is_available():
        registry.ensure_names_registered(variants, a.device)
    batch = a.shape[:-2] or b.shape[:-2]
    return a.new_empty((*batch, a.shape[-2], b.shape[-1]))


def gemm(a: torch.Tensor, b: torch.Tensor, variants: list[str], c=None, alpha=1, beta=0) -> torch.Tensor:
    op = torch.ops.cutlass_ext.gemm.default
    if torch.compiler.is_compiling():
        return op(a, b, c, alpha, beta, variants)
    return registry.call_loading_fallbacks(op, variants, a.device, a, b, c, alpha, beta)


@torch.library.register_fake("cutlass_ext::gemm_fp8")
def _gemm_fp8_fake(a, b, scale_a, scale_b, bias, out_dtype, variants):
    if torch.cuda.is_available():
        registry.ensure_names_registered(variants, a.device)
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


def gemm_fp8(a, b, scale_a, scale_b, bias, out_dtype: torch.dtype, variants: list[str]) -> torch.Tensor:
    op = torch.ops.cutlass_ext.gemm_fp8.default
    if torch.compiler.is_compiling():
        return op(a, b, scale_a, scale_b, bias, out_dtype, variants)
    return registry.call_loading_fallbacks(op, variants, a.device, a, b, scale_a, scale_b, bias, out_dtype)


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


@torch.library.register_fake("cutlass_ext::split_planes")
def _split_planes_fake(x: torch.Tensor, shift, format: int):
    dtype = torch.float16 if format == PLANES_HALF else torch.float32
    per_16_bytes = 16 // dtype.itemsize
    ld = max(per_16_bytes, -(-x.shape[-1] // per_16_bytes) * per_16_bytes)
    return x.new_empty((*x.shape[:-1], ld), dtype=dtype), x.new_empty((*x.shape[:-1], ld), dtype=dtype)


@torch.library.register_fake("cutlass_ext::gemm_split")
def _gemm_split_fake(a_hi, a_lo, b_hi, b_lo, row_shift, column_shift, variants, bias=None, alpha=1.0):
    if torch.cuda.is_available():
        registry.ensure_names_registered(variants, a_hi.device)
    return a_hi.new_empty((*a_hi.shape[:-1], b_hi.shape[-2]), dtype=torch.float32)


def split_planes(x: torch.Tensor, shift: torch.Tensor | None, format: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ops.cutlass_ext.split_planes(x, shift, format)


def gemm_split(
    a_hi, a_lo, b_hi, b_lo, row_shift, column_shift, variants: list[str], bias=None, alpha=1
) -> torch.Tensor:
    op = torch.ops.cutlass_ext.gemm_split.default
    if torch.compiler.is_compiling():
        return op(a_hi, a_lo, b_hi, b_lo, row_shift, column_shift, variants, bias, alpha)
    epilogue = functools.partial(op, bias=bias, alpha=alpha)
    return registry.call_loading_fallbacks(
        epilogue, variants, a_hi.device, a_hi, a_lo, b_hi, b_lo, row_shift, column_shift
    )


@torch.library.register_fake("cutlass_ext::range_shift")
def _range_shift_fake(x: torch.Tensor, dim: int) -> torch.Tensor:
    shape = list(x.shape)
    shape[dim] = 1
    return x.new_empty(shape, dtype=torch.int32)


@torch.library.register_fake("cutlass_ext::halfhalf_gemm")
def _halfhalf_gemm_fake(a, b, c, alpha: float, beta: float, variants: list[str]) -> torch.Tensor:
    return _gemm_fake(a, b, c, alpha, beta, variants)


def range_shift(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.ops.cutlass_ext.range_shift(x, dim)


def halfhalf_gemm(a: torch.Tensor, b: torch.Tensor, variants: list[str], c=None, alpha=1, beta=0) -> torch.Tensor:
    op = torch.ops.cutlass_ext.halfhalf_gemm.default
    if torch.compiler.is_compiling():
        return op(a, b, c, alpha, beta, variants)
    return registry.call_loading_fallbacks(op, variants, a.device, a, b, c, alpha, beta)


@torch.library.register_fake("cutlass_ext::sgemm")
def _sgemm_fake(a: torch.Tensor, b: torch.Tensor, c, alpha: float, beta: float) -> torch.Tensor:
    return _gemm_fake(a, b, c, alpha, beta, [])


def sgemm(a: torch.Tensor, b: torch.Tensor, c=None, alpha=1, beta=0) -> torch.Tensor:
    if torch.compiler.is_compiling():
        return torch.ops.cutlass_ext.sgemm(a, b, c, alpha, beta)
    return cublas.sgemm(a, b, c, alpha, beta)  # eager: the op's implementation without the dispatcher's cost


@torch.library.register_fake("cutlass_ext::product")
def _product_fake(a: torch.Tensor, b: torch.Tensor, c, alpha: float, beta: float, mode: str) -> torch.Tensor:
    return _gemm_fake(a, b, c, alpha, beta, [])
