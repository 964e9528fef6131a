"""Bit-exact reference, in plain PyTorch, of the arithmetic our kernels do.

Every function works on CPU and CUDA tensors. Rounding is computed in float64, where scaling by a power of
two and rounding to an integer are exact, so each result is the correctly rounded value of its format held
in a float32 tensor. The kernels are tested against these functions; these functions are tested against the
seed texts' own tables and hand-made cases.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from .arguments import is_integer


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: sign, `exponent_bits`, `mantissa_bits` stored (implicit bit not counted)."""

    exponent_bits: int
    mantissa_bits: int
    max_finite: float
    # FP8 conversions on NVIDIA GPUs exist only as `cvt.*.satfinite`: overflow and ±inf clamp to ±max_finite.
    saturates: bool = False

    def __post_init__(self):
        for name, least in (("exponent_bits", 2), ("mantissa_bits", 0)):
            value = getattr(self, name)
            if not is_integer(value) or value < least:
                raise ValueError(f"{name}={value!r} must be an integer of at least {least}")
        if isinstance(self.max_finite, bool) or not (
            isinstance(self.max_finite, numbers.Real) and 0 < self.max_finite < math.inf
        ):
            raise ValueError(f"max_finite={self.max_finite!r} must be a positive finite number")
        if not isinstance(self.saturates, bool):
            raise ValueError(f"saturates={self.saturates!r} must be True or False")

    @property
    def min_exponent(self) -> int:
        return 2 - 2 ** (self.exponent_bits - 1)


def _ieee(exponent_bits: int, mantissa_bits: int, saturates: bool = False) -> FloatFormat:
    max_exponent = 2 ** (exponent_bits - 1) - 1
    max_finite = (2.0 - 2.0**-mantissa_bits) * 2.0**max_exponent
    return FloatFormat(exponent_bits, mantissa_bits, max_finite, saturates)


FORMATS: dict[str, FloatFormat] = {
    "fp32": _ieee(8, 23),
    "tf32": _ieee(8, 10),
    "bf16": _ieee(8, 7),
    "fp16": _ieee(5, 10),
    # e4m3 "fn": no infinities, S.1111.111 is NaN, so the largest finite value is 1.75 * 2^8.
    "fp8_e4m3": FloatFormat(4, 3, 448.0, saturates=True),
    "fp8_e5m2": _ieee(5, 2, saturates=True),
}

ROUNDING_MODES = ("rn", "rna", "rz", "sr")

# seed 000 eqs. 2-5 (markidis), 19-22 (halfhalf, lo scaled by 2^11 against underflow), section 3.3 (tf32tf32)
SPLIT_SCHEMES = ("halfhalf", "tf32tf32", "markidis")
LO_SCALE = {"halfhalf": 2.0**11, "tf32tf32": 1.0, "markidis": 1.0}
_SPLIT_ROUNDING = {"halfhalf": ("fp16", "rn"), "tf32tf32": ("tf32", "rna"), "markidis": ("fp16", "rn")}

# Plain Tensor Core schemes without correction. CUTLASS converts float to TF32 by adding half an ulp to the
# bits and letting the Tensor Core drop the low 13 (`round_half_ulp_truncate`), which is RNA.
PLAIN_SCHEMES = {"tf32": ("tf32", "rna"), "fp16": ("fp16", "rn")}
GEMM_SCHEMES = SPLIT_SCHEMES + tuple(PLAIN_SCHEMES)


def _check_real_tensor(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if x.is_complex():
        raise TypeError(f"{name} must be a real tensor; got {x.dtype}")


def _lookup(table, key, argument: str):
    if not isinstance(key, str) or key not in table:
        raise ValueError(f"{argument}={key!r} is not one of {sorted(table)}")
    return table[key]


def round_to(
    x: torch.Tensor, fmt: str | FloatFormat, mode: str = "rn", generator: torch.Generator | None = None
) -> torch.Tensor:
    """Round `x` to format `fmt` (a name of FORMATS or a FloatFormat) with rounding `mode`; returns float32 holding
    the rounded values exactly.

    mode: `rn` nearest-even, `rna` nearest ties away from zero, `rz` toward zero, `sr` stochastic (rounds up
    with probability equal to the distance from the value below, draws from `generator`). Subnormals are kept
    (the quantum stops shrinking at the smallest normal exponent); overflow gives ±inf under rn/rna/sr and the
    largest finite value under rz, as IEEE conversions do, and the largest finite value always for formats that
    saturate (FP8). NaN stays NaN.
    """
    spec = fmt if isinstance(fmt, FloatFormat) else _lookup(FORMATS, fmt, "fmt")
    if not isinstance(mode, str) or mode not in ROUNDING_MODES:
        raise ValueError(f"mode={mode!r} is not one of {list(ROUNDING_MODES)}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor; got {type(x).__name__}")
    if not torch.is_floating_point(x):
        raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None; got {type(generator).__name__}")
    x64 = x.to(torch.float64)
    _, exponent = torch.frexp(x64)  # x = m * 2^exponent with |m| in [0.5, 1)
    leading = torch.clamp(exponent - 1, min=spec.min_exponent)
    quantum = torch.ldexp(torch.ones_like(x64), leading - spec.mantissa_bits)
    scaled = x64 / quantum  # exact: a power-of-two scaling
    if mode == "rn":
        integral = torch.round(scaled)
    elif mode == "rna":
        whole = torch.trunc(scaled)  # |scaled| − |whole| is exact: adding 0.5 to it could round up below a tie
        integral = whole + torch.copysign(((scaled - whole).abs() >= 0.5).to(scaled.dtype), scaled)
    elif mode == "rz":
        integral = torch.trunc(scaled)
    else:
        uniform = torch.rand(x64.shape, dtype=torch.float64, device=x64.device, generator=generator)
        integral = torch.floor(scaled + uniform)
        integral = torch.where(integral == 0, torch.copysign(integral, scaled), integral)  # -0.0 as rn gives it
    rounded = integral * quantum

    overflow = rounded.abs() > spec.max_finite
    saturated = torch.copysign(torch.full_like(x64, spec.max_finite), x64)
    if spec.saturates or mode == "rz":
        rounded = torch.where(overflow, saturated, rounded)
    else:
        rounded = torch.where(overflow, torch.copysign(torch.full_like(x64, math.inf), x64), rounded)
    if spec.saturates:
        rounded = torch.where(torch.isinf(x64), saturated, rounded)
    else:
        rounded = torch.where(torch.isinf(x64), x64, rounded)
    rounded = torch.where(torch.isnan(x64), x64, rounded)
    return rounded.to(torch.float32)


def split(x: torch.Tensor, scheme: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Split FP32 `x` into (hi, lo) so that x ≈ hi + lo / LO_SCALE[scheme]; both float32 tensors.

    halfhalf: hi = FP16 RN(x), lo = FP16 RN((x - hi) * 2^11)   (seed eqs. 19-22)
    tf32tf32: hi = TF32 RNA(x), lo = TF32 RNA(x - hi)           (seed section 3.3)
    markidis: hi = FP16 RN(x), lo = FP16 RN(x - hi)             (seed eqs. 2-5)
    The differences are computed in float32, as the kernels compute them in registers; where hi is Inf or NaN
    (x non-finite, or rounding past the format's range) lo is 0.
    """
    fmt, mode = _lookup(_SPLIT_ROUNDING, scheme, "scheme")
    _check_real_tensor("x", x)
    x32 = x.to(torch.float32)
    hi = round_to(x32, fmt, mode)
    # a hi that is Inf or NaN gets lo = 0, as the kernels split (Inf times a finite value stays Inf)
    remainder = torch.where(torch.isfinite(hi), x32 - hi, 0.0)
    lo = round_to(remainder * LO_SCALE[scheme], fmt, mode)
    return hi, lo


def _truncate_significand(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Round float64 `values` toward zero to `bits` significant bits."""
    significand, exponent = torch.frexp(values)
    return torch.ldexp(torch.trunc(significand * 2.0**bits) / 2.0**bits, exponent)


def _mma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, accumulate: str, accumulator_bits: int) -> torch.Tensor:
    """One Tensor Core step D = A·B + C as the seed's mma_rn / mma_rz model it (section 3.2, eq. 11).

    Products are formed in FP32 and summed in FP64, the running sum truncated to `accumulator_bits` significant
    bits after every addition; C is then added and the result rounded to FP32 with RN (mma_rn) or with RZ
    (mma_rz, as the Tensor Core does). The rounding of that last addition is where RZ costs accuracy.
    """
    products = torch.zeros(c.shape, dtype=torch.float64, device=c.device)
    for j in range(a.shape[1]):
        product = (a[:, j : j + 1] * b[j : j + 1, :]).to(torch.float64)
        products = _truncate_significand(products + product, accumulator_bits)
    total = products + c.to(torch.float64)
    if accumulate == "rn":
        return total.to(torch.float32)
    return round_to(total, "fp32", "rz")


def emulated_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    scheme: str,
    accumulate: str = "rz",
    mma_k: int = 8,
    accumulator_bits: int = 25,
    fold: str = "end",
    block_k: int = 32,
) -> torch.Tensor:
    """C = A·B for FP32 (M,K)×(K,N) as the Tensor Core computes it under `scheme`; returns float32 (M,N).

    accumulate: the rounding after each in-Tensor-Core accumulation, `rz` as the hardware does it or `rn`
    (seed's mma_rz / mma_rn). mma_k: the instruction's k (8 for m16n8k8), the granularity of that rounding.
    Schemes:
      halfhalf, tf32tf32: per k-step, hi·hi into a fresh zero accumulator, added to C with an FP32 RN add
        outside the Tensor Core; lo·lo dropped (seed sections 3.2-3.4). fold="end": lo·hi + hi·lo accumulated
        inside in their own accumulator over all of K, scaled back once at the end (seed Code 3). fold="step":
        lo·hi + hi·lo into a fresh accumulator per k-step, folded in with C += fma(lo, 2^-s, hi·hi) in FP32 RN,
        as the halfhalf kernel does it. fold="block" (unscaled lo only): lo·hi, hi·lo and hi·hi chained inside the
        Tensor Core in a fresh accumulator per `block_k` slice of K, then added to C in FP32 RN, as the
        tf32tf32 kernel does it with CUTLASS's staged accumulation (kernels/split_mma.h).
      markidis: all four products accumulated inside the Tensor Core, in Code 2's order.
      tf32, fp16: the operands rounded once (TF32 RNA as CUTLASS does it, FP16 RN), accumulated inside.
    """
    _lookup(dict.fromkeys(GEMM_SCHEMES), scheme, "scheme")
    for name, value, least in (("mma_k", mma_k, 1), ("accumulator_bits", accumulator_bits, 1), ("block_k", block_k, 1)):
        if not is_integer(value) or value < least:
            raise ValueError(f"{name}={value!r} must be an integer of at least {least}")
    if accumulator_bits > 53:
        raise ValueError(f"accumulator_bits={accumulator_bits!r} must be at most 53 (an FP64 running sum)")
    if not isinstance(fold, str) or fold not in ("end", "step", "block"):
        raise ValueError(f"fold={fold!r} is not one of ['end', 'step', 'block']")
    if fold != "end" and scheme not in ("halfhalf", "tf32tf32"):
        raise ValueError(
            f"fold={fold!r} applies to halfhalf and tf32tf32 only: {scheme} has no correction accumulated apart to fold"
        )
    if fold == "block" and (scheme not in SPLIT_SCHEMES or LO_SCALE[scheme] != 1 or block_k % mma_k):
        raise ValueError(f"fold='block' needs an unscaled split scheme and block_k a multiple of mma_k={mma_k}")
    if accumulate not in ("rn", "rz"):
        raise ValueError(f"accumulate={accumulate!r} is not one of ['rn', 'rz']")
    _check_real_tensor("a", a)
    _check_real_tensor("b", b)
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"a and b must be (M,K) and (K,N); got {tuple(a.shape)} and {tuple(b.shape)}")
    m, k = a.shape
    n = b.shape[1]
    padded_k = -(-k // mma_k) * mma_k  # zero columns add exact zeros
    a32 = torch.nn.functional.pad(a.to(torch.float32), (0, padded_k - k))
    b32 = torch.nn.functional.pad(b.to(torch.float32), (0, 0, 0, padded_k - k))

    def step(a_part, b_part, c, start):
        return _mma(a_part[:, start : start + mma_k], b_part[start : start + mma_k], c, accumulate, accumulator_bits)

    c = torch.zeros(m, n, dtype=torch.float32, device=a.device)
    if scheme in PLAIN_SCHEMES:
        fmt, mode = PLAIN_SCHEMES[scheme]
        a_rounded, b_rounded = round_to(a32, fmt, mode), round_to(b32, fmt, mode)
        for start in range(0, padded_k, mma_k):
            c = step(a_rounded, b_rounded, c, start)
        return c

    a_hi, a_lo = split(a32, scheme)
    b_hi, b_lo = split(b32, scheme)
    if scheme == "markidis":
        for start in range(0, padded_k, mma_k):
            for a_part, b_part in ((a_lo, b_lo), (a_lo, b_hi), (a_hi, b_lo), (a_hi, b_hi)):
                c = step(a_part, b_part, c, start)
        return c

    zero = torch.zeros_like(c)
    if fold == "block":
        for block_start in range(0, padded_k, block_k):
            block = zero
            for start in range(block_start, min(block_start + block_k, padded_k), mma_k):
                for a_part, b_part in ((a_lo, b_hi), (a_hi, b_lo), (a_hi, b_hi)):
                    block = step(a_part, b_part, block, start)
            c = c + block  # seed 3.2: the running sum is FP32 RN; RZ stays inside one block
        return c
    if fold == "step":
        for start in range(0, padded_k, mma_k):
            lo_terms = step(a_hi, b_lo, step(a_lo, b_hi, zero, start), start)
            hi_hi = step(a_hi, b_hi, zero, start)
            # one FP32 rounding of lo·2^-s + hi·hi (an FMA), then one of the add to C
            folded = (lo_terms.double() / LO_SCALE[scheme] + hi_hi.double()).to(torch.float32)
            c = c + folded
        return c
    correction = torch.zeros_like(c)
    for start in range(0, padded_k, mma_k):
        correction = step(a_lo, b_hi, correction, start)
        correction = step(a_hi, b_lo, correction, start)
        c = c + step(a_hi, b_hi, zero, start)  # seed 3.2: hi·hi accumulated outside the Tensor Core, RN
    return c + correction / LO_SCALE[scheme]  # seed eq. 24: lo terms scaled back once, after the k-loop


def mantissa_length_expectation(
    rounding: str = "rn", fmt: str = "fp16", samples: int | None = None, generator: torch.Generator | None = None
) -> float:
    """Expected FP32 mantissa bits (of 23) kept by Markidis' split hi = R(x), lo = R(x - hi) (seed Tables 1-2).

    Counted from the bits: for each FP32 mantissa (all 2^23 of them in [1, 2), or `samples` drawn uniformly),
    the kept length is 23 minus the bit length of the representation error |x - hi - lo| in units of x's ulp.
    """
    ulp = 2.0**-23
    if samples is not None and (not is_integer(samples) or samples < 1):
        raise ValueError(f"samples={samples!r} must be None or an integer of at least 1")
    if samples is None:
        mantissas = torch.arange(2**23, dtype=torch.float64)
    else:
        mantissas = torch.randint(0, 2**23, (samples,), generator=generator).to(torch.float64)
    x = (1.0 + mantissas * ulp).to(torch.float32)
    hi = round_to(x, fmt, rounding)
    lo = round_to(x - hi, fmt, rounding)
    error_ulps = ((x.double() - hi.double() - lo.double()).abs() / ulp).round()
    lost_bits = torch.where(error_ulps > 0, torch.floor(torch.log2(error_ulps.clamp(min=1))) + 1, 0.0)
    return float((23 - lost_bits).mean())


def exp_rand(
    shape, a: int, b: int, generator: torch.Generator | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """FP32 tensor: exponents uniform in [a, b], mantissas uniform over all 2^23 patterns, random sign (seed eq. 25)"""
    if not (is_integer(a) and is_integer(b) and -126 <= a <= b <= 127):
        raise ValueError(f"exponent range [a, b] = [{a!r}, {b!r}] must be integers with -126 <= a <= b <= 127")
    if isinstance(shape, int) or is_integer(shape):
        shape = (int(shape),)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None; got {type(generator).__name__}")
    where = generator.device if generator is not None else device
    exponent = torch.randint(a, b + 1, shape, generator=generator, device=where, dtype=torch.int64)
    mantissa = torch.randint(0, 2**23, shape, generator=generator, device=where, dtype=torch.int64)
    sign = torch.randint(0, 2, shape, generator=generator, device=where, dtype=torch.int64)
    bits = (sign << 31) | ((exponent + 127) << 23) | mantissa
    values = (bits - (sign << 32)).to(torch.int32).view(torch.float32)  # two's-complement view of the sign bit
    return values.to(device) if device is not None else values


def dequantized_product(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor | float,
    scale_b: torch.Tensor | float,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """FP64 reference of an FP8 GEMM: (a · scale_a) @ (b · scale_b)ᵀ + bias with a (M, K) and b (N, K) in any
    FP8 format; a scale is one value or one per row of its operand (any shape holding M or N values)."""

    def dequantized(x, scale, name):
        scale = torch.as_tensor(scale, dtype=torch.float64, device=x.device)
        if scale.numel() == 1:
            return x.double() * scale.reshape(())
        if scale.numel() != len(x):
            raise ValueError(f"{name} must hold one value or one per row ({len(x)}); got shape {tuple(scale.shape)}")
        return x.double() * scale.reshape(-1, 1)

    product = dequantized(a, scale_a, "scale_a") @ dequantized(b, scale_b, "scale_b").T
    return product if bias is None else product + bias.double()


def relative_residual(c: torch.Tensor, ref: torch.Tensor) -> float:
    """‖c − ref‖_F / ‖ref‖_F computed in float64 (seed eq. 7), both norms of values scaled by a power of two near
    ref's largest magnitude (their squares would overflow or vanish in FP64 past ~1e±154)."""
    _check_real_tensor("c", c)
    _check_real_tensor("ref", ref)
    if c.shape != ref.shape:
        raise ValueError(f"c and ref must have the same shape; got {tuple(c.shape)} and {tuple(ref.shape)}")
    ref64 = ref.detach().to(torch.float64)
    difference = c.detach().to(device=ref64.device, dtype=torch.float64) - ref64
    largest = ref64.abs().amax() if ref64.numel() else ref64.new_zeros(())
    _, exponent = torch.frexp(torch.where(torch.isfinite(largest) & (largest > 0), largest, 1.0))
    scale = -exponent.to(torch.float64)  # exact: a power of two
    return float(
        torch.linalg.vector_norm(torch.ldexp(difference, scale)) / torch.linalg.vector_norm(torch.ldexp(ref64, scale))
    )


# The low-bit-accumulator GEMM (seed 002) is defined with its format in `lowbit`, which imports nothing from here.
from .lowbit.reference import lowbit_matmul  # noqa: E402, F401  (re-exported: numerics.lowbit_matmul)
