"""Drop-in modules whose matrix products run through `cutlass_ext.gemm`."""

from __future__ import annotations

import torch

from .gemm import MODES, gemm


class Linear(torch.nn.Linear):
    """`torch.nn.Linear` (float32) with y = x·Wᵀ + b computed by `gemm(..., mode=mode)`, forward and backward."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, mode: str = "tf32tf32", device=None, dtype=None
    ):
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} is not one of {list(MODES)}")
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x has {x.shape[-1]} features in its last dimension; this layer takes {self.in_features}")
        rows = x.reshape(-1, self.in_features)
        y = gemm(rows, self.weight.t(), mode=self.mode)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, mode={self.mode!r}"
