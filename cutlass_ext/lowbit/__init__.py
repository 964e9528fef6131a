"""Low-bit-accumulator GEMMs (seed 002: Blumenfeld, Hubara, Soudry), forward and STE gradients.

from cutlass_ext import lowbit
config = lowbit.LowbitConfig(lowbit.LowbitFormat.make(7, 4), ste="immediate-diff")
config = lowbit.LowbitConfig(lowbit.LowbitFormat.make(7, 4), operands=lowbit.M4E3)  # FP8 operands, Table 3
y = lowbit.linear(x, weight, bias, config)          # F.linear with an M7E4 chunked accumulator
model = lowbit.convert(model, config)              # every Linear / Conv2d but the last one
lowbit.set_underflow(model, True)                  # second stage of dual-stage fine-tuning (Table 2)

CUDA tensors run the kernel (`lowbit.kernel`); CPU tensors run the bit-exact reference (`lowbit.reference`),
with the STE gradients of `lowbit.ste`. The arithmetic is defined in `lowbit.reference`'s docstring.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from ..arguments import is_real
from ..compiling import custom_op
from .format import LowbitFormat, bias_range
from .operands import E4M3, E5M2, M4E3, OperandFormat, check_operand, round_operand
from .reference import broadcast_operands, lowbit_matmul, lowbit_matmul_events, lowbit_matmul_fmt, quantize

# seed 002 section 4 and appendix D: identity (eq. 5 not applied), recursive OF (eq. 7), immediate OF and DIFF (eq. 17)
STES = ("identity", "recursive-of", "immediate-of", "immediate-diff")


@dataclass(frozen=True)
class LowbitConfig:
    """How a layer accumulates: the format, the gradient estimator and the bias policy.

    format: `LowbitFormat` (bits, biases, chunk, underflow). ste: one of `STES`. eps1, eps2: the DIFF STE's
    constants (eq. 17: the product passes its gradient when |FMAq(x, w, S) − S| / (|x·w| + ε1) > ε2; ε1 only
    guards x·w = 0, ε2 = 1e-3 blocks products that full swamping or underflow erased). dynamic_bias: pick the
    biases per call from the output's largest exponent (the seed's Llama runs, Table 5; see `dynamic_format`).
    operands: None (FP32 weights and activations) or an `OperandFormat` both GEMM operands are rounded to first,
    e.g. `M4E3` with a flexible per-tensor bias (Table 3); the gradient passes straight through that rounding.
    """

    format: LowbitFormat
    ste: str = "identity"
    eps1: float = 1e-12
    eps2: float = 1e-3
    dynamic_bias: bool = False
    operands: OperandFormat | None = None

    def __post_init__(self):
        if not isinstance(self.format, LowbitFormat):
            raise TypeError(f"format must be a LowbitFormat; got {type(self.format).__name__}")
        if self.ste not in STES:
            raise ValueError(f"ste={self.ste!r} is not one of {list(STES)}")
        for name in ("eps1", "eps2"):
            value = getattr(self, name)
            if not is_real(value):
                raise TypeError(f"{name} must be a real number (int or float); got {type(value).__name__}")
            if not 0 <= value < math.inf:
                raise ValueError(f"{name}={value!r} must be a finite number ≥ 0")
            object.__setattr__(self, name, float(value))  # the ops take a Python float
        if not isinstance(self.dynamic_bias, bool):
            raise ValueError(f"dynamic_bias={self.dynamic_bias!r} must be True or False")
        if self.operands is not None and not isinstance(self.operands, OperandFormat):
            raise TypeError(f"operands must be None or an OperandFormat; got {type(self.operands).__name__}")

    def with_underflow(self, on: bool) -> "LowbitConfig":
        return dataclasses.replace(self, format=self.format.with_underflow(on))


def dynamic_format(a: torch.Tensor, b: torch.Tensor, fmt: LowbitFormat) -> LowbitFormat:
    """`fmt` with biases set from e = ⌊log2 max|a @ b|⌋ (FP32 product): b_acc = 2^E − 2 − e.

    Then R_OF = 2^(e+1)·(2 − 2^−M) lies in the binade above the output's largest value (headroom for partial sums
    larger than the result) and R_UF = 2^(e + 2 − 2^E). b_prod keeps fmt's gap b_prod − b_acc (the ½·log2(chunk)
    rule). Both are clamped to the valid range; an all-zero or non-finite output keeps fmt. Reads the maximum on the
    host: a dynamic-bias call cannot be captured in a CUDA graph.
    """
    with torch.no_grad():
        largest = float(torch.matmul(a.detach(), b.detach()).abs().amax()) if a.numel() and b.numel() else 0.0
    if not 0.0 < largest < math.inf:
        return fmt
    acc_bias = 2**fmt.exp - 2 - math.frexp(largest)[1] + 1  # frexp: largest = f·2^(e+1), f in [0.5, 1)
    prod_bias = acc_bias + fmt.prod_bias - fmt.acc_bias
    acc_bias = min(max(acc_bias, bias_range(fmt.exp)[0]), bias_range(fmt.exp)[1])
    prod_bias = min(max(prod_bias, bias_range(fmt.prod_exp)[0]), bias_range(fmt.prod_exp)[1])
    return fmt.with_biases(acc_bias, prod_bias)


def _check_config(config) -> None:
    if not isinstance(config, LowbitConfig):
        raise TypeError(f"config must be a LowbitConfig; got {type(config).__name__}")


def matmul(a: torch.Tensor, b: torch.Tensor, config: LowbitConfig) -> torch.Tensor:
    """(…, M, K) @ (…, K, N) with a low-bit accumulator, batch dimensions broadcast; float32 out, differentiable.

    Inputs of any floating dtype are cast to float32 (the seed's full-precision weights and activations), or,
    with `config.operands`, rounded to that format, each tensor with its own bias.
    """
    check_operand("a", a)
    check_operand("b", b)
    _check_config(config)
    a, b = a.float(), b.float()
    if config.operands is not None:
        a, b = round_operand(a, config.operands), round_operand(b, config.operands)
    # Broadcast batch dimensions as stride-0 views: the kernel sees one batch, autograd sums the expanded gradients.
    a, b = broadcast_operands(a, b)
    fmt = dynamic_format(a, b, config.format) if config.dynamic_bias else config.format
    if a.is_cuda:
        try:
            from .kernel import matmul as kernel_matmul
        except ImportError:
            kernel_matmul = None
        if kernel_matmul is not None:
            return kernel_matmul(a, b, fmt, config.ste, config.eps1, config.eps2)
    return _reference_op(
        a,
        b,
        fmt.man,
        fmt.exp,
        fmt.acc_bias,
        fmt.prod_bias,
        fmt.prod_man,
        fmt.prod_exp,
        fmt.chunk,
        fmt.underflow,
        config.ste,
        float(config.eps1),
        float(config.eps2),
    )


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, config: LowbitConfig) -> torch.Tensor:
    """F.linear(x, weight, bias) = x·weightᵀ + bias with a low-bit accumulator; the bias is added in FP32 after,
    and the result has the dtype F.linear gives (`layer_dtype`: a bf16 model's layers stay bf16)."""
    check_operand("x", x)
    check_operand("weight", weight)
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D (out_features, in_features); got shape {tuple(weight.shape)}")
    if x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"x's last dimension must equal weight's in_features {weight.shape[1]}; got x {tuple(x.shape)}"
        )
    if bias is not None:
        check_operand("bias", bias)
        if bias.shape != (weight.shape[0],):
            raise ValueError(f"bias must have shape ({weight.shape[0]},); got {tuple(bias.shape)}")
    y = matmul(x.reshape(math.prod(x.shape[:-1]), weight.shape[1]), weight.t(), config)  # -1 fails at K = 0
    if bias is not None:
        y = y + bias.float()
    return y.reshape(*x.shape[:-1], weight.shape[0]).to(layer_dtype(x, weight))


_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps", "hpu")


def layer_dtype(x: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The dtype torch's layer would return: autocast's where it is on for x's device and would cast these
    operands (it leaves float64 alone), else x's and the weight's promoted dtype (bf16 for a bf16 model). The
    accumulation is the low-bit chain in FP32 registers either way."""
    device = x.device.type
    castable = torch.float64 not in (x.dtype, weight.dtype)
    # devices with autocast, named: torch.amp.is_autocast_available is not traceable by torch 2.11's Dynamo
    if castable and device in _AUTOCAST_DEVICES and torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return torch.promote_types(x.dtype, weight.dtype)


# ---- the reference path (CPU, or CUDA without the kernel), as an op torch.compile treats as one opaque call


@custom_op("cutlass_ext::lowbit_matmul_reference", mutates_args=())
def _reference_op(
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
    ste: str,
    eps1: float,
    eps2: float,
) -> torch.Tensor:
    fmt = LowbitFormat(man, exp, acc_bias, prod_bias, prod_man, prod_exp, chunk, underflow)
    return lowbit_matmul_fmt(a, b, fmt)


@_reference_op.register_fake
def _(a, b, man, exp, acc_bias, prod_bias, prod_man, prod_exp, chunk, underflow, ste, eps1, eps2):
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return a.new_empty((*batch, a.shape[-2], b.shape[-1]))


def _setup_context(ctx, inputs, output):
    a, b, *fields, ste, eps1, eps2 = inputs
    ctx.save_for_backward(a, b)
    ctx.fmt = LowbitFormat(*fields)
    ctx.ste, ctx.eps = ste, (eps1, eps2)


def _backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad_a, grad_b = reference_grads(a, b, grad, ctx.fmt, ctx.ste, *ctx.eps)
    return (grad_a, grad_b) + (None,) * 11


_reference_op.register_autograd(_backward, setup_context=_setup_context)


def reference_grads(
    a: torch.Tensor, b: torch.Tensor, grad_out: torch.Tensor, fmt: LowbitFormat, ste: str, eps1: float, eps2: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """STE gradients of `lowbit_matmul_fmt(a, b, fmt)` for batched, broadcast operands (pure torch, small shapes)."""
    if ste == "identity":  # eq. 5 not applied: the accumulator is transparent to the gradient
        grad_a, grad_b = grad_out @ b.mT, a.mT @ grad_out
    else:
        from .ste import grad_reference

        batch = grad_out.shape[:-2]
        grad_a, grad_b = grad_reference(
            a.expand(*batch, *a.shape[-2:]), b.expand(*batch, *b.shape[-2:]), grad_out, fmt, ste, eps1, eps2
        )
    return grad_a.sum_to_size(a.shape), grad_b.sum_to_size(b.shape)


from .nn import Conv2d, Linear, convert, set_underflow  # noqa: E402  (nn builds on the functions above)

__all__ = [
    "E4M3",
    "E5M2",
    "M4E3",
    "STES",
    "Conv2d",
    "Linear",
    "LowbitConfig",
    "LowbitFormat",
    "OperandFormat",
    "convert",
    "dynamic_format",
    "layer_dtype",
    "linear",
    "lowbit_matmul",
    "lowbit_matmul_events",
    "lowbit_matmul_fmt",
    "matmul",
    "quantize",
    "reference_grads",
    "round_operand",
    "set_underflow",
]
