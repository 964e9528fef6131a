"""`precision`: one switch that runs the matrix products of unchanged PyTorch code through `cutlass_ext.gemm`.

    with ext.precision("tf32tf32"):     # the products this thread makes inside the block
        loss = loss_fn(model(x), y)     # nn.Linear, @, bmm, einsum, ... in tf32tf32, forward and backward
    ext.set_precision("halfhalf")       # the products this thread makes from now on, until set_precision(None)

Routed, when every tensor operand is a float32 CUDA `torch.Tensor` (or Parameter) and the shapes are ones the op
accepts: `torch.matmul` / `torch.linalg.matmul` / `Tensor.matmul` / `@`, `mm`, `bmm`, `addmm`, `baddbmm`
(beta·input + alpha·product in gemm's epilogue), `F.linear` (so `nn.Linear`; its bias fused), and two-operand
`torch.einsum` without repeated labels in one operand (lowered here to one batched product; other einsums run as
torch's). Everything else runs as it would without the switch: other dtypes, CPU tensors, tensor subclasses, other
ops (`linalg.multi_dot`, attention kernels), in-place forms (`addmm_`).

Autocast: a corrected mode is FP32 by definition, so inside `torch.autocast("cuda")` the routed ops also take
bfloat16 and float16 operands, upcast them, compute in FP32 and return FP32 (the ops outside the list keep
autocast's dtypes).

Scope: the switch is a `torch.overrides.TorchFunctionMode`, and torch keeps that stack per thread: both forms
apply to the calling thread only. The backward of a routed product runs in the mode that computed it, whichever
thread autograd uses. `with` blocks nest (the innermost mode wins) and sit above `set_precision`'s mode.
`torch.compile` traces through the switch: a function compiled under one mode is recompiled under another.
"""

from __future__ import annotations

import threading
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode, _pop_mode, _push_mode

from .gemm import MODES, check_mode, gemm

_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)  # subclasses (DTensor, ...) keep their own dispatch
_AUTOCAST_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_ELLIPSIS = "..."


def _checked_mode(mode) -> str:
    if not isinstance(mode, str):
        raise TypeError(f"mode must be a str, one of {list(MODES)} or int8x<moduli>; got {type(mode).__name__}")
    return check_mode(mode)


def _routable(t) -> bool:
    """A tensor operand the switch takes: float32 CUDA, or under CUDA autocast any 16/32-bit float (upcast)."""
    if type(t) not in _PLAIN_TYPES or not t.is_cuda:
        return False
    return t.dtype == torch.float32 or (t.dtype in _AUTOCAST_DTYPES and torch.is_autocast_enabled("cuda"))


def _all_routable(*tensors) -> bool:
    return all(t is None or _routable(t) for t in tensors)


def _broadcastable(shape, onto) -> bool:
    """Whether `shape` broadcasts onto `onto` (torch's rule, without changing `onto`)."""
    if len(shape) > len(onto):
        return False
    return all(size in (1, target) for size, target in zip(reversed(shape), reversed(onto)))


def _batch_broadcastable(a_batch, b_batch) -> bool:
    return all(x == y or x == 1 or y == 1 for x, y in zip(reversed(a_batch), reversed(b_batch)))


class _Product(NamedTuple):
    """One call of gemm: alpha·(a @ b) + beta·c + bias (torch.matmul's semantics), then `finish` on the result."""

    a: torch.Tensor
    b: torch.Tensor
    bias: torch.Tensor | None = None
    c: torch.Tensor | None = None
    alpha: float = 1.0
    beta: float = 0.0
    out: torch.Tensor | None = None
    finish: Callable[[torch.Tensor], torch.Tensor] | None = None

    def compute(self, mode: str) -> torch.Tensor:
        a, b, bias, c = self.a, self.b, self.bias, self.c
        autocast = torch.is_autocast_enabled("cuda")
        if autocast:  # bf16 / fp16 operands computed in FP32
            a, b, bias, c = (t if t is None else t.float() for t in (a, b, bias, c))
        # only what differs from gemm's defaults; beta comes with c
        epilogue = {name: t for name, t in (("bias", bias), ("c", c), ("out", self.out)) if t is not None}
        if self.alpha != 1:
            epilogue["alpha"] = self.alpha
        if c is not None:
            epilogue["beta"] = self.beta
        if autocast:
            with torch.autocast("cuda", enabled=False):  # gemm's own torch ops keep FP32
                result = gemm(a, b, mode, **epilogue)
        else:
            result = gemm(a, b, mode, **epilogue)
        return result if self.finish is None else self.finish(result)


def _matmul(input, other, *, out=None):
    if not (_all_routable(input, other, out) and input.dim() and other.dim()):
        return None
    k_other = other.shape[0] if other.dim() == 1 else other.shape[-2]
    if input.shape[-1] != k_other or not _batch_broadcastable(input.shape[:-2], other.shape[:-2]):
        return None
    return _Product(input, other, out=out)


def _mm(input, mat2, *, out=None):
    if not (_all_routable(input, mat2, out) and input.dim() == 2 and mat2.dim() == 2):
        return None
    return _Product(input, mat2, out=out) if input.shape[1] == mat2.shape[0] else None


def _bmm(input, mat2, *, out=None):
    if not (_all_routable(input, mat2, out) and input.dim() == 3 and mat2.dim() == 3):
        return None
    if input.shape[0] != mat2.shape[0] or input.shape[2] != mat2.shape[1]:
        return None
    return _Product(input, mat2, out=out)


def _scaled_sum(input, first, second, beta, alpha, out, dims: int):
    """beta·input + alpha·(first @ second) for addmm (dims 2) and baddbmm (dims 3)."""
    if not (_all_routable(input, first, second, out) and first.dim() == dims and second.dim() == dims):
        return None
    if first.shape[-1] != second.shape[-2] or first.shape[:-2] != second.shape[:-2]:
        return None
    result_shape = (*first.shape[:-1], second.shape[-1])
    if not _broadcastable(input.shape, result_shape):
        return None
    if beta == 0:  # torch ignores input then (NaN and Inf in it do not propagate)
        return _Product(first, second, alpha=alpha, out=out)
    if beta == 1 and input.shape == result_shape[-1:]:  # the layer's bias: gemm's fused bias epilogue
        return _Product(first, second, bias=input, alpha=alpha, out=out)
    return _Product(first, second, c=input, alpha=alpha, beta=beta, out=out)


def _addmm(input, mat1, mat2, *, beta=1, alpha=1, out=None):
    return _scaled_sum(input, mat1, mat2, beta, alpha, out, dims=2)


def _baddbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    return _scaled_sum(input, batch1, batch2, beta, alpha, out, dims=3)


def _linear(input, weight, bias=None):
    if not (_all_routable(input, weight, bias) and input.dim() and weight.dim() == 2):
        return None
    if input.shape[-1] != weight.shape[1] or (bias is not None and bias.shape != weight.shape[:1]):
        return None
    return _Product(input, weight.mT, bias=bias)


def _einsum(*args):
    """torch.einsum(equation, a, b) or (equation, [a, b]) as one product (torch turns the sublist form into these)."""
    if len(args) == 2 and isinstance(args[1], (list, tuple)):
        args = (args[0], *args[1])
    if len(args) != 3 or not isinstance(args[0], str):
        return None
    equation, a, b = args
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and _all_routable(a, b)):
        return None
    labels = _einsum_labels(equation, a.dim(), b.dim())
    return None if labels is None else _einsum_product(a, b, *labels)


def _letters(labels: str) -> bool:
    return not labels or (labels.isascii() and labels.isalpha())


def _einsum_labels(equation: str, a_dim: int, b_dim: int):
    """(a's labels, b's labels, the output's) with `...` spelled out as one label per dimension it covers, numbered
    from the right so that broadcast dimensions share labels; None where the equation is not a plain two-operand
    product (a label repeated within one operand or the output, an ellipsis summed away, a malformed term)."""
    inputs, arrow, output = equation.replace(" ", "").partition("->")
    terms = inputs.split(",")
    if len(terms) != 2:
        return None
    spelled = []
    for term, dim in zip(terms, (a_dim, b_dim)):
        letters = term.replace(_ELLIPSIS, "")
        if not _letters(letters) or term.count(_ELLIPSIS) > 1:
            return None
        covered = dim - len(letters)
        if covered < 0 or (covered and _ELLIPSIS not in term):
            return None
        before, _, after = term.partition(_ELLIPSIS)
        spelled.append([*before, *(f"{_ELLIPSIS}{covered - 1 - i}" for i in range(covered)), *after])
    widest = max(sum(label.startswith(_ELLIPSIS) for label in labels) for labels in spelled)
    ellipsis = [f"{_ELLIPSIS}{widest - 1 - i}" for i in range(widest)]
    if arrow:
        if not _letters(output.replace(_ELLIPSIS, "")) or output.count(_ELLIPSIS) > 1:
            return None
        if widest and _ELLIPSIS not in output:
            return None
        before, _, after = output.partition(_ELLIPSIS)
        out = [*before, *ellipsis, *after]
    else:  # torch's implicit output: the ellipsis, then the letters used once, in alphabetical order
        used = [label for labels in spelled for label in labels if not label.startswith(_ELLIPSIS)]
        out = ellipsis + sorted(label for label in set(used) if used.count(label) == 1)
    a_labels, b_labels = spelled
    if any(len(set(labels)) != len(labels) for labels in (a_labels, b_labels, out)):
        return None
    if not set(out) <= set(a_labels) | set(b_labels):
        return None
    return a_labels, b_labels, out


def _einsum_product(a, b, a_labels, b_labels, out_labels):
    """a (batch, left, contracted) @ b (batch, contracted, right) with labels used by one operand only summed first;
    batch dimensions of size 1 broadcast as in torch.matmul (the ellipsis's)."""
    a_sizes, b_sizes = dict(zip(a_labels, a.shape)), dict(zip(b_labels, b.shape))
    for label in a_sizes.keys() & b_sizes.keys():
        broadcasts = label.startswith(_ELLIPSIS) and 1 in (a_sizes[label], b_sizes[label])
        if a_sizes[label] != b_sizes[label] and not broadcasts:
            return None
    kept = set(out_labels)
    a_summed = [i for i, label in enumerate(a_labels) if label not in kept and label not in b_sizes]
    b_summed = [i for i, label in enumerate(b_labels) if label not in kept and label not in a_sizes]
    batch = [label for label in out_labels if label in a_sizes and label in b_sizes]
    left = [label for label in out_labels if label in a_sizes and label not in b_sizes]
    right = [label for label in out_labels if label in b_sizes and label not in a_sizes]
    contracted = [label for label in a_labels if label in b_sizes and label not in kept]
    if a_summed:
        a = a.sum(a_summed)
        a_labels = [label for i, label in enumerate(a_labels) if i not in a_summed]
    if b_summed:
        b = b.sum(b_summed)
        b_labels = [label for i, label in enumerate(b_labels) if i not in b_summed]
    k = _size_of([a_sizes[label] for label in contracted])
    a = a.permute([a_labels.index(label) for label in batch + left + contracted])
    a = a.reshape([a_sizes[label] for label in batch] + [_size_of([a_sizes[label] for label in left]), k])
    b = b.permute([b_labels.index(label) for label in batch + contracted + right])
    b = b.reshape([b_sizes[label] for label in batch] + [k, _size_of([b_sizes[label] for label in right])])
    grouped = batch + left + right
    shape = [_joint_size(a_sizes.get(label, 1), b_sizes.get(label, 1)) for label in grouped]
    order = [grouped.index(label) for label in out_labels]

    def finish(result: torch.Tensor) -> torch.Tensor:
        return result.reshape(shape).permute(order)

    return _Product(a, b, finish=finish)


def _size_of(sizes: list) -> int:
    total = 1
    for size in sizes:
        total = total * size
    return total


def _joint_size(a_size: int, b_size: int) -> int:
    """A label's size in the result: the operands' common size, or the one that is not a broadcast 1."""
    return b_size if a_size == 1 else a_size


# The ops the switch routes, as the mode sees them (`a @ b` arrives as Tensor.matmul).
_ROUTERS = {
    torch.matmul: _matmul,
    torch.linalg.matmul: _matmul,
    torch.Tensor.matmul: _matmul,
    torch.Tensor.__matmul__: _matmul,
    torch.mm: _mm,
    torch.Tensor.mm: _mm,
    torch.bmm: _bmm,
    torch.Tensor.bmm: _bmm,
    torch.addmm: _addmm,
    torch.Tensor.addmm: _addmm,
    torch.baddbmm: _baddbmm,
    torch.Tensor.baddbmm: _baddbmm,
    F.linear: _linear,
    torch.einsum: _einsum,
}


class PrecisionMode(TorchFunctionMode):
    """The switch: routes this thread's float32 CUDA matrix products through `gemm(..., mode=mode)` while on the
    stack (see the module's docstring for what is routed). Reusable: `with` it as often as needed."""

    def __init__(self, mode: str):
        super().__init__()
        self.mode = _checked_mode(mode)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        router = _ROUTERS.get(func)
        if router is not None:
            product = router(*args, **kwargs)
            if product is not None:
                return product.compute(self.mode)  # torch pops this mode while it runs: gemm's own ops pass by
        return func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"PrecisionMode({self.mode!r})"


def precision(mode: str) -> PrecisionMode:
    """`with ext.precision(mode):` routes the block's float32 CUDA matrix products (this thread's) through
    `ext.gemm` in `mode`: one of `tf32tf32`, `halfhalf`, `markidis`, `tf32`, `fp32`, `int8x<moduli>` (see
    `ext.gemm`)."""
    return PrecisionMode(mode)


_thread = threading.local()


def set_precision(mode: str | None) -> None:
    """Route this thread's float32 CUDA matrix products through `ext.gemm` in `mode` from now on (None: stop).

    The mode sits at the bottom of the thread's function-mode stack (above `torch.set_default_device`'s), so
    `with ext.precision(...)` blocks still take precedence inside them. A thread that sets a mode must set None
    before it ends (or use `with ext.precision(...)`): torch aborts the process at exit over a mode left on a
    finished thread's stack."""
    switch = None if mode is None else PrecisionMode(mode)
    previous = getattr(_thread, "switch", None)
    stack = [_pop_mode() for _ in range(torch._C._len_torch_function_stack())][::-1]  # bottom first
    stack = [m for m in stack if m is not previous]
    if switch is not None:
        # torch.set_default_device's mode stays under it; a `with torch.device(...)` block's stays above, so that
        # the block's exit pops its own mode
        default_device = getattr(getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None), "device_context", None)
        below = stack.index(default_device) + 1 if any(m is default_device for m in stack) else 0
        stack.insert(below, switch)
    for m in stack:
        _push_mode(m)
    _thread.switch = switch
