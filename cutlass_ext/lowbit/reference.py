"""Bit-exact reference of the low-bit-accumulator GEMM (seed 002, eq. 2, section 3, Fig. 1), in plain PyTorch.

The definition, shared with the CUDA kernel, which must equal `lowbit_matmul_fmt` bit for bit:

Q(y; M, E, b) of an FP32 value y (the round-to-nearest result of one FP32 multiply or add):
  1. truncate the mantissa toward zero: keep the sign, the exponent and the top M of the 23 mantissa bits of
     y's FP32 word (`mantissa_mask`), the seed's floor implemented by a bit mask (section 3);
  2. saturate: |y| ≥ R_OF = 2^(2^E − b − 1)·(2 − 2^−M) becomes ±R_OF (±inf too);
  3. flush: when underflow is on, |y| < R_UF = 2^−b becomes +0.0.
  R_OF and R_UF are M-bit FP32 values, so testing the threshold before or after step 1 gives the same result.
  NaN stays NaN. FP32 subnormals are kept by the FP32 operations (no flush-to-zero) and masked like any other
  word (their 23-bit field keeps its top M bits); R_UF ≥ 2^−149, and with underflow on every value below it is 0.

FMAq(x, w, s) = Q_acc(Q_prod(x·w) + s)  (Fig. 1 left): x·w and the sum are each one FP32 operation rounded to
nearest, never a fused multiply-add. Q_prod uses (prod_man, prod_exp, prod_bias), Q_acc (man, exp, acc_bias).

C[i, j] for A (M, K), B (K, N) (Fig. 1 right): K is cut into consecutive chunks of `chunk` indices (the last may
be shorter); inside chunk c, S_c = FMAq over its k in increasing order starting from S = +0.0; then
T ← Q_acc(T + S_c) over the chunks in increasing order starting from T = +0.0; C[i, j] = T. chunk = 1 is fully
sequential accumulation; chunk ≥ K is a single chain (T = S_0, since Q is idempotent). K = 0 gives zeros.

The first level runs vectorized over all chunks at once (they are independent until the second level), so the
loop has chunk + K/chunk steps rather than K.
"""

from __future__ import annotations

import math

import torch

from ..batched import broadcast_operands
from .format import (
    EXPONENT_RANGE,
    MANTISSA_RANGE,
    LowbitFormat,
    check_bias,
    check_bits,
    mantissa_mask,
    overflow_threshold,
    underflow_threshold,
)

# Elements of the (…, M, N, chunks) first-level tensor held at once (64 MiB of float32).
_GROUP_ELEMENTS = 1 << 24


def _signed(mask: int) -> int:
    """A uint32 mask as the int32 that torch's bitwise ops take."""
    return mask - (1 << 32) if mask >= 1 << 31 else mask


def _q(y: torch.Tensor, mask: int, r_of: float, r_uf: float | None) -> torch.Tensor:
    """Q, in place, of FP32 arithmetic results (quiet NaNs keep the mask's top mantissa bit, so NaN stays NaN)."""
    y.view(torch.int32).bitwise_and_(_signed(mask))
    y.clamp_(-r_of, r_of)
    if r_uf is not None:
        y.masked_fill_(y.abs() < r_uf, 0.0)
    return y


def _check_float32(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if x.dtype != torch.float32:
        raise TypeError(f"{name} must be float32; got {x.dtype}")


def quantize(x: torch.Tensor, man: int, exp: int, bias: int, underflow: bool = True) -> torch.Tensor:
    """Q(x; M=man, E=exp, b=bias) of a float32 tensor (see the module docstring); NaN stays NaN."""
    _check_float32("x", x)
    check_bits("man", man, MANTISSA_RANGE)
    check_bits("exp", exp, EXPONENT_RANGE)
    check_bias("bias", bias, exp)
    if not isinstance(underflow, bool):
        raise ValueError(f"underflow={underflow!r} must be True or False")
    r_uf = underflow_threshold(bias) if underflow else None
    y = _q(x.detach().clone(), mantissa_mask(man), overflow_threshold(man, exp, bias), r_uf)
    # A signalling NaN whose payload lies in the dropped bits would mask to ±inf; NaN is kept as given instead.
    return torch.where(torch.isnan(x), x.detach(), y)


def _q_prod(y: torch.Tensor, fmt: LowbitFormat) -> torch.Tensor:
    return _q(y, fmt.prod_mask, fmt.prod_overflow, fmt.prod_underflow if fmt.underflow else None)


def _q_acc(y: torch.Tensor, fmt: LowbitFormat) -> torch.Tensor:
    return _q(y, fmt.acc_mask, fmt.acc_overflow, fmt.acc_underflow if fmt.underflow else None)


def fmaq(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor, fmt: LowbitFormat) -> torch.Tensor:
    """FMAq(x, w, s) = Q_acc(Q_prod(x·w) + s), elementwise with broadcasting (Fig. 1 left)."""
    for name, value in (("x", x), ("w", w), ("s", s)):
        _check_float32(name, value)
    return _q_acc(_q_prod(x.detach() * w.detach(), fmt) + s.detach(), fmt)


class _Events:
    """Counts of the seed's Table 1 events along the chain (definitions in `lowbit_matmul_events`)."""

    KEYS = (
        "products",
        "additions",
        "prod_overflow",
        "prod_underflow",
        "acc_overflow",
        "acc_underflow",
        "swamping",
        "full_swamping",
    )

    def __init__(self):
        self.counts = dict.fromkeys(self.KEYS, 0)  # python ints or, once counted, device tensors (one sync at the end)

    def _add(self, key: str, mask: torch.Tensor) -> None:
        self.counts[key] = self.counts[key] + mask.sum()

    def totals(self) -> dict[str, int]:
        return {key: int(value) for key, value in self.counts.items()}

    def product(self, x: torch.Tensor, w: torch.Tensor, p: torch.Tensor, fmt: LowbitFormat) -> None:
        self.counts["products"] += p.numel()
        self._add("prod_overflow", p.abs() >= fmt.prod_overflow)
        self._add("prod_underflow", (x != 0) & (w != 0) & (p.abs() < fmt.prod_underflow))

    def addition(
        self, s: torch.Tensor, term: torch.Tensor, y: torch.Tensor, r: torch.Tensor, fmt: LowbitFormat
    ) -> None:
        self.counts["additions"] += y.numel()
        overflow = y.abs() >= fmt.acc_overflow
        underflow = (y != 0) & (y.abs() < fmt.acc_underflow)
        self._add("acc_overflow", overflow)
        self._add("acc_underflow", underflow)
        # TwoSum in float64 (error-free for two float32 operands): s + term = hi + lo exactly.
        s64, t64 = s.double(), term.double()
        hi = s64 + t64
        z = hi - s64
        lo = (s64 - (hi - z)) + (t64 - z)
        in_range = ~overflow & ~underflow
        self._add("swamping", in_range & ((lo != 0) | (r.double() != hi)))
        self._add("full_swamping", in_range & (term != 0) & (r == s))


def _add_step(s: torch.Tensor, term: torch.Tensor, fmt: LowbitFormat, events: _Events | None) -> torch.Tensor:
    """Q_acc(s + term), written into s (a view of the running sums) and returned."""
    if events is None:
        return _q_acc(s.add_(term), fmt)
    y = s + term
    r = _q_acc(y.clone(), fmt)
    events.addition(s, term, y, r, fmt)
    return s.copy_(r)


def _chunk_sums(a: torch.Tensor, bt: torch.Tensor, fmt: LowbitFormat, events: _Events | None) -> torch.Tensor:
    """S_c of every chunk of a (…, M, k) and bᵀ (…, N, k), k = the chunks' span: (chunks, …, M, N)."""
    span = a.shape[-1]
    count = math.ceil(span / fmt.chunk)
    sums = a.new_zeros((count, *a.shape[:-1], bt.shape[-2]))
    for j in range(min(fmt.chunk, span)):
        # The j-th product of every chunk that has one (all but a short last chunk when j is past its end).
        x = a[..., j :: fmt.chunk].movedim(-1, 0).unsqueeze(-1)
        w = bt[..., j :: fmt.chunk].movedim(-1, 0).unsqueeze(-2)
        p = x * w
        if events is not None:
            events.product(x, w, p, fmt)
        _add_step(sums[: p.shape[0]], _q_prod(p, fmt), fmt, events)
    return sums


def _check_operands(a, b) -> tuple[torch.Tensor, torch.Tensor]:
    _check_float32("a", a)
    _check_float32("b", b)
    a, b = broadcast_operands(a, b)
    return a.detach(), b.detach()


def _chain(a: torch.Tensor, b: torch.Tensor, fmt: LowbitFormat, events: _Events | None) -> torch.Tensor:
    if not isinstance(fmt, LowbitFormat):
        raise TypeError(f"fmt must be a LowbitFormat; got {type(fmt).__name__}")
    a, b = _check_operands(a, b)
    k = a.shape[-1]
    fmt = fmt.for_depth(k)
    bt = b.transpose(-1, -2)
    total = a.new_zeros((*a.shape[:-1], b.shape[-1]))
    chunks = math.ceil(k / fmt.chunk)
    group = max(1, _GROUP_ELEMENTS // max(1, total.numel()))
    for first in range(0, chunks, group):
        lo, hi = first * fmt.chunk, min(k, (first + group) * fmt.chunk)
        sums = _chunk_sums(a[..., lo:hi], bt[..., lo:hi], fmt, events)
        for chunk_sum in sums:
            _add_step(total, chunk_sum, fmt, events)
    return total


def lowbit_matmul_fmt(a: torch.Tensor, b: torch.Tensor, fmt: LowbitFormat) -> torch.Tensor:
    """(…, M, K) @ (…, K, N) with batch broadcasting, float32 in and out, by the module docstring's chain."""
    return _chain(a, b, fmt, None)


def lowbit_matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    man: int,
    exp: int,
    acc_bias: int,
    prod_bias: int,
    chunk: int = 16,
    underflow: bool = True,
    prod_man: int | None = None,
    prod_exp: int | None = None,
) -> torch.Tensor:
    """Low-bit-accumulator GEMM (seed 002): M-bit mantissa, E-bit exponent accumulator, chunked; see module."""
    fmt = LowbitFormat.make(man, exp, acc_bias, prod_bias, chunk, underflow, prod_man, prod_exp)
    return lowbit_matmul_fmt(a, b, fmt)


def lowbit_matmul_events(a: torch.Tensor, b: torch.Tensor, fmt: LowbitFormat) -> dict[str, int]:
    """Seed Table 1 event counts of the chain `lowbit_matmul_fmt(a, b, fmt)` runs, over all outputs.

    products: FP32 products x·w formed (M·N·K per batch); additions: accumulator adds (M·N·(K + chunks)).
    prod_overflow: |x·w| ≥ R_OF of the product format (±inf included); prod_underflow: x ≠ 0, w ≠ 0 and
    |x·w| < R_UF (Table 1: |x| < 2^−b). acc_overflow / acc_underflow: the same tests on each FP32 sum y = s + t
    against the accumulator's thresholds (underflow: y ≠ 0). Underflows are counted whether or not the format
    flushes them. swamping: an add with neither event whose result Q_acc(y) differs from the exact sum s + t
    (section 2.3: low bits of the summands lost). full_swamping: among those, the new term t (a quantized
    product, or a chunk sum at the second level) is nonzero and the result equals the running sum s
    (section 2.3: z̄ = z1 although z2 ≠ 0). overflow / underflow: product and accumulator counts together.
    """
    events = _Events()
    _chain(a, b, fmt, events)
    counts = events.totals()
    counts["overflow"] = counts["prod_overflow"] + counts["acc_overflow"]
    counts["underflow"] = counts["prod_underflow"] + counts["acc_underflow"]
    return counts
