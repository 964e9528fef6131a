"""`gemm(mode="fp32")`: IEEE SGEMM from cuBLAS, called with CUBLAS_COMPUTE_32F_PEDANTIC on torch's handle and stream.

A pedantic compute type keeps this one call in FP32 whatever the handle's math mode says (torch sets it from
`torch.backends.cuda.matmul.fp32_precision` whenever it hands the handle out): nothing process-wide is switched,
so another thread's matmul keeps its precision, and compiled and graph-captured programs run this call, not a
plain `a @ b` that would follow their TF32 setting. cuBLAS is reached through ctypes in the library torch loaded
(its headers need not be installed).
"""

from __future__ import annotations

import ctypes
import functools

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


@functools.lru_cache(maxsize=64)
def _scalar(value: float):
    """A pointer to `value` as a C float (host memory: cuBLAS's default pointer mode), made once per value."""
    return ctypes.byref(ctypes.c_float(value))


def _operand(t: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """(t, op, ld) for cuBLAS's column-major view of the row-major product's transpose: a row-major matrix is read
    as stored (op N, rows ld apart), a column-major one transposed (op T); anything else is copied row-major."""
    rows, columns = t.shape[-2], t.shape[-1]
    if (columns <= 1 or t.stride(-1) == 1) and (rows <= 1 or t.stride(-2) >= columns):
        return t, _OP_N, t.stride(-2) if rows > 1 else max(columns, 1)
    if (rows <= 1 or t.stride(-2) == 1) and (columns <= 1 or t.stride(-1) >= rows):
        return t, _OP_T, t.stride(-1) if columns > 1 else max(rows, 1)
    return _operand(t.contiguous())


def sgemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None, alpha: float, beta: float) -> torch.Tensor:
    """alpha·A·B + beta·c for float32 CUDA a (…, m, k) and b (…, k, n), 2-D or 3-D with one batch size (a 2-D
    operand shared by every batch), c broadcast to the product (None: beta is ignored)."""
    if a.get_device() != torch.cuda.current_device():
        with torch.cuda.device(a.device):  # the handle and stream of a's device
            return sgemm(a, b, c, alpha, beta)
    batch = a.shape[0] if a.dim() == 3 else (b.shape[0] if b.dim() == 3 else 1)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    shape = (batch, m, n) if a.dim() == 3 or b.dim() == 3 else (m, n)
    d = a.new_empty(shape)
    if c is not None and beta != 0:
        d.copy_(c.expand(shape))  # cuBLAS adds beta·C in place
    else:
        beta = 0.0
    if d.numel() == 0:
        return d
    if k == 0:
        return d.mul_(beta) if beta != 0 else d.zero_()
    # D row-major is Dᵀ column-major: Dᵀ = Bᵀ·Aᵀ, each operand read as cuBLAS sees its memory.
    a, op_a, lda = _operand(a)
    b, op_b, ldb = _operand(b)
    batch_stride_a = a.stride(0) if a.dim() == 3 else 0
    batch_stride_b = b.stride(0) if b.dim() == 3 else 0
    handle = torch.cuda.current_blas_handle()  # this thread's handle, on the current stream
    status = _gemm_strided_batched()(
        handle,
        op_b,
        op_a,
        n,
        m,
        k,
        _scalar(alpha),
        b.data_ptr(),
        _R_32F,
        ldb,
        batch_stride_b,
        a.data_ptr(),
        _R_32F,
        lda,
        batch_stride_a,
        _scalar(beta),
        d.data_ptr(),
        _R_32F,
        n,
        m * n if d.dim() == 3 else 0,
        batch,
        _COMPUTE_32F_PEDANTIC,
        _GEMM_DEFAULT,
    )
    if status != 0:
        raise RuntimeError(f"cublasGemmStridedBatchedEx_64 failed with cublasStatus_t {status}")
    return d
