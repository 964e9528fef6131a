"""cutlass_ext.ozaki.reference (Ozaki scheme II) on CPU: moduli and bounds, exact residues and CRT, accuracy
against FP64 on the seed's matrix types, argument errors."""

import math
import zlib

import pytest
import torch

from cutlass_ext.numerics import exp_rand, relative_residual
from cutlass_ext.ozaki import reference as ref


def urand(shape, generator):
    return torch.rand(shape, generator=generator) * 2 - 1


@pytest.fixture
def generator(request):
    """Inputs of their own for each test, the same on every run (a failure replays)."""
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.mark.parametrize("count", range(ref.MIN_MODULI, ref.MAX_MODULI + 1))
def test_moduli_are_pairwise_coprime_and_fit_int8(count):
    mods = ref.moduli(count)
    assert len(mods) == count and max(mods) <= 256
    assert all(math.gcd(a, b) == 1 for i, a in enumerate(mods) for b in mods[i + 1 :])


@pytest.mark.parametrize("count", range(ref.MIN_MODULI, ref.MAX_MODULI + 1))
def test_shift_budget_is_the_largest_safe_one(count):
    t, half = ref.shift_budget(count), ref.moduli_product(count) // 2
    margin = 2**ref.CRT_MARGIN_BITS

    def bound(bits):  # the largest |C'| of scaled rows and columns, times 2^12
        return (2**bits + 2 ** (bits - ref.SHIFT_GUARD_BITS) + 182) ** 2 * margin

    assert bound(t) <= half * (margin - 1) < bound(t + 1)


@pytest.mark.parametrize("count", [3, 8, 14])
def test_row_shifts_bound_the_scaled_norm(count, generator):
    x = exp_rand((17, 300), -60, 60, generator)
    x[3] = 0.0
    shifts = ref.row_shifts(x, count)
    t = ref.shift_budget(count)
    assert shifts[3] == t
    scaled = ref.scaled_integers(x, shifts).double()
    norms = scaled.square().sum(-1).sqrt()
    allowance = math.sqrt(x.shape[-1]) / 2
    assert torch.all(norms <= 2**t + allowance)
    assert torch.all(norms[norms > 0] > 2 ** (t - 1) - allowance)  # at most one bit of headroom is left unused


def test_sum_of_squares_runs_in_the_kernels_order(generator):
    """Each k-slice of 1024 summed in k order, then the slices in order (not torch.sum's pairwise tree)."""
    x = torch.randn(3, 2500, generator=generator) * torch.exp2(torch.randint(-20, 20, (3, 2500), generator=generator))
    for row, got in zip(x.double().tolist(), ref._sum_of_squares(x).tolist()):
        total = 0.0
        for start in range(0, len(row), ref.NORM_SLICE_K):
            part = 0.0
            for value in row[start : start + ref.NORM_SLICE_K]:
                part += value * value
            total += part
        assert got == total


@pytest.mark.parametrize("count", [3, 7, 8, 11])
def test_residues_are_balanced_and_congruent(count, generator):
    x = exp_rand((9, 70), -30, 30, generator)
    shifts = ref.row_shifts(x, count)
    integers = ref.scaled_integers(x, shifts)
    planes = ref.residues(x, shifts, count)
    assert planes.dtype == torch.int8 and planes.shape == (count, 9, 70)
    for plane, m in zip(planes, ref.moduli(count)):
        low, high = -(m // 2), (m + 1) // 2 - 1
        assert plane.min() >= low and plane.max() <= high
        assert torch.equal(torch.remainder(integers - plane.long(), m), torch.zeros_like(integers))


@pytest.mark.parametrize("count", [3, 5, 8])
def test_crt_recovers_every_integer_in_range(count, generator):
    """Random C' over the whole balanced range (and its ends), its residues given as arbitrary int32
    representatives: Garner's digits rebuild C' exactly and Horner's FP64 value is within n ulps."""
    mods, product = ref.moduli(count), ref.moduli_product(count)
    half = product // 2
    values = [-half, half - 1, 0, 1, -1] + [int(v) for v in torch.randint(-(2**62), 2**62, (200,), generator=generator)]
    values = [v % product - half if not -half <= v < half else v for v in values]
    representatives = [
        [
            (v % m) + m * int(torch.randint(-(2**31) // m + 1, (2**31 - 1) // m - 1, (), generator=generator))
            for m in mods
        ]
        for v in values
    ]
    products = torch.tensor(representatives, dtype=torch.int64).T.to(torch.int32)
    digits = ref.garner_digits(products, count)
    rebuilt = [sum(int(digits[j, i]) * math.prod(mods[:j]) for j in range(count)) for i in range(len(values))]
    assert rebuilt == values
    horner = ref.horner(digits, count)
    for got, exact in zip(horner.tolist(), values):
        assert abs(got - exact) <= count * 2**-52 * abs(exact)


def test_small_integer_products_are_exact(generator):
    """Integer inputs need no rounding when scaled: the result is the exact product, rounded once to FP32."""
    a = torch.randint(-1000, 1000, (13, 257), generator=generator).float()
    b = torch.randint(-1000, 1000, (257, 11), generator=generator).float()
    exact = (a.double() @ b.double()).float()
    assert torch.equal(ref.ozaki_matmul(a, b, 8), exact)


def test_bound_is_safe_for_parallel_rows_at_the_largest_k():
    """All-ones rows and columns at K = 2^17 − 1: |C'| = ‖A'_i‖·‖B'_j‖, the Cauchy–Schwarz bound with equality."""
    k = ref.MAX_K
    a, b = torch.ones(1, k), torch.ones(k, 1)
    for count in (3, 8):
        assert ref.ozaki_matmul(a, b, count).item() == float(k)


def _pairs(kind, m, k, n, g):
    if kind == "urand":
        return urand((m, k), g), urand((k, n), g)
    ranges = {
        "type1": ((-15, 14), (-15, 14)),
        "type2": ((-15, 14), (-100, -35)),
        "type3": ((-35, -15), (-35, -15)),
        "type4": ((-100, -35), (-100, -35)),
    }[kind]
    return exp_rand((m, k), *ranges[0], g), exp_rand((k, n), *ranges[1], g)


@pytest.mark.parametrize("kind", ["urand", "type1", "type2", "type3", "type4"])
@pytest.mark.parametrize("k", [1, 77, 1024, 4096])
def test_eight_moduli_beat_fp32_accuracy(kind, k, generator):
    a, b = _pairs(kind, 24, k, 19, generator)
    exact = a.double() @ b.double()
    error = relative_residual(ref.ozaki_matmul(a, b, 8), exact)
    assert error <= 1e-7  # SGEMM: 1.6e-7 at K = 1024 (cuBLAS, anchors); FP32 rounding of the output alone ~3e-8


def test_error_falls_with_more_moduli(generator):
    a, b = _pairs("urand", 16, 2048, 16, generator)
    exact = a.double() @ b.double()
    errors = [relative_residual(ref.ozaki_matmul(a, b, c), exact) for c in (4, 5, 6, 7)]
    assert all(later < earlier / 10 for earlier, later in zip(errors, errors[1:]))


def test_batched_operands_broadcast(generator):
    a, b = urand((3, 1, 5, 40), generator), urand((4, 40, 6), generator)
    out = ref.ozaki_matmul(a, b, 8)
    assert out.shape == (3, 4, 5, 6)
    assert torch.equal(out[2, 1], ref.ozaki_matmul(a[2, 0], b[1], 8))


def test_transposed_views_give_the_same_bits(generator):
    a, b = urand((30, 50), generator), urand((50, 20), generator)
    assert torch.equal(ref.ozaki_matmul(a.T.contiguous().T, b.T.contiguous().T, 8), ref.ozaki_matmul(a, b, 8))


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_rows_and_columns_give_nan_and_leave_the_rest(bad, generator):
    a, b = urand((7, 40), generator), urand((40, 6), generator)
    clean = ref.ozaki_matmul(a, b, 8)
    a[2, 5], b[9, 4] = bad, bad
    out = ref.ozaki_matmul(a, b, 8)
    assert ref.row_shifts(a, 8)[2] == ref.NON_FINITE_SHIFT
    assert torch.all(ref.residues(a, ref.row_shifts(a, 8), 8)[:, 2] == 0)
    marked = torch.zeros(7, 6, dtype=torch.bool)
    marked[2, :], marked[:, 4] = True, True
    assert torch.all(out[marked].view(torch.int32) == 0x7FC00000)  # torch's NaN, whatever the input's sign
    assert torch.equal(out[~marked], clean[~marked])


def test_largest_finite_values_are_not_taken_for_non_finite(generator):
    a = torch.full((3, 2**17 - 1), torch.finfo(torch.float32).max)
    assert torch.all(ref.row_shifts(a, 8) != ref.NON_FINITE_SHIFT)


def _defined(a: torch.Tensor, b: torch.Tensor, count: int) -> torch.Tensor:
    """The docstring's definition with Python integers: C' = A'·B' exactly, one rounding to FP64, the scale, FP32."""
    shifts_a, shifts_b = ref.row_shifts(a, count), ref.row_shifts(b.mT, count)
    ia, ib = ref.scaled_integers(a, shifts_a).tolist(), ref.scaled_integers(b.mT, shifts_b).tolist()
    out = torch.empty(a.shape[0], b.shape[1], dtype=torch.float64)
    for i, row in enumerate(ia):
        for j, column in enumerate(ib):
            exact = sum(x * y for x, y in zip(row, column))
            out[i, j] = float(exact) * 2.0 ** -(int(shifts_a[i]) + int(shifts_b[j]))  # float(int): one rounding
    return out.float()


def test_up_to_eight_moduli_c_is_exact_and_rounded_once():
    """C' near 2^62 at an FP32 tie: Horner's rule in FP64 rounds twice there and lands an ulp off."""
    a = torch.tensor([[1.3623046875, 1.3623046875, 2.0**-26]])
    b = torch.tensor([[1.00421142578125], [1.00421142578125], [-3 * 2.0**-28]])
    out = ref.ozaki_matmul(a, b, 8)
    assert int(out.view(torch.int32)) == 0x402F1C00
    assert torch.equal(out.view(torch.int32), _defined(a, b, 8).view(torch.int32))


@pytest.mark.parametrize("count", [3, 5, 8])
def test_recombination_is_the_exact_product_rounded(count, generator):
    a, b = exp_rand((9, 33), -20, 20, generator), exp_rand((33, 7), -20, 20, generator)
    assert torch.equal(ref.ozaki_matmul(a, b, count).view(torch.int32), _defined(a, b, count).view(torch.int32))


def test_argument_errors():
    a, b = torch.ones(4, 8), torch.ones(8, 3)
    with pytest.raises(TypeError, match="a must be float32"):
        ref.ozaki_matmul(a.double(), b)
    with pytest.raises(TypeError, match="b must be a torch.Tensor"):
        ref.ozaki_matmul(a, [[1.0]])
    with pytest.raises(ValueError, match="moduli=2 must be an integer in 3..14"):
        ref.ozaki_matmul(a, b, 2)
    with pytest.raises(ValueError, match="moduli=True"):
        ref.ozaki_matmul(a, b, True)
    with pytest.raises(ValueError, match="must agree on K"):
        ref.ozaki_matmul(a, torch.ones(7, 3))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        ref.ozaki_matmul(torch.ones(8), b)
    with pytest.raises(ValueError, match="K=131072 exceeds 131071"):
        ref.residue_products(torch.zeros(3, 1, 2**17, dtype=torch.int8), torch.zeros(3, 2**17, 1, dtype=torch.int8))
