"""`SGD` and `AdamW` for BF16 weights with BF16 states: nearest, stochastic or Kahan-compensated weight updates.

BF16 parameters on a CUDA device are updated by the fused multi-tensor kernels (`kernel.py`); on the CPU, and for
FP32 parameters (updated plainly in FP32, the seed's "32-bit weights" ablation), the plain-PyTorch rules of
`reference.py` run, which the kernels match bit for bit.
"""

from __future__ import annotations

import torch

from . import kernel, reference, sharding
from .reference import ARITHMETICS, UPDATES, AdamWConstants, Rounding, SgdConstants

_SEED_LIMIT = 2**64
_KEY_LIMIT = 2**32
# torch's check that a non-capturable optimizer is not being captured (generalised beyond CUDA in later torch)
_capture_health_check = (
    getattr(torch.optim.Optimizer, "_accelerator_graph_capture_health_check", None)
    or torch.optim.Optimizer._cuda_graph_capture_health_check
)


def _check_nonnegative(name: str, value) -> None:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a number or a one-element tensor, got shape {tuple(value.shape)}")
        if value.device.type == "cpu" and not value.item() >= 0:  # NaN too
            raise ValueError(f"{name}={value.item()} must be non-negative")
    elif isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name}={value!r} must be a non-negative number")


class _SixteenBitOptimizer(torch.optim.Optimizer):
    """What SGD and AdamW share: mode checks, state layout, Philox keys, and the split between kernel and reference."""

    _kind = ""

    def __init__(self, params, defaults: dict, update: str, arithmetic: str, seed: int, capturable: bool):
        if update not in UPDATES:
            raise ValueError(f"update={update!r} is not one of {list(UPDATES)}")
        if arithmetic not in ARITHMETICS:
            raise ValueError(f"arithmetic={arithmetic!r} is not one of {list(ARITHMETICS)}")
        if not isinstance(seed, int) or not 0 <= seed < _SEED_LIMIT:
            raise ValueError(f"seed={seed!r} must be an integer in [0, 2**64)")
        _check_nonnegative("lr", defaults["lr"])
        defaults = dict(defaults, update=update, arithmetic=arithmetic, seed=seed, capturable=bool(capturable))
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for param in group["params"]:
            if param.dtype not in (torch.bfloat16, torch.float32):
                raise TypeError(f"params must be torch.bfloat16 or torch.float32 tensors, got {param.dtype}")
            if group["capturable"] and param.device.type != "cuda":
                raise ValueError(f"capturable=True needs CUDA params, got one on {param.device}")
            if param.dtype == torch.bfloat16 and param.device.type == "cuda" and not param.is_contiguous():
                raise ValueError("params: BF16 CUDA params must be contiguous (the fused kernels read them flat)")

    def set_rng_key(self, param: torch.Tensor, key: int, element_offset: int = 0) -> None:
        """Give `param` an explicit stochastic-rounding stream: its Philox key and the index its first element has
        in the whole tensor (a shard of a tensor split across ranks draws the numbers of its elements there).

        Without it a param's key is its index in the optimizer's parameter order (over all groups) when it first
        steps, and its offset 0; both are kept in the state dict. A DTensor param (FSDP2's `fully_shard`) is
        already the whole tensor: `element_offset` places that, and each rank adds its shard's place from the
        DTensor's placements (`sharding`), so every sharding draws the same bits per element."""
        if not isinstance(key, int) or not 0 <= key < _KEY_LIMIT:
            raise ValueError(f"key={key!r} must be an integer in [0, 2**32)")
        if not isinstance(element_offset, int) or element_offset < 0:
            raise ValueError(f"element_offset={element_offset!r} must be a non-negative integer")
        if not any(param is p for group in self.param_groups for p in group["params"]):
            raise ValueError("param is not one of this optimizer's parameters")
        self.state[param].update(rng_key=key, element_offset=element_offset)

    def _state_names(self, group: dict) -> tuple[str, ...]:
        raise NotImplementedError

    def _init_state(self, group: dict, param: torch.Tensor, index: int) -> dict:
        state = self.state[param]
        if "step" not in state:
            step_device = param.device if group["capturable"] else "cpu"
            state["step"] = torch.zeros((), dtype=torch.float32, device=step_device)
            for name in self._state_names(group):
                state[name] = torch.zeros_like(param, memory_format=torch.contiguous_format)
            if group["update"] == "kahan" and param.dtype == torch.bfloat16:
                state["compensation"] = torch.zeros_like(param, memory_format=torch.contiguous_format)
            state.setdefault("rng_key", index)
            state.setdefault("element_offset", 0)
        return state

    def _constants(self, group: dict, arithmetic: str):
        raise NotImplementedError

    def _update_reference(self, param, grad, state, row, constants, rounding, arithmetic) -> None:
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure=None):
        """One optimizer step over every parameter with a gradient (parameters whose grad is None are skipped)."""
        _capture_health_check(self)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        index = 0
        for group in self.param_groups:
            _check_nonnegative("lr", group["lr"])
            params, grads, states = [], [], []
            for param in group["params"]:
                index += 1
                if param.grad is None:
                    continue
                grad = param.grad
                if grad.is_sparse:
                    raise RuntimeError("grad: sparse gradients are not supported by cutlass_ext.optim")
                if grad.is_complex():
                    raise RuntimeError("grad: complex gradients are not supported by cutlass_ext.optim")
                state = self._init_state(group, param, index - 1)
                # a DTensor (FSDP2) steps its local shard; its elements keep their indices in the whole tensor
                params.append(sharding.local_tensor(param))
                grads.append(sharding.local_tensor(grad))
                states.append(sharding.local_state(state, param, group["update"]))
            if params:
                self._step_group(group, params, grads, states)
        return loss

    def _step_group(self, group: dict, params, grads, states) -> None:
        torch._foreach_add_([state["step"] for state in states], 1.0)
        fused, plain = [], []
        for i, param in enumerate(params):
            (fused if param.dtype == torch.bfloat16 and param.device.type == "cuda" else plain).append(i)
        if fused:
            self._step_fused(group, [params[i] for i in fused], [grads[i] for i in fused], [states[i] for i in fused])
        for i in plain:
            param, state = params[i], states[i]
            # FP32 params update plainly: FP32 arithmetic, FP32 hyperparameters, no rounding of w - u
            arithmetic = group["arithmetic"] if param.dtype == torch.bfloat16 else "fp32"
            row = self._scalars(group, [state], arithmetic)[0].to(param.device, non_blocking=True)
            rounding = Rounding(group["update"], group["seed"], state["rng_key"], state["element_offset"])
            self._update_reference(
                param, grads[i], state, row, self._constants(group, arithmetic), rounding, arithmetic
            )

    def _scalars(self, group: dict, states, arithmetic: str) -> torch.Tensor:
        steps = torch.stack([state["step"] for state in states])
        return reference.step_scalars(self._kind, group["lr"], steps, group.get("betas"), arithmetic)

    def _step_fused(self, group, params, grads, states) -> None:
        for device in {p.device for p in params}:
            chosen = [i for i, p in enumerate(params) if p.device == device]
            kernel.fused_step(
                self._kind,
                [params[i] for i in chosen],
                [grads[i] for i in chosen],
                [[states[i][name] for i in chosen] for name in self._kernel_state_names(group)],
                # non_blocking: a blocking copy from pageable memory would wait for the whole stream every step
                self._scalars(group, [states[i] for i in chosen], group["arithmetic"]).to(device, non_blocking=True),
                self._constants(group, group["arithmetic"]),
                group["update"],
                group["arithmetic"],
                group["seed"],
                [states[i]["rng_key"] for i in chosen],
                [states[i]["element_offset"] for i in chosen],
                check=False,
            )

    def _kernel_state_names(self, group: dict) -> tuple[str, ...]:
        names = self._state_names(group)
        return names + (("compensation",) if group["update"] == "kahan" else ())


class SGD(_SixteenBitOptimizer):
    """SGD with momentum, dampening, Nesterov and (coupled) weight decay, as torch.optim.SGD, on BF16 weights and a
    BF16 momentum buffer (seed 004 Algorithms 2 and 3).

    update: how the weight update w <- w - u is rounded to BF16: `"nearest"`, `"stochastic"` (reproducible: Philox
    keyed by `seed`, the step, the parameter and the element; see `reference`), or `"kahan"` (a BF16 compensation
    buffer per parameter). The momentum buffer is always rounded to nearest. arithmetic: `"fp32"` computes the
    update in FP32; `"bf16"` rounds every operation to BF16 (the seed's 16-bit FPU). FP32 parameters update plainly
    in FP32. capturable: step counters on the device and `lr` may be a CUDA tensor, for CUDA-graph capture.
    """

    _kind = "sgd"

    def __init__(
        self,
        params,
        lr,
        momentum=0.0,
        dampening=0.0,
        nesterov=False,
        weight_decay=0.0,
        *,
        update="nearest",
        arithmetic="fp32",
        seed=0,
        capturable=False,
    ):
        _check_nonnegative("momentum", momentum)
        _check_nonnegative("weight_decay", weight_decay)
        if not isinstance(dampening, (int, float)) or not 0 <= dampening <= 1:
            raise ValueError(f"dampening={dampening!r} must be a number in [0, 1]")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("nesterov=True needs momentum > 0 and dampening = 0")
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "dampening": dampening,
            "nesterov": nesterov,
            "weight_decay": weight_decay,
        }
        super().__init__(params, defaults, update, arithmetic, seed, capturable)

    def _state_names(self, group):
        return ("momentum_buffer",) if group["momentum"] != 0 else ()

    def _constants(self, group, arithmetic):
        return SgdConstants.from_group(group, arithmetic)

    def _update_reference(self, param, grad, state, row, constants, rounding, arithmetic):
        reference.sgd_update(
            param, grad, state.get("momentum_buffer"), state.get("compensation"), row, constants, rounding, arithmetic
        )


class AdamW(_SixteenBitOptimizer):
    """AdamW with decoupled weight decay (u = lr·m̂/(√v̂ + eps) + lr·weight_decay·w) on BF16 weights and BF16
    moments (seed 004 Algorithms 4 and 5); amsgrad is not offered.

    update: how the weight update w <- w - u is rounded to BF16: `"nearest"`, `"stochastic"` (reproducible: Philox
    keyed by `seed`, the step, the parameter and the element; see `reference`), or `"kahan"` (a BF16 compensation
    buffer per parameter). The moments are always rounded to nearest. arithmetic: `"fp32"` computes the update in
    FP32; `"bf16"` rounds every operation to BF16 (the seed's 16-bit FPU). FP32 parameters update plainly in FP32.
    capturable: step counters on the device and `lr` may be a CUDA tensor, for CUDA-graph capture.
    """

    _kind = "adamw"

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=1e-2,
        *,
        update="nearest",
        arithmetic="fp32",
        seed=0,
        capturable=False,
    ):
        if len(betas) != 2 or not all(
            isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in betas
        ):
            raise ValueError(f"betas={betas!r} must be two numbers in [0, 1)")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:  # NaN too
            raise ValueError(f"eps={eps!r} must be a positive number")
        _check_nonnegative("weight_decay", weight_decay)
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults, update, arithmetic, seed, capturable)

    def _state_names(self, group):
        return ("exp_avg", "exp_avg_sq")

    def _constants(self, group, arithmetic):
        return AdamWConstants.from_group(group, arithmetic)

    def _update_reference(self, param, grad, state, row, constants, rounding, arithmetic):
        reference.adamw_update(
            param,
            grad,
            state["exp_avg"],
            state["exp_avg_sq"],
            state.get("compensation"),
            row,
            constants,
            rounding,
            arithmetic,
        )
