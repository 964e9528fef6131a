"""Property tests of the 16-bit optimizers' reference rules (seed 004, `optim.reference`'s docstring) on the CPU:
stochastic rounding lands on a BF16 neighbour, each element's random bits depend on its index in the whole tensor
alone (so a tensor sharded across ranks steps as the whole does), and a plain step is the rule written out."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from cutlass_ext import optim
from cutlass_ext.optim import reference

FINITE = st.floats(width=32, allow_nan=False, allow_infinity=False)


def _neighbours(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The BF16 values at or toward zero from x and the next one away from zero (by the FP32 words)."""
    words = x.view(torch.int32)
    toward = words & ~0xFFFF
    away = torch.where((words & 0xFFFF) != 0, toward + 0x10000, toward)
    return toward.view(torch.float32), away.view(torch.float32)


@given(values=st.lists(FINITE, min_size=1, max_size=50), seed=st.integers(0, 2**31 - 1))
def test_stochastic_rounding_lands_on_a_neighbour(values, seed):
    x = torch.tensor(values, dtype=torch.float32)
    bits = torch.randint(0, 2**32, x.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int64)
    rounded = reference.round_stochastic(x, bits).float()
    toward, away = _neighbours(x)
    assert ((rounded == toward) | (rounded == away) | (rounded.isinf() & away.isinf())).all()
    exact = x == toward
    assert torch.equal(rounded[exact], x[exact])
    assert torch.equal(reference.round_stochastic(x, torch.zeros_like(bits)).float(), toward)


@given(
    seed=st.integers(0, 2**64 - 1),
    key=st.integers(0, 2**32 - 1),
    step=st.integers(1, 2**24),
    start=st.integers(0, 2**40),
    length=st.integers(1, 64),
    cut=st.integers(0, 64),
)
def test_random_bits_depend_on_the_element_index_alone(seed, key, step, start, length, cut):
    index = torch.arange(start, start + length)
    whole = reference.random_bits(seed, key, step, index)
    assert ((whole >= 0) & (whole < 2**32)).all()
    cut = min(cut, length)
    parts = torch.cat([reference.random_bits(seed, key, step, part) for part in (index[:cut], index[cut:])])
    assert torch.equal(whole, parts)


@st.composite
def optimizer_settings(draw):
    update = draw(st.sampled_from(reference.UPDATES))
    arithmetic = draw(st.sampled_from(reference.ARITHMETICS))
    common = {"update": update, "arithmetic": arithmetic, "seed": draw(st.integers(0, 2**64 - 1))}
    if draw(st.booleans()):
        momentum = draw(st.sampled_from([0.0, 0.9]))
        return optim.SGD, dict(common, lr=draw(st.floats(1e-4, 0.5)), momentum=momentum, weight_decay=0.01)
    return optim.AdamW, dict(common, lr=draw(st.floats(1e-4, 0.5)), betas=(0.9, 0.99))


@given(
    settings=optimizer_settings(),
    size=st.integers(2, 300),
    cut=st.integers(1, 299),
    key=st.integers(0, 2**32 - 1),
    seed=st.integers(0, 2**31 - 1),
)
def test_a_sharded_tensor_steps_as_the_whole(settings, size, cut, key, seed):
    """seed 004 reproducibility: shards given the whole tensor's key and their element offsets draw its numbers."""
    cls, options = settings
    cut = min(cut, size - 1)
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(size, generator=generator).bfloat16()
    grads = [torch.randn(size, generator=generator).bfloat16() for _ in range(2)]
    whole = torch.nn.Parameter(weight.clone())
    shards = [torch.nn.Parameter(weight[:cut].clone()), torch.nn.Parameter(weight[cut:].clone())]
    whole_optimizer, shard_optimizer = cls([whole], **options), cls(shards, **options)
    whole_optimizer.set_rng_key(whole, key)
    shard_optimizer.set_rng_key(shards[0], key, 0)
    shard_optimizer.set_rng_key(shards[1], key, cut)
    for grad in grads:
        whole.grad = grad
        shards[0].grad, shards[1].grad = grad[:cut], grad[cut:]
        whole_optimizer.step()
        shard_optimizer.step()
    assert torch.equal(whole.view(torch.int16), torch.cat([s.detach() for s in shards]).view(torch.int16))


@given(
    weights=st.lists(FINITE.filter(lambda v: abs(v) < 1e30), min_size=1, max_size=40),
    lr=st.floats(1e-6, 1.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_a_plain_sgd_step_is_the_rule_written_out(weights, lr, seed):
    """momentum 0, no weight decay, FP32 arithmetic, nearest: w <- bf16(w - fp32(lr)·g), one FP32 rounding each."""
    weight = torch.tensor(weights).bfloat16()
    grad = torch.randn(weight.shape, generator=torch.Generator().manual_seed(seed)).bfloat16()
    param = torch.nn.Parameter(weight.clone())
    param.grad = grad
    optim.SGD([param], lr=lr).step()
    lr32 = torch.tensor(lr, dtype=torch.float64).float()
    expected = (weight.float() - lr32 * grad.float()).bfloat16()
    assert torch.equal(param.detach().view(torch.int16), expected.view(torch.int16))
