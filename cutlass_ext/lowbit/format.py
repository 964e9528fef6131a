"""`LowbitFormat`: product and accumulator formats of a low-bit-accumulator GEMM (seed 002, eq. 2, Fig. 1).

A format Q(·; M, E, b) keeps M mantissa bits (truncated toward zero by a bit mask of the FP32 word, section 3),
saturates at R_OF = 2^(2^E − b − 1)·(2 − 2^−M) and, when underflow is on, flushes magnitudes below R_UF = 2^−b
to zero. The product x·w is quantized with (prod_man, prod_exp, prod_bias), each accumulation with
(man, exp, acc_bias); K is accumulated in chunks of `chunk` products (Fig. 1 right).
"""

from __future__ import annotations

import dataclasses
import numbers
import operator
from dataclasses import dataclass

FP32_MANTISSA_BITS = 23
FP32_MAX_EXPONENT = 127  # FP32's largest finite value is 2^127·(2 − 2^−23)
FP32_MIN_EXPONENT = -149  # FP32's smallest subnormal is 2^−149
_SIGN_AND_EXPONENT = 0xFF800000

MANTISSA_RANGE = (1, FP32_MANTISSA_BITS)
EXPONENT_RANGE = (2, 8)

# The seed's default bias is b = 2^(E−1) (note under Table 1); its M7E4 runs (Table 2) use b_prod = 12 = 2^3 + 4,
# the authors' kernel's `exp_bias = −2` (anchors README). The default keeps that 4-binade shift for every E.
PROD_BIAS_SHIFT = 4


MAX_CHUNK = 2**63 - 1  # the kernels' chunk is an int64 argument; a chunk past any K is one chunk


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def as_int(value):
    """A Python int for an integer scalar of any kind (numpy's too), so the dataclasses hold what torch.library's
    schemas and the C structs take; anything else (tensors and arrays included) unchanged, for the checks to refuse
    by name."""
    return operator.index(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value


def check_bits(name: str, value, allowed: tuple[int, int]) -> None:
    low, high = allowed
    if not _is_int(value) or not low <= value <= high:
        raise ValueError(f"{name}={value!r} must be an integer in {low}..{high}")


def bias_range(exp: int) -> tuple[int, int]:
    """Biases b whose R_OF is a finite FP32 value (2^E − b − 1 ≤ 127) and whose R_UF = 2^−b is ≥ 2^−149."""
    return 2**exp - 1 - FP32_MAX_EXPONENT, -FP32_MIN_EXPONENT


def check_bias(name: str, value, exp: int) -> None:
    low, high = bias_range(exp)
    if not _is_int(value) or not low <= value <= high:
        raise ValueError(
            f"{name}={value!r} must be an integer in {low}..{high} for {exp} exponent bits "
            f"(R_OF = 2^(2^E - b - 1)·(2 - 2^-M) must be a finite FP32 value and R_UF = 2^-b at least 2^-149)"
        )


def overflow_threshold(man: int, exp: int, bias: int) -> float:
    """R_OF = 2^(2^E − b − 1)·(2 − 2^−M) (eq. 2): the largest magnitude; exact in FP32."""
    return 2.0 ** (2**exp - bias - 1) * (2.0 - 2.0**-man)


def underflow_threshold(bias: int) -> float:
    """R_UF = 2^−b (eq. 2): the smallest nonzero magnitude when underflow is on; exact in FP32."""
    return 2.0**-bias


def mantissa_mask(man: int) -> int:
    """uint32 mask that keeps an FP32 word's sign, exponent and top `man` mantissa bits (floor toward zero)."""
    return _SIGN_AND_EXPONENT | (((1 << man) - 1) << (FP32_MANTISSA_BITS - man))


def default_prod_bias(exp: int) -> int:
    """b_prod = 2^(E−1) + 4: the seed's Table 2 regime (M7E4: b_prod = 12) for any exponent width."""
    return 2 ** (exp - 1) + PROD_BIAS_SHIFT


def default_acc_bias(prod_bias: int, chunk: int) -> int:
    """b_acc = b_prod − ½·log2(chunk), with ½·log2(chunk) rounded half up to an integer.

    A chunk sum of n products grows like √n, so the accumulator's range sits ½·log2(n) binades above the
    product's (issue rule; M7E4, chunk 16: 12 − 2 = 10 as in Table 2). round(½·log2 c) = n exactly when
    2^(2n−1) ≤ c < 2^(2n+1), i.e. n = c.bit_length() // 2 — integer arithmetic, no float log.
    """
    return prod_bias - chunk.bit_length() // 2


@dataclass(frozen=True)
class LowbitFormat:
    """Formats, biases, chunk length and underflow toggle of one low-bit-accumulator GEMM.

    man, exp, acc_bias: the accumulator Q_acc (M in 1..23, E in 2..8). prod_man, prod_exp, prod_bias: the
    product Q_prod. chunk: products per first-level chunk (≥ 1). underflow: flush |x| < R_UF to 0 (the seed's
    UF toggle, section 3 and Table 2). Build with `LowbitFormat.make`, which fills the seed's default biases.
    """

    man: int
    exp: int
    acc_bias: int
    prod_bias: int
    prod_man: int
    prod_exp: int
    chunk: int = 16
    underflow: bool = True

    def __post_init__(self):
        for field in ("man", "exp", "acc_bias", "prod_bias", "prod_man", "prod_exp", "chunk"):
            object.__setattr__(self, field, as_int(getattr(self, field)))
        check_bits("man", self.man, MANTISSA_RANGE)
        check_bits("exp", self.exp, EXPONENT_RANGE)
        check_bits("prod_man", self.prod_man, MANTISSA_RANGE)
        check_bits("prod_exp", self.prod_exp, EXPONENT_RANGE)
        check_bias("acc_bias", self.acc_bias, self.exp)
        check_bias("prod_bias", self.prod_bias, self.prod_exp)
        if not _is_int(self.chunk) or not 1 <= self.chunk <= MAX_CHUNK:
            raise ValueError(f"chunk={self.chunk!r} must be an integer in 1..{MAX_CHUNK} (products per chunk)")
        if not isinstance(self.underflow, bool):
            raise ValueError(f"underflow={self.underflow!r} must be True or False")

    @classmethod
    def make(
        cls,
        man: int,
        exp: int,
        acc_bias: int | None = None,
        prod_bias: int | None = None,
        chunk: int = 16,
        underflow: bool = True,
        prod_man: int | None = None,
        prod_exp: int | None = None,
    ) -> "LowbitFormat":
        """A validated format; the product format defaults to the accumulator's, biases to the seed's rules."""
        man, exp, acc_bias, prod_bias, chunk, prod_man, prod_exp = map(
            as_int, (man, exp, acc_bias, prod_bias, chunk, prod_man, prod_exp)
        )
        check_bits("man", man, MANTISSA_RANGE)
        check_bits("exp", exp, EXPONENT_RANGE)
        if not _is_int(chunk) or not 1 <= chunk <= MAX_CHUNK:
            raise ValueError(f"chunk={chunk!r} must be an integer in 1..{MAX_CHUNK} (products per chunk)")
        prod_man = man if prod_man is None else prod_man
        prod_exp = exp if prod_exp is None else prod_exp
        check_bits("prod_exp", prod_exp, EXPONENT_RANGE)
        prod_bias = default_prod_bias(prod_exp) if prod_bias is None else prod_bias
        check_bias("prod_bias", prod_bias, prod_exp)
        if acc_bias is None:
            acc_bias = default_acc_bias(prod_bias, chunk)
            try:
                check_bias("acc_bias", acc_bias, exp)
            except ValueError as error:  # the user gave no acc_bias: say where this one came from
                rule = f"the default, prod_bias {prod_bias} − ½·log2(chunk {chunk}) rounded"
                raise ValueError(f"{error}; acc_bias={acc_bias} is {rule}: pass acc_bias") from None
        return cls(man, exp, acc_bias, prod_bias, prod_man, prod_exp, chunk, underflow)

    def for_depth(self, k: int) -> "LowbitFormat":
        """The same chain for K = k with chunk at most max(k, 1): a chunk past K is one chunk either way, and the
        chunk's index arithmetic (k + chunk − 1 in the kernels, strides in the reference) stays within int64."""
        chunk = min(self.chunk, max(k, 1))
        return self if chunk == self.chunk else dataclasses.replace(self, chunk=chunk)

    def with_underflow(self, on: bool) -> "LowbitFormat":
        """The same format with underflow flushing on or off (dual-stage fine-tuning, Table 2)."""
        return dataclasses.replace(self, underflow=on)

    def with_biases(self, acc_bias: int, prod_bias: int) -> "LowbitFormat":
        """The same format with other exponent biases (dynamic per-layer bias)."""
        return dataclasses.replace(self, acc_bias=acc_bias, prod_bias=prod_bias)

    @property
    def acc_overflow(self) -> float:
        return overflow_threshold(self.man, self.exp, self.acc_bias)

    @property
    def acc_underflow(self) -> float:
        return underflow_threshold(self.acc_bias)

    @property
    def prod_overflow(self) -> float:
        return overflow_threshold(self.prod_man, self.prod_exp, self.prod_bias)

    @property
    def prod_underflow(self) -> float:
        return underflow_threshold(self.prod_bias)

    @property
    def acc_mask(self) -> int:
        return mantissa_mask(self.man)

    @property
    def prod_mask(self) -> int:
        return mantissa_mask(self.prod_man)

    @property
    def name(self) -> str:
        """e.g. `M7E4_b10_p12_c16_uf` (`_p…` names the product format too when it differs: `p12M4E3`)."""
        product = f"p{self.prod_bias}"
        if (self.prod_man, self.prod_exp) != (self.man, self.exp):
            product += f"M{self.prod_man}E{self.prod_exp}"
        tail = "uf" if self.underflow else "nouf"
        return f"M{self.man}E{self.exp}_b{self.acc_bias}_{product}_c{self.chunk}_{tail}"
