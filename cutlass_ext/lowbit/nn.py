"""Layers whose forward GEMMs run with a low-bit accumulator, and model conversion (seed 002, section 3, App. C)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F

from ..arguments import checked_model, checked_names, is_skipped
from . import LowbitConfig, layer_dtype, linear, matmul


def _checked(config) -> LowbitConfig:
    if not isinstance(config, LowbitConfig):
        raise TypeError(f"config must be a LowbitConfig; got {type(config).__name__}")
    return config


def _describe(config: LowbitConfig) -> str:
    operands = f", operands={config.operands.name}" if config.operands is not None else ""
    return f"lowbit={config.format.name}, ste={config.ste!r}{operands}"


class Linear(torch.nn.Linear):
    """`torch.nn.Linear` with y = x·Wᵀ accumulated by `config`, then + bias in FP32; same parameters and keys, and
    the output dtype torch's layer gives (`lowbit.layer_dtype`)."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, *, config: LowbitConfig, device=None, dtype=None
    ):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.config = _checked(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.config)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, {_describe(self.config)}"


class Conv2d(torch.nn.Conv2d):
    """`torch.nn.Conv2d` as unfold + a low-bit-accumulator GEMM over (C/groups)·kh·kw; bias added in FP32 after.

    The reduction index runs over channels, then kernel rows, then kernel columns (`F.unfold`'s order), the order
    the accumulator chain sees. Every padding torch's layer takes: sizes, "same", "valid", and each padding_mode
    (the padded input is what the chain sees; padded zeros add zero products). Unbatched (C, H, W) input and the
    output dtype as torch's layer (`lowbit.layer_dtype`).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        *,
        config: LowbitConfig,
        device=None,
        dtype=None,
    ):
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            device=device,
            dtype=dtype,
        )
        self.config = _checked(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor; got {getattr(x, 'dtype', type(x).__name__)}")
        if x.dim() not in (3, 4) or x.shape[-3] != self.in_channels:
            c = self.in_channels
            raise ValueError(f"x must be (N, {c}, H, W) or ({c}, H, W); got {tuple(x.shape)}")
        if x.dim() == 3:  # unbatched, as torch's layer takes it
            return self.forward(x.unsqueeze(0)).squeeze(0)
        padding = self.padding
        if isinstance(padding, str) or self.padding_mode != "zeros":  # as torch's layer: pad first ("same" may be
            mode = "constant" if self.padding_mode == "zeros" else self.padding_mode  # uneven), then none
            x = F.pad(x, self._reversed_padding_repeated_twice, mode=mode)
            padding = (0, 0)
        n, _, height, width = x.shape
        kh, kw = self.kernel_size
        out_h = (height + 2 * padding[0] - self.dilation[0] * (kh - 1) - 1) // self.stride[0] + 1
        out_w = (width + 2 * padding[1] - self.dilation[1] * (kw - 1) - 1) // self.stride[1] + 1
        if out_h < 1 or out_w < 1:
            reach = f"{kh}x{kw} kernel at dilation {tuple(self.dilation)}"
            raise ValueError(f"x's {height}x{width} plane, padded by {tuple(padding)}, is smaller than the {reach}")
        columns = F.unfold(x, self.kernel_size, self.dilation, padding, self.stride)  # (N, C·kh·kw, L)
        g = self.groups
        columns = columns.reshape(n, g, columns.shape[1] // g, columns.shape[2])
        weight = self.weight.reshape(g, self.out_channels // g, -1)
        y = matmul(weight, columns, self.config)  # (N, g, O/g, L)
        if self.bias is not None:
            y = y + self.bias.float().reshape(g, -1, 1)
        return y.reshape(n, self.out_channels, out_h, out_w).to(layer_dtype(x, self.weight))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, {_describe(self.config)}"


_TWINS = {torch.nn.Linear: Linear, torch.nn.Conv2d: Conv2d}


def convert(model: torch.nn.Module, config: LowbitConfig, skip: Iterable[str] | None = None) -> torch.nn.Module:
    """Make every `nn.Linear` and `nn.Conv2d` of `model` (exactly those classes, `model` itself included) its
    low-bit twin, in place; returns `model`.

    skip: qualified names (as in `model.named_modules()`) of layers left exact, or of modules whose layers all stay
    exact (as `ext.nn.convert`'s skip). None keeps the last of these layers
    exact, as the seed does (appendix C.2: the final fully connected layer): the layer the last such name reaches,
    under all its names. The layers change class where they are
    (as `ext.nn.convert` does): parameters, state-dict keys, hooks and a layer reachable under several names stay as
    they were (such a layer stays exact if any of its names is skipped). Everything is checked before any layer
    changes.
    """
    _checked(config)
    named = list(checked_model(model).named_modules(remove_duplicate=False))
    layers = [(name, module) for name, module in named if type(module) in _TWINS]
    if skip is None:
        skip = {layers[-1][0]} if layers else set()
    else:
        skip = checked_names(model, skip, "module")
    kept = {id(module) for name, module in layers if is_skipped(name, skip)}
    chosen = {id(module): module for _, module in layers if id(module) not in kept}  # each layer once
    for module in chosen.values():
        module.__class__ = _TWINS[type(module)]
        module.config = config
    return model


def set_underflow(model: torch.nn.Module, on: bool) -> int:
    """Turn underflow flushing on or off in every low-bit layer of `model` (dual-stage, Table 2); returns the count."""
    if not isinstance(on, bool):
        raise ValueError(f"on={on!r} must be True or False")
    count = 0
    for module in checked_model(model).modules():
        if isinstance(module, (Linear, Conv2d)):
            module.config = module.config.with_underflow(on)
            count += 1
    return count
