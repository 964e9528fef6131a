"""`gemm(mode="fp32")`: IEEE SGEMM from cuBLAS, called with CUBLAS_COMPUTE_32F_PEDANTIC on torch's handle and stream.

Where torch's own FP32 matmul is IEEE at the time of the call (its default; autocast and deterministic mode off), the
product is simply torch's: the same cuBLAS kernels at torch's per-call cost, 10-15 µs less than the ctypes call
below (`torch_matmul_runs_sgemm`). Another thread that switches torch's TF32 setting during the call races with it,
as with torch's own matmul.

A pedantic compute type keeps this one call in FP32 whatever the handle's math mode says (torch sets it from
`torch.backends.cuda.matmul.fp32_precision` whenever it hands the handle out): nothing process-wide is switched,
so another thread's matmul keeps its precision, and compiled and graph-captured programs run this call, not a
plain `a @ b` that would follow their TF32 setting. cuBLAS is reached through ctypes in the library torch loaded
(its headers need not be installed).

Eager calls are host-bound at small sizes, so everything a call's shapes and strides decide (operations, leading
dimensions, batch strides, the result's shape) is converted to ctypes values once per signature (`plan`); a call
then passes its three pointers and two scalars. The handle is asked of torch on every call: torch sets its stream
(and workspace) when it hands it out, and a cached handle would keep a stream another matmul may since have changed.
"""

from __future__ import annotations

import ctypes
import functools
from typing import NamedTuple

import torch

# cublas_api.h and library_types.h
_OP_N, _OP_T = 0, 1
_R_32F = 0
_COMPUTE_32F_PEDANTIC = 69
_GEMM_DEFAULT = -1


@functools.cache
def _gemm_strided_batched():
    """cublasGemmStridedBatchedEx_64 of the libcublas this process has loaded (torch's)."""
    torch.cuda.current_blas_handle()  # cuBLAS is loaded and initialised with torch's first handle
    with open("/proc/self/maps") as maps:
        paths = [line.split()[-1] for line in maps if "/libcublas.so" in line]
    major = (torch.version.cuda or "13").split(".")[0]
    library = ctypes.CDLL(paths[0] if paths else f"libcublas.so.{major}")
    function = library.cublasGemmStridedBatchedEx_64
    i32, i64, pointer = ctypes.c_int, ctypes.c_int64, ctypes.c_void_p
    function.argtypes = [pointer, i32, i32, i64, i64, i64, pointer]
    function.argtypes += [pointer, i32, i64, i64] * 2
    function.argtypes += [pointer, pointer, i32, i64, i64, i64, i32, i32]
    function.restype = i32
    return function


_allow_tf32 = getattr(torch._C, "_get_cublas_allow_tf32", None)  # private: a torch without it gets the pedantic call


def torch_matmul_runs_sgemm(device_type: str) -> bool:
    """Whether torch.matmul on float32 tensors of `device_type` runs plain IEEE SGEMM now, as this module's call
    does: its FP32 precision is IEEE, autocast is off (it would run the product in 16 bits) and deterministic mode
    is off (without CUBLAS_WORKSPACE_CONFIG torch refuses cuBLAS there; this module's call does not)."""
    return (
        not torch.is_autocast_enabled(device_type)
        and not torch.are_deterministic_algorithms_enabled()
        and torch_matmul_is_ieee()
    )


def torch_matmul_is_ieee() -> bool:
    """Whether torch.matmul on float32 CUDA tensors runs IEEE SGEMM now: torch's TF32 switch for cuBLAS is off (read
    as torch reads it for each matmul; a mix of its legacy and new precision settings makes torch refuse, and us
    take the pedantic call)."""
    if _allow_tf32 is None:
        return False
    try:
        return not _allow_tf32()
    except RuntimeError:
        return False


@functools.lru_cache(maxsize=64)
def _scalar(value: float):
    """A pointer to `value` as a C float (host memory: cuBLAS's default pointer mode), made once per value."""
    return ctypes.byref(ctypes.c_float(value))


def _operand_layout(shape, stride) -> tuple[int, int] | None:
    """(op, ld) for cuBLAS's column-major view of the row-major product's transpose: a row-major matrix is read as
    stored (op N, rows ld apart), a column-major one transposed (op T); None for strides cuBLAS cannot read."""
    rows, columns = shape[-2], shape[-1]
    if (columns <= 1 or stride[-1] == 1) and (rows <= 1 or stride[-2] >= columns):
        return _OP_N, stride[-2] if rows > 1 else max(columns, 1)
    if (rows <= 1 or stride[-2] == 1) and (columns <= 1 or stride[-1] >= rows):
        return _OP_T, stride[-1] if columns > 1 else max(rows, 1)
    return None


class Call(NamedTuple):
    """One signature's cuBLAS arguments as ctypes values, in the order of cublasGemmStridedBatchedEx_64 around the
    pointers and scalars a call fills in: head (opB, opA, n, m, k), then B's, A's and D's."""

    shape: tuple[int, ...]
    head: tuple
    b: tuple
    a: tuple
    d: tuple


@functools.lru_cache(maxsize=4096)
def plan(a_shape, a_stride, b_shape, b_stride) -> Call | None:
    """The cuBLAS call of a non-empty product (K > 0) of a (…, m, k) and b (…, k, n), 2-D or 3-D with one batch size,
    with these strides; None where cuBLAS cannot read an operand as stored (`sgemm` copies it)."""
    layout_a, layout_b = _operand_layout(a_shape, a_stride), _operand_layout(b_shape, b_stride)
    if layout_a is None or layout_b is None:
        return None
    batched = len(a_shape) == 3 or len(b_shape) == 3
    batch = a_shape[0] if len(a_shape) == 3 else (b_shape[0] if len(b_shape) == 3 else 1)
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    i32, i64 = ctypes.c_int, ctypes.c_int64
    compute = (i32(_COMPUTE_32F_PEDANTIC), i32(_GEMM_DEFAULT))
    # D row-major is Dᵀ column-major: Dᵀ = Bᵀ·Aᵀ, each operand read as cuBLAS sees its memory.
    return Call(
        shape=(batch, m, n) if batched else (m, n),
        head=(i32(layout_b[0]), i32(layout_a[0]), i64(n), i64(m), i64(k)),
        b=(i32(_R_32F), i64(layout_b[1]), i64(b_stride[0] if len(b_shape) == 3 else 0)),
        a=(i32(_R_32F), i64(layout_a[1]), i64(a_stride[0] if len(a_shape) == 3 else 0)),
        d=(i32(_R_32F), i64(n), i64(m * n if batched else 0), i64(batch), *compute),
    )


def run(
    call: Call, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None, alpha: float, beta: float
) -> torch.Tensor:
    """alpha·A·B + beta·c through `call`, the plan of a's and b's shapes and strides (c broadcast to the product;
    None: beta is ignored)."""
    # torch._C's calls behind torch.cuda.current_device and current_blas_handle, without their lazy-init check:
    # CUDA is initialised, a is on it
    if a.get_device() != torch._C._cuda_getDevice():
        with torch.cuda.device(a.device):  # the handle and stream of a's device
            return run(call, a, b, c, alpha, beta)
    d = a.new_empty(call.shape)
    if c is not None and beta != 0:
        d.copy_(c.expand(call.shape))  # cuBLAS adds beta·C in place
    else:
        beta = 0.0
    handle = torch._C._cuda_getCurrentBlasHandle()  # this thread's handle, set to the current stream
    status = _gemm_strided_batched()(
        handle,
        *call.head,
        _scalar(alpha),
        b.data_ptr(),
        *call.b,
        a.data_ptr(),
        *call.a,
        _scalar(beta),
        d.data_ptr(),
        *call.d,
    )
    if status != 0:
        raise RuntimeError(f"cublasGemmStridedBatchedEx_64 failed with cublasStatus_t {status}")
    return d


def sgemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None, alpha: float, beta: float) -> torch.Tensor:
    """alpha·A·B + beta·c for float32 CUDA a (…, m, k) and b (…, k, n), 2-D or 3-D with one batch size (a 2-D
    operand shared by every batch), c broadcast to the product (None: beta is ignored)."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if m == 0 or n == 0 or k == 0 or (a.dim() == 3 and a.shape[0] == 0) or (b.dim() == 3 and b.shape[0] == 0):
        batch = a.shape[0] if a.dim() == 3 else (b.shape[0] if b.dim() == 3 else None)
        d = a.new_zeros((m, n) if batch is None else (batch, m, n))
        if c is not None and beta != 0:
            d.copy_(c.expand(d.shape)).mul_(beta)
        return d
    if _operand_layout(a.shape, a.stride()) is None:
        a = a.contiguous()
    if _operand_layout(b.shape, b.stride()) is None:
        b = b.contiguous()
    return run(plan(a.shape, a.stride(), b.shape, b.stride()), a, b, c, alpha, beta)
