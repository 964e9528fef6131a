"""The update rules of the 16-bit optimizers in plain PyTorch: what the fused kernels compute, bit for bit.

Seed 004, appendix B (Algorithms 2-5). Weights and states are BF16; `arithmetic` says how the update is computed:

- `"fp32"`: every operation in FP32 round-to-nearest from the BF16 inputs, results stored to BF16 (nearest);
- `"bf16"`: every operation's FP32 result rounded to BF16 nearest, and the hyperparameters rounded to BF16 too
  (the seed's 16-bit FPU).

`update` applies to the weight update w <- w - u alone (seed 004 section 3.2); optimizer states are always
rounded to nearest:

- `"nearest"`: w <- bf16_nearest(w - u);
- `"stochastic"`: w <- bf16_stochastic(w - u), the difference taken in FP32 (the seed's ⊖, Algorithms 2 and 4);
- `"kahan"`: a BF16 compensation c per weight: y = -u - c, s = bf16_nearest(w + y), c <- (s - w) - y, w <- s
  (Algorithms 3 and 5).

Reproducible stochastic rounding. The random bits of element e (its index in the whole tensor: the shard's
`element_offset` plus its index in the shard's row-major order) at step t are word `e % 4` of
Philox4x32-10 with key = (seed & 0xffffffff, param_key) and counter = (lo32(e // 4), hi32(e // 4), t,
lo32(seed >> 32)). Rounding an FP32 value x adds the low 16 of those bits to x's bit pattern and clears its low 16
bits: x rounds away from zero with probability (dropped bits) / 2^16. A non-finite x rounds to nearest instead.

Each function here mirrors the kernels' operation order (kernels/optim_update.cuh): change both together.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .philox import philox4x32_10

UPDATES = ("nearest", "stochastic", "kahan")
ARITHMETICS = ("fp32", "bf16")
_MASK32 = 0xFFFFFFFF


def _fp32(value: float) -> float:
    """`value` rounded to the nearest FP32 (the kernels take FP32 hyperparameters)."""
    return torch.tensor(value, dtype=torch.float64).to(torch.float32).item()


def _bf16(value: float) -> float:
    return torch.tensor(_fp32(value), dtype=torch.float32).to(torch.bfloat16).item()


def random_bits(seed: int, param_key: int, step, element_index: torch.Tensor) -> torch.Tensor:
    """The 32 random bits (int64 values in [0, 2^32)) of each element at `step`, as the module docstring defines."""
    block = element_index // 4
    step = torch.as_tensor(step, device=element_index.device).to(torch.int64) & _MASK32
    words = philox4x32_10(
        (block & _MASK32, block >> 32, step, (seed >> 32) & _MASK32),
        (seed & _MASK32, param_key),
    )
    lane = element_index % 4
    return torch.where(
        lane == 0, words[0], torch.where(lane == 1, words[1], torch.where(lane == 2, words[2], words[3]))
    )


def round_nearest(x: torch.Tensor) -> torch.Tensor:
    """FP32 -> BF16, round to nearest even."""
    return x.to(torch.bfloat16)


def round_stochastic(x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """FP32 -> BF16 by adding the low 16 of `bits` to x's bit pattern and truncating; non-finite x to nearest."""
    pattern = x.view(torch.int32).to(torch.int64) & _MASK32
    rounded = ((pattern + (bits & 0xFFFF)) & 0xFFFF0000) & _MASK32
    rounded = torch.where(rounded >= 2**31, rounded - 2**32, rounded).to(torch.int32).view(torch.float32)
    return torch.where(torch.isfinite(x), rounded, x).to(torch.bfloat16)


def _quantizer(arithmetic: str):
    """The rounding applied after every operation: none in FP32 arithmetic, BF16 nearest on the 16-bit FPU."""
    if arithmetic == "bf16":
        return lambda t: t.to(torch.bfloat16).to(torch.float32)
    return lambda t: t


@dataclass(frozen=True)
class SgdConstants:
    """SGD's per-launch hyperparameters as the kernels receive them (FP32 values; BF16 values in bf16 arithmetic)."""

    momentum: float
    one_minus_dampening: float
    weight_decay: float
    nesterov: bool

    @classmethod
    def from_group(cls, group: dict, arithmetic: str) -> SgdConstants:
        rounded = _bf16 if arithmetic == "bf16" else _fp32
        return cls(
            rounded(group["momentum"]),
            rounded(1.0 - group["dampening"]),
            rounded(group["weight_decay"]),
            bool(group["nesterov"]),
        )


@dataclass(frozen=True)
class AdamWConstants:
    """AdamW's per-launch hyperparameters as the kernels receive them."""

    beta1: float
    beta2: float
    one_minus_beta1: float
    one_minus_beta2: float
    eps: float
    weight_decay: float

    @classmethod
    def from_group(cls, group: dict, arithmetic: str) -> AdamWConstants:
        rounded = _bf16 if arithmetic == "bf16" else _fp32
        beta1, beta2 = group["betas"]
        return cls(
            rounded(beta1),
            rounded(beta2),
            rounded(1.0 - beta1),
            rounded(1.0 - beta2),
            rounded(group["eps"]),
            rounded(group["weight_decay"]),
        )


# Step counters are FP32 (exact integers up to 2^24): 32 bits of the step cover them.
_STEP_BITS = 32


def squares_table(betas: tuple, device: torch.device) -> torch.Tensor:
    """(len(betas), _STEP_BITS) FP64 table of beta^(2^k) by repeated squaring in Python floats (IEEE FP64
    multiplications), on `device`. An optimizer makes one per group and holds it: a captured step then uploads
    nothing and reads it on every replay."""
    rows = []
    for beta in betas:
        row = [float(beta)]
        for _ in range(_STEP_BITS - 1):
            row.append(row[-1] * row[-1])
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64).to(device)


def beta_powers(betas, steps: torch.Tensor, table: torch.Tensor | None = None) -> torch.Tensor:
    """(n, len(betas)) FP64 beta^step for the n integer `steps`, the same bits on every device.

    torch.pow is not: its vectorised CPU path (Sleef), its scalar CPU path (libm) and CUDA's pow differ in the last
    FP64 bit, and so, rarely, would the FP32 bias corrections of a CPU run, a fused CUDA run and a captured run.
    Here beta^step is the product of beta^(2^k) over the set bits k of step, multiplied in a fixed binary tree:
    only IEEE FP64 multiplications, which round alike on CPU and GPU.
    """
    if table is None:  # `squares_table` of these betas on steps' device, where the caller holds none
        table = squares_table(tuple(float(beta) for beta in betas), steps.device)
    shifts = torch.arange(_STEP_BITS, device=steps.device)
    bits = (steps.to(torch.int64).unsqueeze(-1) >> shifts) & 1
    factors = torch.where(bits.unsqueeze(1) == 1, table, 1.0)
    while factors.shape[-1] > 1:
        factors = factors[..., 0::2] * factors[..., 1::2]
    return factors[..., 0]


def step_scalars(kind: str, lr, steps: torch.Tensor, betas, arithmetic: str, table=None) -> torch.Tensor:
    """The (n, 4) FP32 rows the kernels read per tensor, for n tensors at `steps` (FP32, already incremented).

    SGD: (lr, step, 1 if this is the tensor's first step else 0, 0); AdamW: (lr, step, 1 / (1 - beta1^step),
    1 / (1 - beta2^step)): the bias corrections of Algorithm 4 lines 7-10 as reciprocals (FP64 from
    `beta_powers`, rounded once), so that each element multiplies by them instead of dividing. Every operation is
    an IEEE one, so the rows are the same bits on the CPU and on a CUDA device (capturable step counters).
    """
    q = _quantizer(arithmetic)
    steps = steps.to(torch.float32)
    lr = q(torch.as_tensor(lr, dtype=torch.float64, device=steps.device).to(torch.float32)).expand(steps.shape)
    if kind == "sgd":
        first = (steps == 1).to(torch.float32)
        return torch.stack((lr, steps, first, torch.zeros_like(steps)), dim=1)
    corrections = q(torch.reciprocal(1.0 - beta_powers(betas, steps, table)).to(torch.float32))
    return torch.stack((lr, steps, corrections[:, 0], corrections[:, 1]), dim=1)


@dataclass(frozen=True)
class Rounding:
    """How one tensor's weight update is rounded: the mode and, for stochastic rounding, its Philox stream."""

    update: str = "nearest"
    seed: int = 0
    param_key: int = 0
    element_offset: int = 0


def _apply_update(param, weight, update_value, compensation, scalars, rounding: Rounding, q) -> None:
    """w <- w - u in the tensor's rounding mode (seed 004 section 3.2); writes param (and compensation)."""
    if param.dtype == torch.float32:
        param.copy_(weight - update_value)
    elif rounding.update == "nearest":
        param.copy_(round_nearest(weight - update_value))
    elif rounding.update == "stochastic":
        index = torch.arange(param.numel(), device=param.device).view(param.shape) + rounding.element_offset
        bits = random_bits(rounding.seed, rounding.param_key, scalars[1], index)
        param.copy_(round_stochastic(weight - update_value, bits))
    else:
        # Algorithm 3 lines 7-9: the compensated step y, the rounded sum s, and what rounding lost
        corrected = q(-update_value - compensation.to(torch.float32))
        total = round_nearest(weight + corrected).to(torch.float32)
        compensation.copy_(round_nearest(q(q(total - weight) - corrected)))
        param.copy_(total)


def sgd_update(
    param, grad, momentum_buffer, compensation, scalars, constants: SgdConstants, rounding: Rounding, arithmetic: str
) -> None:
    """One SGD step of one tensor, in place (Algorithms 2 and 3, with torch.optim.SGD's dampening and Nesterov).

    scalars: the tensor's row of `step_scalars("sgd", ...)`. momentum_buffer: None when momentum is 0.
    compensation: the Kahan buffer, None unless rounding.update is "kahan". FP32 params update plainly in FP32.
    """
    q = _quantizer(arithmetic if param.dtype == torch.bfloat16 else "fp32")
    lr, first = scalars[0], scalars[2]
    weight = param.to(torch.float32)
    direction = grad.to(torch.float32)
    if constants.weight_decay != 0:
        direction = q(direction + q(constants.weight_decay * weight))
    if constants.momentum != 0:
        # torch.optim.SGD's first step copies the gradient into the buffer
        blended = q(
            q(constants.momentum * momentum_buffer.to(torch.float32)) + q(constants.one_minus_dampening * direction)
        )
        momentum = torch.where(first != 0, direction, blended)
        momentum_buffer.copy_(momentum)
        direction = q(direction + q(constants.momentum * momentum)) if constants.nesterov else momentum
    _apply_update(param, weight, q(lr * direction), compensation, scalars, rounding, q)


def adamw_update(
    param,
    grad,
    exp_avg,
    exp_avg_sq,
    compensation,
    scalars,
    constants: AdamWConstants,
    rounding: Rounding,
    arithmetic: str,
) -> None:
    """One AdamW step of one tensor, in place (Algorithms 4 and 5: decoupled weight decay η·d·w inside u; the
    bias corrections applied as multiplications by their reciprocals).

    scalars: the tensor's row of `step_scalars("adamw", ...)`; the update uses the FP32 moments of this step
    (before they are stored to BF16).
    """
    q = _quantizer(arithmetic if param.dtype == torch.bfloat16 else "fp32")
    lr, correction1, correction2 = scalars[0], scalars[2], scalars[3]
    weight = param.to(torch.float32)
    gradient = grad.to(torch.float32)
    first = q(q(constants.beta1 * exp_avg.to(torch.float32)) + q(constants.one_minus_beta1 * gradient))
    second = q(
        q(constants.beta2 * exp_avg_sq.to(torch.float32)) + q(constants.one_minus_beta2 * q(gradient * gradient))
    )
    exp_avg.copy_(first)
    exp_avg_sq.copy_(second)
    first_hat = q(first * correction1)
    # √ in FP64 rounded once is FP32's correctly rounded √ (torch's vectorised FP32 √ on the CPU is not)
    second_hat = q(torch.sqrt(q(second * correction2).double()).float())
    ratio = q(first_hat / q(second_hat + constants.eps))
    decay = q(q(lr * constants.weight_decay) * weight)
    _apply_update(param, weight, q(q(lr * ratio) + decay), compensation, scalars, rounding, q)
