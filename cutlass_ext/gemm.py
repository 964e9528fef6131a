"""`gemm`: FP32 matrix products on the Tensor Cores, at TF32 accuracy or corrected to FP32 accuracy."""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import torch

from . import corrected_sm90, ops, registry, tuned
from . import device as device_info
from .compiling import constant_result
from .config import KERNEL_MODES, LAYOUTS, KernelConfig, default_configs
from .split_config import DEFAULT_SPLIT, SplitConfig

MODES = KERNEL_MODES + ("fp32",)
# halfhalf's packing pass writes row-major operands from any strides (its column-major kernels ran 50.8 TFLOP/s
# against 67.0 row-major at 8192^3; docs/design-notes.md, corrected SGEMM on sm80+); the other modes read
# transposed views through column-major kernels.
_PACKS_ROW_MAJOR = {"halfhalf"}


def _configs_for(mode: str, layout_a: str, layout_b: str, shared_memory_bytes: int | None = None) -> list:
    """The variants that read such operands as stored, then the row-major ones the binding falls back to with
    contiguous copies; tiles fitted to the device's shared memory."""
    if mode in _PACKS_ROW_MAJOR:
        layout_a = layout_b = "row"
    fitted = functools.partial(default_configs, mode, shared_memory_bytes=shared_memory_bytes)
    return list(dict.fromkeys(fitted(layout_a=layout_a, layout_b=layout_b) + fitted()))


# Per (mode, layout of A, layout of B); plain data, so torch.compile reads it without tracing.
_DEFAULT_CONFIGS = {
    (mode, layout_a, layout_b): _configs_for(mode, layout_a, layout_b)
    for mode in KERNEL_MODES
    for layout_a in LAYOUTS
    for layout_b in LAYOUTS
}
_DEFAULT_VARIANTS = {key: tuple(c.name for c in configs) for key, configs in _DEFAULT_CONFIGS.items()}


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
    if torch.compiler.is_compiling() or not torch._C._get_cublas_allow_tf32():
        return a @ b  # already IEEE: read in a fraction of a microsecond, not switched
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
    the finite factor's lo part is zero). Arguments are checked once per signature (dtypes, devices, shapes).
    """
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        _check_operands(a=a, b=b)
    signature = (mode, a.dtype, b.dtype, a.device, b.device, a.shape, b.shape)
    if torch.compiler.is_compiling():
        _check(*signature)  # symbolic shapes are not cached
    else:
        _cached_check(*signature)
    if (a.requires_grad or b.requires_grad) and torch.is_grad_enabled():
        return _Gemm.apply(a, b, mode)
    return _product(a, b, mode)


def _check(mode, a_dtype, b_dtype, a_device, b_device, a_shape, b_shape) -> None:
    """gemm's argument checks, which depend only on the call's signature."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not one of {list(MODES)}")
    for name, dtype in (("a", a_dtype), ("b", b_dtype)):
        if dtype != torch.float32:
            raise TypeError(f"{name} must be float32; got {dtype}")
    for name, device in (("a", a_device), ("b", b_device)):
        if device.type != "cuda":
            raise ValueError(f"{name} must be a CUDA tensor; got device {device}")
    for name, shape in (("a", a_shape), ("b", b_shape)):
        if len(shape) not in (2, 3):
            raise ValueError(f"{name} must be 2-D, or 3-D for a batch; got shape {tuple(shape)}")
    if a_device != b_device:
        raise ValueError(f"a and b must be on one device; got {a_device} and {b_device}")
    if a_shape[-1] != b_shape[-2]:
        raise ValueError(f"a is {tuple(a_shape)} and b is {tuple(b_shape)}: a.shape[-1] must equal b.shape[-2]")
    if len(a_shape) == 3 and len(b_shape) == 3 and a_shape[0] != b_shape[0]:
        raise ValueError(f"a is {tuple(a_shape)} and b is {tuple(b_shape)}: batch sizes must match")


_cached_check = functools.lru_cache(maxsize=4096)(_check)


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
    m, n, k = a.shape[-2], b.shape[-1], a.shape[-1]
    if not (a.numel() and b.numel()):  # empty, or K = 0: the binding writes the (zero) output, no kernel runs
        registry.binding()
        return ops.gemm(a, b, list(_DEFAULT_VARIANTS[mode, _layout(a), _layout(b)]))
    if not all(isinstance(v, int) for v in (m, n, k)):  # symbolic shapes under torch.compile: the defaults
        defaults = list(_DEFAULT_VARIANTS[mode, _layout(a), _layout(b)])
        return ops.halfhalf_gemm(a, b, defaults) if mode == "halfhalf" else ops.gemm(a, b, defaults)
    hopper_ok = corrected_sm90.supports_shapes(a.dim(), b.dim(), n)
    index = a.device.index if a.device.index is not None else torch.cuda.current_device()
    path, variants = _split_plan(_runtime_plan(index, mode, _layout(a), _layout(b), m, n, k, hopper_ok))
    if path == "sm90":
        return corrected_sm90.product(a, b, mode, variants)
    if mode == "halfhalf":
        return ops.halfhalf_gemm(a, b, variants)  # shifts, packing, product and unscaling in one call
    return ops.gemm(a, b, variants)


# Below about one wave of 128x128 tiles (132 SMs on an H100 or H200) the sm80 kernels' smaller tiles and split-K
# fill the GPU better than the Hopper path's: the H100's table picks sm80 at 1024³ (64 tiles) and sm90 at 4096³.
HOPPER_MIN_TILES = 128


@dataclass(frozen=True)
class Plan:
    """What `gemm` runs for one problem: `path` (`sm90` Hopper corrected kernels, `sm80` mma.sync kernels), the
    variant names in order of preference, and where the first came from."""

    path: str
    variants: tuple[str, ...]
    source: str


def plan(
    gpu: device_info.DeviceInfo,
    mode: str,
    m: int,
    n: int,
    k: int,
    layout_a="row",
    layout_b="row",
    hopper_ok: bool = True,
) -> Plan:
    """The variants `gemm` runs for an (m, k) x (k, n) product of `mode` on `gpu` (no GPU needed: `explain`):
    the tuned tables' entry (tables by `tuned.table_chain`), else the architecture's default: on Hopper the
    corrected sm90 kernels for problems of a wave of tiles or more, else the sm80 kernels that fit the device's
    shared memory. hopper_ok: whether the sm90 path takes these operands (`corrected_sm90.supports_shapes`)."""
    if mode in _PACKS_ROW_MAJOR:
        layout_a = layout_b = "row"
    defaults = tuple(c.name for c in _configs_for(mode, layout_a, layout_b, gpu.shared_memory_bytes))
    config, source = tuned.resolve(gpu.name, mode, m, n, k, gpu=gpu)
    if isinstance(config, SplitConfig) and hopper_ok:
        return Plan("sm90", (config.name,), source)
    if isinstance(config, KernelConfig) and (config.layout_a, config.layout_b) == (layout_a, layout_b):
        return Plan("sm80", (config.name,) + tuple(v for v in defaults if v != config.name), source)
    tiles = -(-m // 128) * -(-n // 128)
    if gpu.hopper and mode in DEFAULT_SPLIT and hopper_ok and tiles >= HOPPER_MIN_TILES:
        return Plan("sm90", (DEFAULT_SPLIT[mode].name,), f"sm90 default ({source})")
    return Plan("sm80", defaults, f"sm{gpu.arch or '80'} default ({source})")


@constant_result
def _runtime_plan(index: int, mode: str, layout_a: str, layout_b: str, m: int, n: int, k: int, hopper_ok: bool) -> str:
    """`path:variant,variant` for this problem on device `index`, its first variant built and loaded (a constant
    to torch.compile, which calls it while tracing)."""
    return _cached_runtime_plan(index, mode, layout_a, layout_b, m, n, k, hopper_ok, tuned.generation())


@functools.lru_cache(maxsize=4096)
def _split_plan(plan: str) -> tuple[str, list[str]]:
    """`path:variant,variant` -> (path, [variant, ...]), parsed once per plan."""
    path, variants = plan.split(":")
    return path, variants.split(",")


@functools.lru_cache(maxsize=4096)
def _cached_runtime_plan(index, mode, layout_a, layout_b, m, n, k, hopper_ok, _generation) -> str:
    chosen = plan(device_info.info(index), mode, m, n, k, layout_a, layout_b, hopper_ok)
    device = torch.device("cuda", index)
    try:
        variants = registry.first_usable(list(chosen.variants), device)
    except RuntimeError as error:
        if chosen.path != "sm90":
            raise
        warnings.warn(f"cutlass_ext: {error}\nfalling back to the sm80 kernels", RuntimeWarning, stacklevel=2)
        chosen = Plan("sm80", _DEFAULT_VARIANTS[mode, layout_a, layout_b], "sm80 default")
        variants = registry.first_usable(list(chosen.variants), device)
    return f"{chosen.path}:{','.join(variants)}"


class _Gemm(torch.autograd.Function):
    """dA = dC·Bᵀ and dB = Aᵀ·dC, both through the same mode (and, for halfhalf, the same range scaling).
    forward takes ctx itself: a separate setup_context makes every apply bind its arguments by inspect (~15 µs)."""

    @staticmethod
    def forward(ctx, a, b, mode):
        ctx.mode = mode
        ctx.save_for_backward(a, b)
        return _product(a, b, mode)

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
