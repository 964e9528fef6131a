"""The block-scaled FP8 kernels as `torch.library` ops: ctypes calls into the family's torch-free libraries
(kernels/sm90_fp8_block_abi.h), with fake kernels for torch.compile. Arguments are checked by the API
(`api.py`); the ops take them as it hands them over: scales float32 in the variant's layout (unit stride along
k-blocks, or along rows for M-major activation scales), the grouped kernel's scale_a and scale_b dense."""

from __future__ import annotations

import ctypes
import functools

import torch

from .. import native
from ..compiling import custom_op
from .variant import config_of

TMA_BYTES = 16  # TMA moves rows whose start and stride are multiples of 16 bytes

_CUTLASS_STATUSES = {
    1: "misaligned operand",
    2: "invalid data type",
    3: "invalid layout",
    4: "invalid problem",
    5: "not supported",
    6: "workspace null",
    7: "internal error",
    8: "arch mismatch",
    9: "insufficient driver",
    10: "memory allocation",
    11: "invalid status",
}


class _DenseArgs(ctypes.Structure):
    _fields_ = [
        ("m", ctypes.c_int64),
        ("n", ctypes.c_int64),
        ("k", ctypes.c_int64),
        ("a", ctypes.c_void_p),
        ("lda", ctypes.c_int64),
        ("b", ctypes.c_void_p),
        ("ldb", ctypes.c_int64),
        ("scale_a", ctypes.c_void_p),
        ("scale_a_row_stride", ctypes.c_int64),
        ("scale_a_block_stride", ctypes.c_int64),
        ("scale_b", ctypes.c_void_p),
        ("scale_b_row_stride", ctypes.c_int64),
        ("bias", ctypes.c_void_p),
        ("d", ctypes.c_void_p),
        ("ldd", ctypes.c_int64),
        ("device", ctypes.c_int32),
        ("sm_count", ctypes.c_int32),
    ]


class _GroupedArgs(ctypes.Structure):
    _fields_ = [
        ("groups", ctypes.c_int64),
        ("n", ctypes.c_int64),
        ("k", ctypes.c_int64),
        ("m_total", ctypes.c_int64),
        ("capacity", ctypes.c_int64),
        ("offsets", ctypes.c_void_p),
        ("counts", ctypes.c_void_p),
        ("a", ctypes.c_void_p),
        ("lda", ctypes.c_int64),
        ("b", ctypes.c_void_p),
        ("ldb", ctypes.c_int64),
        ("b_group_stride", ctypes.c_int64),
        ("scale_a", ctypes.c_void_p),
        ("scale_b", ctypes.c_void_p),
        ("scale_b_group_stride", ctypes.c_int64),
        ("d", ctypes.c_void_p),
        ("ldd", ctypes.c_int64),
        ("device", ctypes.c_int32),
        ("sm_count", ctypes.c_int32),
    ]


class _KGroupedArgs(ctypes.Structure):
    _fields_ = [
        ("groups", ctypes.c_int64),
        ("m", ctypes.c_int64),
        ("n", ctypes.c_int64),
        ("k_total", ctypes.c_int64),
        ("offsets", ctypes.c_void_p),
        ("a", ctypes.c_void_p),
        ("lda", ctypes.c_int64),
        ("b", ctypes.c_void_p),
        ("ldb", ctypes.c_int64),
        ("scale_a", ctypes.c_void_p),
        ("scale_b", ctypes.c_void_p),
        ("c", ctypes.c_void_p),
        ("d", ctypes.c_void_p),
        ("ldd", ctypes.c_int64),
        ("d_group_stride", ctypes.c_int64),
        ("device", ctypes.c_int32),
        ("sm_count", ctypes.c_int32),
    ]


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _launch(variant: str, suffix: str, args: ctypes.Structure, device: torch.device) -> None:
    """can_implement, workspace, run: the three launchers of one variant (library_exports.h)."""
    library = native.library(config_of(variant), device)
    status = getattr(library, f"{variant}{suffix}_can_implement")(ctypes.byref(args))
    if status != 0:
        reason = _CUTLASS_STATUSES.get(status, f"status {status}")
        raise ValueError(f"{variant} cannot run this problem ({reason}): check alignment (16-byte rows) and shapes")
    workspace_size = getattr(library, f"{variant}{suffix}_workspace_size")
    workspace_size.restype = ctypes.c_size_t
    workspace = torch.empty(workspace_size(ctypes.byref(args)), dtype=torch.uint8, device=device)
    run = getattr(library, f"{variant}{suffix}_run")
    status = run(ctypes.byref(args), ctypes.c_void_p(workspace.data_ptr()), native.stream_handle(device))
    native.check_status(status, f"{variant}{suffix}_run")


@custom_op("cutlass_ext::gemm_fp8_block", mutates_args=())
def gemm_fp8_block(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
    variant: str,
) -> torch.Tensor:
    """(M, N) = block-scaled a (M, K) @ b (N, K)ᵀ + bias by `variant` (kernels/sm90_fp8_block_abi.h)."""
    (m, k), n = a.shape, b.shape[0]
    out = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_() if bias is None else out.copy_(bias.expand(m, n))
    args = _DenseArgs(
        m,
        n,
        k,
        a.data_ptr(),
        a.stride(0),
        b.data_ptr(),
        b.stride(0),
        scale_a.data_ptr(),
        scale_a.stride(0),
        scale_a.stride(1),
        scale_b.data_ptr(),
        scale_b.stride(0),
        bias.data_ptr() if bias is not None else None,
        out.data_ptr(),
        out.stride(0),
        _index(a.device),
        _sm_count(_index(a.device)),
    )
    with torch.cuda.device(a.device):
        _launch(variant, "_fp8_block", args, a.device)
    return out


@gemm_fp8_block.register_fake
def _(a, b, scale_a, scale_b, bias, out_dtype, variant):
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


@custom_op("cutlass_ext::grouped_gemm_fp8_block", mutates_args=())
def grouped_gemm_fp8_block(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    offsets: torch.Tensor | None,
    counts: torch.Tensor | None,
    out_dtype: torch.dtype,
    variant: str,
) -> torch.Tensor:
    """Per group g, D_g = block-scaled A_g @ b[g]ᵀ (kernels/sm90_fp8_block_abi.h). Contiguous (offsets): a (M, K)
    -> (M, N); masked (counts): a (G, C, K) -> (G, C, N). Rows no group owns are left unwritten."""
    groups, n, k = b.shape
    masked = counts is not None
    rows = a.shape[0] * a.shape[1] if masked else a.shape[0]
    out = torch.empty((*a.shape[:-1], n), dtype=out_dtype, device=a.device)
    if rows == 0 or n == 0 or groups == 0:
        return out
    if k == 0:
        return out.zero_()
    args = _GroupedArgs(
        groups,
        n,
        k,
        rows,
        a.shape[1] if masked else 0,
        None if masked else offsets.data_ptr(),
        counts.data_ptr() if masked else None,
        a.data_ptr(),
        a.stride(-2),
        b.data_ptr(),
        b.stride(1),
        b.stride(0),
        scale_a.data_ptr(),
        scale_b.data_ptr(),
        scale_b.stride(0),
        out.data_ptr(),
        n,
        _index(a.device),
        _sm_count(_index(a.device)),
    )
    with torch.cuda.device(a.device):
        _launch(variant, "_fp8_grouped", args, a.device)
    return out


@grouped_gemm_fp8_block.register_fake
def _(a, b, scale_a, scale_b, offsets, counts, out_dtype, variant):
    return a.new_empty((*a.shape[:-1], b.shape[1]), dtype=out_dtype)


# torch.library.custom_op for a mutating op: it bumps `out`'s version counter (compiling.custom_op is functional only)
@torch.library.custom_op("cutlass_ext::k_grouped_gemm_fp8_block", mutates_args=("out",))
def k_grouped_gemm_fp8_block(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    offsets: torch.Tensor,
    out: torch.Tensor,
    accumulate: bool,
    variant: str,
) -> None:
    """Per group g, out[g] (+)= block-scaled a[:, cols_g] @ b[:, cols_g]ᵀ, the columns cut by offsets along K
    (kernels/sm90_fp8_block_abi.h). a (M, K), b (N, K); scale_a (kb, M) and scale_b (kb, N) dense; out (G, M, N)
    dense."""
    (m, k), n, groups = a.shape, b.shape[0], offsets.shape[0]
    if groups == 0 or m == 0 or n == 0:
        return
    # checked here, not in the API: a pointer is known only at run time (also inside a compiled graph)
    for name, tensor in (("a", a), ("b", b), ("out", out)):
        if tensor.data_ptr() % TMA_BYTES:
            raise ValueError(f"{name} must start on a 16-byte boundary (TMA); its data pointer does not")
    args = _KGroupedArgs(
        groups,
        m,
        n,
        k,
        offsets.data_ptr(),
        a.data_ptr(),
        a.stride(0) if k else 16,  # no columns: every group empty (or invalid), a and b never read
        b.data_ptr(),
        b.stride(0) if k else 16,
        scale_a.data_ptr(),
        scale_b.data_ptr(),
        out.data_ptr() if accumulate else None,
        out.data_ptr(),
        out.stride(1),
        out.stride(0),
        _index(a.device),
        _sm_count(_index(a.device)),
    )
    with torch.cuda.device(a.device):
        _launch(variant, "_fp8_k_grouped", args, a.device)


@k_grouped_gemm_fp8_block.register_fake
def _(a, b, scale_a, scale_b, offsets, out, accumulate, variant):
    return None
