"""`Fp8Linear`: an inference `nn.Linear` on Hopper's FP8 Tensor Cores (e4m3 weights quantized once, activations per
call), with the scales and the bias applied in the GEMM.

    layer = ext.nn.Fp8Linear.from_linear(linear, scaling="row")   # per output channel / per token
    layer = ext.nn.Fp8Linear.from_linear(linear, scaling="block") # DeepSeek-V3's 128x128 weight / 1x128 token blocks
    y = layer(x)                                                   # x (..., in_features) bf16 -> (..., out) bf16
"""

from __future__ import annotations

import torch

from .arguments import is_integer
from .fp8 import ACCUMULATIONS, OUT_DTYPES, gemm_fp8, quantize_fp8
from .fp8_rows import quantize_fp8_rows

SCALINGS = ("row", "tensor", "block")
_WEIGHT_BLOCK, _TOKEN_BLOCK = (128, 128), (1, 128)  # DeepSeek-V3's blocks (fp8_block)
_WEIGHT_DTYPE = torch.float8_e4m3fn
_INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_ROW_BYTES = 16  # the FP8 kernels read and write rows in 16-byte units (TMA)


def _readable(weight: torch.Tensor) -> bool:
    """Whether the weight's values exist to be checked (not a meta or fake tensor, as in a model built on `meta`)."""
    from torch._subclasses.fake_tensor import is_fake

    return weight.device.type != "meta" and not is_fake(weight)


class Fp8Linear(torch.nn.Module):
    """y ≈ x·Wᵀ + b with W held as e4m3 and a float32 scale, x quantized to e4m3 on each call (per token: one pass,
    `fp8_rows.quantize_fp8_rows`; per tensor: `ext.quantize_fp8`), the product, scales and bias in one
    `ext.gemm_fp8` call (tuned per shape).

    scaling: "row" scales each output channel of W (computed once) and each token of x (per call); "tensor" one
    scale for W and one for each call's x; "block" each 128x128 block of W and each token's 128-wide slices of x
    (DeepSeek-V3's recipe, the block-scaled kernel; weight_scale (ceil(out / 128), ceil(in / 128)), the multipliers
    W ≈ weight · scale that such checkpoints store as `weight_scale_inv`, assignable to the buffers as they are).
    accum: `gemm_fp8`'s accumulation ("promoted" as accurate as cuBLAS's default, "fast" all of K inside the Tensor
    Core; block scales are applied at each 128-deep k-block's promotion, so "promoted" only). out_dtype: the
    output's dtype (the bias is held in it).
    Buffers, not parameters: inference only. Convert the model's dtype before `from_linear` (`Module.to(dtype)` would
    cast the FP8 weight too). Needs an sm90 GPU; in_features a multiple of 16, out_features of 8 (4 for float32
    output).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        scaling: str = "row",
        accum: str = "promoted",
        out_dtype: torch.dtype = torch.bfloat16,
        device=None,
    ):
        super().__init__()
        if scaling not in SCALINGS:
            raise ValueError(f"scaling={scaling!r} is not one of {list(SCALINGS)}")
        if accum not in ACCUMULATIONS:
            raise ValueError(f"accum={accum!r} is not one of {list(ACCUMULATIONS)}")
        if scaling == "block" and accum != "promoted":
            raise ValueError(f"accum={accum!r}: block scales are applied as each k-block is promoted; use 'promoted'")
        if out_dtype not in OUT_DTYPES.values():
            raise TypeError(f"out_dtype must be one of {list(OUT_DTYPES.values())}; got {out_dtype}")
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if not is_integer(value) or value < 1:  # numpy ints too
                raise ValueError(f"{name}={value!r} must be a positive integer")
        if in_features % _ROW_BYTES:
            raise ValueError(f"in_features={in_features} must be a multiple of {_ROW_BYTES} (FP8 rows of K bytes)")
        columns = _ROW_BYTES // out_dtype.itemsize
        if out_features % columns:
            raise ValueError(f"out_features={out_features} must be a multiple of {columns} for {out_dtype} output")
        self.in_features, self.out_features = in_features, out_features
        self.scaling, self.accum, self.out_dtype = scaling, accum, out_dtype
        scale_shape = {
            "row": (out_features, 1),
            "tensor": (),
            "block": (-(-out_features // _WEIGHT_BLOCK[0]), -(-in_features // _WEIGHT_BLOCK[1])),
        }[scaling]
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=_WEIGHT_DTYPE, device=device))
        self.register_buffer("weight_scale", torch.ones(scale_shape, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.zeros(out_features, dtype=out_dtype, device=device) if bias else None)

    @classmethod
    def from_linear(
        cls,
        linear: torch.nn.Linear,
        scaling: str = "row",
        accum: str = "promoted",
        out_dtype: torch.dtype | None = None,
    ) -> Fp8Linear:
        """An Fp8Linear computing what `linear` does: its weight quantized now (per output channel for "row", per
        128x128 block for "block"), its bias kept in out_dtype (default: the weight's dtype), on its device."""
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"linear must be a torch.nn.Linear; got {type(linear).__name__}")
        weight = linear.weight.detach().contiguous()  # the GEMM reads the weight K-major, whatever its layout
        if _readable(weight) and not bool(torch.isfinite(weight).all()):  # once, at conversion
            raise ValueError("linear.weight holds Inf or NaN: its FP8 scales would not be finite")
        layer = cls(
            linear.in_features,
            linear.out_features,
            linear.bias is not None,
            scaling=scaling,
            accum=accum,
            out_dtype=out_dtype or weight.dtype,
            device=weight.device,
        )
        layer.weight, scale = quantize_fp8(weight, _WEIGHT_DTYPE, granularity=scaling, block=_WEIGHT_BLOCK)
        layer.weight_scale = scale.reshape(layer.weight_scale.shape)
        if linear.bias is not None:
            layer.bias = linear.bias.detach().to(layer.out_dtype).clone()
        return layer

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check(input)
        rows = input.reshape(-1, self.in_features).contiguous()  # K-major, as the GEMM reads the activations
        if self.scaling == "row":
            rows_fp8, rows_scale = quantize_fp8_rows(rows, _WEIGHT_DTYPE)  # one pass per token
        else:
            rows_fp8, rows_scale = quantize_fp8(rows, _WEIGHT_DTYPE, granularity=self.scaling, block=_TOKEN_BLOCK)
        output = gemm_fp8(
            rows_fp8, self.weight, rows_scale, self.weight_scale, self.out_dtype, bias=self.bias, accum=self.accum
        )
        return output.reshape(*input.shape[:-1], self.out_features)

    def _check(self, input) -> None:
        """The layer's arguments by their names here (gemm_fp8 would name them a and b)."""
        if self.weight.dtype != _WEIGHT_DTYPE:
            raise TypeError(
                f"weight must be {_WEIGHT_DTYPE}; got {self.weight.dtype} (Module.to(dtype) casts buffers: change the "
                "model's dtype before from_linear)"
            )
        if not isinstance(input, torch.Tensor):
            raise TypeError(f"input must be a torch.Tensor; got {type(input).__name__}")
        if input.dtype not in _INPUT_DTYPES:
            raise TypeError(f"input must be one of {list(_INPUT_DTYPES)}; got {input.dtype}")
        if input.dim() == 0 or input.shape[-1] != self.in_features:
            raise ValueError(
                f"input has shape {tuple(input.shape)}: its last dimension must be in_features={self.in_features}"
            )
        if input.device.type != "cuda":
            raise ValueError(f"input must be a CUDA tensor; got device {input.device}")
        if self.weight.device != input.device:
            raise ValueError(f"weight is on {self.weight.device} and input on {input.device}: they must share one")

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
            f"scaling={self.scaling!r}, accum={self.accum!r}, out_dtype={self.out_dtype}"
        )
