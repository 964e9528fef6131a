"""The pure-torch STE references of the low-bit-accumulator GEMM (seed 002 section 4, appendix D)."""

import pytest
import torch

from cutlass_ext.lowbit.format import LowbitFormat
from cutlass_ext.lowbit.reference import fmaq, lowbit_matmul_fmt, quantize
from cutlass_ext.lowbit.ste import STES, grad_reference

MASKED = [ste for ste in STES if ste != "identity"]
# E = 3, b = 4: R_OF = 2^3·(2 − 2^−5) = 15.75 for both the product and the accumulator.
SMALL = LowbitFormat.make(5, 3, acc_bias=4, prod_bias=4, chunk=2, underflow=False)


def _inputs(m, k, n, seed, spread=6):
    generator = torch.Generator().manual_seed(seed)

    def scale(shape):
        return 2.0 ** torch.randint(-spread, spread, shape, generator=generator)

    a = torch.randn(m, k, generator=generator) * scale((m, k))
    b = torch.randn(k, n, generator=generator) * scale((k, n))
    g = torch.randn(m, n, generator=generator)
    return a, b, g


def _mask_from_grad(a, fmt, ste):
    """The mask of one output row (M = N = 1) read off grad_a with b = 1, grad_out = 1."""
    b = torch.ones(a.shape[1], 1)
    grad_a, _ = grad_reference(a, b, torch.ones(1, 1), fmt, ste)
    return (grad_a[0] != 0).tolist()


def test_identity_is_the_plain_gradient():
    a, b, g = _inputs(5, 9, 4, 0)
    grad_a, grad_b = grad_reference(a, b, g, SMALL, "identity")
    assert torch.equal(grad_a, g @ b.T)
    assert torch.equal(grad_b, a.T @ g)


def test_overflow_inside_a_chunk_cuts_the_earlier_steps_for_the_recursive_ste():
    # chunk 4: 10, 20 (overflows, saturates to 15.75), 5.75, 6.75; the second-level add of 6.75 passes
    fmt = LowbitFormat.make(5, 3, acc_bias=4, prod_bias=4, chunk=4, underflow=False)
    a = torch.tensor([[10.0, 10.0, -10.0, 1.0]])
    assert _mask_from_grad(a, fmt, "immediate-of") == [True, False, True, True]
    assert _mask_from_grad(a, fmt, "recursive-of") == [False, False, True, True]


def test_second_level_overflow_cuts_the_chunks_before_it():
    # chunk 2: S_0 saturates at R_OF, so T + S_0 = R_OF fails |·| < R_OF; S_1 = −2 brings T back in range
    a = torch.tensor([[10.0, 10.0, -1.0, -1.0]])
    assert _mask_from_grad(a, SMALL, "immediate-of") == [True, False, True, True]
    assert _mask_from_grad(a, SMALL, "recursive-of") == [False, False, True, True]


def test_diff_ste_cuts_swamped_and_flushed_products():
    # M2: 8 + 0.5 truncates to 8 (full swamping); 2^-6 is flushed by R_UF = 2^-4; 1 and 2 change the sum
    fmt = LowbitFormat.make(2, 3, acc_bias=4, prod_bias=4, chunk=8, underflow=True)
    a = torch.tensor([[8.0, 0.5, 2.0**-6, 1.0, 2.0]])
    assert _mask_from_grad(a, fmt, "immediate-diff") == [True, False, False, False, True]
    # 8 + 1 = 9 = 1.001b·2^3 truncates to 8 with two mantissa bits: swamped too; 8 + 2 = 10 = 1.01b·2^3 is kept


def _naive_masks(a, b, fmt, ste, eps1=1e-12, eps2=1e-3):
    """Masks from the seed's recursive definition, one output at a time with `reference.fmaq` (eqs. 10-11, 17)."""
    m, k_total = a.shape
    n = b.shape[1]
    masks = torch.zeros(m, n, k_total, dtype=torch.bool)

    def scalar(v):
        return torch.tensor(v, dtype=torch.float32)

    for i in range(m):
        for j in range(n):
            bits, chunk_bits, chunk_of = [], [], []
            total, s = scalar(0.0), scalar(0.0)
            for k in range(k_total):
                if k % fmt.chunk == 0:
                    s = scalar(0.0)
                x, w = a[i, k], b[k, j]
                u = quantize(x * w, fmt.prod_man, fmt.prod_exp, fmt.prod_bias, fmt.underflow) + s
                z = fmaq(x, w, s, fmt)
                diff = (z - s).abs() > scalar(eps2) * ((x * w).abs() + scalar(eps1))
                bits.append(bool(diff) if ste == "immediate-diff" else bool(u.abs() < fmt.acc_overflow))
                chunk_of.append(k // fmt.chunk)
                s = z
                if k % fmt.chunk == fmt.chunk - 1 or k == k_total - 1:
                    chunk_bits.append(bool((total + s).abs() < fmt.acc_overflow))
                    total = quantize(total + s, fmt.man, fmt.exp, fmt.acc_bias, fmt.underflow)
            for k in range(k_total):
                if ste != "recursive-of":
                    masks[i, j, k] = bits[k]
                    continue
                same_chunk = [t for t in range(k, k_total) if chunk_of[t] == chunk_of[k]]
                masks[i, j, k] = all(bits[t] for t in same_chunk) and all(chunk_bits[chunk_of[k] :])
    return masks


@pytest.mark.parametrize("ste", MASKED)
@pytest.mark.parametrize(
    "shape, fmt",
    [
        ((3, 11, 2), LowbitFormat.make(3, 3, acc_bias=1, prod_bias=1, chunk=4)),
        ((2, 9, 3), LowbitFormat.make(4, 3, acc_bias=2, prod_bias=2, chunk=3, underflow=False)),
        ((2, 13, 2), LowbitFormat.make(5, 4, acc_bias=5, prod_bias=6, chunk=5)),
    ],
)
def test_gradients_apply_the_masks_of_the_recursive_definition(ste, shape, fmt):
    m, k, n = shape
    a, b, g = _inputs(m, k, n, seed=m + 7 * k + 31 * n, spread=3)
    scale = fmt.acc_overflow**0.5 / 2  # products around R_OF / 4: some chunk sums overflow, small products swamp
    a, b = a.abs() * scale, b * scale
    masks = _naive_masks(a, b, fmt, ste)
    assert 0 < masks.sum() < masks.numel()  # the inputs reach the format's events
    grad_a, grad_b = grad_reference(a, b, g, fmt, ste)
    # the masked sums in float64 carry no rounding to speak of at these sizes: agreement to FP32's precision
    expected_a = torch.einsum("ijk,ij,kj->ik", masks.double(), g.double(), b.double())
    expected_b = torch.einsum("ijk,ij,ik->kj", masks.double(), g.double(), a.double())
    torch.testing.assert_close(grad_a.double(), expected_a, rtol=1e-5, atol=1e-6 * expected_a.abs().max())
    torch.testing.assert_close(grad_b.double(), expected_b, rtol=1e-5, atol=1e-6 * expected_b.abs().max())


def test_without_events_every_masked_ste_is_the_plain_gradient_summed_in_order():
    # a wide accumulator (M23 E8, no underflow) never overflows; OF masks are all ones
    fmt = LowbitFormat.make(23, 8, acc_bias=128, prod_bias=128, chunk=4, underflow=False)
    a, b, g = _inputs(4, 10, 3, seed=3, spread=2)
    recursive = grad_reference(a, b, g, fmt, "recursive-of")
    immediate = grad_reference(a, b, g, fmt, "immediate-of")
    assert all(torch.equal(x, y) for x, y in zip(recursive, immediate))
    sequential = torch.zeros(4, 10)
    for j in range(3):
        sequential = sequential + g[:, j : j + 1] * b[:, j].unsqueeze(0)
    assert torch.equal(recursive[0], sequential)


def test_batched_inputs_match_each_problem():
    fmt = LowbitFormat.make(4, 3, chunk=3)
    a, b, g = (torch.stack(t) for t in zip(*(_inputs(3, 7, 2, seed) for seed in (1, 2))))
    grad_a, grad_b = grad_reference(a, b, g, fmt, "recursive-of")
    for i in range(2):
        single = grad_reference(a[i], b[i], g[i], fmt, "recursive-of")
        assert torch.equal(grad_a[i], single[0]) and torch.equal(grad_b[i], single[1])


def test_empty_k_gives_zero_gradients():
    fmt = LowbitFormat.make(7, 4)
    grad_a, grad_b = grad_reference(torch.zeros(3, 0), torch.zeros(0, 2), torch.ones(3, 2), fmt, "immediate-of")
    assert grad_a.shape == (3, 0) and grad_b.shape == (0, 2)


def test_the_reference_forward_is_the_chain_the_masks_follow():
    fmt = LowbitFormat.make(3, 3, acc_bias=1, prod_bias=2, chunk=4)
    a, b, _ = _inputs(2, 9, 2, seed=11)
    out = lowbit_matmul_fmt(a, b, fmt)
    for i in range(2):
        for j in range(2):
            total = torch.tensor(0.0)
            for c in range(0, 9, 4):
                s = torch.tensor(0.0)
                for k in range(c, min(9, c + 4)):
                    s = fmaq(a[i, k], b[k, j], s, fmt)
                total = quantize(total + s, fmt.man, fmt.exp, fmt.acc_bias, fmt.underflow)
            assert torch.equal(out[i, j], total)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"ste": "straight"}, ValueError, "ste="),
        ({"fmt": "M7E4"}, TypeError, "fmt must be"),
        ({"a": torch.zeros(2, 3, dtype=torch.float64)}, TypeError, "a must be"),
        ({"b": torch.zeros(4, 2)}, ValueError, "must agree"),
        ({"grad_out": torch.zeros(2, 3)}, ValueError, "grad_out must be"),
        ({"a": torch.zeros(3)}, ValueError, "a must have"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, error, match):
    arguments = {"a": torch.zeros(2, 3), "b": torch.zeros(3, 2), "grad_out": torch.zeros(2, 2)}
    arguments |= {"fmt": SMALL, "ste": "recursive-of"}
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        grad_reference(**arguments)
