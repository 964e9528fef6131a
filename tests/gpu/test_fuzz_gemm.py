"""Property tests of `ext.gemm` against an FP64 reference: random shapes (0, 1, primes, tile edges, one dimension
past 65535), strides (transposed, sliced, stepped, stride-0 batches), batch broadcasting and value ranges
(subnormals, tiny and huge exponents, wide rows, NaN and ±Inf).

Every mode is held to a componentwise worst-case bound, |C − A·B| ≤ E, from seed 000's error analysis:
  representation  an operand x is held as hi + lo with |x − hi − lo| ≤ 2^-22·|x| (tf32tf32: RNA to 11 bits twice,
                  section 3.3; halfhalf: FP16 RN twice, lo scaled by 2^11, eqs. 19-22, after a per-row power-of-two
                  scaling that puts the row's largest magnitude in [2^14, 2^15), so an element also carries
                  FP16's subnormal quantum of lo, 2^-35 of the scaled unit, i.e. ≤ 2^-50·max|row|); the dropped
                  lo·lo term is another 2^-22·|a||b|;
  accumulation    hi·hi products are exact in FP32; each add is truncated (RZ, inside the Tensor Core, 25-bit
                  alignment: eq. 11) or rounded (RN, outside), relative error ≤ u = 2^-22 per add, over chains of
                  at most K + 2 adds in any order or split: γ(n) = n·u / (1 − n·u) (Higham's γ_n) times |A||B|;
  underflow       q·(Σ|a_i·| + Σ|b_·j|) + (3K + 2)·2^-149: half the subnormal quantum q of the format an operand
                  part is rounded to (TF32: 2^-137, FP32's 2^-150 otherwise, taken as 2^-146) and FP32's in each
                  product and sum.
tf32 rounds each operand once to 11 bits (2^-11 each), markidis keeps all four products inside with RZ (its
operands must fit FP16: the docstring's baseline), fp32 is cuBLAS SGEMM (u = 2^-24). Such a bound cannot fail from
rounding, yet catches a wrong tile edge, a dropped k-block or a stray stride, and a missing correction (2^-11) at
small K; from K ~ 128 the worst-case γ term outgrows an uncorrected product's typical error, and the relres tests
(test_gemm.py, test_gemm_corrected.py) are what catch it there.

The corrected kernels also match their `numerics.emulated_gemm` model closely on small shapes (the sm80 kernels'
accumulation order: tf32tf32 chains its three products per MMA step, halfhalf folds them per step).

NaN and Inf (the docstring): an output is non-finite exactly where SGEMM's is, NaN wherever SGEMM's is NaN; where
SGEMM gives ±Inf, tf32 and fp32 give the same Inf, the split modes the same Inf or NaN.

The gradients (dA = dC·Bᵀ, dB = Aᵀ·dC in the same mode) are held to the bounds of those products, and the
epilogue (alpha·A·B + beta·C + bias, out=, torch.matmul's 1-D and broadcast shapes) to |alpha| times the product's
bound plus the FP32 rounding of its terms. The CPU tests (tests/test_fuzz_numerics.py) check that every mode's
emulated arithmetic stays inside `error_bound` and that an uncorrected product does not.
"""

import math

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

import cutlass_ext as ext
from cutlass_ext import numerics

from .fuzz_inputs import LAYOUTS, SPECIALS, stored, values, with_specials

SPLIT_MODES = ("tf32tf32", "halfhalf")
# value ranges of A and of B (fuzz_inputs.values): exponent ranges are numerics.exp_rand's (seed eq. 25)
DISTRIBUTIONS = {
    "urand": ("urand", "urand"),
    "type1": ((-15, 14), (-15, 14)),
    "wide rows": ((-50, 50), (-50, 50)),
    "huge": ((50, 60), (-20, 0)),
    "tiny": ((-126, -100), (-20, 0)),
    "subnormal": ("subnormal", (-10, 10)),
}
# markidis splits unscaled into FP16: only operands inside FP16's range
MODE_DISTRIBUTIONS = {mode: list(DISTRIBUTIONS) for mode in ("tf32tf32", "halfhalf", "tf32", "fp32")}
MODE_DISTRIBUTIONS["markidis"] = ["urand", "type1"]
# sizes where tiles and instructions have edges, primes, 0 and 1
SIZES = st.one_of(st.sampled_from([0, 1, 2, 3, 7, 8, 13, 31, 32, 61, 127, 128, 129, 257]), st.integers(1, 300))


def _gamma(n: int, unit: float) -> float:
    return n * unit / (1 - n * unit)


def error_bound(mode: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """E of the module docstring for finite a (…, M, K) and b (…, K, N): FP64, shaped like the product."""
    k = a.shape[-1]
    a64, b64 = a.double().abs(), b.double().abs()
    magnitude = a64 @ b64
    if mode == "fp32":
        relative = _gamma(k + 2, 2.0**-24)
    elif mode == "tf32":
        relative = 2 * 2.0**-11 + 2.0**-22 + _gamma(k + 2, 2.0**-22)
    elif mode == "markidis":
        relative = 3 * 2.0**-22 + _gamma(4 * k + 4, 2.0**-22)
    else:
        relative = 4 * 2.0**-22 + _gamma(k + 2, 2.0**-22)
    row_sums, column_sums = a64.sum(-1, keepdim=True), b64.sum(-2, keepdim=True)
    quantum = 2.0**-137 if mode in ("tf32tf32", "tf32") else 2.0**-146
    bound = relative * magnitude + quantum * (row_sums + column_sums) + (3 * k + 2) * 2.0**-149
    if mode == "halfhalf" and k:  # FP16's subnormal quantum of lo at the row's (column's) scale
        row_max, column_max = a64.amax(-1, keepdim=True), b64.amax(-2, keepdim=True)
        bound = bound + 2.0**-49 * (row_max * column_sums + column_max * row_sums)
    if mode == "markidis":  # the same quantum, unscaled
        bound = bound + 2.0**-24 * (row_sums + column_sums)
    return bound


def _operands(data, m, n, k, distribution, generator):
    batch = data.draw(st.sampled_from(["none", "a", "b", "both", "stride 0"]), label="batch")
    count = data.draw(st.integers(1, 4), label="batch size")
    a_shape = (count, m, k) if batch in ("a", "both") else (m, k)
    b_shape = (count, k, n) if batch in ("b", "both") else (k, n)
    kind_a, kind_b = DISTRIBUTIONS[distribution]
    a, b = values(kind_a, a_shape, generator), values(kind_b, b_shape, generator)
    if batch == "stride 0":  # one matrix of each expanded to a batch: batch stride 0
        a = a.expand(count, m, k)
        b = b.expand(count, k, n)
    a = stored(a, data.draw(st.sampled_from(LAYOUTS), label="layout of a"))
    b = stored(b, data.draw(st.sampled_from(LAYOUTS), label="layout of b"))
    return a, b


def _check_within_bound(mode, a, b, c, note=""):
    reference = a.double() @ b.double()
    assert c.shape == reference.shape and c.dtype == torch.float32
    excess = (c.double() - reference).abs() - error_bound(mode, a, b)
    if not excess.numel() or excess.max() <= 0:
        return
    worst = excess.argmax().item()
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), excess.shape))
    raise AssertionError(
        f"{mode}: |C - A·B| exceeds the bound at {int((excess > 0).sum())} of {excess.numel()} outputs "
        f"({int((~torch.isfinite(c)).sum())} non-finite), most at {index}: C={c[index].item()!r}, "
        f"A·B={reference[index].item()!r}, excess {excess[index].item():.3g}; relres "
        f"{numerics.relative_residual(c, reference):.3g}{note}"
    )


@given(
    data=st.data(),
    mode=st.sampled_from(ext.MODES),
    m=SIZES,
    n=SIZES,
    k=SIZES,
    seed=st.integers(0, 2**31 - 1),
)
@example(data=None, mode="tf32tf32", m=129, n=67, k=35, seed=1).via("tile edges in every dimension")
def test_gemm_is_within_its_modes_bound(data, mode, m, n, k, seed):
    if data is None:  # the explicit example: contiguous urand operands
        generator = torch.Generator(device="cuda").manual_seed(seed)
        a, b = values("urand", (m, k), generator), values("urand", (k, n), generator)
    else:
        distribution = data.draw(st.sampled_from(MODE_DISTRIBUTIONS[mode]), label="distribution")
        generator = torch.Generator(device="cuda").manual_seed(seed)
        a, b = _operands(data, m, n, k, distribution, generator)
    _check_within_bound(mode, a, b, ext.gemm(a, b, mode=mode))


def _check_long_product(mode, batch, m, n, k):
    generator = torch.Generator(device="cuda").manual_seed(m + n + k)
    prefix = () if batch is None else (batch,)
    a = values("urand", (*prefix, m, k), generator)
    b = values("urand", (*prefix, k, n), generator)
    c = ext.gemm(a, b, mode=mode)
    again = ext.gemm(a, b, mode=mode)  # a second run that differs points at a race or at reads of stale memory
    _check_within_bound(mode, a, b, c, note=f"; a second run {'equals' if torch.equal(c, again) else 'differs'}")


@pytest.mark.parametrize("m, n, k", [(70001, 3, 5), (2, 65537, 3), (3, 2, 70003), (1, 1, 131072)])
@pytest.mark.parametrize("mode", ext.MODES)
def test_one_dimension_past_65535(mode, m, n, k):
    """Grid dimensions y and z stop at 65535: a long M, N or K at small others."""
    _check_long_product(mode, None, m, n, k)


@pytest.mark.parametrize("mode", ext.MODES)
def test_a_batch_past_65535(mode):
    """The sm80 kernels put the batch on grid z (at most 65535): the binding launches a longer batch in parts."""
    _check_long_product(mode, 65537, 1, 2, 3)


def _scaled(x: torch.Tensor, dim: int):
    """x·2^s with the largest magnitude of each row (dim -1) or column (dim -2) in [2^14, 2^15) (halfhalf's
    scaling, seed 4.1.1), and s."""
    _, exponent = torch.frexp(x.abs().amax(dim=dim, keepdim=True))
    shift = (15 - exponent).clamp(-126, 126)
    return x * torch.ldexp(torch.ones_like(x), shift), shift


def emulated(mode: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The sm80 kernel's arithmetic as numerics.emulated_gemm models it (halfhalf on the scaled operands)."""
    if mode == "tf32tf32":
        return numerics.emulated_gemm(a, b, "tf32tf32", accumulate="rz", fold="block", mma_k=8, block_k=8)
    a_scaled, row_shift = _scaled(a, -1)
    b_scaled, column_shift = _scaled(b, -2)
    c = numerics.emulated_gemm(a_scaled, b_scaled, "halfhalf", accumulate="rz", fold="step", mma_k=16)
    return (c.double() * torch.ldexp(torch.ones_like(c.double()), -(row_shift + column_shift))).float()


@given(
    mode=st.sampled_from(SPLIT_MODES),
    m=st.integers(1, 64),
    n=st.integers(1, 64),
    k=st.integers(1, 200),
    distribution=st.sampled_from(["urand", "type1"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_corrected_kernels_match_their_emulation(mode, m, n, k, distribution, seed):
    """Small problems run one sm80 tile per output block, unsplit: the kernel's rounding is the model's, up to the
    Tensor Core's alignment inside one MMA step (the model truncates a running sum instead)."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    kind_a, kind_b = DISTRIBUTIONS[distribution]
    a, b = values(kind_a, (m, k), generator), values(kind_b, (k, n), generator)
    model = emulated(mode, a, b)
    ours = ext.gemm(a, b, mode=mode)
    reference = a.double() @ b.double()
    # the model's own error and the kernel's are each of order sqrt(K)·2^-24 of |A||B|: within a few of them
    scale = (a.double().abs() @ b.double().abs()).norm().item()
    allowed = 8 * math.sqrt(k + 8) * 2.0**-24 * scale
    assert (ours.double() - model.double()).norm().item() <= allowed
    assert (ours.double() - reference).norm().item() <= 2 * (model.double() - reference).norm().item() + allowed


@given(
    mode=st.sampled_from(ext.MODES),
    m=st.integers(1, 40),
    n=st.integers(1, 40),
    k=st.integers(1, 90),
    specials=st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 10**6), SPECIALS), min_size=1, max_size=4),
    seed=st.integers(0, 2**31 - 1),
)
def test_nan_and_inf_behave_as_documented(mode, m, n, k, specials, seed):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    a, b = values("urand", (m, k), generator), values("urand", (k, n), generator)
    a = with_specials(a, [(position, value) for operand, position, value in specials if operand == "a"])
    b = with_specials(b, [(position, value) for operand, position, value in specials if operand == "b"])
    ours = ext.gemm(a, b, mode=mode)
    sgemm = a.double() @ b.double()  # finite values are small: FP64's non-finite outputs are SGEMM's
    assert torch.equal(torch.isfinite(ours), torch.isfinite(sgemm))
    assert ours[sgemm.isnan()].isnan().all()
    infinite = sgemm.isinf()
    if mode in ("tf32", "fp32"):
        assert torch.equal(ours[infinite].double(), sgemm[infinite])
    else:
        kept = ours[infinite]
        assert (kept.isnan() | (kept.double() == sgemm[infinite])).all()
    finite = torch.isfinite(sgemm)
    clean = torch.where(finite, sgemm, 0.0)
    bound = error_bound(mode, torch.nan_to_num(a, 0, 0, 0), torch.nan_to_num(b, 0, 0, 0))
    assert ((ours.double() - clean).abs()[finite] <= bound[finite]).all()


@given(
    mode=st.sampled_from(ext.MODES),
    m=st.integers(1, 70),
    n=st.integers(1, 70),
    k=st.integers(1, 70),
    batch=st.sampled_from(["none", "a", "b", "both"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_gradients_are_within_their_products_bounds(mode, m, n, k, batch, seed):
    """dA = dC·Bᵀ and dB = Aᵀ·dC in the same mode (the docstring), a shared operand's gradient summed over the
    batch: each within the bound of the product that computes it (a batch sum folded into K)."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    count = 3
    a = values("urand", (count, m, k) if batch in ("a", "both") else (m, k), generator).requires_grad_()
    b = values("urand", (count, k, n) if batch in ("b", "both") else (k, n), generator).requires_grad_()
    c = ext.gemm(a, b, mode=mode)
    grad = values("urand", c.shape, generator)
    c.backward(grad)
    g, a0, b0 = grad.detach(), a.detach(), b.detach()
    if batch == "b":  # a shared by every batch: dA = Σ_batch dC·Bᵀ, one product over (batch·N)
        folded_a = (g.transpose(0, 1).reshape(m, -1), b0.mT.reshape(-1, k))
    else:
        folded_a = (g, b0.mT)
    if batch == "a":
        folded_b = (a0.reshape(-1, k).mT, g.reshape(-1, n))
    else:
        folded_b = (a0.mT, g)
    _check_within_bound(mode, *folded_a, a.grad)
    _check_within_bound(mode, *folded_b, b.grad)


# batch shapes of A and B that broadcast as torch.matmul's, and the 1-D cases (a row A, a column B)
MATMUL_BATCHES = [((), ()), ((3,), ()), ((), (2,)), ((2, 1), (3,)), ((1, 3), (2, 1)), ("row", ()), ((), "column")]


@given(
    mode=st.sampled_from(ext.MODES),
    batches=st.sampled_from(MATMUL_BATCHES),
    m=st.integers(1, 50),
    n=st.integers(1, 50),
    k=st.integers(0, 80),
    alpha=st.sampled_from([1.0, 0.0, -0.5, 3.0]),
    beta=st.sampled_from([0.0, 1.0, -2.0]),
    bias=st.booleans(),
    c_shape=st.sampled_from(["none", "full", "row", "column", "scalar"]),
    out=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_epilogue_and_matmul_shapes_within_bound(mode, batches, m, n, k, alpha, beta, bias, c_shape, out, seed):
    """D = alpha·A·B + beta·C + bias with torch.matmul's shapes (the docstring): the product's bound times |alpha|
    plus FP32 rounding of the epilogue's terms; beta = 0 ignores C even where it is NaN, as BLAS does; beta ≠ 0
    without a C is a ValueError."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    batch_a, batch_b = batches
    a = values("urand", (k,) if batch_a == "row" else (*batch_a, m, k), generator)
    b = values("urand", (k,) if batch_b == "column" else (*batch_b, k, n), generator)
    expected_shape = torch.matmul(a.double(), b.double()).shape
    bias_tensor = values("urand", (n,), generator) if bias and b.dim() > 1 else None
    c = None
    if c_shape in ("row", "column") and not expected_shape:
        c_shape = "scalar"  # a scalar result: C is one value
    if c_shape != "none":
        shape = {
            "full": expected_shape,
            "row": expected_shape[-1:],
            "column": (*expected_shape[:-1], 1)[-2:],
            "scalar": (),
        }[c_shape]
        c = values("urand", shape, generator) if beta != 0 else torch.full(shape, math.nan, device="cuda")
    out_tensor = torch.full(expected_shape, math.nan, device="cuda") if out else None
    if beta != 0 and c is None:  # the docstring's beta scales c: without one, the call is refused
        with pytest.raises(ValueError, match="beta=.* scales c, but no c was given"):
            ext.gemm(a, b, mode, bias=bias_tensor, alpha=alpha, beta=beta, out=out_tensor)
        return
    result = ext.gemm(a, b, mode, bias=bias_tensor, alpha=alpha, beta=beta, c=c, out=out_tensor)
    assert result.shape == expected_shape and result.dtype == torch.float32
    if out:
        assert result.data_ptr() == out_tensor.data_ptr()
    product = torch.matmul(a.double(), b.double())
    reference = alpha * product
    terms = abs(alpha) * torch.matmul(a.double().abs(), b.double().abs())
    if beta != 0 and c is not None:
        reference = reference + beta * c.double()
        terms = terms + abs(beta) * c.double().abs()
    if bias_tensor is not None:
        reference = reference + bias_tensor.double()
        terms = terms + bias_tensor.double().abs()
    a_matrix = a.unsqueeze(0) if a.dim() == 1 else a
    b_matrix = b.unsqueeze(-1) if b.dim() == 1 else b
    bound = abs(alpha) * error_bound(mode, a_matrix, b_matrix).reshape(expected_shape) + 4 * 2.0**-24 * terms
    assert torch.isfinite(result).all(), "beta = 0 must ignore c's NaN, and out's NaN must be overwritten"
    excess = (result.double() - reference).abs() - bound
    assert not excess.numel() or excess.max() <= 0, f"exceeds the bound by {excess.max().item():.3g}"
