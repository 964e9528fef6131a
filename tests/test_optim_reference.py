"""The 16-bit optimizers' plain-PyTorch rules against the seed's Algorithms 2-5 written out element by element.

The naive versions below compute every operation in float64 and round it to FP32 (exact for +, -, ·, /, √: the
double rounding is innocuous at 53 bits), then to BF16 where the arithmetic says so, with their own Philox in
Python integers and their own bit-level roundings; the optimizers must agree with them bit for bit.
"""

import math
import struct

import numpy as np
import pytest
import torch

from cutlass_ext.optim import SGD, AdamW, reference
from cutlass_ext.optim.philox import philox4x32_10
from tests.gpu import test_optim_kernel as gpu_cases

MASK32 = 0xFFFFFFFF


def python_philox(counter, key):
    """Philox4x32-10 on Python integers (Salmon et al., SC'11)."""
    c, (k0, k1) = list(counter), key
    for round_index in range(10):
        if round_index:
            k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & MASK32, (p0 >> 32) ^ c[3] ^ k1, p0 & MASK32]
    return c


def bits_of(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def float_of(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits & MASK32))[0]


def f32(x: float) -> float:
    return float(np.float32(x))


def bf16(x: float) -> float:
    """FP32 value -> nearest BF16 (ties to even), as a float."""
    if not math.isfinite(x):
        return x
    bits = bits_of(x)
    return float_of(((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16)


def bf16_stochastic(x: float, random: int) -> float:
    return float_of(((bits_of(x) + (random & 0xFFFF)) >> 16) << 16)


class Naive:
    """Scalar arithmetic of one mode: FP32 round-to-nearest after each operation, then BF16 in bf16 arithmetic."""

    def __init__(self, arithmetic: str):
        self.q = bf16 if arithmetic == "bf16" else (lambda x: x)

    def const(self, value: float) -> float:
        return self.q(f32(value))

    def __call__(self, value: float) -> float:
        return self.q(f32(value))


def naive_random(seed, key, step, element):
    words = python_philox(
        [(element // 4) & MASK32, (element // 4) >> 32, step, (seed >> 32) & MASK32], [seed & MASK32, key]
    )
    return words[element % 4]


def naive_weight_update(w, u, c, update, op, random):
    """Seed 004 Algorithms 2-5's last lines; returns (new w, new c)."""
    if update == "nearest":
        return bf16(f32(w - u)), c
    if update == "stochastic":
        return bf16_stochastic(f32(w - u), random), c
    y = op(-u - c)
    s = bf16(f32(w + y))
    return s, bf16(op(op(s - w) - y))


def naive_sgd(w, grads, update, arithmetic, hp, seed, key, offset):
    """Algorithms 2 and 3 with torch.optim.SGD's dampening, Nesterov and first step; w and grads are lists of
    steps' float lists."""
    op = Naive(arithmetic)
    lr, mom, omd, wd = (op.const(v) for v in (hp["lr"], hp["momentum"], 1 - hp["dampening"], hp["weight_decay"]))
    m = [0.0] * len(w)
    c = [0.0] * len(w)
    for t, grad in enumerate(grads, start=1):
        for e in range(len(w)):
            d = grad[e]
            if wd:
                d = op(d + op(wd * w[e]))
            if mom:
                moment = d if t == 1 else op(op(mom * m[e]) + op(omd * d))
                m[e] = bf16(moment)
                d = op(d + op(mom * moment)) if hp["nesterov"] else moment
            u = op(lr * d)
            w[e], c[e] = naive_weight_update(w[e], u, c[e], update, op, naive_random(seed, key, t, offset + e))
    return w


def power_by_squaring(beta: float, t: int) -> float:
    """beta^t as reference.beta_powers defines it: beta^(2^k) of t's set bits k, multiplied in a binary tree."""
    squares = [beta]
    for _ in range(31):
        squares.append(squares[-1] * squares[-1])
    factors = [squares[k] if (t >> k) & 1 else 1.0 for k in range(32)]
    while len(factors) > 1:
        factors = [a * b for a, b in zip(factors[0::2], factors[1::2])]
    return factors[0]


def naive_adamw(w, grads, update, arithmetic, hp, seed, key, offset):
    """Algorithms 4 and 5, the bias corrections applied as multiplications by their reciprocals."""
    op = Naive(arithmetic)
    beta1, beta2 = hp["betas"]
    lr, b1, b2, omb1, omb2, eps, wd = (
        op.const(v) for v in (hp["lr"], beta1, beta2, 1 - beta1, 1 - beta2, hp["eps"], hp["weight_decay"])
    )
    m = [0.0] * len(w)
    v = [0.0] * len(w)
    c = [0.0] * len(w)
    for t, grad in enumerate(grads, start=1):
        correction1 = op(1 / (1 - power_by_squaring(beta1, t)))
        correction2 = op(1 / (1 - power_by_squaring(beta2, t)))
        for e in range(len(w)):
            g = grad[e]
            first = op(op(b1 * m[e]) + op(omb1 * g))
            second = op(op(b2 * v[e]) + op(omb2 * op(g * g)))
            m[e], v[e] = bf16(first), bf16(second)
            ratio = op(op(first * correction1) / op(op(math.sqrt(op(second * correction2))) + eps))
            u = op(op(lr * ratio) + op(op(lr * wd) * w[e]))
            w[e], c[e] = naive_weight_update(w[e], u, c[e], update, op, naive_random(seed, key, t, offset + e))
    return w


DISTRIBUTIONS = {
    "normal": lambda g, shape: torch.randn(shape, generator=g),
    "tiny": lambda g, shape: torch.randn(shape, generator=g) * 1e-3,
    "wide": lambda g, shape: torch.randn(shape, generator=g) * torch.exp(4 * torch.randn(shape, generator=g)),
}
SGD_SETTINGS = [
    {"lr": 0.05, "momentum": 0.0, "dampening": 0.0, "nesterov": False, "weight_decay": 0.0},
    {"lr": 0.01, "momentum": 0.9, "dampening": 0.1, "nesterov": False, "weight_decay": 1e-2},
    {"lr": 0.003, "momentum": 0.8, "dampening": 0.0, "nesterov": True, "weight_decay": 5e-4},
]


def _run_optimizer(make, weight, grads, key, offset):
    param = torch.nn.Parameter(weight.clone())
    optimizer = make([param])
    optimizer.set_rng_key(param, key, offset)
    for grad in grads:
        param.grad = grad.to(param.dtype)
        optimizer.step()
    return param.detach().float().flatten().tolist()


def _inputs(distribution, seed, shape=(5, 7), steps=4):
    g = torch.Generator().manual_seed(seed)
    weight = DISTRIBUTIONS[distribution](g, shape).to(torch.bfloat16)
    grads = [DISTRIBUTIONS[distribution](g, shape).to(torch.bfloat16) for _ in range(steps)]
    return weight, grads


def _as_lists(weight, grads):
    return weight.float().flatten().tolist(), [g.float().flatten().tolist() for g in grads]


@pytest.mark.parametrize("update", reference.UPDATES)
@pytest.mark.parametrize("arithmetic", reference.ARITHMETICS)
@pytest.mark.parametrize("distribution", sorted(DISTRIBUTIONS))
@pytest.mark.parametrize("setting", range(len(SGD_SETTINGS)))
def test_sgd_matches_algorithms_2_and_3(update, arithmetic, distribution, setting):
    hp = SGD_SETTINGS[setting]
    seed, key, offset = 2**40 + 977, 31337, 6
    weight, grads = _inputs(distribution, 100 + setting)
    got = _run_optimizer(
        lambda p: SGD(p, **hp, update=update, arithmetic=arithmetic, seed=seed), weight, grads, key, offset
    )
    want = naive_sgd(*_as_lists(weight, grads), update, arithmetic, hp, seed, key, offset)
    assert got == want


ADAMW_SETTINGS = [
    {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2},
    {"lr": 3e-2, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.0},
]


@pytest.mark.parametrize("update", reference.UPDATES)
@pytest.mark.parametrize("arithmetic", reference.ARITHMETICS)
@pytest.mark.parametrize("distribution", sorted(DISTRIBUTIONS))
@pytest.mark.parametrize("setting", range(len(ADAMW_SETTINGS)))
def test_adamw_matches_algorithms_4_and_5(update, arithmetic, distribution, setting):
    hp = ADAMW_SETTINGS[setting]
    seed, key, offset = 123456789, 7, 1
    weight, grads = _inputs(distribution, 200 + setting)
    got = _run_optimizer(
        lambda p: AdamW(p, **hp, update=update, arithmetic=arithmetic, seed=seed), weight, grads, key, offset
    )
    want = naive_adamw(*_as_lists(weight, grads), update, arithmetic, hp, seed, key, offset)
    assert got == want


def test_fp32_params_update_plainly_in_fp32():
    """FP32 params beside BF16 ones: FP32 states, FP32 arithmetic (numpy's float32, one rounding per operation),
    no compensation, whatever update and arithmetic the group asks for."""
    g = torch.Generator().manual_seed(5)
    weight = torch.randn(23, generator=g)
    grads = [torch.randn(23, generator=g) for _ in range(3)]
    param = torch.nn.Parameter(weight.clone())
    optimizer = SGD([param], lr=0.1, momentum=0.9, update="kahan", arithmetic="bf16")
    lr, mom = np.float32(0.1), np.float32(0.9)
    want, momentum = weight.numpy().copy(), None
    for grad in grads:
        param.grad = grad
        optimizer.step()
        momentum = grad.numpy().copy() if momentum is None else mom * momentum + grad.numpy()
        want = want - lr * momentum
    assert "compensation" not in optimizer.state[param]
    assert optimizer.state[param]["momentum_buffer"].dtype == torch.float32
    assert np.array_equal(param.detach().numpy(), want)


@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.99, 0.9999), (0.0, 0.5), (0.95, 0.999999)])
@pytest.mark.parametrize("arithmetic", list(reference.ARITHMETICS))
def test_step_scalars_are_the_same_bits_however_computed(betas, arithmetic):
    """The fused CUDA path stacks a group's rows, the CPU path takes one row at a time, a capturable step computes
    them on the device: every way must give the bits of Python-float arithmetic (torch.pow's vectorised and scalar
    CPU paths alone differ in the last FP64 bit), and stay within FP32 rounding of the exact corrections."""
    steps = torch.cat(
        (torch.arange(1.0, 3001.0), torch.tensor([2.0**k for k in range(12, 25)]), torch.tensor([65537.0]))
    )
    stacked = reference.step_scalars("adamw", 3e-4, steps, betas, arithmetic)
    for row, step in zip(stacked, steps):
        alone = reference.step_scalars("adamw", 3e-4, step.reshape(1), betas, arithmetic)[0]
        assert torch.equal(row.view(torch.int32), alone.view(torch.int32))
    op = Naive(arithmetic)
    for row, t in zip(stacked.tolist(), steps.long().tolist()):
        want = [op(1 / (1 - power_by_squaring(beta, t))) for beta in betas]
        assert [bits_of(x) for x in row[2:]] == [bits_of(x) for x in want], t
        exact = [1 / (1 - math.pow(beta, t)) for beta in betas]
        assert all(abs(x - e) <= 2**-23 * e for x, e in zip(row[2:], exact)) or arithmetic == "bf16"


@pytest.mark.parametrize(
    "counter, key, words",
    [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((MASK32,) * 4, (MASK32, MASK32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ],
)
def test_philox_known_answers(counter, key, words):
    """Random123's kat_vectors for philox4x32_10."""
    assert tuple(int(w) for w in philox4x32_10(counter, key)) == words
    assert tuple(python_philox(counter, key)) == words


def test_philox_tensor_matches_python_integers():
    g = torch.Generator().manual_seed(11)
    words = torch.randint(0, 2**32, (6, 64), generator=g, dtype=torch.int64)
    got = torch.stack(philox4x32_10(words[:4], words[4:]))
    for i in range(64):
        assert got[:, i].tolist() == python_philox(words[:4, i].tolist(), words[4:, i].tolist())


def test_random_bits_follow_the_documented_stream():
    seed, key, step = 0xDEADBEEF_12345678, 99, 17
    elements = torch.tensor([0, 1, 2, 3, 4, 5, 2**33 + 2, 2**40 + 7])
    got = reference.random_bits(seed, key, step, elements).tolist()
    assert got == [naive_random(seed, key, step, e) for e in elements.tolist()]


def test_stochastic_rounding_is_exactly_proportional():
    """Over all 2^16 random values, x rounds away from zero as often as its dropped bits say (seed 004 §3.2)."""
    for value in (1.0 + 2**-10 + 2**-20, -3.14159, 1e-30, 65504.5):
        x = torch.full((2**16,), value, dtype=torch.float32)
        rounded = reference.round_stochastic(x, torch.arange(2**16)).float()
        dropped = bits_of(f32(value)) & 0xFFFF
        truncated = float_of(bits_of(f32(value)) & 0xFFFF0000)
        assert int((rounded != truncated).sum()) == dropped
        assert set(rounded.tolist()) <= {truncated, float_of((bits_of(f32(value)) & 0xFFFF0000) + 0x10000)}


def test_stochastic_rounding_keeps_non_finite_values():
    x = torch.tensor([float("inf"), float("-inf"), float("nan")])
    rounded = reference.round_stochastic(x, torch.full((3,), 0xFFFF)).float()
    assert rounded[0] == float("inf") and rounded[1] == float("-inf") and rounded[2].isnan()


@pytest.mark.parametrize("arithmetic", reference.ARITHMETICS)
@pytest.mark.parametrize("update, low, high", [("nearest", 1.0, 1.0), ("stochastic", 1.9, 2.1), ("kahan", 1.99, 2.01)])
def test_unit_example(update, arithmetic, low, high):
    """1.0 + 1000 × 0.001 in BF16: nearest rounding drops every step; SR and Kahan reach about 2."""
    param = torch.nn.Parameter(torch.ones(1000, dtype=torch.bfloat16))
    optimizer = SGD([param], lr=0.001, update=update, arithmetic=arithmetic, seed=1)
    for _ in range(1000):
        param.grad = -torch.ones_like(param)
        optimizer.step()
    assert low <= param.float().mean().item() <= high


def test_gpu_comparison_runs_start_from_the_drawn_weights():
    """The GPU test's reference run must not train the weights its CUDA run starts from (a CPU `.to` aliases):
    two CPU runs of its harness from one draw give the same bits."""
    weights, grads = gpu_cases.draw_case("adamw", "nearest", "fp32", "normal")
    first, _ = gpu_cases.train_from("cpu", "adamw", "nearest", "fp32", weights, grads)
    first = [p.detach().clone() for p in first]  # an aliased run would train these further
    second, _ = gpu_cases.train_from("cpu", "adamw", "nearest", "fp32", weights, grads)
    gpu_cases.assert_bits_equal(second, first)
