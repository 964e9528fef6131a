"""Drop-in modules whose matrix products run through `cutlass_ext.gemm`, and whole-model conversion.

ext.nn.convert(model, mode="tf32tf32")        # every nn.Linear of model, in place
ext.nn.unconvert(model)                       # back to torch.nn.Linear
fp8 = ext.nn.Fp8Linear.from_linear(linear)    # inference on Hopper: FP8 weights, per-token activations
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.nn.utils import parametrize

from .arguments import checked_model, checked_names, is_skipped
from .fp8_linear import Fp8Linear
from .gemm import check_mode, gemm

__all__ = ["Fp8Linear", "Linear", "convert", "unconvert"]

_AUTOCAST_INPUTS = (torch.float32, torch.bfloat16, torch.float16)


class Linear(torch.nn.Linear):
    """`torch.nn.Linear` (float32) with y = x·Wᵀ + b computed by one `gemm(x, W.T, mode, bias=b)` call (the bias
    added in the kernels' epilogue; after the product in an int8x<moduli> mode), forward and backward; same
    parameters and state-dict keys. mode: any of `gemm`'s.

    Inside `torch.autocast("cuda")` the layer still computes in FP32 and returns FP32 (a corrected mode is FP32 by
    definition): bfloat16 and float16 inputs are upcast. The weight stays float32.
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, mode: str = "tf32tf32", device=None, dtype=None
    ):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.mode = check_mode(mode)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        autocast = torch.is_autocast_enabled("cuda")
        self._check(input, autocast)
        if autocast:
            with torch.autocast("cuda", enabled=False):  # gemm's own torch ops keep FP32
                return gemm(input.float(), self.weight.mT, self.mode, bias=self.bias)
        return gemm(input, self.weight.mT, self.mode, bias=self.bias)

    def _check(self, input, autocast: bool) -> None:
        """The layer's arguments by their names here (gemm would name them a, b and bias)."""
        if not isinstance(input, torch.Tensor):
            raise TypeError(f"input must be a torch.Tensor; got {type(input).__name__}")
        if input.dtype != torch.float32 and not (autocast and input.dtype in _AUTOCAST_INPUTS):
            expected = "float32 (or bfloat16 / float16 under CUDA autocast)"
            raise TypeError(f"input must be {expected}; got {input.dtype}")
        for name, parameter in (("weight", self.weight), ("bias", self.bias)):
            if parameter is not None and parameter.dtype != torch.float32:
                raise TypeError(
                    f"{name} must be float32 (this layer computes in FP32; keep it float32 under autocast); "
                    f"got {parameter.dtype}"
                )
        if input.device.type != "cuda":
            raise ValueError(f"input must be a CUDA tensor; got device {input.device}")
        if self.weight.device != input.device:
            raise ValueError(f"weight is on {self.weight.device} and input on {input.device}: they must share one")
        if input.dim() == 0 or input.shape[-1] != self.in_features:
            raise ValueError(
                f"input has shape {tuple(input.shape)}: its last dimension must be in_features={self.in_features}"
            )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, mode={self.mode!r}"


def convert(model: torch.nn.Module, mode: str = "tf32tf32", skip: Iterable[str] | str | None = None) -> torch.nn.Module:
    """Make every `torch.nn.Linear` of `model` (exactly that class, `model` itself included) an `ext.nn.Linear` in
    `mode`, in place, and set every `ext.nn.Linear` already there to `mode`; returns `model`.

    The modules change class where they are (as `torch.nn.utils.parametrize` does), so parameters, state-dict keys,
    hooks, optimizers holding the parameters and every other reference to a layer stay valid. skip: qualified
    names (as in `model.named_modules()`) of layers, or of modules whose layers all stay `torch.nn.Linear` (a layer
    reachable under several names stays if one is skipped).
    Convert before `fully_shard` or parametrizations, which give the layers classes of their own: a parametrized
    `torch.nn.Linear` not skipped is refused (ValueError naming it, the model unchanged); a parametrized
    `ext.nn.Linear` takes the new mode.
    """
    mode = check_mode(mode)
    checked_model(model)
    skip = set() if skip is None else checked_names(model, skip, "module")
    named = list(model.named_modules(remove_duplicate=False))
    kept = {id(module) for name, module in named if is_skipped(name, skip)}  # a layer under several names: any
    for name, module in named:  # all refusals before any change
        if id(module) not in kept and _parametrized_class(module) is torch.nn.Linear:
            raise ValueError(
                f"layer {name!r} has parametrizations, which gave it a class of its own: convert before registering "
                "them, or skip it"
            )
    for _, module in named:
        if id(module) in kept:
            continue
        if type(module) in (torch.nn.Linear, Linear):
            module.__class__ = Linear
            module.mode = mode
        elif _parametrized_class(module) is Linear:  # a converted layer parametrized since: its class stays
            module.mode = mode
    return model


def _parametrized_class(module: torch.nn.Module) -> type | None:
    """The class a parametrized module had before `torch.nn.utils.parametrize` gave it its own; None if none."""
    return parametrize.type_before_parametrizations(module) if parametrize.is_parametrized(module) else None


def unconvert(model: torch.nn.Module) -> torch.nn.Module:
    """The inverse of `convert`: every `ext.nn.Linear` of `model` becomes a `torch.nn.Linear` again, in place;
    returns `model`. One with parametrizations is refused (ValueError naming it, the model unchanged)."""
    modules = list(checked_model(model).named_modules())
    for name, module in modules:  # all refusals before any change
        if _parametrized_class(module) is Linear:
            raise ValueError(
                f"layer {name!r} has parametrizations, which gave it a class of its own: remove them "
                "(torch.nn.utils.parametrize.remove_parametrizations) before unconvert"
            )
    for _, module in modules:
        if type(module) is Linear:
            module.__class__ = torch.nn.Linear
            del module.mode
    return model
