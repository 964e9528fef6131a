"""`gemm`: FP32 matrix products on the Tensor Cores."""

from __future__ import annotations

import torch

from . import ops, registry
from .config import INSTRUCTION_SHAPES, default_configs

MODES = tuple(sorted(INSTRUCTION_SHAPES))
# Plain data, so that torch.compile reads it without tracing the config machinery.
_DEFAULT_CONFIGS = {mode: default_configs(mode) for mode in MODES}
_DEFAULT_VARIANTS = {mode: [c.name for c in configs] for mode, configs in _DEFAULT_CONFIGS.items()}


def _check_operands(**operands) -> None:
    """One property at a time over all operands, so the first error names the most basic problem."""
    for name, tensor in operands.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(tensor).__name__}")
    for name, tensor in operands.items():
        if tensor.dtype != torch.float32:
            raise TypeError(f"{name} must be float32; got {tensor.dtype}")
    for name, tensor in operands.items():
        if tensor.device.type != "cuda":
            raise ValueError(f"{name} must be a CUDA tensor; got device {tensor.device}")
    for name, tensor in operands.items():
        if tensor.dim() != 2:
            raise ValueError(f"{name} must be 2-D; got shape {tuple(tensor.shape)}")


def gemm(a: torch.Tensor, b: torch.Tensor, mode: str = "tf32") -> torch.Tensor:
    """C = A·B for float32 CUDA tensors A (M, K) and B (K, N), computed by a CUTLASS kernel; returns (M, N).

    mode: `tf32` rounds A and B to TF32 (RNA) and accumulates on the Tensor Core: the uncorrected baseline,
    about 3e-4 relative error. Any M, N, K >= 0 and any strides; the first use builds and caches the kernels.
    """
    if mode not in _DEFAULT_VARIANTS:
        raise ValueError(f"mode={mode!r} is not one of {list(MODES)}")
    _check_operands(a=a, b=b)
    if a.device != b.device:
        raise ValueError(f"a and b must be on one device; got {a.device} and {b.device}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: a.shape[1] must equal b.shape[0]")
    if not torch.compiler.is_compiling():
        registry.ensure_registered(_DEFAULT_CONFIGS[mode], a.device)
    return ops.gemm(a, b, _DEFAULT_VARIANTS[mode])
