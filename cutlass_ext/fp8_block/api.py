"""Block-scaled FP8 GEMM and grouped (mixture-of-experts) GEMM on Hopper: argument checks, the scale forms each
accepts, and the variant each shape runs.

Scales are float32. An activation operand A (M, K) takes per-tensor (one value), per-row ((M,) or (M, 1)) or 1x128
block scales (M, ceil(K / 128)); a weight operand B (N, K) per-tensor, per-row ((N,), (N, 1) or (1, N)), 128x128
block scales (ceil(N / 128), ceil(K / 128)) or 1x128 ones (N, ceil(K / 128)). Per-tensor and per-row scales are
block scales whose blocks share one value: they are expanded to that form (a copy of M·K/128 floats at most).
K must be a multiple of 16; the last k-block may be partial (quantize.py). Every scale multiplies one 128-deep
k-block's Tensor Core sums as they are promoted into FP32 registers.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings

import torch

from .. import device as device_info
from .. import native, tuned
from ..compiling import cached_constant
from .config import SCALE_BLOCK_K, Fp8BlockConfig
from .kernel import TMA_BYTES as _TMA_BYTES
from .kernel import gemm_fp8_block as _gemm_op
from .kernel import grouped_gemm_fp8_block as _grouped_op
from .kernel import k_grouped_gemm_fp8_block as _k_grouped_op
from .variant import CONFIGS as _BLOCK_CONFIGS
from .variant import config_of

FP8_DTYPES = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}
OUT_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
_INT32_MAX = 2**31 - 1


def k_blocks(k: int) -> int:
    return -(-k // SCALE_BLOCK_K)


def _check_scale_tensor(name: str, scale, device: torch.device) -> torch.Tensor:
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        if not math.isfinite(scale):  # a host value is checked here; tensors stay unread (no host sync)
            raise ValueError(f"{name}={scale} must be finite")
        return torch.full((1,), float(scale), dtype=torch.float32, device=device)
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"{name} must be a float32 tensor or a float; got {type(scale).__name__}")
    if scale.dtype != torch.float32:
        raise TypeError(f"{name} must be float32; got {scale.dtype}")
    if scale.device != device and not (scale.numel() == 1 and scale.device.type == "cpu"):
        raise ValueError(f"{name} must be on {device}; got {scale.device}")
    return scale.to(device)


def activation_scales(name: str, scale, rows: int, k: int, device: torch.device) -> torch.Tensor:
    """A's scales as the kernels read them: (rows, ceil(k / 128)) with unit stride along k-blocks."""
    scale = _check_scale_tensor(name, scale, device)
    blocks = k_blocks(k)
    if scale.shape == (rows, blocks):
        return scale if blocks == 1 or scale.stride(1) == 1 else scale.contiguous()
    if scale.numel() == 1:
        return scale.reshape(1, 1).expand(rows, blocks).contiguous()
    if scale.shape in ((rows,), (rows, 1)):
        return scale.reshape(rows, 1).expand(rows, blocks).contiguous()
    raise ValueError(
        f"{name} has shape {tuple(scale.shape)}: expected one value, per row ({rows},) or ({rows}, 1), or 1x128 "
        f"blocks ({rows}, {blocks}) = (M, ceil(K / 128))"
    )


def weight_scales(name: str, scale, n: int, k: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """(B's scales as the kernels read them, rows of B per scale): 128x128 blocks (ceil(n / 128), kb) or rows
    (n, kb), unit stride along k-blocks."""
    scale = _check_scale_tensor(name, scale, device)
    blocks = k_blocks(k)
    row_blocks = -(-n // 128)
    # 128x128 blocks first: a (1, N) tensor with N = ceil(K / 128) <= 128 is the block quantizer's output here
    if scale.dim() == 2 and scale.shape == (row_blocks, blocks):
        return (scale if blocks == 1 or scale.stride(1) == 1 else scale.contiguous()), 128
    if scale.dim() == 2 and scale.shape == (n, blocks) and blocks > 1:
        return (scale if scale.stride(1) == 1 else scale.contiguous()), 1
    if scale.numel() == 1:
        return scale.reshape(1, 1).expand(row_blocks, blocks).contiguous(), 128
    if scale.shape in ((n,), (n, 1), (1, n)):
        return scale.reshape(n, 1).expand(n, blocks).contiguous(), 1
    raise ValueError(
        f"{name} has shape {tuple(scale.shape)}: expected one value, per row ({n},), 128x128 blocks "
        f"({row_blocks}, {blocks}) = (ceil(N / 128), ceil(K / 128)) or 1x128 blocks ({n}, {blocks})"
    )


def is_block_scaled(m: int, n: int, k: int, scale_a, scale_b) -> bool:
    """Whether gemm_fp8's scales ask for block scaling: scale_a of 1x128 blocks over more than one k-block, or
    scale_b of 128x128 blocks, or of 1x128 blocks over more than one k-block. (With one k-block, K <= 128, row
    and 1x128 scales are the same product and run the row-scaled kernel. A (1, N) scale_b beside per-row or
    per-tensor scale_a stays the row-scaled kernel's (1, N) form even where 128x128 blocks have that shape.)"""
    blocks = k_blocks(k)
    a_shape = tuple(scale_a.shape) if isinstance(scale_a, torch.Tensor) else ()
    b_shape = tuple(scale_b.shape) if isinstance(scale_b, torch.Tensor) else ()
    row_forms = {(n,), (n, 1), (1, n), (1,), (1, 1), ()}
    return (
        (blocks > 1 and a_shape == (m, blocks))
        or (b_shape == (-(-n // 128), blocks) and b_shape not in row_forms)
        or (blocks > 1 and b_shape == (n, blocks))
    )


def _check_operand(name: str, x, dims: int) -> str:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if x.dtype not in FP8_DTYPES:
        raise TypeError(f"{name} must be one of {list(FP8_DTYPES)}; got {x.dtype}")
    if x.device.type != "cuda":
        raise ValueError(f"{name} must be a CUDA tensor; got device {x.device}")
    if x.dim() != dims:
        raise ValueError(f"{name} must be {dims}-D; got shape {tuple(x.shape)}")
    if x.stride(-1) != 1 and x.shape[-1] > 1:
        raise ValueError(f"{name} must have unit stride along K (its last dimension); got strides {x.stride()}")
    return FP8_DTYPES[x.dtype]


def _check_pair(a, b, out_dtype: torch.dtype) -> tuple[str, str, str, tuple[int, int, int]]:
    """a (M, K) and b (N, K) of one product checked: their FP8 names, the output's, and (M, N, K)."""
    a_name = _check_operand("a", a, 2)
    b_name = _check_operand("b", b, 2)
    if a.device != b.device:
        raise ValueError(f"a and b must be on one device; got {a.device} and {b.device}")
    (m, k), n = a.shape, b.shape[0]
    return a_name, b_name, _check_shapes("a", k, "b", b.shape[1], n, out_dtype), (m, n, k)


def _check_shapes(a_name: str, a_k: int, b_name: str, b_k: int, n: int, out_dtype: torch.dtype) -> str:
    if out_dtype not in OUT_DTYPES:
        raise TypeError(f"out_dtype must be one of {list(OUT_DTYPES)}; got {out_dtype}")
    if a_k != b_k:
        raise ValueError(f"{a_name} and {b_name} must agree on K (their last dimension); got {a_k} and {b_k}")
    if a_k % _TMA_BYTES:
        raise ValueError(f"K={a_k} must be a multiple of 16 (FP8 rows are read by TMA in 16-byte units)")
    alignment = _TMA_BYTES // out_dtype.itemsize
    if n % alignment:
        raise ValueError(f"N={n} must be a multiple of {alignment} for {out_dtype} output (16-byte rows of D)")
    return OUT_DTYPES[out_dtype]


def _check_capability(device: torch.device) -> None:
    capability = _capability(device.index if device.index is not None else torch.cuda.current_device())
    if capability != (9, 0):
        raise RuntimeError(
            f"block-scaled FP8 GEMMs run on Hopper (sm90) GPUs; {device} is sm{capability[0]}{capability[1]}"
        )


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


# The default dense kernel per M (up to the bound, first match), where no tuned entry serves the call. Up to 128 rows,
# 64x128 ping-pong tiles: twice the CTAs of 128-row tiles over the same weights, 1.07-1.51x their speed at M = 1-128
# on the H100 (results/h100/sweep_sm90_fp8_block.csv). Above, 128x128 cooperative tiles under CUTLASS's stream-K
# scheduler, which shares the last wave out along K.
DENSE_BY_M = (
    (128, Fp8BlockConfig(tile=(64, 128, 128), schedule="pingpong")),
    (None, Fp8BlockConfig(scheduler="streamk")),
)


MODE = "fp8_block"  # the tuned tables' mode of the dense kernels (configs/sm90_fp8_block.yaml)


def dense_plan(gpu, a_dtype: str, b_dtype: str, out_dtype: str, scale_n: int, m: int, n: int, k: int):
    """(variant, where it came from) for a dense block-scaled product on `gpu` (no GPU needed: `explain`): the tuned
    tables' winner for the nearest shape (`tuned.table_chain`) tuned for at least M rows (the winners change kind
    with M: a few-token tile stretched over more rows reads the weights again per token tile), where the call's
    types are the ones it was measured with; else the default for M."""
    config, source = tuned.resolve(gpu.name, MODE, m, n, k, gpu=gpu, m_buckets_only=True)
    name, source = _measured_for(config, source, (a_dtype, b_dtype, out_dtype, scale_n), MODE)
    if name:
        return name, source
    return dense_variant(a_dtype, b_dtype, out_dtype, scale_n, m), f"default for M = {m} ({source})"


GROUPED_MODE = "fp8_grouped"  # the grouped kernel's (configs/sm90_fp8_grouped.yaml; m: tokens per expert)


def grouped_plan(
    gpu, a_dtype: str, b_dtype: str, out_dtype: str, scale_n: int, m: int, n: int, k: int, groups: int | None = None
):
    """(variant, where it came from) for a grouped product of `groups` experts of about m tokens each on `gpu` (no
    GPU needed): the tuned tables' winner for the nearest (tokens per expert, N, K, experts) where the call's types
    are the measured ones, else the default."""
    config, source = tuned.resolve(gpu.name, GROUPED_MODE, m, n, k, gpu=gpu, batch=groups)
    name, source = _measured_for(config, source, (a_dtype, b_dtype, out_dtype, scale_n), GROUPED_MODE)
    if name:
        return name, source
    return grouped_variant(a_dtype, b_dtype, out_dtype, scale_n), f"default ({source})"


K_GROUPED_MODE = "fp8_k_grouped"  # the weight-gradient form's (configs/sm90_fp8_k_grouped*.yaml; k: tokens per expert)


def k_grouped_plan(gpu, a_dtype: str, b_dtype: str, out_dtype: str, m: int, n: int, k: int, groups: int):
    """(variant, where it came from) for the weight gradients of `groups` experts of about k tokens each, D_g
    (M, N), on `gpu` (no GPU needed): the tuned tables' winner for the nearest (M, N, tokens per expert, experts)
    where the call's types are the measured ones, else the default."""
    config, source = tuned.resolve(gpu.name, K_GROUPED_MODE, m, n, k, gpu=gpu, batch=groups)
    name, source = _measured_for(config, source, (a_dtype, b_dtype, out_dtype, 1), K_GROUPED_MODE)
    if name:
        return name, source
    return k_grouped_variant(a_dtype, b_dtype, out_dtype), f"default ({source})"


def _measured_for(config, source: str, types: tuple, mode: str) -> tuple[str | None, str]:
    """(the tuned winner's name, source) where it is a kernel of the call's form (`mode`: a hand-edited row cannot
    send one form's kernel to another's call) measured with the call's types (a_dtype, b_dtype, out_dtype,
    scale_n); else (None, source saying what it was measured for)."""
    if config is None:
        return None, source
    if getattr(config, "mode", None) != mode:
        return None, f"{source}, a {getattr(config, 'mode', '?')} kernel"
    measured = (config.a_dtype, config.b_dtype, config.out_dtype, config.scale_n)
    if measured == types:
        return config.name, source
    return None, f"{source}, measured for {'/'.join(map(str, measured))}"


@cached_constant(maxsize=4096)
def _grouped_planned(index: int, a_dtype: str, b_dtype: str, out_dtype: str, scale_n: int, m, n, k, groups, _table):
    """The variant a grouped call runs on CUDA device `index` (as `_planned`, for grouped_plan)."""
    variant = grouped_plan(device_info.info(index), a_dtype, b_dtype, out_dtype, scale_n, m, n, k, groups)[0]
    return _loadable(variant, grouped_variant(a_dtype, b_dtype, out_dtype, scale_n), index)


@cached_constant(maxsize=4096)
def _k_grouped_planned(index: int, a_dtype: str, b_dtype: str, out_dtype: str, m, n, k, groups, _table):
    """The variant a weight-gradient call runs on CUDA device `index` (as `_planned`, for k_grouped_plan)."""
    variant = k_grouped_plan(device_info.info(index), a_dtype, b_dtype, out_dtype, m, n, k, groups)[0]
    return _loadable(variant, k_grouped_variant(a_dtype, b_dtype, out_dtype), index)


def dispatch_configs() -> list:
    """The block-scaled variants dispatch runs for e4m3 inputs, bf16 output and 128x128 weight blocks (what
    `--prebuild --modes fp8_block` builds): the defaults per M, the grouped kernels (mixture-of-experts and its
    weight gradients, FP32 out) and the shipped tables' winners."""
    defaults = [config for _, config in DENSE_BY_M]
    defaults.append(Fp8BlockConfig.from_name(grouped_variant("e4m3", "e4m3", "bf16", 128)))
    defaults.append(Fp8BlockConfig.from_name(k_grouped_variant("e4m3", "e4m3", "fp32")))
    shipped = [c for c in tuned.shipped_configs() if isinstance(c, _BLOCK_CONFIGS)]
    return list(dict.fromkeys(defaults + shipped))


@cached_constant(maxsize=4096)  # serving repeats a few signatures; token counts vary
def _planned(index: int, a_dtype: str, b_dtype: str, out_dtype: str, scale_n: int, m: int, n: int, k: int, _table):
    """The variant a dense call runs on CUDA device `index`: `dense_plan`'s once its library builds and loads, else
    the default (torch.compile calls it while tracing; keyed by the tuned tables' generation)."""
    variant = dense_plan(device_info.info(index), a_dtype, b_dtype, out_dtype, scale_n, m, n, k)[0]
    return _loadable(variant, dense_variant(a_dtype, b_dtype, out_dtype, scale_n, m), index)


@functools.cache
def _loadable(variant: str, default: str, index: int) -> str:
    """`variant` once its library builds and loads for device `index`; else, with a warning (once), `default`."""
    if variant == default:
        return variant
    try:
        native.library(config_of(variant), torch.device("cuda", index))
    except (RuntimeError, OSError) as error:  # a build that fails, a library that does not load
        warnings.warn(f"cutlass_ext: {error}\nfalling back to {default}", RuntimeWarning, stacklevel=2)
        return default
    return variant


def dense_variant(a_dtype: str, b_dtype: str, out_dtype: str, scale_n: int, m: int = 1 << 30) -> str:
    """The default dense kernel for these types and M (DENSE_BY_M), where no tuned table has an entry."""
    bucket = next(i for i, (bound, _) in enumerate(DENSE_BY_M) if bound is None or m <= bound)
    return _dense_variant(a_dtype, b_dtype, out_dtype, scale_n, bucket)


@cached_constant
def _dense_variant(a_dtype: str, b_dtype: str, out_dtype: str, scale_n: int, bucket: int) -> str:
    config = DENSE_BY_M[bucket][1]
    return dataclasses.replace(config, a_dtype=a_dtype, b_dtype=b_dtype, out_dtype=out_dtype, scale_n=scale_n).name


@cached_constant
def grouped_variant(a_dtype: str, b_dtype: str, out_dtype: str, scale_n: int) -> str:
    """The grouped kernel: 128x128 cooperative tiles under the group scheduler."""
    return Fp8BlockConfig(a_dtype, b_dtype, out_dtype, scale_n=scale_n, grouped=True).name


@cached_constant
def k_grouped_variant(a_dtype: str, b_dtype: str, out_dtype: str) -> str:
    """The weight-gradient kernel: 128x128 cooperative tiles under the group scheduler."""
    return Fp8BlockConfig(a_dtype, b_dtype, out_dtype, scale_n=1, k_grouped=True, scale_a_major="m").name


def gemm_fp8_block(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a,
    scale_b,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: torch.Tensor | None = None,
    variant: str | None = None,
) -> torch.Tensor:
    """D (M, N) = Σ_kb scale_a[m, kb] · scale_b[n, kb] · (a @ b.T)_kb + bias on a Hopper GPU, D of out_dtype.

    a (M, K), b (N, K): FP8 (e4m3 or e5m2), unit stride along K, rows 16-byte aligned. Scales: module docstring.
    bias: (N,) of out_dtype or None. variant: a `Fp8BlockConfig` name to run instead of the default (its dtypes
    and scale_n must match the call). No host synchronisation: CUDA-graph capturable, torch.compile-able.
    """
    a_name, b_name, out_name, (m, n, k) = _check_pair(a, b, out_dtype)
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.shape != (n,) or bias.dtype != out_dtype:
            raise ValueError(f"bias must be a ({n},) tensor of {out_dtype}; got {_describe(bias)}")
        if bias.device != a.device or bias.stride(0) != 1:
            raise ValueError(f"bias must be a dense tensor on {a.device}")
    scale_b, scale_n = weight_scales("scale_b", scale_b, n, k, a.device)
    if not torch.compiler.is_compiling():
        _check_capability(a.device)
    if variant is None:
        index = a.device.index if a.device.index is not None else torch.cuda.current_device()
        variant = _planned(index, a_name, b_name, out_name, scale_n, m, n, k, tuned.generation())
    else:
        _check_variant(variant, a_name, b_name, out_name, scale_n, grouped=False)
    if _scale_a_major(variant) == "m":  # block scales taken as they are if already M-major
        given = _check_scale_tensor("scale_a", scale_a, a.device)
        block_shaped = given.shape == (m, k_blocks(k))
        scale_a = m_major(given if block_shaped else activation_scales("scale_a", given, m, k, a.device))
    else:
        scale_a = activation_scales("scale_a", scale_a, m, k, a.device)
    rows = _scale_rows_n(variant)
    if rows != scale_n:  # a tile across weight-scale blocks reads each block's scale once per `rows` rows of B
        scale_b = scale_b.repeat_interleave(scale_n // rows, dim=0)
    return _gemm_op(a, b, scale_a, scale_b, bias, out_dtype, variant)


@cached_constant
def _scale_a_major(variant: str) -> str:
    return config_of(variant).scale_a_major


@cached_constant
def _scale_rows_n(variant: str) -> int:
    return config_of(variant).scale_rows_n


def m_major(scale: torch.Tensor) -> torch.Tensor:
    """(M, kb) scales as the M-major kernels read them (DeepGEMM's TMA-aligned layout): unit stride along M, each
    k-block's column 16-byte aligned and padded to a multiple of 4 rows, the padding inside the allocation (TMA
    reads a column's whole 16-byte units; CUTLASS's can_implement asks the M extent to be a multiple of 4). As
    given if they are so laid out, else copied into that layout with zero padding."""
    rows, blocks = scale.shape
    padded_rows = -(-rows // 4) * 4
    if _m_major_padded(scale, padded_rows):
        return scale
    padded = scale.new_zeros((blocks, padded_rows))
    padded[:, :rows].copy_(scale.T)
    return padded.T[:rows]


def _m_major_padded(scale: torch.Tensor, padded_rows: int) -> bool:
    rows, blocks = scale.shape
    if rows == 0 or blocks == 0 or torch.compiler.is_compiling():  # no pointer to test while tracing: copy
        return False
    column_stride = scale.stride(1)
    last = scale.storage_offset() + (blocks - 1) * column_stride + padded_rows  # one past the last padded row
    return (
        (scale.stride(0) == 1 or rows == 1)
        and column_stride % 4 == 0
        and column_stride >= padded_rows
        and scale.data_ptr() % 16 == 0
        and last * scale.element_size() <= scale.untyped_storage().nbytes()
    )


def grouped_gemm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a,
    scale_b,
    *,
    offsets: torch.Tensor | None = None,
    masked_counts: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    variant: str | None = None,
) -> torch.Tensor:
    """One launch of every expert's product D_g = A_g @ b[g].T with block scales (a mixture-of-experts layer).

    b (G, N, K): the experts' weights, FP8; scale_b: per expert what gemm_fp8 takes for a weight operand, stacked
    ((G, ceil(N / 128), kb), (G, N, kb), (G, N) per row or (G,) per tensor). Two layouts of the tokens:
    contiguous: offsets (G,) int32 on the device, the groups' cumulative ends (group g owns rows
      offsets[g-1] ... offsets[g] - 1 of a (M, K)); returns (M, N). Groups may be empty or any size. The ends
      must not decrease (they are read on the device, unchecked: no host sync): a smaller end empties its group
      and makes the next one overlap rows an earlier group writes; ends past M are taken as M.
    masked: masked_counts (G,) int32 on the device, a (G, C, K) with C rows of capacity per expert of which the
      first masked_counts[g] are valid; returns (G, C, N).
    Rows no group owns (past the last offset, past a count) are left unspecified. scale_a: as gemm_fp8's for the
    whole a ((M, kb) or (G, C, kb) blocks, per row or per tensor). No host synchronisation: the counts are read
    on the device, so the call is CUDA-graph capturable.
    """
    if (offsets is None) == (masked_counts is None):
        raise ValueError("pass exactly one of offsets (contiguous layout) and masked_counts (masked layout)")
    masked = masked_counts is not None
    a_name = _check_operand("a", a, 3 if masked else 2)
    b_name = _check_operand("b", b, 3)
    if a.device != b.device:
        raise ValueError(f"a and b must be on one device; got {a.device} and {b.device}")
    groups, n, k = b.shape
    out_name = _check_shapes("a", a.shape[-1], "b", k, n, out_dtype)
    counts = masked_counts if masked else offsets
    counts_name = "masked_counts" if masked else "offsets"
    if not isinstance(counts, torch.Tensor) or counts.dtype != torch.int32 or counts.shape != (groups,):
        raise ValueError(f"{counts_name} must be a ({groups},) int32 tensor (one per expert); got {_describe(counts)}")
    if counts.device != a.device:
        raise ValueError(f"{counts_name} must be on {a.device} (read there, never on the host); got {counts.device}")
    counts = counts.contiguous()  # read as a dense int32 array on the device
    if masked and a.shape[0] != groups:
        raise ValueError(f"a (G, C, K) must have G={groups} experts like b; got shape {tuple(a.shape)}")
    a = a if a.is_contiguous() else a.contiguous()  # a group's rows start where the one before ends
    b = b if b.is_contiguous() else b.contiguous()
    rows = a.shape[0] * a.shape[1] if masked else a.shape[0]
    scale_a = activation_scales("scale_a", _flat_rows(scale_a, a.shape[:-1]), rows, k, a.device).contiguous()
    scale_b, scale_n = _expert_scales(scale_b, groups, n, k, a.device)
    if not torch.compiler.is_compiling():
        _check_capability(a.device)
    if variant is None:
        index = a.device.index if a.device.index is not None else torch.cuda.current_device()
        per_expert = a.shape[1] if masked else -(-rows // max(groups, 1))  # capacity, or the mean tokens per expert
        args = (a_name, b_name, out_name, scale_n, per_expert, n, k, groups, tuned.generation())
        variant = _grouped_planned(index, *args)
    else:
        _check_variant(variant, a_name, b_name, out_name, scale_n, grouped=True)
    return _grouped_op(
        a, b, scale_a, scale_b, None if masked else counts, counts if masked else None, out_dtype, variant
    )


def k_grouped_gemm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a,
    scale_b,
    offsets: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    accumulate: bool = False,
    out_dtype: torch.dtype = torch.float32,
    variant: str | None = None,
) -> torch.Tensor:
    """The weight gradients of a mixture-of-experts layer in one launch, groups cut along K: per group g,
    D[g] (M, N) = Σ_kb scale_a[i, kb] · scale_b[j, kb] · (a[:, cols] @ b[:, cols].T)_kb over the columns
    [offsets[g-1], offsets[g]) it owns (e.g. a = dYᵀ, b = Xᵀ with the tokens sorted by expert: D[g] = dW_g).

    a (M, K), b (N, K): FP8, unit stride along K (K a multiple of 16). scale_a (M, ceil(K / 128)) and scale_b
    (N, ceil(K / 128)): 1x128 block scales along K, float32 (`quantize_fp8(x, granularity="block", block=(1, 128))`
    of a and b), or per row / per tensor; read M- and N-contiguous (taken as they are if already so, e.g. the
    transpose of a dense (ceil(K / 128), M), else transposed: a copy). offsets (G,) int32 on the device, the
    groups' cumulative ends along K, read there (no host synchronisation: graph capturable). Every non-empty group
    must start at a multiple of 128 (pad each expert's tokens to 128, as DeepGEMM asks); one that does not, or whose
    offsets run backwards or past K, comes out NaN; an empty group's D[g] is 0 (or out[g] unchanged when
    accumulating). out: (G, M, N) dense of out_dtype to write, or to add to with accumulate=True (gradient
    accumulation in place); else a new tensor. variant: a `_kgrouped` variant's name (collective or direct) to run
    instead of the tuned tables' winner for (M, N, mean tokens per expert, G), or where none is, the 128x128
    collective kernel. Returns D (out when given).
    """
    a_name, b_name, out_name, (m, n, k) = _check_pair(a, b, out_dtype)
    if not isinstance(accumulate, bool):
        raise TypeError(f"accumulate must be True or False; got {accumulate!r}")
    if not isinstance(offsets, torch.Tensor) or offsets.dtype != torch.int32 or offsets.dim() != 1:
        raise ValueError(f"offsets must be a (G,) int32 tensor (each group's end along K); got {_describe(offsets)}")
    if offsets.device != a.device:
        raise ValueError(f"offsets must be on {a.device} (read there, never on the host); got {offsets.device}")
    groups = offsets.shape[0]
    shape = (groups, m, n)
    if out is None:
        if accumulate:
            raise ValueError("accumulate=True adds to out: pass out (G, M, N)")
        out = torch.empty(shape, dtype=out_dtype, device=a.device)
    elif not isinstance(out, torch.Tensor) or out.shape != shape or out.dtype != out_dtype:
        raise ValueError(f"out must be a {shape} tensor of {out_dtype}; got {_describe(out)}")
    elif out.device != a.device or not out.is_contiguous():
        raise ValueError(f"out must be a dense (contiguous) tensor on {a.device}")
    if max(m, n) > _INT32_MAX:  # the kernel's problem shapes are int32
        raise ValueError(f"a's rows M={m} and b's rows N={n} must be at most {_INT32_MAX}")
    scale_a = _k_major_transposed("scale_a", scale_a, m, k, a.device)
    scale_b = _k_major_transposed("scale_b", scale_b, n, k, a.device)
    if not torch.compiler.is_compiling():
        _check_capability(a.device)
    if variant is None and (k == 0 or groups == 0):
        variant = k_grouped_variant(a_name, b_name, out_name)
    elif variant is None:
        index = a.device.index if a.device.index is not None else torch.cuda.current_device()
        per_expert = -(-k // groups)  # the mean tokens per expert (the sizes live on the device)
        args = (a_name, b_name, out_name, m, n, per_expert, groups, tuned.generation())
        variant = _k_grouped_planned(index, *args)
    else:
        _check_variant(variant, a_name, b_name, out_name, 1, grouped=False, k_grouped=True)
    a = a if a.stride(0) % _TMA_BYTES == 0 else a.contiguous()
    b = b if b.stride(0) % _TMA_BYTES == 0 else b.contiguous()
    _k_grouped_op(a, b, scale_a, scale_b, offsets.contiguous(), out, accumulate, variant)
    return out


def _k_major_transposed(name: str, scale, rows: int, k: int, device: torch.device) -> torch.Tensor:
    """Block scales (rows, kb) as the dense (kb, rows) array the K-grouped kernel reads: the given tensor's memory
    when it already is that, else a transposed copy (per-row and per-tensor scales expanded first)."""
    given = _check_scale_tensor(name, scale, device)
    blocks = k_blocks(k)
    if given.shape == (rows, blocks) and given.stride() == (1, rows) and rows * blocks:
        return given.t()
    return activation_scales(name, given, rows, k, device).t().contiguous()


def _flat_rows(scale, row_shape) -> torch.Tensor:
    """A masked layout's (G, C, ...) activation scales as (G·C, ...) rows."""
    if isinstance(scale, torch.Tensor) and len(row_shape) == 2 and scale.dim() >= 2 and scale.shape[:2] == row_shape:
        return scale.reshape(row_shape[0] * row_shape[1], *scale.shape[2:])
    return scale


def _expert_scales(scale, groups: int, n: int, k: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """Each expert's weight scales in one form (weight_scales), stacked dense: (G, rows, kb), rows of B per scale."""
    scale = _check_scale_tensor("scale_b", scale, device)
    if scale.numel() == 1:
        scale = scale.reshape(1).expand(groups)
    if scale.dim() == 0 or scale.shape[0] != groups:
        raise ValueError(f"scale_b must hold one entry per expert (first dimension {groups}); got {tuple(scale.shape)}")
    forms = [weight_scales("scale_b[g]", scale[g], n, k, device) for g in range(min(groups, 1))]
    if not forms:
        return scale.new_empty((0, 1, k_blocks(k))), 128
    scale_n = forms[0][1]
    rows = -(-n // scale_n)
    if scale.shape[1:] == (rows, k_blocks(k)):
        return scale.contiguous(), scale_n
    return scale.reshape(groups, -1, 1).expand(groups, rows, k_blocks(k)).contiguous(), scale_n


def _check_variant(
    variant: str, a_name: str, b_name: str, out_name: str, scale_n: int, grouped: bool, k_grouped: bool = False
) -> None:
    config = config_of(variant)
    wanted = (a_name, b_name, out_name, scale_n, grouped, k_grouped)
    if (config.a_dtype, config.b_dtype, config.out_dtype, config.scale_n, config.grouped, config.k_grouped) != wanted:
        kind = "a K-grouped kernel (_kgrouped)" if k_grouped else "not a K-grouped kernel"
        raise ValueError(
            f"variant={variant!r} does not fit this call: it needs a={a_name}, b={b_name}, out={out_name}, "
            f"scale_n={scale_n}, grouped={grouped} and {kind}"
        )


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"{tuple(x.shape)} {x.dtype} on {x.device}"
    return type(x).__name__
