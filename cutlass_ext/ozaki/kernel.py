"""The Ozaki-II kernels on CUDA as one `torch.library` op, `cutlass_ext::ozaki_gemm`, with a fake kernel and autograd.

One call runs three launchers of the variant's library (kernels/ozaki_gemm.cuh): the operand pass over A's rows
and over B's columns (shifts and INT8 residue planes, K-major, K padded to 16 bytes), one batched INT8 GEMM over
every (modulus, batch) problem into INT8 residue planes (or INT32 products), and the recombination into the FP32
output. The result equals `reference.ozaki_matmul` bit for bit (its docstring is the definition). CPU tensors run
the reference itself.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from .. import native, registry
from ..compiling import custom_op
from .config import OzakiConfig
from .reference import moduli, ozaki_matmul

_K_ALIGNMENT = 16  # INT8 elements per 16-byte TMA row
_PRODUCT_TYPES = {"residues": torch.int8, "products": torch.int32}  # what the GEMM writes (OzakiConfig.output)
_NORM_SLICE_K = 1024  # kernels/ozaki_arith.cuh kNormSliceK


class _ScaleArgs(ctypes.Structure):
    _fields_ = [(f, ctypes.c_int64) for f in ("rows", "k", "batch", "k_pitch", "rows_pitch")] + [
        ("x", ctypes.c_void_p),
        ("x_batch_stride", ctypes.c_int64),
        ("x_row_stride", ctypes.c_int64),
        ("x_k_stride", ctypes.c_int64),
        ("shifts", ctypes.c_void_p),
        ("planes", ctypes.c_void_p),
        ("norms", ctypes.c_void_p),
    ]


class _GemmArgs(ctypes.Structure):
    _fields_ = [(f, ctypes.c_int64) for f in ("m", "n", "k_pitch", "problems")] + [
        ("a", ctypes.c_void_p),
        ("b", ctypes.c_void_p),
        ("d", ctypes.c_void_p),
        ("problem_moduli", ctypes.c_void_p),
        ("device", ctypes.c_int32),
        ("sm_count", ctypes.c_int32),
    ]


class _RecombineArgs(ctypes.Structure):
    _fields_ = [(f, ctypes.c_int64) for f in ("m", "n", "batch", "n_pitch")] + [
        ("products", ctypes.c_void_p),
        ("shift_a", ctypes.c_void_p),
        ("shift_b", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("out_batch_stride", ctypes.c_int64),
        ("out_row_stride", ctypes.c_int64),
        ("out_column_stride", ctypes.c_int64),
    ]


@functools.cache
def _config(variant: str) -> OzakiConfig:
    return OzakiConfig.from_name(variant)


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@functools.cache
def _problem_moduli(device: torch.device, count: int, batch: int) -> torch.Tensor:
    """int32 (count · batch,): the modulus of each problem of the GEMM's launch (planes are modulus-major).
    Filled on the device (no host copy, so a first call inside a CUDA graph capture works too) and kept."""
    return torch.cat([torch.full((batch,), m, dtype=torch.int32, device=device) for m in moduli(count)])


def _round_up(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


def _launcher(library: ctypes.CDLL, variant: str, name: str, restype=ctypes.c_int):
    function = getattr(library, f"{variant}_{name}")
    function.restype = restype
    return function


def _check(library: ctypes.CDLL, status: int, what: str) -> None:
    if status != 0:
        spell = library.cutlass_ext_status_string
        spell.restype = ctypes.c_char_p
        raise RuntimeError(f"{what} failed with status {status} ({spell(status).decode()} if a cutlass::Status)")


def _scale(library, variant, x, rows_dim, planes, shifts, norms, stream) -> None:
    """Shifts and residue planes (moduli, batch, rows_pitch, k_pitch) of x's rows (rows_dim = 1) or columns
    (rows_dim = 2), x (batch, ·, ·)."""
    k_dim = 3 - rows_dim
    args = _ScaleArgs(
        x.shape[rows_dim],
        x.shape[k_dim],
        x.shape[0],
        planes.shape[-1],
        planes.shape[-2],
        x.data_ptr(),
        x.stride(0),
        x.stride(rows_dim),
        x.stride(k_dim),
        shifts.data_ptr(),
        planes.data_ptr(),
        norms.data_ptr(),
    )
    _check(library, _launcher(library, variant, "ozaki_scale")(ctypes.byref(args), stream), f"{variant} operand pass")


def cuda_product(a: torch.Tensor, b: torch.Tensor, variant: str) -> torch.Tensor:
    """The op's CUDA implementation: (B, M, K) @ (B, K, N) float32 CUDA tensors by `variant`'s kernels."""
    batch, m, k = a.shape
    n = b.shape[-1]
    out = a.new_empty((batch, m, n))
    if out.numel() == 0:
        return out
    if k == 0:
        return out.zero_()
    config = _config(variant)
    count, device = config.moduli, a.device
    arch = registry.device_arch(device)
    if arch != "90a":
        raise RuntimeError(f"the Ozaki-II kernels run on sm_90a (Hopper); {device} is sm_{arch}")
    product_type = _PRODUCT_TYPES[config.output]
    k_pitch, n_pitch = _round_up(k, _K_ALIGNMENT), _round_up(n, 16 // product_type.itemsize)
    with torch.cuda.device(device):
        library = native.library(config, device)
        stream = native.stream_handle(device)
        planes_a = torch.empty((count, batch, m, k_pitch), dtype=torch.int8, device=device)
        planes_b = torch.empty((count, batch, n_pitch, k_pitch), dtype=torch.int8, device=device)
        shifts_a = torch.empty((batch, m), dtype=torch.int32, device=device)
        shifts_b = torch.empty((batch, n), dtype=torch.int32, device=device)
        norms = torch.empty(batch * max(m, n) * -(-k // _NORM_SLICE_K), dtype=torch.float64, device=device)
        _scale(library, variant, a, 1, planes_a, shifts_a, norms, stream)
        _scale(library, variant, b, 2, planes_b, shifts_b, norms, stream)
        products = torch.empty((count, batch, m, n_pitch), dtype=product_type, device=device)
        index = device.index if device.index is not None else torch.cuda.current_device()
        gemm_args = _GemmArgs(
            m,
            n_pitch,  # TMA needs whole 16-byte rows of the output: B's padding rows are zeros
            k_pitch,
            count * batch,
            planes_a.data_ptr(),
            planes_b.data_ptr(),
            products.data_ptr(),
            _problem_moduli(device, count, batch).data_ptr(),
            index,
            _sm_count(index),
        )
        size = _launcher(library, variant, "ozaki_gemm_workspace_size", ctypes.c_size_t)(ctypes.byref(gemm_args))
        workspace = torch.empty(max(int(size), 1), dtype=torch.uint8, device=device)
        status = _launcher(library, variant, "ozaki_gemm")(ctypes.byref(gemm_args), workspace.data_ptr(), stream)
        _check(library, status, f"{variant} INT8 GEMM")
        recombine_args = _RecombineArgs(
            m,
            n,
            batch,
            n_pitch,
            products.data_ptr(),
            shifts_a.data_ptr(),
            shifts_b.data_ptr(),
            out.data_ptr(),
            *out.stride(),
        )
        status = _launcher(library, variant, "ozaki_recombine")(ctypes.byref(recombine_args), stream)
        _check(library, status, f"{variant} recombination")
    return out


@custom_op("cutlass_ext::ozaki_gemm", mutates_args=())
def ozaki_gemm(a: torch.Tensor, b: torch.Tensor, variant: str) -> torch.Tensor:
    """(B, M, K) @ (B, K, N) float32, any strides, by Ozaki scheme II with `variant`'s moduli -> (B, M, N)."""
    if a.is_cuda:
        return cuda_product(a, b, variant)
    return ozaki_matmul(a, b, _config(variant).moduli)


@ozaki_gemm.register_fake
def _(a, b, variant):
    return a.new_empty((a.shape[0], a.shape[1], b.shape[-1]))


def _setup_context(ctx, inputs, output):
    a, b, variant = inputs
    ctx.save_for_backward(a, b)
    ctx.variant = variant


def _backward(ctx, grad):
    """dA = dC·Bᵀ and dB = Aᵀ·dC, two more products with the same moduli (transposed views, no copies)."""
    a, b = ctx.saved_tensors
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        grad_a = torch.ops.cutlass_ext.ozaki_gemm(grad, b.mT, ctx.variant)
    if ctx.needs_input_grad[1]:
        grad_b = torch.ops.cutlass_ext.ozaki_gemm(a.mT, grad, ctx.variant)
    return grad_a, grad_b, None


ozaki_gemm.register_autograd(_backward, setup_context=_setup_context)
