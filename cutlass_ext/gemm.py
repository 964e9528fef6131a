"""`gemm`: FP32 matrix products on the Tensor Cores, at TF32 accuracy or corrected to FP32 accuracy."""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from dataclasses import dataclass

import torch

from . import corrected_sm90, cublas, ops, ozaki, registry, tuned
from . import device as device_info
from .families.sm80.config import KERNEL_MODES, LAYOUTS, KernelConfig, default_configs
from .families.sm90.config import DEFAULTS as DEFAULT_SPLIT
from .families.sm90.config import Sm90Config as SplitConfig

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


def check_mode(mode) -> str:
    """`mode` if `gemm` computes it: one of MODES, or int8x<moduli> (Ozaki scheme II, 3..14 moduli)."""
    if isinstance(mode, str) and mode in MODES:
        return mode
    if ozaki.is_mode(mode):
        ozaki.mode_moduli(mode)  # a count out of range names the moduli
        return mode
    raise ValueError(f"mode={mode!r} is not one of {list(MODES)} or int8x<moduli>")


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


def gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    mode: str = "tf32tf32",
    *,
    bias: torch.Tensor | None = None,
    # int defaults: torch.compile(dynamic=True) traces a float default as a symbolic float, and the branch on it
    # below restarts the whole compilation to specialize it; an int default it specializes up front.
    alpha: float = 1,
    beta: float = 0,
    c: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """D = alpha·A·B + beta·C + bias for float32 CUDA tensors, with torch.matmul's shapes, computed on the Tensor
    Cores.

    Shapes as torch.matmul: A (…, M, K) and B (…, K, N) give (…, M, N), the batch dimensions broadcast (a matrix
    without them is shared by every batch); a 1-D A is a row (K,) and a 1-D B a column (K,), their dimension dropped
    from the result. bias (N,) is added to every row, c (broadcastable to the result) is scaled by beta (beta = 0
    ignores c, NaN included, as BLAS does), both inside the kernels' epilogue where they can (the sm80 kernels read
    them as their C operand, halfhalf's unscaling pass applies them). out: a float32 tensor of the result's shape to
    write into (no autograd, as torch's out= arguments).

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
      fp32      IEEE SGEMM (cuBLAS on the FP32 units) in eager, compiled and graph-captured code alike, whatever
                torch's TF32 setting says, without changing it.
      int8x<N>  Ozaki scheme II on INT8 Tensor Cores with N moduli (`cutlass_ext.ozaki`; int8x8 is within SGEMM's
                error over FP32's range, sm_90a; K < 2^17; the epilogue runs after the product; a row of a or
                column of b holding Inf or NaN gives NaN in its row or column).
    Any sizes >= 0 and any strides; the first use builds and caches the kernels. Differentiable in a, b, bias and
    c: dA and dB are computed in the same mode. NaN propagates; Inf makes the outputs SGEMM makes Inf non-finite
    (NaN where the finite factor's lo part is zero). Arguments are checked once per signature (dtypes, devices,
    shapes).
    """
    if mode not in MODES and ozaki.is_mode(mode):
        ozaki.check_operands(a, b)  # the operands' types before their shapes and the epilogue's
        _cached_check_shapes(a.shape, b.shape)
        scaled = isinstance(alpha, bool) or isinstance(beta, bool) or alpha != 1 or beta != 0
        if bias is not None or c is not None or out is not None or scaled:
            if c is None and out is None and not scaled and isinstance(bias, torch.Tensor):
                _cached_check_bias(bias.dtype, bias.device, bias.shape, a.device, b.shape)  # nn.Linear's call
            else:
                _check_epilogue(a, b, bias, alpha, beta, c, out)
            if out is not None and _records_grad(a, b, bias, c if beta != 0 else None):
                raise RuntimeError(_OUT_WITH_GRAD)
        return ozaki.gemm_mode(a, b, mode, bias=bias, alpha=alpha, beta=beta, c=c, out=out)
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        _check_operands(a=a, b=b)
    if torch.compiler.is_compiling():  # symbolic shapes: checked, not cached; the kernels are picked when it runs
        _check(mode, a.dtype, b.dtype, a.device, b.device, a.shape, b.shape)
        if c is None and out is None and _kernel_shapes(a, b):
            return _kernel_call(a, b, mode, bias, alpha, beta, None)
        return _general(a, b, mode, bias, alpha, beta, c, out)
    # One cached look-up per call checks the arguments and finds the kernels (None: not the kernels' shapes).
    plan = _eager_plan(
        mode, a.dtype, b.dtype, a.device, b.device, a.shape, b.shape, a.stride(), b.stride(), tuned.generation()
    )
    if c is None and out is None and plan is not None:  # what the kernels take as it is (nn.Linear's call)
        return _kernel_call(a, b, mode, bias, alpha, beta, plan)
    return _general(a, b, mode, bias, alpha, beta, c, out)


def _kernel_call(a, b, mode, bias, alpha, beta, plan) -> torch.Tensor:
    """gemm of operands the kernels take as they are, with a bias and alpha at most; `plan` (eager) or None (traced)."""
    if bias is not None or alpha != 1.0 or beta != 0.0 or type(alpha) is bool:
        # gemm's default alpha is the int 1 (nn.Linear's call): int and float take the cached check (bool does not)
        if plan is not None and type(alpha) in (int, float) and beta == 0.0 and isinstance(bias, torch.Tensor):
            _cached_check_bias(bias.dtype, bias.device, bias.shape, a.device, b.shape)
        else:
            _check_epilogue(a, b, bias, alpha, beta, None, None)
        alpha = float(alpha)
    if (a.requires_grad or b.requires_grad or (bias is not None and bias.requires_grad)) and torch.is_grad_enabled():
        return _Gemm.apply(a, b, None, bias, alpha, 0.0, mode)
    bias_scale = 0.0 if bias is None else 1.0
    if plan is None:
        return _product(a, b, mode, bias, alpha, bias_scale)
    return _launch(plan, a, b, bias, alpha, bias_scale, mode)


def _kernel_shapes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the kernels take a and b as they are: 2-D, or 3-D with one batch size (a 2-D one shared)."""
    a_dim, b_dim = a.dim(), b.dim()
    if a_dim == 2:
        return b_dim in (2, 3)
    return a_dim == 3 and (b_dim == 2 or (b_dim == 3 and a.shape[0] == b.shape[0]))


def _output_shape(a_shape, b_shape) -> tuple:
    """torch.matmul's result shape for checked operand shapes."""
    rows = (a_shape[-2],) if len(a_shape) > 1 else ()
    columns = (b_shape[-1],) if len(b_shape) > 1 else ()
    return (*_broadcast_batch(a_shape[:-2], b_shape[:-2]), *rows, *columns)


def _broadcast_batch(a_batch, b_batch) -> tuple:
    """The broadcast of two batch shapes (right-aligned; sizes equal or 1); ValueError naming both if none."""
    length = max(len(a_batch), len(b_batch))
    a_full = (1,) * (length - len(a_batch)) + tuple(a_batch)
    b_full = (1,) * (length - len(b_batch)) + tuple(b_batch)
    batch = []
    for x, y in zip(a_full, b_full):
        if x != y and x != 1 and y != 1:
            raise ValueError(
                f"a's batch dimensions {tuple(a_batch)} and b's {tuple(b_batch)} do not broadcast: batch sizes must "
                "match or be 1"
            )
        batch.append(y if x == 1 else x)
    return tuple(batch)


def _broadcasts_to(shape, target) -> bool:
    if len(shape) > len(target):
        return False
    return all(s == 1 or s == t for s, t in zip(reversed(tuple(shape)), reversed(tuple(target))))


def _check_bias(dtype, device, shape, a_device, b_shape) -> None:
    """A bias tensor's checks: they depend only on its signature and b's shape."""
    if dtype != torch.float32:
        raise TypeError(f"bias must be float32; got {dtype}")
    if device != a_device:
        raise ValueError(f"bias must be on a's device {a_device}; got {device}")
    if len(b_shape) < 2:
        raise ValueError("bias is one value per column of the product: it needs a b of at least 2 dimensions")
    if tuple(shape) != (b_shape[-1],):
        raise ValueError(f"bias must have shape ({b_shape[-1]},), one value per column; got {tuple(shape)}")


_cached_check_bias = functools.lru_cache(maxsize=1024)(_check_bias)  # nn.Linear passes a bias on every call


def _check_epilogue(a, b, bias, alpha, beta, c, out) -> tuple:
    """The epilogue's arguments, checked on each call that has one; returns the result's shape."""
    for name, value in (("alpha", alpha), ("beta", beta)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a real number; got {type(value).__name__}")
    if beta != 0 and c is None:
        raise ValueError(f"beta={beta} scales c, but no c was given")
    shape = _output_shape(a.shape, b.shape)
    for name, tensor in (("bias", bias), ("c", c), ("out", out)):
        if tensor is not None and not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(tensor).__name__}")
    if bias is not None:
        _check_bias(bias.dtype, bias.device, bias.shape, a.device, b.shape)
    for name, tensor in (("c", c), ("out", out)):
        if tensor is None:
            continue
        if tensor.dtype != torch.float32:
            raise TypeError(f"{name} must be float32; got {tensor.dtype}")
        if tensor.device != a.device:
            raise ValueError(f"{name} must be on a's device {a.device}; got {tensor.device}")
    if c is not None and not _broadcasts_to(c.shape, shape):
        raise ValueError(f"c of shape {tuple(c.shape)} does not broadcast to the result's shape {shape}")
    if out is not None and tuple(out.shape) != shape:
        raise ValueError(f"out must have the result's shape {shape}; got {tuple(out.shape)}")
    return shape


def _kernel_operand(t: torch.Tensor, batch: tuple, count) -> torch.Tensor:
    """t (…, rows, columns) as the kernels take it: one matrix shared by every batch where t has one, else the
    `count` matrices of its broadcast to `batch`, flattened (a view where t's strides allow, else a copy)."""
    if t.dim() == 2:
        return t
    matrix = t.shape[-2:]
    if math.prod(t.shape[:-2]) == 1:  # every batch reads the same matrix
        return t.reshape(matrix)
    return t.expand(*batch, *matrix).reshape(count, *matrix)


def _records_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


# torch's rule for out= arguments: no autograd through them
_OUT_WITH_GRAD = (
    "gemm(): functions with out=... arguments don't support automatic differentiation, but one of the arguments "
    "requires grad."
)


def _general(a, b, mode, bias, alpha, beta, c, out) -> torch.Tensor:
    """gemm for any operand shapes and epilogue, through the kernels' 2-D and 3-D problems."""
    shape = _check_epilogue(a, b, bias, alpha, beta, c, out)
    alpha, beta = float(alpha), float(beta)
    a_matrix = a.unsqueeze(0) if a.dim() == 1 else a
    b_matrix = b.unsqueeze(-1) if b.dim() == 1 else b
    batch = _broadcast_batch(a_matrix.shape[:-2], b_matrix.shape[:-2])
    count = math.prod(batch)
    a_kernel = _kernel_operand(a_matrix, batch, count)
    b_kernel = _kernel_operand(b_matrix, batch, count)
    m, n = a_matrix.shape[-2], b_matrix.shape[-1]
    kernel_shape = (m, n) if a_kernel.dim() == 2 and b_kernel.dim() == 2 else (count, m, n)
    c_kernel = c.expand(shape).reshape(kernel_shape) if c is not None and beta != 0 else None
    if _records_grad(a, b, c_kernel, bias):
        if out is not None:
            raise RuntimeError(_OUT_WITH_GRAD)
        result = _Gemm.apply(a_kernel, b_kernel, c_kernel, bias, alpha, beta, mode)
    else:
        source, source_scale = _source(c_kernel, bias, beta)
        result = _product(a_kernel, b_kernel, mode, source, alpha, source_scale)
    result = result.reshape(shape)
    return out.copy_(result) if out is not None else result


def _source(c, bias, beta) -> tuple:
    """The epilogue's one source operand and its scale: c (…, m, n), bias (n,) (broadcast over the rows), or
    beta·c + bias formed here when there are both."""
    if bias is None:
        return c, beta
    if c is None:
        return bias, 1.0
    return torch.add(bias, c, alpha=beta), 1.0


def _check(mode, a_dtype, b_dtype, a_device, b_device, a_shape, b_shape) -> None:
    """gemm's argument checks, which depend only on the call's signature."""
    check_mode(mode)
    for name, dtype in (("a", a_dtype), ("b", b_dtype)):
        if dtype != torch.float32:
            raise TypeError(f"{name} must be float32; got {dtype}")
    for name, device in (("a", a_device), ("b", b_device)):
        if device.type != "cuda":
            raise ValueError(f"{name} must be a CUDA tensor; got device {device}")
    for name, shape in (("a", a_shape), ("b", b_shape)):
        if len(shape) == 0:
            raise ValueError(f"{name} must have at least one dimension, as torch.matmul's operands; got a scalar")
    if a_device != b_device:
        raise ValueError(f"a and b must be on one device; got {a_device} and {b_device}")
    _check_shapes(a_shape, b_shape)


def _check_shapes(a_shape, b_shape) -> None:
    """torch.matmul's rules for operands of at least one dimension: K agrees, the batch dimensions broadcast."""
    inner = "b.shape[-2]" if len(b_shape) > 1 else "b.shape[0]"
    if a_shape[-1] != b_shape[-2 if len(b_shape) > 1 else 0]:
        raise ValueError(f"a is {tuple(a_shape)} and b is {tuple(b_shape)}: a.shape[-1] must equal {inner}")
    _broadcast_batch(a_shape[:-2], b_shape[:-2])


_cached_check_shapes = functools.lru_cache(maxsize=1024)(_check_shapes)  # once per signature


def _layout_of(shape, stride) -> str:
    """`col` for matrices stored down their columns (a transposed view), else `row` (copied if not row-major)."""
    rows, columns = shape[-2], shape[-1]
    row_major = (columns <= 1 or stride[-1] == 1) and (rows <= 1 or stride[-2] >= columns)
    column_major = (rows <= 1 or stride[-2] == 1) and (columns <= 1 or stride[-1] >= rows)
    return "col" if column_major and not row_major else "row"


def _layout(t: torch.Tensor) -> str:
    return _layout_of(t.shape, t.stride())


def _product(
    a: torch.Tensor, b: torch.Tensor, mode: str, source: torch.Tensor | None, alpha: float, beta: float
) -> torch.Tensor:
    """alpha·A·B + beta·source for validated kernel operands (2-D, or 3-D with one batch size) and a source that
    broadcasts to the product (c, or bias (n,)). torch.compile traces one op, which plans when it runs: sizes may
    be symbolic there (dynamo reads a symbolic size as an int, so no test of the sizes could tell). No float
    defaults: torch.compile would trace them as symbolic floats (see gemm's alpha)."""
    if torch.compiler.is_compiling():
        return torch.ops.cutlass_ext.product(a, b, source, alpha, beta, mode)
    return _run(a, b, source, alpha, beta, mode)


def _run(a, b, source, alpha: float, beta: float, mode: str) -> torch.Tensor:
    """cutlass_ext::product: the plan for these operands on their device (cached per signature), then its kernels."""
    plan = _eager_plan(
        mode, a.dtype, b.dtype, a.device, b.device, a.shape, b.shape, a.stride(), b.stride(), tuned.generation()
    )
    if plan is None:  # empty, or K = 0: no kernel runs, beta·source is written
        if mode == "fp32":
            return cublas.sgemm(a, b, source, alpha, beta)
        registry.binding()
        return ops.gemm(a, b, list(_DEFAULT_VARIANTS[mode, _layout(a), _layout(b)]), source, alpha, beta)
    return _launch(plan, a, b, source, alpha, beta, mode)


@functools.lru_cache(maxsize=4096)
def _eager_plan(mode, a_dtype, b_dtype, a_device, b_device, a_shape, b_shape, a_stride, b_stride, _generation):
    """gemm's argument checks (raised, never cached), then (path, [variant, ...]) for non-empty operands of the
    kernels' shapes, their first variant built and loaded; None for other shapes. path `fp32` is cuBLAS, with its
    call for these shapes and strides (`cublas.plan`) in place of the variants."""
    _check(mode, a_dtype, b_dtype, a_device, b_device, a_shape, b_shape)
    a_dim, b_dim = len(a_shape), len(b_shape)
    if not (a_dim in (2, 3) and b_dim in (2, 3) and (a_dim == 2 or b_dim == 2 or a_shape[0] == b_shape[0])):
        return None
    if 0 in a_shape or 0 in b_shape:
        return None
    if mode == "fp32":
        return "fp32", cublas.plan(a_shape, a_stride, b_shape, b_stride)
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    hopper_ok = corrected_sm90.supports_shapes(a_dim, b_dim, n)
    packs = mode in _PACKS_ROW_MAJOR
    layout_a = "row" if packs else _layout_of(a_shape, a_stride)
    layout_b = "row" if packs else _layout_of(b_shape, b_stride)
    return _cached_runtime_plan(a_device.index, mode, layout_a, layout_b, m, n, k, hopper_ok, _generation)


def dispatched_variant(a: torch.Tensor, b: torch.Tensor, mode: str) -> str:
    """The kernel `gemm(a, b, mode=mode)` runs for these operands (benchmarks record it beside their times):
    a variant's name, `cuBLAS` for `fp32`, or `none` for empty products."""
    plan = _eager_plan(
        mode, a.dtype, b.dtype, a.device, b.device, a.shape, b.shape, a.stride(), b.stride(), tuned.generation()
    )
    if plan is None:
        return "none"
    return "cuBLAS" if plan[0] == "fp32" else plan[1][0]


def _launch(plan, a, b, source, alpha: float, beta: float, mode: str) -> torch.Tensor:
    """The kernels of `plan` for kernel operands a and b, with alpha and beta·source (c, or a bias (n,))."""
    path, variants = plan
    if path == "fp32":  # variants: the cuBLAS call, None where an operand is copied first
        if source is None and alpha == 1.0 and cublas.torch_matmul_runs_sgemm(a.device.type):
            # the same SGEMM at torch's eager cost; past any TorchFunctionMode (ext.precision's routes matmul)
            with torch._C.DisableTorchFunction():
                return torch.matmul(a, b)
        if variants is None:
            return cublas.sgemm(a, b, source, alpha, beta)
        return cublas.run(variants, a, b, source, alpha, beta)
    if path == "sm90":
        n = b.shape[-1]
        if source is None and alpha == 1.0:
            return corrected_sm90.product(a, b, mode, variants)
        if source is None or (source.shape == (n,) and beta == 1.0):  # a bias: the epilogue adds it
            return corrected_sm90.product(a, b, mode, _with_bias_epilogue(tuple(variants)), source, alpha)
        return _epilogue(corrected_sm90.product(a, b, mode, variants), source, alpha, beta)
    # halfhalf: operand pass, product and unscaling (with the epilogue) in one call
    op = torch.ops.cutlass_ext.halfhalf_gemm.default if mode == "halfhalf" else torch.ops.cutlass_ext.gemm.default
    return registry.call_loading_fallbacks(op, variants, a.device, a, b, source, alpha, beta)


torch.library.impl("cutlass_ext::product", "CUDA", _run)


@functools.lru_cache(maxsize=256)
def _with_bias_epilogue(variants: tuple[str, ...]) -> list[str]:
    """The sm90 variants' twins that compute alpha·A·B + bias in their epilogue (built on first use)."""
    return [dataclasses.replace(SplitConfig.from_name(name), epilogue="bias").name for name in variants]


def _epilogue(d: torch.Tensor, source: torch.Tensor | None, alpha: float, beta: float) -> torch.Tensor:
    """alpha·d + beta·source in place on a fresh product, where the kernel applies no such epilogue (the sm90
    kernels add a bias, not a C)."""
    if alpha != 1.0:
        d.mul_(alpha)
    return d if source is None else d.add_(source, alpha=beta)


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
    if config is not None and getattr(config, "mode", None) != mode:  # a hand-edited row: never another product
        config, source = None, f"{source}: a {getattr(config, 'mode', config.family)} kernel, not {mode}'s"
    if isinstance(config, SplitConfig) and hopper_ok:
        return Plan("sm90", (config.name,), source)
    if isinstance(config, KernelConfig) and (config.layout_a, config.layout_b) == (layout_a, layout_b):
        return Plan("sm80", (config.name,) + tuple(v for v in defaults if v != config.name), source)
    tiles = -(-m // 128) * -(-n // 128)
    if gpu.hopper and mode in DEFAULT_SPLIT and hopper_ok and tiles >= HOPPER_MIN_TILES:
        return Plan("sm90", (DEFAULT_SPLIT[mode].name,), f"sm90 default ({source})")
    return Plan("sm80", defaults, f"sm{gpu.arch or '80'} default ({source})")


@functools.lru_cache(maxsize=4096)
def _cached_runtime_plan(index, mode, layout_a, layout_b, m, n, k, hopper_ok, _generation) -> tuple[str, list[str]]:
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
    return chosen.path, list(variants)


class _Gemm(torch.autograd.Function):
    """dA = alpha·dD·Bᵀ and dB = alpha·Aᵀ·dD, both through the same mode (and, for halfhalf, the same range
    scaling); dC = beta·dD, dbias = dD summed over the rows. forward takes ctx itself: a separate setup_context
    makes every apply bind its arguments by inspect (~15 µs)."""

    @staticmethod
    def forward(ctx, a, b, c, bias, alpha, beta, mode):
        ctx.mode, ctx.alpha, ctx.beta = mode, alpha, beta
        ctx.save_for_backward(a, b)
        source, source_scale = _source(c, bias, beta)
        return _product(a, b, mode, source, alpha, source_scale)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        mode, alpha = ctx.mode, ctx.alpha
        grad_a = grad_b = grad_c = grad_bias = None
        if ctx.needs_input_grad[0]:
            if a.dim() == 2 and grad.dim() == 3:  # a shared by every batch: sum its gradient over the batch
                rows = grad.transpose(0, 1).flatten(1)  # (m, batch·n); flatten: no -1 to infer at size 0
                grad_a = _product(rows, b.mT.flatten(0, 1), mode, None, alpha, 0.0)
            else:
                grad_a = _product(grad, b.mT, mode, None, alpha, 0.0)
        if ctx.needs_input_grad[1]:
            if b.dim() == 2 and grad.dim() == 3:
                rows_a, rows_grad = a.flatten(0, 1), grad.flatten(0, 1)
                grad_b = _product(rows_a.mT, rows_grad, mode, None, alpha, 0.0)
            else:
                grad_b = _product(a.mT, grad, mode, None, alpha, 0.0)
        if ctx.needs_input_grad[2]:
            grad_c = grad * ctx.beta
        if ctx.needs_input_grad[3]:
            grad_bias = grad.flatten(0, -2).sum(0)
        return grad_a, grad_b, grad_c, grad_bias, None, None, None
