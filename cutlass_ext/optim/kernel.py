"""The launcher of the fused multi-tensor optimizer kernels (`config.OptimConfig`'s libraries).

`fused_step` calls a variant's torch-free library through ctypes inside a `torch.library` op, so `torch.compile`
traces the optimizer step and CUDA graphs capture the launches (the per-tensor table travels in kernel arguments,
not in a host-to-device copy).
"""

from __future__ import annotations

import ctypes

import numpy as np
import torch

from .. import native
from .config import OptimConfig


class _Tensor(ctypes.Structure):
    """kernels/optim_step.cuh's cutlass_ext_optim_tensor."""

    _fields_ = [
        ("param", ctypes.c_void_p),
        ("grad", ctypes.c_void_p),
        ("state0", ctypes.c_void_p),
        ("state1", ctypes.c_void_p),
        ("compensation", ctypes.c_void_p),
        ("numel", ctypes.c_int64),
        ("element_offset", ctypes.c_int64),
        ("scalars", ctypes.c_void_p),
        ("param_key", ctypes.c_uint32),
    ]


class _Constants(ctypes.Structure):
    """kernels/optim_update.cuh's Constants."""

    _fields_ = [
        *(
            (name, ctypes.c_float)
            for name in (
                "momentum",
                "one_minus_dampening",
                "weight_decay",
                "beta1",
                "beta2",
                "one_minus_beta1",
                "one_minus_beta2",
                "eps",
            )
        ),
        ("nesterov", ctypes.c_int32),
        ("seed_low", ctypes.c_uint32),
        ("seed_high", ctypes.c_uint32),
    ]


_CONSTANT_NAMES = (
    "momentum",
    "one_minus_dampening",
    "weight_decay",
    "beta1",
    "beta2",
    "one_minus_beta1",
    "one_minus_beta2",
    "eps",
    "nesterov",
)


# The table as a numpy record type laid out like _Tensor: filled from Python lists in one call per step, not one
# ctypes structure per tensor.
_TABLE_FORMATS = {ctypes.c_void_p: "u8", ctypes.c_int64: "i8", ctypes.c_uint32: "u4"}
_TABLE = np.dtype(
    {
        "names": [name for name, _ in _Tensor._fields_],
        "formats": [_TABLE_FORMATS[kind] for _, kind in _Tensor._fields_],
        "offsets": [getattr(_Tensor, name).offset for name, _ in _Tensor._fields_],
        "itemsize": ctypes.sizeof(_Tensor),
    }
)


def _launcher(config: OptimConfig, device: torch.device):
    function = getattr(native.library(config, device), f"{config.name}_optim_step")
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(_Constants), ctypes.c_void_p]
    return function


# torch.library.custom_op for a mutating op: it bumps the mutated tensors' version counters (compiling.custom_op
# defines functional ops only).
@torch.library.custom_op(
    "cutlass_ext::optim_fused_step", mutates_args=("params", "states0", "states1", "compensations")
)
def _fused_step_op(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    states0: list[torch.Tensor],
    states1: list[torch.Tensor],
    compensations: list[torch.Tensor],
    scalars: torch.Tensor,
    variant: str,
    constants: list[float],
    seed_words: list[int],
    keys: list[int],
    element_offsets: list[int],
) -> None:
    config = OptimConfig.from_name(variant)
    device = params[0].device
    count = len(params)
    row_bytes = scalars.stride(0) * scalars.element_size()
    scalars_address = scalars.data_ptr()

    def addresses(tensors):
        return [t.data_ptr() for t in tensors] if tensors else [0] * count

    rows = zip(
        addresses(params),
        addresses(grads),
        addresses(states0),
        addresses(states1),
        addresses(compensations),
        [p.numel() for p in params],
        element_offsets,
        [scalars_address + i * row_bytes for i in range(count)],
        keys,
    )
    table = np.array(list(rows), dtype=_TABLE)
    values = dict(zip(_CONSTANT_NAMES, constants))
    packed = _Constants(
        **{k: v for k, v in values.items() if k != "nesterov"},
        nesterov=int(values["nesterov"]),
        seed_low=seed_words[0],
        seed_high=seed_words[1],
    )
    with torch.cuda.device(device):
        status = _launcher(config, device)(table.ctypes.data, count, ctypes.byref(packed), native.stream_handle(device))
    native.check_status(status, f"optimizer step {variant}")


@_fused_step_op.register_fake
def _(
    params, grads, states0, states1, compensations, scalars, variant, constants, seed_words, keys, element_offsets
) -> None:
    return None


def _check_tensor(name: str, tensor: torch.Tensor, param: torch.Tensor) -> None:
    if tensor.dtype != torch.bfloat16 or tensor.device != param.device or tensor.shape != param.shape:
        raise ValueError(
            f"{name} must be a BF16 tensor of the param's shape on {param.device}, got "
            f"{tensor.dtype} {tuple(tensor.shape)} on {tensor.device}"
        )
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous")


def fused_step(
    kind: str,
    params,
    grads,
    states,
    scalars: torch.Tensor,
    constants,
    update: str,
    arithmetic: str,
    seed: int,
    keys,
    element_offsets,
    threads: int = OptimConfig.threads,
    vectors_per_thread: int = OptimConfig.vectors_per_thread,
    grid: str = OptimConfig.grid,
    check: bool = True,
) -> None:
    """One fused step of BF16 CUDA `params` on one device (reference.sgd_update / adamw_update, bit for bit).

    states: the lists of state tensors the kind keeps, in the kernel's order (SGD: momentum buffers if momentum
    is not 0; AdamW: exp_avg, exp_avg_sq), then the compensation buffers when update is "kahan". scalars: the
    (n, 4) FP32 rows of reference.step_scalars on the params' device. constants: reference.SgdConstants or
    AdamWConstants. threads, vectors_per_thread, grid: the variant's launch shape (OptimConfig). check:
    validate every tensor (the optimizers skip it: torch keeps each grad like its param, and they made the states
    themselves).
    """
    config = OptimConfig(kind, update, arithmetic, threads, vectors_per_thread, grid)
    grads = [grad if grad.is_contiguous() else grad.contiguous() for grad in grads]
    states = [list(group) for group in states]
    if check:
        for param, grad in zip(params, grads):
            _check_tensor("params", param, param)
            _check_tensor("grad", grad, param)
        for group in states:
            for state, param in zip(group, params):
                _check_tensor("optimizer state", state, param)
    compensations = states.pop() if update == "kahan" else []
    states0 = states[0] if states else []
    states1 = states[1] if len(states) > 1 else []
    if scalars.device != params[0].device or scalars.dtype != torch.float32 or scalars.shape != (len(params), 4):
        raise ValueError(f"scalars must be FP32 ({len(params)}, 4) on {params[0].device}")
    values = {
        "momentum": 0.0,
        "one_minus_dampening": 1.0,
        "weight_decay": 0.0,
        "beta1": 0.0,
        "beta2": 0.0,
        "one_minus_beta1": 0.0,
        "one_minus_beta2": 0.0,
        "eps": 0.0,
        "nesterov": 0.0,
    }
    values.update({k: float(v) for k, v in vars(constants).items()})
    _fused_step_op(
        params,
        grads,
        states0,
        states1,
        compensations,
        scalars.contiguous(),
        config.name,
        [values[name] for name in _CONSTANT_NAMES],
        [seed & 0xFFFFFFFF, seed >> 32],
        list(keys),
        list(element_offsets),
    )
