"""The low-bit-accumulator GEMM kernels (seed 002) on CUDA: forward and STE backward, as a kernel family.

`LowbitKernelConfig` is the family's one description of a variant (tiles of the forward, window of the
backward); codegen renders it from `kernels/lowbit_gemm*.in`, and `native.library` builds and loads it. The
forward equals `reference.lowbit_matmul_fmt` bit for bit (its docstring is the definition). The backward of an
STE other than the identity recomputes each output's chain once, window by window inside one kernel, applies the
STE's mask on the fly and forms both gradients from it (`ste.grad_reference` defines them); nothing of size
M·N·K is stored. The recursive STE also keeps, from the forward, one int32 per output: the last chunk whose
second-level add overflowed.
"""

from __future__ import annotations

import ctypes
import functools
import math
import re
from dataclasses import dataclass
from string import Template

import torch

from .. import native, registry, tuned
from ..compiling import custom_op
from ..config import VariantFields
from ..toolchain import kernels_dir
from .format import LowbitFormat
from .operands import check_operand
from .reference import broadcast_operands
from .ste import STES, check_ste

FAMILY = "lowbit"
_STE_CODES = {"recursive-of": 1, "immediate-of": 2, "immediate-diff": 3}  # lowbit_abi.h
_NAME_PATTERN = re.compile(r"lowbit_(?P<block>\d+x\d+x\d+)_t(?P<thread>\d+x\d+)_w(?P<window>\d+)")
# Seed 002 eq. 17's small constants of the DIFF STE: ε1 keeps the denominator positive, ε2 is the threshold
# below which a step's contribution counts as swamped.
DEFAULT_EPS1 = 1e-12
DEFAULT_EPS2 = 1e-3


@dataclass(frozen=True)
class LowbitKernelConfig(VariantFields):
    """One low-bit GEMM variant. block: (m, n, k) of a CTA's output tile and k-tile; thread: (m, n) outputs each
    thread owns (their chains run side by side); window: k per thread of the backward (1..32)."""

    block: tuple[int, int, int] = (64, 64, 32)
    thread: tuple[int, int] = (4, 4)
    window: int = 16
    family: str = FAMILY

    def __post_init__(self):
        if self.family != FAMILY:
            raise ValueError(f"family={self.family!r} must be {FAMILY!r}")
        self._check_extents(block="mnk", thread="mn")
        (block_m, block_n, block_k), (thread_m, thread_n) = self.block, self.thread
        if block_m % thread_m or block_n % thread_n:
            raise ValueError(f"thread={self.thread!r} must divide block={self.block!r} in m and n")
        threads = (block_m // thread_m) * (block_n // thread_n)
        if threads > 1024 or (block_m * block_k) % threads or (block_k * block_n) % threads:
            raise ValueError(
                f"block={self.block!r}, thread={self.thread!r}: {threads} threads must be at most 1024 and divide "
                "the k-tiles of A and B"
            )
        if not isinstance(self.window, int) or not 1 <= self.window <= 32:
            raise ValueError(f"window={self.window!r} must be an integer in 1..32")

    @property
    def mode(self) -> str:
        """The tuned tables' mode of every variant (MODE)."""
        return MODE

    @property
    def name(self) -> str:
        (bm, bn, bk), (tm, tn) = self.block, self.thread
        return f"lowbit_{bm}x{bn}x{bk}_t{tm}x{tn}_w{self.window}"

    @classmethod
    def from_name(cls, name: str) -> LowbitKernelConfig:
        match = _NAME_PATTERN.fullmatch(name)
        if match is None:
            raise ValueError(f"{name!r} is not a low-bit GEMM variant name such as {cls().name!r}")
        return cls(
            block=tuple(int(v) for v in match["block"].split("x")),
            thread=tuple(int(v) for v in match["thread"].split("x")),
            window=int(match["window"]),
        )._named(name)

    @staticmethod
    def is_name(name: str) -> bool:
        return name.startswith("lowbit_")


DEFAULT_CONFIG = LowbitKernelConfig()
# The family's one mode in the tuned tables: a variant's entry is the fastest forward + backward pair for the
# shape (its tiles serve the forward, its window the backward).
MODE = "lowbit"


def plan(gpu, m: int, n: int, k: int) -> tuple[LowbitKernelConfig, str]:
    """(variant, where it came from) for an (m, k) x (k, n) product on `gpu` (a `device.DeviceInfo`; no GPU
    needed): the tuned tables' entry for the nearest shape (`tuned.resolve`), else DEFAULT_CONFIG."""
    config, source = tuned.resolve(gpu.name, MODE, m, n, k, gpu=gpu)
    if not isinstance(config, LowbitKernelConfig):
        return DEFAULT_CONFIG, f"default ({source})"
    return config, source


def dispatch_configs() -> list[LowbitKernelConfig]:
    """The variants `matmul` may run (what `python -m cutlass_ext.build --prebuild --modes lowbit` builds): the
    default and the shipped tuned tables' winners."""
    shipped = [c for c in tuned.shipped_configs() if isinstance(c, LowbitKernelConfig)]
    return list(dict.fromkeys([DEFAULT_CONFIG, *shipped]))


def render_instance(config: LowbitKernelConfig) -> str:
    """The variant's launchers in the family's translation unit (kernels/lowbit_gemm_instance.in)."""
    (block_m, block_n, block_k), (thread_m, thread_n) = config.block, config.thread
    return Template((kernels_dir() / "lowbit_gemm_instance.in").read_text()).substitute(
        name=config.name,
        block_m=block_m,
        block_n=block_n,
        block_k=block_k,
        thread_m=thread_m,
        thread_n=thread_n,
        window=config.window,
    )


class _Format(ctypes.Structure):
    _fields_ = [
        ("acc_mask", ctypes.c_uint32),
        ("prod_mask", ctypes.c_uint32),
        ("acc_overflow", ctypes.c_float),
        ("acc_underflow", ctypes.c_float),
        ("prod_overflow", ctypes.c_float),
        ("prod_underflow", ctypes.c_float),
        ("chunk", ctypes.c_int64),
        ("underflow", ctypes.c_int32),
    ]


def _strided(name: str) -> list:
    return [(name, ctypes.c_void_p)] + [(f"{name}_{s}_stride", ctypes.c_int64) for s in ("batch", "row", "column")]


class _ForwardArgs(ctypes.Structure):
    _fields_ = (
        [(f, ctypes.c_int64) for f in ("m", "n", "k", "batch")]
        + _strided("a")
        + _strided("b")
        + _strided("d")
        + [("blocked", ctypes.c_void_p), ("format", _Format)]
    )


class _GradsArgs(ctypes.Structure):
    _fields_ = (
        [(f, ctypes.c_int64) for f in ("m", "n", "k", "batch")]
        + _strided("a")
        + _strided("b")
        + _strided("g")
        + _strided("blocked")
        + _strided("da")
        + _strided("db")
        + [
            ("workspace", ctypes.c_void_p),
            ("format", _Format),
            ("ste", ctypes.c_int32),
            ("eps1", ctypes.c_float),
            ("eps2", ctypes.c_float),
        ]
    )


# The format crosses the op boundary as plain fields (what torch.library schemas hold).
_FORMAT_FIELDS = ("man", "exp", "acc_bias", "prod_bias", "prod_man", "prod_exp", "chunk", "underflow")


def _format_fields(fmt: LowbitFormat, k: int) -> tuple:
    return tuple(getattr(fmt.for_depth(k), field) for field in _FORMAT_FIELDS)


def _c_format(fields) -> _Format:
    fmt = LowbitFormat(*fields)
    return _Format(
        fmt.acc_mask,
        fmt.prod_mask,
        fmt.acc_overflow,
        fmt.acc_underflow,
        fmt.prod_overflow,
        fmt.prod_underflow,
        fmt.chunk,
        int(fmt.underflow),
    )


def _strides(t: torch.Tensor) -> list:
    return [t.data_ptr(), *t.stride()]


@functools.cache
def _config(variant: str) -> LowbitKernelConfig:
    return LowbitKernelConfig.from_name(variant)


def _planned(variant: str, a: torch.Tensor, n: int) -> str:
    """`variant`, or for "" the one `plan` picks for A (B, M, K) times (K, n) on A's device. The ops plan when they
    run, so torch.compile never traces the device and tuned-table look-ups."""
    if variant:
        return variant
    batch, m, k = a.shape
    return plan(registry.device_info(registry.device_index(a.device)), batch * m, n, k)[0].name


def _function(variant: str, function_name: str, device: torch.device):
    return getattr(native.library(_config(variant), device), f"{variant}_{function_name}")


def _launch(variant: str, function_name: str, args, device: torch.device) -> None:
    status = _function(variant, function_name, device)(ctypes.byref(args), native.stream_handle(device))
    native.check_status(status, f"{variant}_{function_name}")


@custom_op("cutlass_ext::lowbit_forward", mutates_args=())
def lowbit_forward(
    a: torch.Tensor,
    b: torch.Tensor,
    man: int,
    exp: int,
    acc_bias: int,
    prod_bias: int,
    prod_man: int,
    prod_exp: int,
    chunk: int,
    underflow: bool,
    with_blocked: bool,
    variant: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, M, K) @ (B, K, N) by the chunked FMAq chain -> (B, M, N) float32, and, with_blocked, the (B, M, N) int32
    record the recursive STE's backward reads (kernels/lowbit_grad.cuh, ChainRecord: the last chunk whose
    second-level add overflowed, and the last with a first-level overflow, where its chains are recomputed).
    variant: a variant name, or "" for `plan`'s."""
    batch, m, k = a.shape
    n = b.shape[-1]
    out = a.new_empty((batch, m, n))
    blocked = a.new_empty((batch, m, n) if with_blocked else (0,), dtype=torch.int32)
    if out.numel() == 0:
        return out, blocked
    fields = (man, exp, acc_bias, prod_bias, prod_man, prod_exp, chunk, underflow)
    args = _ForwardArgs(
        m,
        n,
        k,
        batch,
        *_strides(a),
        *_strides(b),
        *_strides(out),
        blocked.data_ptr() if with_blocked else None,
        _c_format(fields),
    )
    with torch.cuda.device(a.device):
        _launch(_planned(variant, a, n), "lowbit_forward", args, a.device)
    return out, blocked


@lowbit_forward.register_fake
def _(a, b, man, exp, acc_bias, prod_bias, prod_man, prod_exp, chunk, underflow, with_blocked, variant):
    batch, m, _ = a.shape
    n = b.shape[-1]
    blocked = a.new_empty((batch, m, n) if with_blocked else (0,), dtype=torch.int32)
    return a.new_empty((batch, m, n)), blocked


def _transposed(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(-1, -2)


@custom_op("cutlass_ext::lowbit_grads", mutates_args=())
def lowbit_grads(
    a: torch.Tensor,
    b: torch.Tensor,
    g: torch.Tensor,
    blocked: torch.Tensor,
    man: int,
    exp: int,
    acc_bias: int,
    prod_bias: int,
    prod_man: int,
    prod_exp: int,
    chunk: int,
    underflow: bool,
    ste: str,
    eps1: float,
    eps2: float,
    want_a: bool,
    want_b: bool,
    variant: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dA (B, M, K), dB (B, K, N)) of the chain A (B, M, K) @ B (B, K, N) under `ste`, given dD = g (B, M, N),
    from one recomputation of the chain; a gradient not wanted comes back empty. blocked: the forward's (B, M, N)
    int32 output for the recursive STE, any tensor for the others. variant: a variant name, or "" for `plan`'s."""
    batch, m, k = a.shape
    n = b.shape[-1]
    da = a.new_empty((batch, m, k) if want_a else (0,))
    db = b.new_empty((batch, k, n) if want_b else (0,))
    if m == 0 or k == 0 or batch == 0:  # dB of an empty sum (dA is then empty)
        return da, db.zero_()
    recursive = ste == "recursive-of"
    # The kernel's rows run in parallel and its columns in sequence: the longer side goes to the rows. The chain of
    # Bᵀ·Aᵀ has the same products in the same order, and its row-order sum is dA's sum over the columns.
    x, w, gx, blocked_x, dx, dw, want_x, want_w = a, b, g, blocked, da, db, want_a, want_b
    if n > m:
        x, w, gx, blocked_x, dx, dw = (_transposed(t) if t.dim() == 3 else t for t in (b, a, g, blocked, db, da))
        want_x, want_w = want_b, want_a
    args = _GradsArgs(
        x.shape[1],
        w.shape[2],
        k,
        batch,
        *_strides(x),
        *_strides(w),
        *_strides(gx),
        *(_strides(blocked_x) if recursive else [None, 0, 0, 0]),
        *(_strides(dx) if want_x else [None, 0, 0, 0]),
        *(_strides(dw) if want_w else [None, 0, 0, 0]),
        None,
        _c_format((man, exp, acc_bias, prod_bias, prod_man, prod_exp, chunk, underflow)),
        _STE_CODES[ste],
        eps1,
        eps2,
    )
    with torch.cuda.device(a.device):
        variant = _planned(variant, a, n)
        workspace_bytes = _function(variant, "lowbit_grads_workspace", a.device)
        workspace_bytes.restype = ctypes.c_int64
        size = workspace_bytes(ctypes.byref(args))
        workspace = torch.empty(size, dtype=torch.uint8, device=a.device)  # the launcher clears it
        args.workspace = workspace.data_ptr()
        _launch(variant, "lowbit_grads", args, a.device)
    return da, db


@lowbit_grads.register_fake
def _(
    a,
    b,
    g,
    blocked,
    man,
    exp,
    acc_bias,
    prod_bias,
    prod_man,
    prod_exp,
    chunk,
    underflow,
    ste,
    eps1,
    eps2,
    want_a,
    want_b,
    variant,
):
    return a.new_empty(a.shape if want_a else (0,)), b.new_empty(b.shape if want_b else (0,))


class LowbitMatmul(torch.autograd.Function):
    """(B, M, K) @ (B, K, N) by the chunked FMAq chain; its backward applies the STE (seed 002 section 4)."""

    @staticmethod
    def forward(ctx, a, b, fields, ste, eps1, eps2, variant):
        with_blocked = ste == "recursive-of" and (a.requires_grad or b.requires_grad)
        out, blocked = torch.ops.cutlass_ext.lowbit_forward(a, b, *fields, with_blocked, variant)
        ctx.save_for_backward(a, b, blocked)
        ctx.fields, ctx.ste, ctx.eps, ctx.variant = fields, ste, (eps1, eps2), variant
        return out

    @staticmethod
    def backward(ctx, grad_out):
        a, b, blocked = ctx.saved_tensors
        grad_a = grad_b = None
        if ctx.ste == "identity":
            if ctx.needs_input_grad[0]:
                grad_a = grad_out @ b.transpose(-1, -2)
            if ctx.needs_input_grad[1]:
                grad_b = a.transpose(-1, -2) @ grad_out
            return grad_a, grad_b, None, None, None, None, None
        want_a, want_b = ctx.needs_input_grad[:2]
        grad_a, grad_b = torch.ops.cutlass_ext.lowbit_grads(
            a, b, grad_out, blocked, *ctx.fields, ctx.ste, *ctx.eps, want_a, want_b, ctx.variant
        )
        return grad_a if want_a else None, grad_b if want_b else None, None, None, None, None, None


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    fmt: LowbitFormat,
    ste: str = "identity",
    eps1: float = DEFAULT_EPS1,
    eps2: float = DEFAULT_EPS2,
    config: LowbitKernelConfig | None = None,
) -> torch.Tensor:
    """(…, M, K) @ (…, K, N) float32 CUDA tensors (any strides, batch broadcast) by the chunked FMAq chain of `fmt`,
    equal to `reference.lowbit_matmul_fmt` bit for bit; autograd through `ste` (one of STES, `ste.py`). `config`
    picks the kernel variant (tiles, window); None: `plan`'s (the tuned tables' entry, else the default), looked up
    when the kernels run.
    Every variant computes the same bits."""
    check_operand("a", a, torch.float32, "cuda", min_dim=2)
    check_operand("b", b, torch.float32, "cuda", min_dim=2)
    if not isinstance(fmt, LowbitFormat):
        raise TypeError(f"fmt must be a LowbitFormat; got {type(fmt).__name__}")
    check_ste(ste)
    if config is not None and not isinstance(config, LowbitKernelConfig):
        raise TypeError(f"config must be None or a LowbitKernelConfig; got {type(config).__name__}")
    a, b = broadcast_operands(a, b)  # one device, one K, one batch shape (stride-0 views)
    *batch, m, k = a.shape
    n = b.shape[-1]
    count = math.prod(batch)
    a3, b3 = a.reshape(count, m, k), b.reshape(count, k, n)
    variant = "" if config is None else config.name
    out = LowbitMatmul.apply(a3, b3, _format_fields(fmt, k), ste, float(eps1), float(eps2), variant)
    return out.reshape(*batch, m, n)


__all__ = [
    "DEFAULT_CONFIG",
    "MODE",
    "STES",
    "LowbitKernelConfig",
    "dispatch_configs",
    "matmul",
    "plan",
    "render_instance",
]
