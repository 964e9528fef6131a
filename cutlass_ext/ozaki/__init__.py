"""FP32-accurate GEMM on INT8 Tensor Cores by Ozaki scheme II (arXiv 2504.08009; GEMMul8, arXiv 2508.03984).

from cutlass_ext import ozaki
c = ozaki.gemm(a, b)             # 8 moduli: within SGEMM's error on the seed's matrix types, K up to 65536
c = ozaki.gemm(a, b, moduli=7)   # one INT8 GEMM fewer, 3-16x the error (13x median)
c = ext.gemm(a, b, mode="int8x8")  # the same through ext.gemm

Each row of A and column of B is scaled by a power of two to integers, reduced modulo `moduli` coprime integers
≤ 256 to INT8 residues, multiplied exactly by one INT8 GEMM per modulus and rebuilt by the Chinese remainder
theorem (`reference.py` defines every step). Autograd runs two more such products; batch dimensions broadcast.
"""

from __future__ import annotations

import functools
import re

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from ..batched import flatten_batch
from .config import DEFAULT_MODULI, OzakiConfig
from .kernel import cuda_product, ozaki_gemm
from .reference import MAX_K, check_moduli_count, ozaki_matmul


def _check_operand(name: str, x, matrix: bool = True) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if x.dtype != torch.float32:
        raise TypeError(f"{name} must be float32; got {x.dtype}")
    if x.dim() < (2 if matrix else 1):
        least = "2 dimensions" if matrix else "1 dimension"
        raise ValueError(f"{name} must have at least {least}; got shape {tuple(x.shape)}")


def check_operands(a, b) -> None:
    """`ext.gemm`'s operands in an int8x<moduli> mode: float32 tensors, 1-D or more."""
    _check_operand("a", a, matrix=False)
    _check_operand("b", b, matrix=False)


def gemm(
    a: torch.Tensor, b: torch.Tensor, moduli: int = DEFAULT_MODULI, config: OzakiConfig | None = None
) -> torch.Tensor:
    """(…, M, K) @ (…, K, N) float32 tensors (any strides; batch dimensions broadcast) by Ozaki scheme II with
    `moduli` INT8 GEMMs; float32 (…, M, N), equal to `reference.ozaki_matmul` bit for bit. `config` picks the
    GEMM's tiles (its `moduli` must agree). CUDA tensors need sm_90a; CPU tensors run the reference. K < 2^17;
    a row of a or column of b holding Inf or NaN makes its row or column of the result NaN."""
    _check_operand("a", a)
    _check_operand("b", b)
    check_moduli_count(moduli)
    if config is None:
        config = _default_config(moduli)
    elif not isinstance(config, OzakiConfig):
        raise TypeError(f"config must be an OzakiConfig; got {type(config).__name__}")
    elif config.moduli != moduli:
        raise ValueError(f"config.moduli={config.moduli} differs from moduli={moduli}")
    batch, a3, b3 = flatten_batch(a, b)
    if a3.shape[-1] > MAX_K:
        raise ValueError(f"K={a3.shape[-1]} exceeds {MAX_K}: INT32 products of INT8 residues would overflow")
    if _plain_eager(a3, b3):  # the kernels without the op's dispatch (~20-40 µs of host time a call)
        out = cuda_product(a3, b3, config.name)
    else:
        out = ozaki_gemm(a3, b3, config.name)
    return out.reshape(*batch, a3.shape[-2], b3.shape[-1])


_default_config = functools.cache(lambda moduli: OzakiConfig(moduli=moduli))


def _plain_eager(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the op would only run its CUDA kernels: CUDA tensors and `_untraced`."""
    return a.is_cuda and _untraced(a, b)


def _untraced(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Plain tensors, no gradient to record and nothing that must see the op: torch.compile, fake tensors, a
    dispatch mode, torch.func's transforms (vmap, jvp: their tensors have no storage) or torch.jit.trace (which
    records torch ops, not the kernels' launches)."""
    return (
        type(a) is torch.Tensor
        and type(b) is torch.Tensor
        and not (torch.is_grad_enabled() and (a.requires_grad or b.requires_grad))
        and not torch.compiler.is_compiling()
        and not torch.jit.is_tracing()
        and not torch._C._are_functorch_transforms_active()
        and _get_current_dispatch_mode() is None
    )


_MODE = re.compile(r"int8x(?P<moduli>[1-9][0-9]*)", re.ASCII)  # one spelling per count: no 08, no other digits


def is_mode(mode) -> bool:
    """Whether `mode` names an Ozaki-II product for `ext.gemm`: `int8x<moduli>`, e.g. `int8x8`."""
    return isinstance(mode, str) and _MODE.fullmatch(mode) is not None


def mode_moduli(mode: str) -> int:
    """The moduli of an `int8x<moduli>` mode, checked (3..14)."""
    return check_moduli_count(int(_MODE.fullmatch(mode)["moduli"]))


def gemm_mode(a, b, mode: str, *, bias=None, alpha=1.0, beta=0.0, c=None, out=None) -> torch.Tensor:
    """`ext.gemm(a, b, mode="int8x<moduli>", ...)`: torch.matmul's shapes (1-D operands too); the epilogue
    alpha·A·B + beta·C + bias runs in FP32 after the product (not fused); out receives the result."""
    moduli = mode_moduli(mode)
    check_operands(a, b)
    a_matrix = a.unsqueeze(0) if a.dim() == 1 else a
    b_matrix = b.unsqueeze(-1) if b.dim() == 1 else b
    result = gemm(a_matrix, b_matrix, moduli)
    if b.dim() == 1:
        result = result.squeeze(-1)
    if a.dim() == 1:
        result = result.squeeze(-2 if b.dim() > 1 else -1)
    if alpha != 1.0:
        result = result * alpha
    if c is not None and beta != 0.0:
        result = result + beta * c
    if bias is not None:
        result = result + bias
    if out is not None:
        return out.copy_(result)
    return result


__all__ = [
    "DEFAULT_MODULI",
    "OzakiConfig",
    "check_operands",
    "gemm",
    "gemm_mode",
    "is_mode",
    "mode_moduli",
    "ozaki_gemm",
    "ozaki_matmul",
]
