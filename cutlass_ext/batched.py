"""Operands of a batched matmul, (…, M, K) and (…, K, N): checked once and broadcast to one batch."""

from __future__ import annotations

import math

import torch


def batch_shape(a_batch: torch.Size, b_batch: torch.Size) -> torch.Size:
    """The broadcast of two batch shapes (RuntimeError where they do not broadcast). Eager calls take ATen's shape
    inference (as torch.distributions does), not torch.broadcast_shapes, whose first call imports sympy (0.4-2 s
    of a process's first low-bit call)."""
    if a_batch == b_batch:
        return a_batch
    plain = all(type(size) is int for size in (*a_batch, *b_batch))  # not symbolic (make_fx, export) nor traced
    if torch.compiler.is_compiling() or torch.jit.is_tracing() or not plain:
        return torch.broadcast_shapes(a_batch, b_batch)
    return torch._C._infer_size(torch.Size(a_batch), torch.Size(b_batch))


def broadcast_operands(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(…, M, K) and (…, K, N) checked (dimensions, K, device) and expanded to their common batch shape as stride-0
    views (autograd sums the expanded gradients back)."""
    if a.dim() < 2 or b.dim() < 2:
        raise ValueError(
            f"a and b must have at least 2 dimensions (…, M, K) and (…, K, N); got {a.dim()} and {b.dim()}"
        )
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"a (…, M, K) and b (…, K, N) must agree on K; got a {tuple(a.shape)}, b {tuple(b.shape)}")
    if a.device != b.device:
        raise ValueError(f"a and b must be on one device; got {a.device} and {b.device}")
    try:
        batch = batch_shape(a.shape[:-2], b.shape[:-2])
    except RuntimeError:
        raise ValueError(f"batch dimensions of a {tuple(a.shape)} and b {tuple(b.shape)} do not broadcast") from None
    return a.expand(*batch, *a.shape[-2:]), b.expand(*batch, *b.shape[-2:])


def flatten_batch(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Size, torch.Tensor, torch.Tensor]:
    """(batch shape, A as (count, M, K), B as (count, K, N)) for kernels that take one batch dimension; the result
    (count, M, N) reshapes to (*batch, M, N). Views where the strides allow, copies otherwise."""
    a, b = broadcast_operands(a, b)
    batch = a.shape[:-2]
    count = math.prod(batch)
    return batch, a.reshape(count, *a.shape[-2:]), b.reshape(count, *b.shape[-2:])
