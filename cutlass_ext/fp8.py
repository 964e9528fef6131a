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

from . import device as device_info
from . import fp8_block, ops, registry, tuned
from .compiling import constant_result
from .families.sm90_fp8.config import ACCUMULATIONS, DEFAULT_FP8, FP8_DTYPES, OUT_DTYPES, Fp8Config, dtype_name

GRANULARITIES = ("tensor", "row", "block")
_QUANTIZABLE = (torch.float32, torch.bfloat16, torch.float16)
_TMA_BYTES = 16  # TMA moves rows whose start and stride are multiples of 16 bytes
# Up to here M is a decode batch (the decode sweeps' shapes): dispatch takes the tuned M bucket at or above M.
# Above it the nearest bucket is kept: at M = 8192 the 4096 bucket's tile measured 1449 TFLOP/s and the 16384
# bucket's 1262 (two runs).
DECODE_M = 256


def quantize_fp8(
    x: torch.Tensor,
    dtype: torch.dtype = torch.float8_e4m3fn,
    granularity: str = "tensor",
    block: tuple[int, int] = (1, 128),
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_fp8, scale) with x ≈ x_fp8 · scale: the largest magnitude (of x, of each row, or of each block) maps to
    the format's largest finite value. scale is float32: a 0-d tensor per tensor, (rows, 1) per row of a 2-D x;
    per block (granularity="block"), `block` = (1, 128) (activations) or (128, 128) (weights) and x (…, R, K)
    gets scales (…, ceil(R / block[0]), ceil(K / 128)), the layout gemm_fp8 and grouped_gemm_fp8 read
    (fp8_block/quantize.py: a partial last block's scale covers the elements that exist).

    Scales are at least the smallest normal float32, 2^-126: an all-zero row gets it, and so does one whose largest
    magnitude is below max_finite·2^-126 (~5e-36 for e4m3), which then uses fewer of the format's values (under
    ~1e-45 none). Non-finite values of x give non-finite scales; `gemm_fp8(..., check_scales=True)` reports those.
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
    if granularity == "block":
        if x.dim() < 2:
            raise ValueError(f"granularity='block' needs x of at least 2 dimensions; got shape {tuple(x.shape)}")
        return fp8_block.quantize_block(x, dtype, fp8_block.check_block(block))
    largest = torch.finfo(dtype).max
    magnitude = x.abs().float()
    if magnitude.numel() == 0:  # no element: the all-zero case (amax has nothing to reduce)
        amax = magnitude.new_zeros(() if granularity == "tensor" else (x.shape[0], 1))
    else:
        amax = magnitude.amax() if granularity == "tensor" else magnitude.amax(dim=1, keepdim=True)
    # a tensor divisor: CUDA divides by a Python scalar as a product with its rounded reciprocal, one ulp off
    # the IEEE quotient the one-pass kernels compute
    scale = (amax / torch.full((), largest, device=amax.device)).clamp_min(torch.finfo(torch.float32).tiny)
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
    Block scales (DeepSeek-V3's, from quantize_fp8(..., granularity="block")): scale_a (M, ceil(K / 128)) of 1x128
    blocks and scale_b (ceil(N / 128), ceil(K / 128)) of 128x128 blocks or (N, ceil(K / 128)) of 1x128 ones (either
    with a per-tensor or per-row other operand) run the block-scaled kernel (cutlass_ext.fp8_block), which
    multiplies each 128-deep k-block's sums by its scales as it promotes them: `accum` does not apply there.
    Beside block scales of a, a (1, N) scale_b with N = ceil(K / 128) ≤ 128 has the shape of 128x128 block scales
    and is read as them; pass per-row scales of b as (N, 1) or (N,) there.
    bias: (N,) of out_dtype, added after scaling, or None.
    accum: "promoted" adds the Tensor Core's partial sums into FP32 registers every 128 k elements (as accurate
      as cuBLAS's default); "fast" keeps all of K inside the Tensor Core (torch._scaled_mm's use_fast_accum=True).
    check_scales: also check scales held on the GPU for non-finite values, which reads them on the host (a
      synchronisation; skipped under CUDA-graph capture and torch.compile). Host scales are always checked.
    No host synchronisation otherwise: CUDA-graph capturable, torch.compile-able. The first call builds and
    caches the kernel variant (tuned per shape from the GPU's table; see cutlass_ext.tuned).
    """
    for name, tensor in (("a", a), ("b", b)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(tensor).__name__}")
    if accum not in ACCUMULATIONS:
        raise ValueError(f"accum={accum!r} is not one of {list(ACCUMULATIONS)}")
    if a.dim() == b.dim() == 2 and fp8_block.is_block_scaled(len(a), len(b), a.shape[1], scale_a, scale_b):
        scale_a = _scale(scale_a, "scale_a", a.device, check_scales)
        scale_b = _scale(scale_b, "scale_b", a.device, check_scales)
        return fp8_block.gemm_fp8_block(a, b, scale_a, scale_b, out_dtype, bias)
    # Checked once per signature here; strides, alignment, scales and bias are checked per call by the op.
    signature = (a.dtype, b.dtype, a.shape, b.shape, a.device, b.device, out_dtype, accum, tuned.generation())
    compiling = torch.compiler.is_compiling()
    variants = _plan(*signature) if compiling else _cached_plan(*signature)  # symbolic shapes are not cached
    scale_a = _scale(scale_a, "scale_a", a.device, check_scales)
    scale_b = _scale(scale_b, "scale_b", a.device, check_scales)
    return ops.gemm_fp8(a, b, scale_a, scale_b, bias, out_dtype, variants)


def _plan(a_dtype, b_dtype, a_shape, b_shape, a_device, b_device, out_dtype, accum, _table_generation) -> list[str]:
    """The kernel variants for one signature of gemm_fp8's operands, once its dtypes and shapes are checked."""
    a_name = dtype_name(a_dtype, FP8_DTYPES, "a")
    b_name = dtype_name(b_dtype, FP8_DTYPES, "b")
    out_name = dtype_name(out_dtype, OUT_DTYPES, "out_dtype")
    for name, device, shape in (("a", a_device, a_shape), ("b", b_device, b_shape)):
        if device.type != "cuda":
            raise ValueError(f"{name} must be a CUDA tensor; got device {device}")
        if len(shape) != 2:
            raise ValueError(f"{name} must be 2-D; got shape {tuple(shape)}")
    if a_device != b_device:
        raise ValueError(f"a and b must be on one device; got {a_device} and {b_device}")
    (m, k), n = a_shape, b_shape[0]
    if b_shape[1] != k:
        raise ValueError(
            f"a is {tuple(a_shape)} and b is {tuple(b_shape)}: b is (N, K), the weight as nn.Linear stores it, "
            f"so a.shape[1] must equal b.shape[1]"
        )
    if k % _TMA_BYTES:
        raise ValueError(f"K={k} must be a multiple of 16 (FP8 rows are read by TMA in 16-byte units)")
    if n % (_TMA_BYTES // out_dtype.itemsize):
        raise ValueError(
            f"b has N={n} rows: N must be a multiple of {_TMA_BYTES // out_dtype.itemsize} for {out_dtype} output "
            f"(rows of the output are written by TMA in 16-byte units)"
        )
    index = a_device.index if a_device.index is not None else torch.cuda.current_device()
    capability = (9, 0) if torch.compiler.is_compiling() else _capability(index)  # not traced, as the block path
    if capability != (9, 0):
        raise RuntimeError(f"gemm_fp8 runs on Hopper (sm90) GPUs; {a_device} is sm{capability[0]}{capability[1]}")
    return _variants(a_device, a_name, b_name, out_name, accum, m, n, k)


# Decode steps repeat a few signatures: a dictionary lookup replaces the checks and the table lookup.
_cached_plan = functools.lru_cache(maxsize=4096)(_plan)


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def _scale(scale, name: str, device: torch.device, check: bool) -> torch.Tensor:
    """A scale as the op takes it, which checks its dtype, shape and device: a float or a one-element CPU tensor
    becomes a one-element float32 tensor on `device` (its value checked finite here); a GPU tensor passes as it
    is (its values checked finite too when `check`: a host round trip)."""
    if isinstance(scale, torch.Tensor):
        if scale.is_cuda or scale.numel() != 1:
            checkable = (
                check
                and not torch.compiler.is_compiling()
                and not (scale.is_cuda and torch.cuda.is_current_stream_capturing())  # a CPU-only torch lacks it
            )
            if checkable and not bool(torch.isfinite(scale).all()):
                raise ValueError(f"{name} holds non-finite values")
            return scale
        if scale.dtype != torch.float32:
            raise TypeError(f"{name} must be float32; got {scale.dtype}")
        value = float(scale)
    elif isinstance(scale, (int, float)) and not isinstance(scale, bool):
        value = float(scale)
    else:
        raise TypeError(f"{name} must be a float or a float32 tensor; got {type(scale).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name}={value} must be finite")
    return torch.full((1,), value, dtype=torch.float32, device=device)


def dispatch_configs(accums=ACCUMULATIONS) -> list:
    """The FP8 variants `gemm_fp8` runs for e4m3 inputs and bf16 output (what `--prebuild` builds): the default
    per accumulation and the shipped tuned tables' winners."""
    defaults = [Fp8Config.from_name(_default_variant("e4m3", "e4m3", "bf16", accum)) for accum in accums]
    defaults += [Fp8Config.from_name(name) for (accum, _), name in DECODE_DEFAULTS.items() if accum in accums]
    shipped = [c for c in tuned.shipped_configs() if isinstance(c, Fp8Config) and c.accum in accums]
    return list(dict.fromkeys(defaults + shipped))


def _variants(device, a_dtype: str, b_dtype: str, out_dtype: str, accum: str, m: int, n: int, k: int) -> list[str]:
    """variant_names for this call, the first usable one built and loaded."""
    variants = variant_names(device, a_dtype, b_dtype, out_dtype, accum, m, n, k)
    if not torch.compiler.is_compiling():
        variants = registry.first_usable(variants, device)
    return variants


def variant_names(device, a_dtype: str, b_dtype: str, out_dtype: str, accum: str, m: int, n: int, k: int):
    """The variants gemm_fp8 runs for this problem on `device`, neither built nor loaded (see `plan`)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return list(_planned(index, a_dtype, b_dtype, out_dtype, accum, m, n, k).split(","))


# Decode (M up to 64): the swapped-operand kernels (Dᵀ = B·Aᵀ, the weights on wgmma's 64-row side) that the H100's
# table picks at N = K = 8192, per accumulation and M bucket: what an sm90 GPU runs off its table's shapes.
DECODE_DEFAULTS = {
    ("fast", 16): "fp8_e4m3e4m3_bf16_64x16x256_c1x1_pp_fast_swap_l2pf8",
    ("fast", 32): "fp8_e4m3e4m3_bf16_64x32x256_c1x1_pp_fast_swap_l2pf8",
    ("fast", 64): "fp8_e4m3e4m3_bf16_64x64x256_c1x1_pp_fast",
    ("promoted", 16): "fp8_e4m3e4m3_bf16_64x16x128_c1x1_pp_promoted_swap_l2pf8",
    ("promoted", 32): "fp8_e4m3e4m3_bf16_64x32x128_c1x1_pp_promoted_swap_l2pf8",
    ("promoted", 64): "fp8_e4m3e4m3_bf16_64x32x128_c1x1_pp_promoted_swap_l2pf8",
}


def plan(gpu, a_dtype: str, b_dtype: str, out_dtype: str, accum: str, m: int, n: int, k: int):
    """(variant names, where the first came from) for gemm_fp8 on `gpu` (no GPU needed: `explain`): the tuned
    tables' entry for the nearest shape (tables by `tuned.table_chain`), else the sm90 default for the size — the
    swapped decode kernels up to M = 64, the 128x128 stream-K kernel above — with the 128x128 kernel last."""
    bucket_above = m <= DECODE_M  # decode: a tile tuned for fewer tokens would stream the weights more than once
    config, source = tuned.resolve(gpu.name, f"fp8_{accum}", m, n, k, m_bucket_above=bucket_above, gpu=gpu)
    default = _default_variant(a_dtype, b_dtype, out_dtype, accum)
    if config is not None and getattr(config, "mode", None) != f"fp8_{accum}":  # a hand-edited row: not this call's
        config, source = None, f"{source}: a {getattr(config, 'mode', config.family)} kernel, not fp8_{accum}'s"
    if config is not None:
        best = _name_with_dtypes(config.name, a_dtype, b_dtype, out_dtype)
    else:
        bucket = next((b for b in (16, 32, 64) if m <= b), None)
        best = DECODE_DEFAULTS.get((accum, bucket))
        best = best and _name_with_dtypes(best, a_dtype, b_dtype, out_dtype)
        source = f"sm90 default ({source})"
    return ([default] if best in (None, default) else [best, default]), source


@constant_result
def _planned(index: int, a_dtype: str, b_dtype: str, out_dtype: str, accum: str, m: int, n: int, k: int) -> str:
    """`plan`'s names, comma-joined (a constant to torch.compile)."""
    return ",".join(plan(device_info.info(index), a_dtype, b_dtype, out_dtype, accum, m, n, k)[0])


@functools.cache
def _default_variant(a_dtype: str, b_dtype: str, out_dtype: str, accum: str) -> str:
    """DEFAULT_FP8's name for these dtypes and accumulation (asked on every call: built once)."""
    return dataclasses.replace(DEFAULT_FP8, accum=accum).with_dtypes(a_dtype, b_dtype, out_dtype).name


@functools.cache
def _name_with_dtypes(name: str, a_dtype: str, b_dtype: str, out_dtype: str) -> str:
    """A tuned variant's name for other dtypes (asked on every call: derived once)."""
    return Fp8Config.from_name(name).with_dtypes(a_dtype, b_dtype, out_dtype).name
