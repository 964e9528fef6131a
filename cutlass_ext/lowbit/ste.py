"""Straight-through estimators of the low-bit-accumulator GEMM (seed 002 section 4, appendix D), in plain PyTorch.

The reference of the CUDA backward, for small shapes (it holds the (M, N, K) mask). For output (i, j), the
chain of `reference.lowbit_matmul_fmt` runs, at each k of chunk c, from the chunk's partial sum s:
  x·w = a[i, k]·b[k, j] (FP32), u = Q_prod(x·w) + s (FP32), z = Q_acc(u), s ← z;
and after each chunk v = T + S_c, T ← Q_acc(v). Each step's STE bit (eq. 17):
  OF:   |u| < R_OF of the accumulator;
  DIFF: |z − s| > ε2·(|x·w| + ε1), every operation one FP32 rounding (eq. 17 without its division).
The mask m[i, j, k] of each STE:
  identity:        1 (the plain gradients grad_out·bᵀ and aᵀ·grad_out);
  immediate-of:    the step's OF bit (eq. 15: the partial sums pass their gradient unchanged, dz/ds = 1);
  immediate-diff:  the step's DIFF bit;
  recursive-of:    the product of the OF bits of the step and of every later step of its chunk, and of the
                   second-level bits |T + S_c'| < R_OF of its chunk and every later one (eqs. 10-11 in the
                   chunked order: the gradient reaches y through all of them).
Gradients, with masked terms skipped and each product and sum rounded once (the kernel's order):
  grad_a[i, k] = Σ_j, j increasing, of m[i, j, k]·(grad_out[i, j]·b[k, j]);
  grad_b[k, j] = Σ_i, i increasing, of m[i, j, k]·(grad_out[i, j]·a[i, k]).
"""

from __future__ import annotations

import math

import torch

from .format import LowbitFormat
from .reference import quantize

STES = ("identity", "recursive-of", "immediate-of", "immediate-diff")


def check_ste(ste) -> None:
    if ste not in STES:
        raise ValueError(f"ste={ste!r} is not one of {list(STES)}")


def _masks(a: torch.Tensor, b: torch.Tensor, fmt: LowbitFormat, ste: str, eps1: torch.Tensor, eps2: torch.Tensor):
    """The (M, N, K) bool mask of `ste` for A (M, K) and B (K, N), by the chain of the module docstring."""
    m, k_total = a.shape
    n = b.shape[1]
    r_of = fmt.acc_overflow

    def q_prod(y):
        return quantize(y, fmt.prod_man, fmt.prod_exp, fmt.prod_bias, fmt.underflow)

    def q_acc(y):
        return quantize(y, fmt.man, fmt.exp, fmt.acc_bias, fmt.underflow)

    steps = torch.zeros((m, n, k_total), dtype=torch.bool, device=a.device)
    chunk_passes = []  # second-level OF bit of each chunk, (M, N)
    total = a.new_zeros((m, n))
    s = a.new_zeros((m, n))
    for k in range(k_total):
        if k % fmt.chunk == 0:
            s = a.new_zeros((m, n))
        product = a[:, k : k + 1] * b[k : k + 1, :]
        u = q_prod(product) + s
        z = q_acc(u)
        if ste == "immediate-diff":
            steps[:, :, k] = (z - s).abs() > eps2 * (product.abs() + eps1)
        else:
            steps[:, :, k] = u.abs() < r_of
        s = z
        if k % fmt.chunk == fmt.chunk - 1 or k == k_total - 1:
            v = total + s
            chunk_passes.append(v.abs() < r_of)
            total = q_acc(v)
    if ste != "recursive-of":
        return steps
    # Suffix products, from the last step backwards: within the chunk, then across the second level.
    masks = torch.zeros_like(steps)
    later_chunks = torch.ones((m, n), dtype=torch.bool, device=a.device)
    for c in reversed(range(len(chunk_passes))):
        later_chunks = later_chunks & chunk_passes[c]
        later_steps = later_chunks.clone()
        for k in reversed(range(c * fmt.chunk, min(k_total, (c + 1) * fmt.chunk))):
            later_steps = later_steps & steps[:, :, k]
            masks[:, :, k] = later_steps
    return masks


def _grad_pair(a, b, grad_out, fmt, ste, eps1, eps2):
    if ste == "identity":
        return grad_out @ b.T, a.T @ grad_out
    masks = _masks(a, b, fmt, ste, eps1, eps2)
    grad_a = a.new_zeros(a.shape)
    for j in range(b.shape[1]):
        term = grad_out[:, j : j + 1] * b[:, j].unsqueeze(0)
        grad_a = torch.where(masks[:, j, :], grad_a + term, grad_a)
    grad_b = b.new_zeros(b.shape)
    for i in range(a.shape[0]):
        term = grad_out[i].unsqueeze(0) * a[i].unsqueeze(1)
        grad_b = torch.where(masks[i].T, grad_b + term, grad_b)
    return grad_a, grad_b


def grad_reference(
    a: torch.Tensor,
    b: torch.Tensor,
    grad_out: torch.Tensor,
    fmt: LowbitFormat,
    ste: str = "identity",
    eps1: float = 1e-12,
    eps2: float = 1e-3,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_a, grad_b) of `reference.lowbit_matmul_fmt(a, b, fmt)` under `ste` (module docstring), for float32
    (…, M, K), (…, K, N) and grad_out (…, M, N) with equal batch dimensions; ε1, ε2 are rounded to FP32."""
    check_ste(ste)
    if not isinstance(fmt, LowbitFormat):
        raise TypeError(f"fmt must be a LowbitFormat; got {type(fmt).__name__}")
    for name, x in (("a", a), ("b", b), ("grad_out", grad_out)):
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
            raise TypeError(f"{name} must be a float32 tensor")
        if x.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dimensions; got shape {tuple(x.shape)}")
    batch = a.shape[:-2]
    if b.shape[:-2] != batch or grad_out.shape[:-2] != batch or a.shape[-1] != b.shape[-2]:
        raise ValueError(
            f"a (…, M, K), b (…, K, N), grad_out (…, M, N) must agree; got {tuple(a.shape)}, {tuple(b.shape)}, "
            f"{tuple(grad_out.shape)}"
        )
    if grad_out.shape[-2:] != (a.shape[-2], b.shape[-1]):
        raise ValueError(f"grad_out must be (…, {a.shape[-2]}, {b.shape[-1]}); got {tuple(grad_out.shape)}")
    eps = [torch.tensor(e, dtype=torch.float32, device=a.device) for e in (eps1, eps2)]
    a3, b3, g3 = (x.detach().reshape(math.prod(batch), *x.shape[-2:]) for x in (a, b, grad_out))
    pairs = [_grad_pair(a3[i], b3[i], g3[i], fmt, ste, *eps) for i in range(a3.shape[0])]
    grad_a = torch.stack([p[0] for p in pairs]) if pairs else a3.new_zeros(a3.shape)
    grad_b = torch.stack([p[1] for p in pairs]) if pairs else b3.new_zeros(b3.shape)
    return grad_a.reshape(a.shape), grad_b.reshape(b.shape)
