"""`SGD` and `AdamW` for BF16 weights with BF16 states: nearest, stochastic or Kahan-compensated weight updates.

BF16 parameters on a CUDA device are updated by the fused multi-tensor kernels (`kernel.py`); on the CPU, and for
FP32 parameters (updated plainly in FP32, the seed's "32-bit weights" ablation), the plain-PyTorch rules of
`reference.py` run, which the kernels match bit for bit.
"""

from __future__ import annotations

import collections
import math

import torch

from ..arguments import is_real
from . import kernel, reference, sharding
from .reference import ARITHMETICS, UPDATES, AdamWConstants, Rounding, SgdConstants

_SEED_BITS = 64
_KEY_BITS = 32
# torch's check that a non-capturable optimizer is not being captured (generalised beyond CUDA in later torch)
_capture_health_check = (
    getattr(torch.optim.Optimizer, "_accelerator_graph_capture_health_check", None)
    or torch.optim.Optimizer._cuda_graph_capture_health_check
)


FP32_MAX = float(torch.finfo(torch.float32).max)  # the kernels take hyperparameters as FP32


def _check_nonnegative(name: str, value) -> None:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dim() > 1:
            raise ValueError(f"{name} must be a number or a one-element tensor, got shape {tuple(value.shape)}")
        if not value.is_floating_point() and value.dtype in (torch.bool, torch.complex64, torch.complex128):
            raise ValueError(f"{name} must be a real number; got a {value.dtype} tensor")
        # only a CPU tensor is read: reading a CUDA one would wait for its stream (and break graph capture)
        if value.device.type == "cpu" and not 0 <= value.item() <= FP32_MAX:  # NaN too
            raise ValueError(f"{name}={value.item()} must be a non-negative number finite in FP32")
    elif not is_real(value) or not 0 <= value <= FP32_MAX:
        raise ValueError(f"{name}={value!r} must be a non-negative number finite in FP32")


def _check_positive(name: str, value) -> None:
    if not is_real(value) or not 0 < value < math.inf:  # NaN too
        raise ValueError(f"{name}={value!r} must be a finite positive number")


def _check_fraction(name: str, value) -> None:
    if not is_real(value) or not 0 <= value <= 1:
        raise ValueError(f"{name}={value!r} must be a number in [0, 1]")


def _check_flag(name: str, value) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name}={value!r} must be a bool")


def _check_choice(name: str, value, choices) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {list(choices)}")


def _check_index(name: str, value, bits: int | None = None) -> None:
    """A non-negative integer, below 2**bits when given: seeds, Philox keys and element offsets."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (bits is not None and value >> bits):
        bound = "a non-negative integer" if bits is None else f"an integer in [0, 2**{bits})"
        raise ValueError(f"{name}={value!r} must be {bound}")


def _check_nesterov(group: dict) -> None:
    _check_flag("nesterov", group["nesterov"])
    if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
        raise ValueError("nesterov=True needs momentum > 0 and dampening = 0")


def _check_betas(betas) -> None:
    """Two numbers in [0, 1), in any sequence (a tuple, a list, a numpy array, a config system's list)."""
    try:
        values = None if isinstance(betas, (str, bytes)) else tuple(betas)
    except TypeError:
        values = None
    if values is None or len(values) != 2 or not all(is_real(beta) and 0 <= beta < 1 for beta in values):
        raise ValueError(f"betas={betas!r} must be two numbers in [0, 1)")


def _check_param(param: torch.Tensor, capturable: bool) -> None:
    if param.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"params must be torch.bfloat16 or torch.float32 tensors, got {param.dtype}")
    if capturable and param.device.type != "cuda":
        raise ValueError(f"capturable=True needs CUDA params, got one on {param.device}")
    if param.dtype == torch.bfloat16 and param.device.type == "cuda" and not param.is_contiguous():
        raise ValueError("params: BF16 CUDA params must be contiguous (the fused kernels read them flat)")


def _group_tensors(params) -> list[torch.Tensor]:
    """The tensors of a group's `params` as torch's add_param_group reads them: one tensor, or tensors and
    (name, tensor) pairs; anything else torch refuses with its own error."""
    params = [params] if isinstance(params, torch.Tensor) else params
    entries = [entry[1] if isinstance(entry, tuple) and len(entry) == 2 else entry for entry in params]
    return [entry for entry in entries if isinstance(entry, torch.Tensor)]


def _check_state_tensor(name: str, value, param: torch.Tensor) -> None:
    """A loaded state tensor as `_init_state` makes it: the param's shape, dtype and device, and contiguous (the
    fused kernels read it flat)."""
    if not isinstance(value, torch.Tensor):
        got = type(value).__name__
    else:
        layout = "" if sharding.local_tensor(value).is_contiguous() else "non-contiguous "
        if not layout and (value.shape, value.dtype, value.device) == (param.shape, param.dtype, param.device):
            return
        got = f"a {layout}{value.dtype} tensor of shape {tuple(value.shape)} on {value.device}"
    raise ValueError(
        f"{name} must be a contiguous {param.dtype} tensor of shape {tuple(param.shape)} on {param.device}, got {got}"
    )


def _check_step(name: str, step, device: torch.device) -> torch.Tensor:
    """A loaded step counter as `_init_state` makes it: a 0-dim FP32 tensor on `device` (moved there, as torch
    moves a capturable one, so a checkpoint loaded with map_location still steps)."""
    if not isinstance(step, torch.Tensor) or step.numel() != 1 or step.is_complex() or step.dtype == torch.bool:
        raise ValueError(f"{name} must be a one-element real tensor, got {step!r}")
    value = step.item()
    if not 0 <= value < math.inf or value != int(value):
        raise ValueError(f"{name}={value!r} must be a non-negative whole number")
    return step.reshape(()).to(dtype=torch.float32, device=device)


class _SixteenBitOptimizer(torch.optim.Optimizer):
    """What SGD and AdamW share: mode checks, state layout, Philox keys, and the split between kernel and reference."""

    _kind = ""
    # the hyperparameters every group holds (a loaded state dict's groups too)
    _group_keys = ("lr", "weight_decay", "update", "arithmetic", "seed", "capturable")

    def __init__(self, params, defaults: dict, update: str, arithmetic: str, seed: int, capturable: bool):
        defaults = dict(defaults, update=update, arithmetic=arithmetic, seed=seed, capturable=bool(capturable))
        # the defaults themselves, even those every group overrides, as torch's optimizers do
        self._check_hyperparameters(defaults)
        super().__init__(params, defaults)

    # torch's options a group may carry that these optimizers do not implement, with the value that means "off"
    _torch_options = {"maximize": False, "differentiable": False}

    def _check_torch_options(self, group: dict) -> None:
        """A group asking for a torch option these optimizers lack (set in the group or by hand) is refused by name:
        stepping without it would silently train otherwise."""
        for key, off in self._torch_options.items():
            if key in group and group[key] != off and group[key] is not None:
                raise ValueError(f"{key}={group[key]!r}: cutlass_ext.optim.{type(self).__name__} does not offer it")

    def _check_hyperparameters(self, group: dict) -> None:
        """The checks of the constructor's arguments, on the constructor's defaults, on each group (the defaults
        merged with its own keys) and on each loaded group; errors name the key."""
        self._check_torch_options(group)
        _check_nonnegative("lr", group["lr"])
        _check_nonnegative("weight_decay", group["weight_decay"])
        _check_choice("update", group["update"], UPDATES)
        _check_choice("arithmetic", group["arithmetic"], ARITHMETICS)
        _check_index("seed", group["seed"], _SEED_BITS)
        _check_flag("capturable", group["capturable"])

    def _check_group(self, group: dict) -> None:
        self._check_hyperparameters(group)
        for param in _group_tensors(group["params"]):
            _check_param(param, group["capturable"])

    def add_param_group(self, param_group: dict) -> None:
        # checked before torch appends it, so a refused group leaves param_groups as they were
        if isinstance(param_group, dict) and "params" in param_group:  # torch names other shapes itself
            if not isinstance(param_group["params"], (torch.Tensor, set)):
                param_group["params"] = list(param_group["params"])  # an iterator is read once, for both checks
            self._check_group({**self.defaults, **param_group})
        super().add_param_group(param_group)

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's load, then the loaded groups and states checked as the constructor and `step` need them; a
        refused state dict raises ValueError naming the group, parameter index or key, and leaves the optimizer's
        previous state in place."""
        previous = self.state, self.param_groups
        # torch runs the post-hooks inside its load: they wait until the loaded state has passed the checks
        post_hooks = self.__dict__.get("_optimizer_load_state_dict_post_hooks")
        deferred = list((post_hooks or {}).values())
        if post_hooks is not None:
            self._optimizer_load_state_dict_post_hooks = collections.OrderedDict()
        try:
            super().load_state_dict(state_dict)  # builds new state and group objects: `previous` is untouched
        finally:
            if post_hooks is not None:
                post_hooks.update(self._optimizer_load_state_dict_post_hooks)  # any a pre-hook registered (ran)
                self._optimizer_load_state_dict_post_hooks = post_hooks
        try:
            self._check_loaded()
        except ValueError as error:
            self.state, self.param_groups = previous
            raise ValueError(f"state_dict: {error}") from None
        self.__dict__.pop("_beta_tables", None)  # the loaded groups are new objects
        for hook in deferred:
            hook(self)

    def _check_loaded(self) -> None:
        for number, group in enumerate(self.param_groups):
            missing = [key for key in self._group_keys if key not in group]
            if missing:
                raise ValueError(f"param_groups[{number}] lacks {missing}")
            try:
                self._check_group(group)
            except (TypeError, ValueError) as error:
                raise ValueError(f"param_groups[{number}]: {error}") from None
        held = {id(param) for group in self.param_groups for param in group["params"]}
        if any(id(key) not in held for key in self.state):
            raise ValueError("state holds entries for parameters that no group holds")
        index = 0
        for group in self.param_groups:
            for param in group["params"]:
                if param in self.state:
                    self._check_param_state(group, param, self.state[param], index)
                index += 1

    def _check_param_state(self, group: dict, param: torch.Tensor, state, index: int) -> None:
        """One loaded parameter's state: what `_init_state` and `set_rng_key` make (its step moved into place)."""
        name = f"state[{index}]"
        if not isinstance(state, dict):
            raise ValueError(f"{name} must be a dict, got {type(state).__name__}")
        stream = {"rng_key", "element_offset"}
        if state.keys() <= stream:  # not stepped yet: at most the stream set_rng_key gave it
            tensors = ()
        else:
            tensors = self._tensor_state_names(group, param)
            expected = {"step", *stream, *tensors}
            if missing := sorted(expected - state.keys(), key=str):
                raise ValueError(f"{name} lacks keys {missing}")
            # buffers of settings changed since (momentum set to 0, Kahan switched off) stay, as in torch.optim
            tensors = tuple(key for key in self._all_tensor_state_names(param) if key in state)
            if unexpected := sorted(state.keys() - expected - set(tensors), key=str):
                raise ValueError(f"{name} has unexpected keys {unexpected}")
            state["step"] = _check_step(f"{name}['step']", state["step"], self._step_device(group, param))
        for key in tensors:
            _check_state_tensor(f"{name}[{key!r}]", state[key], param)
        if "rng_key" in state:
            _check_index(f"{name}['rng_key']", state["rng_key"], _KEY_BITS)
        if "element_offset" in state:
            _check_index(f"{name}['element_offset']", state["element_offset"])

    def set_rng_key(self, param: torch.Tensor, key: int, element_offset: int = 0) -> None:
        """Give `param` an explicit stochastic-rounding stream: its Philox key and the index its first element has
        in the whole tensor (a shard of a tensor split across ranks draws the numbers of its elements there).

        Without it a param's key is its index in the optimizer's parameter order (over all groups) when it first
        steps, and its offset 0; both are kept in the state dict. A DTensor param (FSDP2's `fully_shard`) is
        already the whole tensor: `element_offset` places that, and each rank adds its shard's place from the
        DTensor's placements (`sharding`), so every sharding draws the same bits per element."""
        _check_index("key", key, _KEY_BITS)
        _check_index("element_offset", element_offset)
        if not any(param is p for group in self.param_groups for p in group["params"]):
            raise ValueError("param is not one of this optimizer's parameters")
        self.state[param].update(rng_key=key, element_offset=element_offset)

    def _state_names(self, group: dict) -> tuple[str, ...]:
        raise NotImplementedError

    def _all_tensor_state_names(self, param: torch.Tensor) -> tuple[str, ...]:
        """Every state tensor `param` can hold under some setting of its group."""
        return self._every_state_name + (("compensation",) if param.dtype == torch.bfloat16 else ())

    def _tensor_state_names(self, group: dict, param: torch.Tensor) -> tuple[str, ...]:
        """The state tensors of `param`, each shaped like it: FP32 params round nothing, so need no compensation."""
        kahan = group["update"] == "kahan" and param.dtype == torch.bfloat16
        return self._state_names(group) + (("compensation",) if kahan else ())

    @staticmethod
    def _step_device(group: dict, param: torch.Tensor) -> torch.device:
        return param.device if group["capturable"] else torch.device("cpu")

    def _init_state(self, group: dict, param: torch.Tensor, index: int) -> dict:
        state = self.state[param]
        if "step" not in state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=self._step_device(group, param))
            for name in self._tensor_state_names(group, param):
                state[name] = torch.zeros_like(param, memory_format=torch.contiguous_format)
            state.setdefault("rng_key", index)
            state.setdefault("element_offset", 0)
        return state

    def _add_missing_state(self, group: dict, param: torch.Tensor, state: dict) -> bool:
        """Zero buffers for what the group needs now and a stepped param lacks (momentum raised from 0, an update
        switched to Kahan), as torch.optim.SGD makes its momentum buffer when momentum first turns on. True where
        that is a momentum buffer: its first step copies the gradient in, as on a param's first step."""
        restart = False
        for name in self._tensor_state_names(group, param):
            if state.get(name) is None:
                state[name] = torch.zeros_like(param, memory_format=torch.contiguous_format)
                restart = restart or name == "momentum_buffer"
        return restart

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
        for group in self.param_groups:  # every group before any steps: a refused step changes nothing
            # what a training loop or scheduler may edit by hand between steps
            _check_nonnegative("lr", group["lr"])
            _check_choice("update", group["update"], UPDATES)
            self._check_torch_options(group)
        index = 0
        for group in self.param_groups:
            params, grads, states, restarts = [], [], [], []
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
                restarts.append(self._add_missing_state(group, param, state))
                # a DTensor (FSDP2) steps its local shard; its elements keep their indices in the whole tensor
                params.append(sharding.local_tensor(param))
                grads.append(sharding.local_tensor(grad))
                states.append(sharding.local_state(state, param, group["update"]))
            if params:
                self._step_group(group, params, grads, states, restarts)
        return loss

    def _step_group(self, group: dict, params, grads, states, restarts) -> None:
        torch._foreach_add_([state["step"] for state in states], 1.0)
        fused, plain = [], []
        for i, param in enumerate(params):
            (fused if param.dtype == torch.bfloat16 and param.device.type == "cuda" else plain).append(i)
        if fused:
            self._step_fused(group, *([items[i] for i in fused] for items in (params, grads, states, restarts)))
        for i in plain:
            param, state = params[i], states[i]
            # FP32 params update plainly: FP32 arithmetic, FP32 hyperparameters, no rounding of w - u
            arithmetic = group["arithmetic"] if param.dtype == torch.bfloat16 else "fp32"
            row = self._scalars(group, [state], arithmetic, [restarts[i]])[0].to(param.device, non_blocking=True)
            rounding = Rounding(group["update"], group["seed"], state["rng_key"], state["element_offset"])
            self._update_reference(
                param, grads[i], state, row, self._constants(group, arithmetic), rounding, arithmetic
            )

    def _scalars(self, group: dict, states, arithmetic: str, restarts) -> torch.Tensor:
        steps = torch.stack([state["step"] for state in states])
        table = self._beta_table(group, steps.device) if "betas" in group else None
        rows = reference.step_scalars(self._kind, group["lr"], steps, group.get("betas"), arithmetic, table)
        return self._restarted(rows, restarts) if any(restarts) else rows

    def _beta_table(self, group: dict, device: torch.device) -> torch.Tensor:
        """The group's table of beta^(2^k) on `device`, held while the optimizer lives and its betas stay: a
        captured step reads it on every replay, and no step after the first uploads one (a scheduler that cycles
        the betas replaces it)."""
        betas = tuple(float(beta) for beta in group["betas"])
        held = self.__dict__.setdefault("_beta_tables", {})
        found = held.get((id(group), device))
        if found is None or found[0] != betas:
            found = held[id(group), device] = (betas, reference.squares_table(betas, device))
        return found[1]

    def _restarted(self, rows: torch.Tensor, restarts) -> torch.Tensor:
        """The rows of tensors whose momentum buffer was just made: their step is the buffer's first."""
        return rows

    def _step_fused(self, group, params, grads, states, restarts) -> None:
        for device in {p.device for p in params}:
            chosen = [i for i, p in enumerate(params) if p.device == device]
            kernel.fused_step(
                self._kind,
                [params[i] for i in chosen],
                [grads[i] for i in chosen],
                [[states[i][name] for i in chosen] for name in self._kernel_state_names(group)],
                # non_blocking: a blocking copy from pageable memory would wait for the whole stream every step
                self._scalars(
                    group, [states[i] for i in chosen], group["arithmetic"], [restarts[i] for i in chosen]
                ).to(device, non_blocking=True),
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
    The positional arguments are torch's, in torch's order; its `maximize` and `differentiable` are not offered
    (refused, in a group too).
    """

    _kind = "sgd"
    _group_keys = _SixteenBitOptimizer._group_keys + ("momentum", "dampening", "nesterov")

    def __init__(
        self,
        params,
        lr=1e-3,
        momentum=0.0,
        dampening=0.0,
        weight_decay=0.0,
        nesterov=False,
        *,
        update="nearest",
        arithmetic="fp32",
        seed=0,
        capturable=False,
    ):
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "dampening": dampening,
            "nesterov": nesterov,
            "weight_decay": weight_decay,
        }
        super().__init__(params, defaults, update, arithmetic, seed, capturable)

    def _check_hyperparameters(self, group):
        super()._check_hyperparameters(group)
        _check_nonnegative("momentum", group["momentum"])
        _check_fraction("dampening", group["dampening"])
        _check_nesterov(group)

    _every_state_name = ("momentum_buffer",)

    def _state_names(self, group):
        return ("momentum_buffer",) if group["momentum"] != 0 else ()

    def _restarted(self, rows, restarts):
        first = torch.tensor(restarts, device=rows.device) | (rows[:, 2] != 0)  # step_scalars' column 2: first step
        return torch.cat((rows[:, :2], first.to(rows.dtype).unsqueeze(1), rows[:, 3:]), dim=1)

    def _constants(self, group, arithmetic):
        return SgdConstants.from_group(group, arithmetic)

    def _update_reference(self, param, grad, state, row, constants, rounding, arithmetic):
        reference.sgd_update(
            param, grad, state.get("momentum_buffer"), state.get("compensation"), row, constants, rounding, arithmetic
        )


class AdamW(_SixteenBitOptimizer):
    """AdamW with decoupled weight decay (u = lr·m̂/(√v̂ + eps) + lr·weight_decay·w) on BF16 weights and BF16
    moments (seed 004 Algorithms 4 and 5); torch's `amsgrad`, `maximize`, `differentiable` and coupled weight decay
    (`decoupled_weight_decay=False`) are not offered (refused, in a group too).

    update: how the weight update w <- w - u is rounded to BF16: `"nearest"`, `"stochastic"` (reproducible: Philox
    keyed by `seed`, the step, the parameter and the element; see `reference`), or `"kahan"` (a BF16 compensation
    buffer per parameter). The moments are always rounded to nearest. arithmetic: `"fp32"` computes the update in
    FP32; `"bf16"` rounds every operation to BF16 (the seed's 16-bit FPU). FP32 parameters update plainly in FP32.
    capturable: step counters on the device and `lr` may be a CUDA tensor, for CUDA-graph capture.
    """

    _kind = "adamw"
    _group_keys = _SixteenBitOptimizer._group_keys + ("betas", "eps")
    _torch_options = {**_SixteenBitOptimizer._torch_options, "amsgrad": False, "decoupled_weight_decay": True}

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
        _check_betas(betas)  # before tuple() reads it
        defaults = {"lr": lr, "betas": tuple(float(beta) for beta in betas), "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults, update, arithmetic, seed, capturable)

    def _check_hyperparameters(self, group):
        super()._check_hyperparameters(group)
        _check_betas(group["betas"])
        _check_positive("eps", group["eps"])

    _every_state_name = ("exp_avg", "exp_avg_sq")

    def _state_names(self, group):
        return self._every_state_name

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
