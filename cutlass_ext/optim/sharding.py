"""Where a DTensor parameter's local shard lies in the whole tensor, for stochastic rounding across shardings.

Stochastic rounding draws the bits of element e from e's index in the whole tensor (`reference`'s docstring), so
a shard updated on its own rank must know the index of its first element there. FSDP2 (`fully_shard`) keeps each
parameter as a DTensor sharded along dim 0 by torch.chunk's rule: chunks of ceil(n / ranks) rows, the last ones
shorter or empty. Such a shard is one contiguous range of the whole tensor's row-major elements, so one offset
places every element, and 1, 2 or any number of ranks draw the same bits for the same element.
"""

from __future__ import annotations

import functools
import math
import sys

import torch


def is_dtensor(tensor: torch.Tensor) -> bool:
    """Whether `tensor` is a DTensor, without importing torch.distributed.tensor (a second of import time): a
    DTensor exists only once that module is loaded."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(tensor, module.DTensor)


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (the same storage: in-place updates reach the DTensor); other tensors as they are."""
    return tensor.to_local() if is_dtensor(tensor) else tensor


@functools.lru_cache(maxsize=4096)
def _block(shape: tuple[int, ...], placements: tuple, mesh) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(lengths, starts) of this rank's block of a tensor of `shape` placed on `mesh` as `placements`: each
    Shard(d) of a mesh dimension splits the block left so far along d by torch.chunk's rule, as DTensor does."""
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        raise ValueError("params: this rank holds no shard of a DTensor parameter (it is not in the param's mesh)")
    lengths, starts = list(shape), [0] * len(shape)
    for mesh_dim, placement in enumerate(placements):
        if placement.is_replicate():
            continue
        if type(placement) is not sys.modules["torch.distributed.tensor"].Shard:
            raise ValueError(f"params: DTensor placement {placement} is not supported (only Shard and Replicate)")
        dim = placement.dim % len(shape)
        chunk = -(-lengths[dim] // mesh.size(mesh_dim))
        start = min(coordinate[mesh_dim] * chunk, lengths[dim])
        lengths[dim] = min(lengths[dim] - start, chunk)
        starts[dim] += start
    return tuple(lengths), tuple(starts)


def _is_one_range(lengths: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether a block of `lengths` is one contiguous run of the row-major elements: some dim k with every dim
    before it of length 1 and every dim after it whole."""
    if math.prod(lengths) == 0:
        return True
    partial = [d for d, (length, size) in enumerate(zip(lengths, shape)) if length != size]
    return not partial or all(lengths[d] == 1 for d in range(partial[-1]))


def shard_offset(param: torch.Tensor) -> int:
    """The index, in the whole tensor's row-major order, of the first element of `param`'s local shard: 0 for a
    plain tensor. Raises ValueError when the shard is not one contiguous range of the whole tensor (e.g. sharded
    along a dim other than the first), since one offset cannot then place its elements."""
    if not is_dtensor(param):
        return 0
    shape = tuple(param.shape)
    lengths, starts = _block(shape, tuple(param.placements), param.device_mesh)
    local_shape = tuple(param.to_local().shape)
    if lengths != local_shape:
        raise ValueError(
            f"params: a DTensor of shape {shape} placed as {tuple(param.placements)} holds a local shard of shape "
            f"{local_shape}, not the {lengths} of torch.chunk's rule"
        )
    if not _is_one_range(lengths, shape):
        raise ValueError(
            f"params: a DTensor shard of shape {lengths} of a {shape} tensor (placements "
            f"{tuple(param.placements)}) is not one contiguous range of its elements; stochastic rounding needs "
            "shards along dim 0 (as fully_shard makes)"
        )
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    return sum(start * stride for start, stride in zip(starts, strides))


def local_state(state: dict, param: torch.Tensor, update: str) -> dict:
    """The state a step of `param`'s local shard reads: the DTensor states' local shards (same storage), the step
    counter itself, and for stochastic rounding the element offset moved to the shard's first element. A plain
    param's state as it is."""
    if not is_dtensor(param):
        return state
    local = {name: local_tensor(value) if isinstance(value, torch.Tensor) else value for name, value in state.items()}
    if update == "stochastic":
        local["element_offset"] = state["element_offset"] + shard_offset(param)
    return local
