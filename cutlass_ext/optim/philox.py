"""Philox4x32-10 in plain PyTorch (int64 tensors holding 32-bit words), on CPU or CUDA.

The counter-based generator of Salmon et al. (Random123, SC'11) with cuRAND's and torch's constants: the same
(counter, key) gives the same four words on any device and in any launch order, which is what makes stochastic
rounding reproducible (kernels/optim_philox.cuh computes the same function).
"""

from __future__ import annotations

import torch

_MASK32 = 0xFFFFFFFF
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57  # round multipliers
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85  # Weyl key increments
PHILOX_ROUNDS = 10


def _mulhilo(multiplier: int, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low words of the 64-bit product `multiplier · value` without int64 overflow: the multiplier is
    split into 16-bit halves, so each partial product stays below 2^48."""
    low_half, high_half = multiplier & 0xFFFF, multiplier >> 16
    partial_low = value * low_half
    partial_high = value * high_half
    high = (partial_high + (partial_low >> 16)) >> 16
    low = (((partial_high & 0xFFFF) << 16) + partial_low) & _MASK32
    return high, low


def philox4x32_10(counter, key) -> tuple[torch.Tensor, ...]:
    """The four 32-bit output words of Philox4x32-10 for `counter` (four words) and `key` (two words).

    Words are int64 tensors (or ints) holding values in [0, 2^32); they broadcast against each other.
    """
    c0, c1, c2, c3 = (torch.as_tensor(c, dtype=torch.int64) for c in counter)
    k0, k1 = (torch.as_tensor(k, dtype=torch.int64) for k in key)
    for round_index in range(PHILOX_ROUNDS):
        if round_index:
            k0 = (k0 + PHILOX_W0) & _MASK32
            k1 = (k1 + PHILOX_W1) & _MASK32
        high0, low0 = _mulhilo(PHILOX_M0, c0)
        high1, low1 = _mulhilo(PHILOX_M1, c2)
        c0, c1, c2, c3 = high1 ^ c1 ^ k0, low1, high0 ^ c3 ^ k1, low0
    return c0, c1, c2, c3
