"""Ozaki scheme II in plain PyTorch: the definition the INT8 kernels compute, bit for bit.

An FP32 product C = A·B is made exact in integers and rebuilt from residues (Ozaki, Uchino, Imamura,
arXiv 2504.08009; GEMMul8, arXiv 2508.03984):

1. Scaling. Each row i of A (each column j of B) gets a power-of-two shift s_i chosen from its Euclidean norm so
   that A' = round(diag(2^s)·A) holds integers with ‖A'_i‖₂ ≤ 2^t + √K/2 (`row_shifts`). With the same bound for
   B', Cauchy–Schwarz gives |A'_i·B'_j| < P/2, P = ∏ m_l (`shift_budget` picks t).
2. Residues. A' mod m_l and B' mod m_l, balanced into [-⌊m_l/2⌋, ⌈m_l/2⌉ - 1] (INT8 for m_l ≤ 256), one plane per
   modulus (`residues`). The moduli are the coprime integers ≤ 256 taken greedily from the top (`moduli`).
3. One INT8 GEMM per modulus, exact in INT32 while K < 2^17 (|residue products| ≤ 2^14).
4. Recombination (`recombine`): C' = A'·B' is the unique integer in (-P/2, P/2) with the residues of the INT32
   products. Up to 8 moduli (P < 2^64) it is rebuilt exactly and rounded once to FP64 (the kernels: Σ y_l·P/m_l
   − k·P in wrapping 64-bit arithmetic); above, Garner's algorithm gives its balanced mixed-radix digits and
   Horner's rule in FP64 (each multiply and add rounded) its value within ~n·2^-53: digits of a balanced
   representation vanish above |C'|'s size, so no cancellation amplifies the error. C = float32(C'·2^-(s_i + s_j)).

Every step is exact or in a fixed order (the norm: FP64 sums of exact squares, k-slices of 1024 in k order, then
the slices in order), so the kernels equal this reference bit for bit.

Inf and NaN: a row of A (column of B) holding one has a non-finite sum of squares (finite FP32 squares cannot
overflow FP64 at K < 2^17); it gets the shift NON_FINITE_SHIFT, residues 0, and every output of its row (column) is
NaN (0x7fc00000, torch's NaN). SGEMM gives ±Inf or NaN there, by the signs and the zeros met; a finite output is
never made from a non-finite input, and the other outputs keep their bits.
"""

from __future__ import annotations

import math

import torch

MAX_MODULUS = 256
MIN_MODULI = 3  # fewer leave too few bits for the rounding allowance √K/2 at K = 2^17
MAX_MODULI = 14  # P < 2^111: scaled integers stay below 2^56, FP64-exact residue inputs with room to spare
MAX_K = 2**17 - 1  # INT32 products of residues in [-128, 127] stay exact: K·2^14 < 2^31
SHIFT_GUARD_BITS = 30  # the norm's FP64 rounding error (≤ K·2^-53 relative) is covered by 2^-30
NORM_SLICE_K = 1024  # k per partial sum of squares (kernels/ozaki_arith.cuh kNormSliceK)
MAX_WRAPPED_MODULI = 8  # P < 2^64: the kernels rebuild C' exactly in 64-bit integers
CRT_MARGIN_BITS = 12  # |C'| ≤ (1 − 2^-12)·P/2: the kernels' fixed-point estimate of C'/P rounds to the right k
NON_FINITE_SHIFT = -(2**31)  # the shift of a row or column holding Inf or NaN (kernels/ozaki_arith.cuh)


def _coprime_moduli() -> tuple[int, ...]:
    chosen: list[int] = []
    for candidate in range(MAX_MODULUS, 1, -1):
        if all(math.gcd(candidate, m) == 1 for m in chosen):
            chosen.append(candidate)
        if len(chosen) == MAX_MODULI:
            break
    return tuple(chosen)


_ALL_MODULI = _coprime_moduli()  # 256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199


def check_moduli_count(count) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or not MIN_MODULI <= count <= MAX_MODULI:
        raise ValueError(f"moduli={count!r} must be an integer in {MIN_MODULI}..{MAX_MODULI}")
    return count


def moduli(count: int) -> tuple[int, ...]:
    """The first `count` pairwise-coprime moduli ≤ 256, largest first."""
    return _ALL_MODULI[: check_moduli_count(count)]


def moduli_product(count: int) -> int:
    return math.prod(moduli(count))


def shift_budget(count: int) -> int:
    """The largest t with (2^t·(1 + 2^-30) + √(2^17)/2)² ≤ (1 − 2^-12)·P/2: scaled rows and columns of norm ≤ 2^t
    (plus the rounding allowance and the norm's guard) keep every |C'| below P/2 with a margin, so the balanced CRT
    recovers C' exactly."""
    limit = (moduli_product(count) // 2) * (2**CRT_MARGIN_BITS - 1)  # compared with bound · 2^12
    rounding_allowance = 182  # ≥ √(2^17)/2 = 181.02: each of K ≤ 2^17 roundings moves an entry by ≤ 1/2
    t = 0
    while (2 ** (t + 1) + 2 ** (t + 1 - SHIFT_GUARD_BITS) + rounding_allowance) ** 2 * 2**CRT_MARGIN_BITS <= limit:
        t += 1
    return t


def _check_float32(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if x.dtype != torch.float32:
        raise TypeError(f"{name} must be float32; got {x.dtype}")


def _sum_of_squares(x: torch.Tensor) -> torch.Tensor:
    """float64 (…, R): Σ_k x² in the kernels' order: each k-slice of NORM_SLICE_K summed in k order, then the
    slices in order (every square is exact in FP64; each add rounds once)."""
    k = x.shape[-1]
    padded = torch.nn.functional.pad(x.double(), (0, -k % NORM_SLICE_K))  # adding +0.0 changes no sum
    slices = padded.square().unflatten(-1, (-1, NORM_SLICE_K))
    in_order = slices.cumsum(dim=-1)[..., -1]  # a sequential running sum, unlike sum()'s pairwise tree
    return in_order.cumsum(dim=-1)[..., -1] if in_order.shape[-1] else in_order.sum(dim=-1)


def row_shifts(x: torch.Tensor, count: int) -> torch.Tensor:
    """int32 (…, R): s = t − ⌈e/2⌉ per row of x (…, R, K), where S = Σ_k x² in FP64 (`_sum_of_squares`) is
    f·2^e, f ∈ [½, 1); then 2^s·‖x_row‖₂ < 2^t (1 + 2^-30). An all-zero row gets s = t, a row holding Inf or NaN
    NON_FINITE_SHIFT."""
    _check_float32("x", x)
    t = shift_budget(count)
    squares = _sum_of_squares(x)
    finite = torch.isfinite(squares)
    _, exponent = torch.frexp(torch.where(finite, squares, 0.0))
    half_exponent = torch.where(squares > 0, -torch.div(-exponent, 2, rounding_mode="floor"), 0)
    return torch.where(finite, t - half_exponent, NON_FINITE_SHIFT).to(torch.int32)


def scaled_integers(x: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """int64 (…, R, K): round-half-even(x · 2^s) per row (exact in FP64: a power-of-two scale of an FP32 value);
    0 in a row whose shift is NON_FINITE_SHIFT."""
    marked = (shifts == NON_FINITE_SHIFT).unsqueeze(-1)
    scale = torch.where(marked, 0, shifts.unsqueeze(-1)).to(torch.float64)
    scaled = torch.ldexp(torch.where(marked, 0.0, x.double()), scale)
    return torch.round(scaled).to(torch.int64)


def balanced(values: torch.Tensor, modulus: int) -> torch.Tensor:
    """values mod `modulus` in [-⌊m/2⌋, ⌈m/2⌉ - 1] (int64 in, int64 out)."""
    half = modulus // 2
    return torch.remainder(values + half, modulus) - half


def residues(x: torch.Tensor, shifts: torch.Tensor, count: int) -> torch.Tensor:
    """int8 (count, …, R, K): the balanced residues of round(diag(2^s)·x) modulo each of the first `count` moduli."""
    integers = scaled_integers(x, shifts)
    return torch.stack([balanced(integers, m) for m in moduli(count)]).to(torch.int8)


def residue_products(residues_a: torch.Tensor, residues_b: torch.Tensor) -> torch.Tensor:
    """int32 (count, …, M, N): the exact integer products of (count, …, M, K) and (count, …, K, N) residue planes
    (FP64 matmul is exact here: every partial sum stays below 2^31 < 2^53)."""
    k = residues_a.shape[-1]
    if k > MAX_K:
        raise ValueError(f"K={k} exceeds {MAX_K}: INT32 products of INT8 residues would overflow")
    return torch.matmul(residues_a.double(), residues_b.double()).to(torch.int32)


def _inverse_table(mods: tuple[int, ...]) -> list[list[int]]:
    """inverse[i][j] = m_i^-1 mod m_j for i < j (Garner's constants)."""
    return [[pow(mods[i], -1, mods[j]) if i < j else 0 for j in range(len(mods))] for i in range(len(mods))]


def garner_digits(products: torch.Tensor, count: int) -> torch.Tensor:
    """int64 (count, …): the balanced mixed-radix digits d_l of the C' with C' ≡ products[l] (mod m_l),
    C' = d_0 + m_0·(d_1 + m_1·(d_2 + …)), |d_l| ≤ m_l/2 (Garner's algorithm in exact integer arithmetic)."""
    mods = moduli(count)
    inverse = _inverse_table(mods)
    values = products.to(torch.int64)
    digits = []
    for j, m_j in enumerate(mods):
        t = torch.remainder(values[j], m_j)
        for i in range(j):
            t = torch.remainder((t - digits[i]) * inverse[i][j], m_j)
        digits.append(balanced(t, m_j))
    return torch.stack(digits)


def horner(digits: torch.Tensor, count: int) -> torch.Tensor:
    """float64: Σ_l d_l·∏_{i<l} m_i by Horner's rule from the top digit, v ← v·m_l + d_l, each op rounded once."""
    mods = moduli(count)
    value = digits[count - 1].double()
    for j in range(count - 2, -1, -1):
        value = value * float(mods[j])
        value = value + digits[j].double()
    return value


def exact_value(digits: torch.Tensor, count: int) -> torch.Tensor:
    """int64: C' = Σ_l d_l·∏_{i<l} m_i exactly, for count ≤ MAX_WRAPPED_MODULI (|C'| < P/2 < 2^63; Horner's rule
    in integers, every partial value a smaller balanced mixed-radix number)."""
    if count > MAX_WRAPPED_MODULI:
        raise ValueError(f"count={count}: C' is exact in int64 for at most {MAX_WRAPPED_MODULI} moduli")
    mods = moduli(count)
    value = digits[count - 1].to(torch.int64)
    for j in range(count - 2, -1, -1):
        value = value * mods[j] + digits[j]
    return value


def recombine(products: torch.Tensor, shifts_a: torch.Tensor, shifts_b: torch.Tensor, count: int) -> torch.Tensor:
    """float32 (…, M, N): C = C'·2^-(s_i + s_j) from the per-modulus products (count, …, M, N), rounded once
    (FP64 → FP32, nearest even); the power-of-two scale is exact in FP64 for every FP32 input. C' in FP64: exact
    in integers and rounded once up to 8 moduli, Horner's rule in FP64 above (the module docstring). NaN where a
    row's or column's shift is NON_FINITE_SHIFT."""
    digits = garner_digits(products, count)
    value = exact_value(digits, count).double() if count <= MAX_WRAPPED_MODULI else horner(digits, count)
    marked = (shifts_a == NON_FINITE_SHIFT).unsqueeze(-1) | (shifts_b == NON_FINITE_SHIFT).unsqueeze(-2)
    scale = -(shifts_a.to(torch.float64).unsqueeze(-1) + shifts_b.to(torch.float64).unsqueeze(-2))
    result = torch.ldexp(value, torch.where(marked, 0.0, scale)).to(torch.float32)
    return torch.where(marked, torch.tensor(float("nan"), dtype=torch.float32), result)


def ozaki_matmul(a: torch.Tensor, b: torch.Tensor, moduli_count: int = 8) -> torch.Tensor:
    """(…, M, K) @ (…, K, N) float32 by Ozaki scheme II with `moduli_count` INT8 moduli; float32 (…, M, N).

    The definition of `cutlass_ext.ozaki.gemm`: K < 2^17, batch dimensions broadcast; a row of a or column of b
    holding Inf or NaN gives NaN in its row or column of the result (the module's docstring)."""
    _check_float32("a", a)
    _check_float32("b", b)
    check_moduli_count(moduli_count)
    if a.dim() < 2 or b.dim() < 2:
        raise ValueError(f"a and b must have at least 2 dimensions; got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"a (…, M, K) and b (…, K, N) must agree on K; got a {tuple(a.shape)}, b {tuple(b.shape)}")
    try:
        batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"a's batch dimensions {tuple(a.shape[:-2])} and b's {tuple(b.shape[:-2])} do not broadcast"
        ) from None
    a = a.expand(*batch, *a.shape[-2:])
    b_columns = b.expand(*batch, *b.shape[-2:]).mT
    shifts_a = row_shifts(a, moduli_count)
    shifts_b = row_shifts(b_columns, moduli_count)
    planes_a = residues(a, shifts_a, moduli_count)
    planes_b = residues(b_columns, shifts_b, moduli_count).mT
    products = residue_products(planes_a, planes_b)
    return recombine(products, shifts_a, shifts_b, moduli_count)
