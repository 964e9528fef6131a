"""What the property tests (test_fuzz_*.py) share: value ranges, storage layouts, planted NaN and Inf, the bitwise
comparison, and example budgets that keep the `gpu` profile's whole run within a few minutes."""

import math

import torch
from hypothesis import settings
from hypothesis import strategies as st

from cutlass_ext import numerics

LAYOUTS = ("contiguous", "transposed", "sliced", "stepped")


def values(kind, shape, generator: torch.Generator) -> torch.Tensor:
    """FP32 values on the generator's device. kind: `urand` U(-1, 1), `normal`, `subnormal` (FP32 subnormals,
    2^-146 to 2^-126), or an exponent range (lo, hi) drawn by numerics.exp_rand (seed 000 eq. 25)."""
    if kind == "urand":
        return torch.rand(shape, generator=generator, device=generator.device) * 2 - 1
    if kind == "normal":
        return torch.randn(shape, generator=generator, device=generator.device)
    if kind == "subnormal":
        return numerics.exp_rand(shape, -126, -107, generator=generator) * 2.0**-20
    return numerics.exp_rand(shape, *kind, generator=generator)


def stored(x: torch.Tensor, layout: str) -> torch.Tensor:
    """x's values on the GPU in the given storage: `transposed` (a column-major view), `sliced` (rows of a wider
    matrix), `stepped` (every other column); the elements a view skips hold NaN, so reading one shows."""
    x = x.cuda()
    if layout == "transposed":
        return x.mT.contiguous().mT
    if layout == "sliced":
        return torch.cat([x, torch.full_like(x[..., :5], math.nan)], dim=-1)[..., : x.shape[-1]]
    if layout == "stepped":
        return torch.stack([x, torch.full_like(x, math.nan)], dim=-1).flatten(-2)[..., ::2]
    return x


def with_specials(x: torch.Tensor, positions) -> torch.Tensor:
    """A copy of x with value v at flat index p % x.numel() for each (p, v) of `positions`."""
    flat = x.reshape(-1).clone()
    for position, value in positions:
        if flat.numel():
            flat[position % flat.numel()] = value
    return flat.reshape(x.shape)


SPECIALS = st.sampled_from([math.nan, math.inf, -math.inf])

_WORDS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Same shape, dtype and words, except that any NaN matches any NaN."""
    x, y = x.detach().cpu().contiguous(), y.detach().cpu().contiguous()
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    words = _WORDS[x.dtype]
    return bool(((x.view(words) == y.view(words)) | (x.isnan() & y.isnan())).all())


def mostly(small, large, one_in: int = 8):
    """Draws of `small`, and of `large` about once in `one_in`: large problems are covered while the examples
    whose reference runs on the CPU stay cheap on average."""
    return st.integers(1, one_in).flatmap(lambda draw: large if draw == one_in else small)


def examples(share: float) -> settings:
    """The loaded profile's max_examples times `share` (at least 5), for tests whose examples cost more than the
    others' (a CPU reference): the `gpu` profile's whole run stays within its time budget."""
    return settings(max_examples=max(5, round(settings.default.max_examples * share)))
