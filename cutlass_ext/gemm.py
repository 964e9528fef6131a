"""`gemm`: FP32 matrix products on the Tensor Cores, at TF32 accuracy or corrected to FP32 accuracy."""

from __future__ import annotations

import functools

import torch

from . import corrected_sm90, ops, registry, scaling, tuned
from .config import KERNEL_MODES, LAYOUTS, KernelConfig, default_configs
from .split_config import SplitConfig

MODES = KERNEL_MODES + ("fp32",)
# halfhalf's packing pass writes row-major operands from any strides (its row-major kernels are its fastest:
# sweeps/results/h100/NOTES.md); the other modes read transposed views through column-major kernels.
_PACKS_ROW_MAJOR = {"halfhalf"}


def _configs_for(mode: str, layout_a: str, layout_b: str) -> list:
    """The variants that read such operands as stored, then the row-major ones the binding falls back to with
    contiguous copies."""
    if mode in _PACKS_ROW_MAJOR:
        layout_a = layout_b = "row"
    return list(dict.fromkeys(default_configs(mode, layout_a, layout_b) + default_configs(mode)))


# Per (mode, layout of A, layout of B); plain data, so torch.compile reads it without tracing.
_DEFAULT_CONFIGS = {
    (mode, layout_a, layout_b): _configs_for(mode, layout_a, layout_b)
    for mode in KERNEL_MODES
    for layout_a in LAYOUTS
    for layout_b in LAYOUTS
}
_DEFAULT_VARIANTS = {key: [c.name for c in configs] for key, configs in _DEFAULT_CONFIGS.items()}


def dispatch_configs(modes=KERNEL_MODES) -> list:
    """Every kernel variant `gemm` may run for these modes (what `python -m cutlass_ext.build --prebuild` builds):
    the defaults and the shipped tuned tables' winners."""
    defaults = [c for (mode, _, _), configs in _DEFAULT_CONFIGS.items() if mode in modes for c in configs]
    return list(dict.fromkeys(defaults + [c for c in tuned.shipped_configs() if c.mode in modes]))


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
        if tensor.dim() not in (2, 3):
            raise ValueError(f"{name} must be 2-D, or 3-D for a batch; got shape {tuple(tensor.shape)}")


def _cublas_sgemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """cuBLAS SGEMM on the FP32 SIMT units, whatever the process-wide TF32 setting says."""
    if torch.compiler.is_compiling():
        return a @ b
    previous = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    try:
        return a @ b
    finally:
        torch.backends.cuda.matmul.fp32_precision = previous


def gemm(a: torch.Tensor, b: torch.Tensor, mode: str = "tf32tf32") -> torch.Tensor:
    """C = A·B for float32 CUDA tensors A (M, K) and B (K, N), computed on the Tensor Cores; returns (M, N).

    Batched: A (batch, M, K) and/or B (batch, K, N), a 2-D operand shared by every batch; returns (batch, M, N).

    mode:
      tf32tf32  TF32 hi + lo per operand, three products, hi·hi accumulated in FP32 round-to-nearest:
                FP32 accuracy over FP32's whole exponent range (seed 000).
      halfhalf  FP16 hi + lo·2^-11, the same correction on FP16 Tensor Cores. Rows of A and columns of B are
                scaled by exact powers of two so FP16's range holds them, and split once per element in that
                pass (hi and lo packed in one 32-bit word). Within one row of A (or column of
                B), values more than ~2^29 below the largest lose precision: use tf32tf32 for such data.
      markidis  FP16 hi + lo, all four products accumulated inside the Tensor Core (baseline, loses accuracy
                with K).
      tf32      operands rounded to TF32 (RNA), no correction: ~3e-4 relative error, like cuBLAS TF32.
      fp32      cuBLAS SGEMM on the FP32 units, for comparison.
    Any M, N, K >= 0 and any strides; the first use builds and caches the kernels. Differentiable: dA and dB
    are computed in the same mode. NaN propagates; Inf makes the outputs SGEMM makes Inf non-finite (NaN where
    the finite factor's lo part is zero).
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not one of {list(MODES)}")
    _check_operands(a=a, b=b)
    if a.device != b.device:
        raise ValueError(f"a and b must be on one device; got {a.device} and {b.device}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: a.shape[-1] must equal b.shape[-2]")
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] != b.shape[0]:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: batch sizes must match")
    return _Gemm.apply(a, b, mode)


def _layout(t: torch.Tensor) -> str:
    """`col` for matrices stored down their columns (a transposed view), else `row` (copied if not row-major)."""
    rows, columns = t.shape[-2], t.shape[-1]
    row_major = (columns <= 1 or t.stride(-1) == 1) and (rows <= 1 or t.stride(-2) >= columns)
    column_major = (rows <= 1 or t.stride(-2) == 1) and (columns <= 1 or t.stride(-1) >= rows)
    return "col" if column_major and not row_major else "row"


def _product(a: torch.Tensor, b: torch.Tensor, mode: str) -> torch.Tensor:
    """The forward product of validated operands."""
    if mode == "fp32":
        return _cublas_sgemm(a, b)
    if a.numel() and b.numel() and (hopper := _hopper_variant(a, b, mode)) is not None:
        return corrected_sm90.product(a, b, mode, [hopper])
    if mode == "halfhalf" and a.numel() and b.numel():
        variants = _variants(a, b, mode)  # loaded before the packing pass, which the kernel libraries export
        a, b, row_shift, column_shift = scaling.packed_operands(a, b)
        return scaling.unscaled_product(ops.gemm(a, b, variants), row_shift, column_shift)
    return ops.gemm(a, b, _variants(a, b, mode))


def _hopper_variant(a: torch.Tensor, b: torch.Tensor, mode: str) -> str | None:
    """The Hopper corrected variant (kernels/sm90_corrected_gemm.cuh) where the tuned table chose one for this
    shape and the path supports the operands; None otherwise."""
    shape = (a.shape[-2], b.shape[-1], a.shape[-1])
    if not all(isinstance(v, int) for v in shape):
        return None
    name = _tuned_name(a.device.index or 0, mode, *shape)
    if name is None or not SplitConfig.is_name(name) or not corrected_sm90.supports(a, b):
        return None
    return name


def _variants(a: torch.Tensor, b: torch.Tensor, mode: str) -> list[str]:
    """The tuned variant for this shape (if the GPU's tuned table has one for these layouts), then the defaults
    for the operands' layouts; built and loaded (cheap once done)."""
    key = (mode, _layout(a), _layout(b))
    shape = (a.shape[-2], b.shape[-1], a.shape[-1])
    best = _tuned_variant(a.device.index or 0, *key, *shape) if all(isinstance(v, int) for v in shape) else None
    variants = _DEFAULT_VARIANTS[key] if best is None else [best] + [v for v in _DEFAULT_VARIANTS[key] if v != best]
    if not torch.compiler.is_compiling():
        registry.ensure_names_registered(variants, a.device)
    return variants


@torch.compiler.assume_constant_result
def _tuned_variant(device_index: int, mode: str, layout_a: str, layout_b: str, m: int, n: int, k: int) -> str | None:
    """The tuned table's variant name for the nearest shape, or None (a constant to torch.compile)."""
    config = tuned.lookup(_device_name(device_index), mode, m, n, k)
    if not isinstance(config, KernelConfig) or (config.layout_a, config.layout_b) != (layout_a, layout_b):
        return None
    return config.name


@torch.compiler.assume_constant_result
def _tuned_name(device_index: int, mode: str, m: int, n: int, k: int) -> str | None:
    """The tuned table's variant name for the nearest shape, of any family (a constant to torch.compile)."""
    config = tuned.lookup(_device_name(device_index), mode, m, n, k)
    return None if config is None else config.name


@functools.cache
def _device_name(device_index: int) -> str:
    return torch.cuda.get_device_name(device_index)


class _Gemm(torch.autograd.Function):
    """dA = dC·Bᵀ and dB = Aᵀ·dC, both through the same mode (and, for halfhalf, the same range scaling)."""

    @staticmethod
    def forward(a, b, mode):
        return _product(a, b, mode)

    @staticmethod
    def setup_context(ctx, inputs, output):
        a, b, ctx.mode = inputs
        ctx.save_for_backward(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            if a.dim() == 2 and grad.dim() == 3:  # a shared by every batch: sum its gradient over the batch
                grad_a = _product(
                    grad.transpose(0, 1).reshape(grad.shape[1], -1), b.mT.reshape(-1, a.shape[1]), ctx.mode
                )
            else:
                grad_a = _product(grad, b.mT, ctx.mode)
        if ctx.needs_input_grad[1]:
            if b.dim() == 2 and grad.dim() == 3:
                grad_b = _product(a.reshape(-1, a.shape[-1]).mT, grad.reshape(-1, grad.shape[-1]), ctx.mode)
            else:
                grad_b = _product(a.mT, grad, ctx.mode)
        return grad_a, grad_b, None
