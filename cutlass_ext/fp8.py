"""`gemm_fp8` and `quantize_fp8`: FP8 GEMM on Hopper's Tensor Cores with scales and bias fused in the epilogue.

a8, scale_a = ext.quantize_fp8(x, granularity="row")        # activations (M, K): scale (M, 1)
w8, scale_w = ext.quantize_fp8(weight, granularity="row")   # weight (N, K), as nn.Linear stores it
y = ext.gemm_fp8(a8, w8, scale_a, scale_w, out_dtype=torch.bfloat16)   # y ≈ x @ weight.T
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch

from . import ops, registry, tuned
from .fp8_config import ACCUMULATIONS, DEFAULT_FP8, FP8_DTYPES, OUT_DTYPES, Fp8Config, dtype_name

GRANULARITIES = ("tensor", "row")
_QUANTIZABLE = (torch.float32, torch.bfloat16, torch.float16)
_TMA_BYTES = 16  # TMA moves rows whose start and stride are multiples of 16 bytes
# Up to here M is a decode batch (the decode sweeps' shapes): dispatch takes the tuned M bucket at or above M.
# Above it the nearest bucket is kept: at M = 8192 the 4096 bucket's tile measured 1449 TFLOP/s and the 16384
# bucket's 1262 (two runs).
DECODE_M = 256


def quantize_fp8(
    x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn, granularity: str = "tensor"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_fp8, scale) with x ≈ x_fp8 · scale: the largest magnitude (of x, or of each row) maps to the format's
    largest finite value. scale is float32: a 0-d tensor per tensor, (rows, 1) per row of a 2-D x.

    An all-zero row gets the smallest normal float32 as its scale. Non-finite values of x give non-finite
    scales; `gemm_fp8(..., check_scales=True)` reports those.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor; got {type(x).__name__}")
    if x.dtype not in _QUANTIZABLE:
        raise TypeError(f"x must be one of {list(_QUANTIZABLE)}; got {x.dtype}")
    dtype_name(dtype, FP8_DTYPES, "dtype")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity={granularity!r} is not one of {list(GRANULARITIES)}")
    if granularity == "row" and x.dim() != 2:
        raise ValueError(f"granularity='row' needs a 2-D x; got shape {tuple(x.shape)}")
    largest = torch.finfo(dtype).max
    magnitude = x.abs().float()
    amax = magnitude.amax() if granularity == "tensor" else magnitude.amax(dim=1, keepdim=True)
    scale = (amax / largest).clamp_min(torch.finfo(torch.float32).tiny)
    x_fp8 = (x.float() / scale).clamp(-largest, largest).to(dtype)
    return x_fp8, scale


def gemm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor | float,
    scale_b: torch.Tensor | float,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: torch.Tensor | None = None,
    accum: str = "promoted",
    check_scales: bool = False,
) -> torch.Tensor:
    """D = scale_a · scale_b · (a @ b.T) + bias on a Hopper GPU (sm90), returned as (M, N) of `out_dtype`.

    a: (M, K) and b: (N, K), float8_e4m3fn or float8_e5m2 (any pair), each with unit stride along K (b is the
    weight as torch.nn.Linear stores it). K must be a multiple of 16 and each row must start on a 16-byte
    boundary; N must be a multiple of 8 for bf16 / fp16 output, of 4 for fp32 (TMA's 16-byte rows).
    scale_a: one value (a float, or a float32 tensor of one element) or one per row of a, (M, 1) or (M,).
    scale_b: one value, or one per row of b: (1, N), (N, 1) or (N,). Scales multiply the FP32 accumulator.
    bias: (N,) of out_dtype, added after scaling, or None.
    accum: "promoted" adds the Tensor Core's partial sums into FP32 registers every 128 k elements (as accurate
      as cuBLAS's default); "fast" keeps all of K inside the Tensor Core (torch._scaled_mm's use_fast_accum=True).
    check_scales: also check scales held on the GPU for non-finite values, which reads them on the host (a
      synchronisation; skipped under CUDA-graph capture and torch.compile). Host scales are always checked.
    No host synchronisation otherwise: CUDA-graph capturable, torch.compile-able. The first call builds and
    caches the kernel variant (tuned per shape from the GPU's table; see cutlass_ext.tuned).
    """
    a_dtype, b_dtype = _check_operands(a, b)
    out_name = dtype_name(out_dtype, OUT_DTYPES, "out_dtype")
    if accum not in ACCUMULATIONS:
        raise ValueError(f"accum={accum!r} is not one of {list(ACCUMULATIONS)}")
    m, k = a.shape
    n = b.shape[0]
    if n % (_TMA_BYTES // out_dtype.itemsize):
        raise ValueError(
            f"b has N={n} rows: N must be a multiple of {_TMA_BYTES // out_dtype.itemsize} for {out_dtype} output "
            f"(rows of the output are written by TMA in 16-byte units)"
        )
    scale_a = _scale(scale_a, "scale_a", m, a.device, check_scales)
    scale_b = _scale(scale_b, "scale_b", n, a.device, check_scales)
    if bias is not None:
        bias = _check_bias(bias, n, out_dtype, a.device)
    variants = _variants(a.device, a_dtype, b_dtype, out_name, accum, m, n, k)
    return ops.gemm_fp8(a, b, scale_a, scale_b, bias, out_dtype, variants)


def _check_operands(a, b) -> tuple[str, str]:
    for name, tensor in (("a", a), ("b", b)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(tensor).__name__}")
    a_dtype = dtype_name(a.dtype, FP8_DTYPES, "a")
    b_dtype = dtype_name(b.dtype, FP8_DTYPES, "b")
    for name, tensor in (("a", a), ("b", b)):
        if not tensor.is_cuda:
            raise ValueError(f"{name} must be a CUDA tensor; got device {tensor.device}")
        if tensor.dim() != 2:
            raise ValueError(f"{name} must be 2-D; got shape {tuple(tensor.shape)}")
    if a.device != b.device:
        raise ValueError(f"a and b must be on one device; got {a.device} and {b.device}")
    (m, k), n = a.shape, b.shape[0]
    if b.shape[1] != k:
        raise ValueError(
            f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: b is (N, K), the weight as nn.Linear stores it, "
            f"so a.shape[1] must equal b.shape[1]"
        )
    if k % _TMA_BYTES:
        raise ValueError(f"K={k} must be a multiple of 16 (FP8 rows are read by TMA in 16-byte units)")
    capability = _capability(a.get_device())
    if capability != (9, 0):
        raise RuntimeError(f"gemm_fp8 runs on Hopper (sm90) GPUs; {a.device} is sm{capability[0]}{capability[1]}")
    compiling = torch.compiler.is_compiling()
    for name, tensor, rows in (("a", a, m), ("b", b, n)):
        row_stride, k_stride = tensor.stride()
        if k > 1 and k_stride != 1:
            raise ValueError(
                f"{name} must have unit stride along K (row-major {tuple(tensor.shape)}); got strides "
                f"{tensor.stride()}: pass {name}.contiguous()"
            )
        if rows > 1 and row_stride % _TMA_BYTES:
            raise ValueError(f"{name}'s row stride {row_stride} must be a multiple of 16 elements")
        if not compiling and rows and k and tensor.data_ptr() % _TMA_BYTES:
            raise ValueError(f"{name} must start on a 16-byte boundary (a view with an offset?): pass a copy")
    return a_dtype, b_dtype


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def _scale(scale, name: str, length: int, device: torch.device, check: bool) -> torch.Tensor:
    """A contiguous float32 vector of 1 or `length` values on `device` (no host round trip for CUDA tensors)."""
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        _check_finite(float(scale), name)
        return torch.full((1,), float(scale), dtype=torch.float32, device=device)
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"{name} must be a float or a float32 tensor; got {type(scale).__name__}")
    if scale.dtype != torch.float32:
        raise TypeError(f"{name} must be float32; got {scale.dtype}")
    shape = tuple(scale.shape)
    row_shapes = ((length, 1), (length,), (1, length)) if name == "scale_b" else ((length, 1), (length,))
    if not (scale.numel() == 1 and len(shape) <= 2) and shape not in row_shapes:
        raise ValueError(
            f"{name} has shape {tuple(scale.shape)}: expected one value (per tensor) or {length} values "
            f"(per row), shaped {' or '.join(str(s) for s in row_shapes)}"
        )
    if not scale.is_cuda and scale.numel() == 1:
        value = float(scale)
        _check_finite(value, name)
        return torch.full((1,), value, dtype=torch.float32, device=device)
    if scale.device != device:
        raise ValueError(f"{name} must be on {device} (or a CPU scalar); got {scale.device}")
    checkable = check and not torch.compiler.is_compiling() and not torch.cuda.is_current_stream_capturing()
    if checkable and not bool(torch.isfinite(scale).all()):
        raise ValueError(f"{name} holds non-finite values")
    # the op reads the values in order: any contiguous shape of them will do, without a copy
    return scale if scale.is_contiguous() else scale.reshape(-1).contiguous()


def _check_finite(value: float, name: str) -> None:
    if not math.isfinite(value):
        raise ValueError(f"{name}={value} must be finite")


def _check_bias(bias, n: int, out_dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f"bias must be a torch.Tensor or None; got {type(bias).__name__}")
    if bias.dtype != out_dtype:
        raise TypeError(f"bias must have out_dtype {out_dtype}; got {bias.dtype}")
    if bias.device != device:
        raise ValueError(f"bias must be on {device}; got {bias.device}")
    if tuple(bias.shape) not in ((n,), (1, n)):
        raise ValueError(f"bias must have shape ({n},), one value per output column; got {tuple(bias.shape)}")
    bias = bias.reshape(-1).contiguous()
    if not torch.compiler.is_compiling() and bias.data_ptr() % _TMA_BYTES:
        bias = bias.clone()  # the epilogue reads bias in 16-byte vectors
    return bias


def dispatch_configs(accums=ACCUMULATIONS) -> list:
    """The FP8 variants `gemm_fp8` runs for e4m3 inputs and bf16 output (what `--prebuild` builds): the default
    per accumulation and the shipped tuned tables' winners."""
    defaults = [Fp8Config.from_name(_default_variant("e4m3", "e4m3", "bf16", accum)) for accum in accums]
    shipped = [c for c in tuned.shipped_configs() if isinstance(c, Fp8Config) and c.accum in accums]
    return list(dict.fromkeys(defaults + shipped))


def _variants(device, a_dtype: str, b_dtype: str, out_dtype: str, accum: str, m: int, n: int, k: int) -> list[str]:
    """The tuned variant for the nearest shape (if the GPU's table has one), then the default; built and loaded."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    best = _tuned_variant(index, a_dtype, b_dtype, out_dtype, accum, m, n, k)
    default = _default_variant(a_dtype, b_dtype, out_dtype, accum)
    variants = [default] if best in (None, default) else [best, default]
    if not torch.compiler.is_compiling():
        registry.ensure_names_registered(variants, device)
    return variants


@functools.cache
def _default_variant(a_dtype: str, b_dtype: str, out_dtype: str, accum: str) -> str:
    """DEFAULT_FP8's name for these dtypes and accumulation (asked on every call: built once)."""
    return dataclasses.replace(DEFAULT_FP8, accum=accum).with_dtypes(a_dtype, b_dtype, out_dtype).name


@torch.compiler.assume_constant_result
def _tuned_variant(index: int, a_dtype: str, b_dtype: str, out_dtype: str, accum: str, m: int, n: int, k: int):
    """The tuned table's kernel shape for the nearest (M, N, K), with these dtypes (a constant to torch.compile)."""
    bucket_above = m <= DECODE_M  # decode: a tile tuned for fewer tokens would stream the weights more than once
    config = tuned.lookup(_device_name(index), f"fp8_{accum}", m, n, k, m_bucket_above=bucket_above)
    return None if config is None else _name_with_dtypes(config.name, a_dtype, b_dtype, out_dtype)


@functools.cache
def _name_with_dtypes(name: str, a_dtype: str, b_dtype: str, out_dtype: str) -> str:
    """A tuned variant's name for other dtypes (asked on every call: derived once)."""
    return Fp8Config.from_name(name).with_dtypes(a_dtype, b_dtype, out_dtype).name


@functools.cache
def _device_name(index: int) -> str:
    return torch.cuda.get_device_name(index)
