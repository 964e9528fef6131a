"""Inputs and references shared by the GPU tests."""

import contextlib

import torch

from cutlass_ext import numerics

# name -> (A's distribution, B's distribution). The exp_rand pairs are the seed's Types 1-4 (section 4.1.1,
# Figure 11): (-15,14) is held by halfhalf at full precision, (-35,-15) at less, (-100,-35) not at all unscaled.
DISTRIBUTIONS = {
    "urand(-1,1)": ("urand", "urand"),
    "normal": ("normal", "normal"),
    "type1": ((-15, 14), (-15, 14)),
    "type2": ((-15, 14), (-35, -15)),
    "type3": ((-35, -15), (-35, -15)),
    "type4": ((-100, -35), (-15, 14)),
}


def draw(kind, shape, generator):
    if kind == "urand":
        return torch.rand(shape, generator=generator, device="cuda") * 2 - 1
    if kind == "normal":
        return torch.randn(shape, generator=generator, device="cuda")
    return numerics.exp_rand(shape, *kind, generator=generator)


def operands(distribution, m, n, k, seed):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    kind_a, kind_b = DISTRIBUTIONS[distribution]
    return draw(kind_a, (m, k), generator), draw(kind_b, (k, n), generator)


def reference(a, b):
    return a.double() @ b.double()


@contextlib.contextmanager
def cublas_precision(precision):
    """`tf32` or `ieee` for torch.matmul on float32."""
    previous = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = precision
    try:
        yield
    finally:
        torch.backends.cuda.matmul.fp32_precision = previous


def poison_allocator(*shape):
    """Leave NaNs in the block the caching allocator hands out next for this shape: unwritten outputs stay NaN."""
    junk = torch.full(shape, float("nan"), device="cuda")
    del junk
