"""Op schemas and fake kernels, registered at import so torch.compile can trace before anything is built.

The CUDA implementations come from the torch binding (kernels/torch_binding.cpp), loaded at first use.
"""

from __future__ import annotations

import torch

from . import registry
from .config import KernelConfig

_library = torch.library.Library("cutlass_ext", "DEF")
# variants: kernel variant names in order of preference; the first that can run the problem runs it.
_library.define("gemm(Tensor a, Tensor b, str[] variants) -> Tensor")


@torch.library.register_fake("cutlass_ext::gemm")
def _gemm_fake(a: torch.Tensor, b: torch.Tensor, variants: list[str]) -> torch.Tensor:
    # A compiled graph calls the real op later: have its kernels ready by then.
    if torch.cuda.is_available():
        registry.ensure_registered([KernelConfig.from_name(name) for name in variants], a.device)
    batch = a.shape[:-2] or b.shape[:-2]
    return a.new_empty((*batch, a.shape[-2], b.shape[-1]))


def gemm(a: torch.Tensor, b: torch.Tensor, variants: list[str]) -> torch.Tensor:
    return torch.ops.cutlass_ext.gemm(a, b, variants)
