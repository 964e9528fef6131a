"""Property tests of `ext.optim.SGD` and `ext.optim.AdamW` on CUDA against the same optimizers on the CPU, which run
the plain-PyTorch rules of `optim.reference` (seed 004 Algorithms 2-5): weights, states and compensation buffers
equal bit for bit after every step, over random hyperparameters, update and arithmetic modes, tensor sizes (0, 1,
partial vectors and chunks, past 65535 elements), BF16 and FP32 parameters side by side, non-contiguous gradients,
explicit Philox keys and shard offsets, and gradients with subnormal, tiny, huge and non-finite values (which
propagate as the reference's arithmetic makes them; stochastic rounding rounds non-finite values to nearest)."""

import math

import torch
from hypothesis import example, given
from hypothesis import strategies as st

import cutlass_ext as ext

from .fuzz_inputs import examples, same_bits

SIZES = st.one_of(st.sampled_from([0, 1, 7, 8, 9, 1023, 1031, 4096, 70001]), st.integers(1, 3000))
GRADIENTS = ("normal", "tiny", "huge", "subnormal", "specials")


def _gradient(kind: str, size: int, generator) -> torch.Tensor:
    values = torch.randn(size, generator=generator)
    if kind == "tiny":
        values = values * 2.0**-60
    elif kind == "huge":
        values = values * 2.0**40
    elif kind == "subnormal":
        values = values * 2.0**-128  # BF16 subnormals (FP32's exponent range, 7 stored bits)
    elif kind == "specials" and size:
        picks = torch.randint(0, size, (3,), generator=generator)
        values[picks] = torch.tensor([math.nan, math.inf, -math.inf])
    return values


@st.composite
def optimizers(draw):
    kind = draw(st.sampled_from(["sgd", "adamw"]))
    options = {
        "update": draw(st.sampled_from(["nearest", "stochastic", "kahan"])),
        "arithmetic": draw(st.sampled_from(["fp32", "bf16"])),
        "seed": draw(st.integers(0, 2**64 - 1)),
        "lr": draw(st.floats(1e-6, 1.0)),
        "weight_decay": draw(st.sampled_from([0.0, 1e-4, 0.01, 0.1])),
    }
    if kind == "sgd":
        momentum = draw(st.sampled_from([0.0, 0.5, 0.9, 0.99]))
        nesterov = momentum > 0 and draw(st.booleans())
        dampening = 0.0 if nesterov else draw(st.sampled_from([0.0, 0.1, 1.0]))
        options.update(momentum=momentum, nesterov=nesterov, dampening=dampening)
        return ext.optim.SGD, options
    options.update(
        betas=(draw(st.floats(0.0, 0.99)), draw(st.floats(0.0, 0.9999))),
        eps=draw(st.sampled_from([1e-12, 1e-8, 1e-6, 1e-3])),
    )
    return ext.optim.AdamW, options


@given(
    optimizer=optimizers(),
    sizes=st.lists(SIZES, min_size=1, max_size=5),
    data=st.data(),
    steps=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
)
@example(
    optimizer=(
        ext.optim.AdamW,
        {
            "update": "stochastic",
            "arithmetic": "bf16",
            "seed": 2**63 + 5,
            "lr": 1e-3,
            "weight_decay": 0.01,
            "betas": (0.9, 0.999),
            "eps": 1e-8,
        },
    ),
    sizes=[70001, 1, 0],
    data=None,
    steps=2,
    seed=5,
).via("a grid of several blocks, a single element and an empty tensor")
@examples(0.5)
def test_cuda_step_equals_the_cpu_reference(optimizer, sizes, data, steps, seed):
    cls, options = optimizer
    generator = torch.Generator().manual_seed(seed)

    def choose(strategy, label, default):
        return data.draw(strategy, label=label) if data is not None else default

    dtypes = [choose(st.sampled_from([torch.bfloat16, torch.float32]), "dtype", torch.bfloat16) for _ in sizes]
    weights = [torch.randn(size, generator=generator).to(dtype) for size, dtype in zip(sizes, dtypes)]
    cpu = [torch.nn.Parameter(w.clone()) for w in weights]
    gpu = [torch.nn.Parameter(w.cuda()) for w in weights]
    cpu_optimizer, gpu_optimizer = cls(cpu, **options), cls(gpu, **options)
    for index in range(len(sizes)):
        if choose(st.booleans(), "explicit Philox key", False):
            key, offset = choose(st.integers(0, 2**32 - 1), "key", 0), choose(st.integers(0, 2**40), "offset", 0)
            cpu_optimizer.set_rng_key(cpu[index], key, offset)
            gpu_optimizer.set_rng_key(gpu[index], key, offset)
    for _ in range(steps):
        for index, size in enumerate(sizes):
            kind = choose(st.sampled_from(GRADIENTS), "gradient values", "normal")
            grad = _gradient(kind, size, generator).to(dtypes[index])
            cpu[index].grad = grad
            if choose(st.booleans(), "non-contiguous gradient", False) and size > 1:
                doubled = torch.stack([grad, torch.full_like(grad, math.nan)], dim=-1).flatten().cuda()
                gpu[index].grad = doubled[::2]
            else:
                gpu[index].grad = grad.cuda()
        cpu_optimizer.step()
        gpu_optimizer.step()
        for cpu_param, gpu_param in zip(cpu, gpu):
            assert same_bits(gpu_param, cpu_param), f"{cls.__name__} {options}: weights differ"
            cpu_state, gpu_state = cpu_optimizer.state[cpu_param], gpu_optimizer.state[gpu_param]
            assert set(cpu_state) == set(gpu_state)
            for name, value in cpu_state.items():
                if isinstance(value, torch.Tensor):
                    assert same_bits(gpu_state[name], value), f"{cls.__name__} {options}: state {name} differs"
                else:
                    assert gpu_state[name] == value
