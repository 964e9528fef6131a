"""Inputs of the accuracy checks: urand, the seed's exponent-range types 1–4 (seed 000 section 4.1, eq. 25) and
STARS-H-like kernel matrices (its section 4.1: `spatial`, an exponential covariance kernel over random points, and
`cauchy`), each times a urand(-1, 1) B as in the seed."""

from __future__ import annotations

import torch

from ..numerics import exp_rand

KINDS = ("urand", "type1", "type2", "type3", "type4", "stars_spatial", "stars_cauchy")
_TYPE_RANGES = {
    "type1": ((-15, 14), (-15, 14)),
    "type2": ((-15, 14), (-100, -35)),
    "type3": ((-35, -15), (-35, -15)),
    "type4": ((-100, -35), (-100, -35)),
}


def _urand(shape, generator):
    return torch.rand(shape, generator=generator, dtype=torch.float64) * 2 - 1


def _stars(kind: str, m: int, k: int, generator) -> torch.Tensor:
    if kind == "stars_spatial":  # exp(-|x_i - y_j| / 0.1), points uniform in the unit square
        x, y = (
            torch.rand(m, 2, generator=generator, dtype=torch.float64),
            torch.rand(k, 2, generator=generator, dtype=torch.float64),
        )
        return torch.exp(-torch.cdist(x, y) / 0.1)
    x = torch.rand(m, 1, generator=generator, dtype=torch.float64)  # cauchy: 1 / (x_i - y_j), y shifted
    y = torch.rand(1, k, generator=generator, dtype=torch.float64) + 0.5 / max(m, k)
    return 1.0 / (x - y)


def accuracy_inputs(kind: str, m: int, k: int, n: int, seed: int, device="cuda") -> tuple[torch.Tensor, torch.Tensor]:
    """float32 A (m, k) and B (k, n) of one of `KINDS`, drawn on the CPU from `seed`, moved to `device`."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not one of {list(KINDS)}")
    g = torch.Generator().manual_seed(seed)
    if kind in _TYPE_RANGES:
        (a_range, b_range) = _TYPE_RANGES[kind]
        a, b = exp_rand((m, k), *a_range, g), exp_rand((k, n), *b_range, g)
    elif kind == "urand":
        a, b = _urand((m, k), g).float(), _urand((k, n), g).float()
    else:
        a, b = _stars(kind, m, k, g).float(), _urand((k, n), g).float()
    return a.to(device), b.to(device)
