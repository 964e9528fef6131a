"""The sweep's problem for the weight-gradient form (mode fp8_k_grouped): shape [M, N, tokens per expert, experts]
is one mixture-of-experts layer's weight gradients, D_g (M, N) = dY_gᵀ · X_g over each expert's tokens (groups
cut along K), e4m3 operands with 1x128 scales along K on both, FP32 D accumulated in place (as a training step's
gradient accumulation, and as DeepGEMM's `k_grouped_fp8_gemm_nt_contiguous` is measured).

The gate: relres against the FP64 product of the dequantized operands at most 1.1 x 2^-12. FP32 output rounds
away almost nothing; what shows is the Tensor Cores' FP8 accumulation inside each 128-deep k-block, which keeps
about 13-14 bits: DeepGEMM's kernel and ours measure 1.27-1.28e-4 on these inputs at every weight-gradient case
(sweeps/results/h200/fp8_block_wgrad.csv), and every variant of the form gives the collective kernel's bits. A
k-block scaled or summed wrongly, or a group reading another's columns, lands far above it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import benchmark, numerics
from ..families.sm80.measure import SEED_RELRES_LIMIT
from .quantize import dequantize, quantize_block

ACCURACY_FACTOR = 1.1
TENSOR_CORE_RELRES = 2.0**-12  # FP8 accumulation inside a k-block (module docstring)
REFERENCE_ROWS = 128  # the FP64 reference covers the first rows of every group


@dataclass
class KGroupedProblem:
    """One shape's (a8, b8, scale_a, scale_b, offsets, out) sets, the FP64 reference of the first set's first rows
    of every group and the relres bound of the gate."""

    m: int
    n: int
    k: int  # tokens per expert
    batch: int  # experts
    input_sets: list
    reference: torch.Tensor
    bound: float

    @property
    def graph_calls(self) -> int:
        return 3

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k

    def operands(self, prepare) -> list:
        for *_, out in self.input_sets:
            out.zero_()  # the gate's call writes the product alone (timed calls then accumulate onto it)
        return self.input_sets

    def relres(self, output: torch.Tensor) -> float:
        rows = self.reference.shape[0] // self.batch
        return numerics.relative_residual(output[:, :rows].reshape(-1, self.n), self.reference)

    def gate(self, mode: str, relres: float) -> tuple[str, str]:
        if not math.isfinite(relres) or relres > SEED_RELRES_LIMIT or relres > self.bound:
            return "inaccurate", f"relres {relres:.3g} > {self.bound:.3g}"
        return "ok", ""


def make_problem(m: int, n: int, k: int, batch: int, seed: int = 0) -> KGroupedProblem:
    """dY from N(0, 1), X from N(0, 1/tokens), each 1x128-quantized to e4m3 along the tokens; `batch` experts of k
    tokens each (k a multiple of 128, as the form asks), the scales M- and N-contiguous as the kernels read them."""
    if k % 128:
        raise ValueError(f"tokens per expert k={k} must be a multiple of 128 (the weight-gradient form's groups)")
    generator = torch.Generator(device="cuda").manual_seed(seed * 1_000_003 + m * 31 + n * 17 + k + batch * 7)
    total = batch * k
    offsets = torch.arange(1, batch + 1, device="cuda", dtype=torch.int32) * k
    input_sets = []
    for _ in range(benchmark.rotation_count((m + n) * total + 8 * batch * m * n)):
        a8, scale_a = quantize_block(
            torch.randn(m, total, generator=generator, device="cuda"), torch.float8_e4m3fn, (1, 128)
        )
        b = torch.randn(n, total, generator=generator, device="cuda") / math.sqrt(k)
        b8, scale_b = quantize_block(b, torch.float8_e4m3fn, (1, 128))
        scale_a, scale_b = scale_a.t().contiguous().t(), scale_b.t().contiguous().t()
        out = torch.zeros(batch, m, n, device="cuda")
        input_sets.append((a8, b8, scale_a, scale_b, offsets, out))
    a8, b8, scale_a, scale_b = input_sets[0][:4]
    rows = min(m, max(1, REFERENCE_ROWS // batch))
    a64 = dequantize(a8[:rows], scale_a[:rows], 1)
    parts = []
    for g in range(batch):  # B in float64 a group at a time (whole, 7168 x 32768 would take 1.9 GB)
        columns, blocks = slice(g * k, (g + 1) * k), slice(g * k // 128, (g + 1) * k // 128)
        parts.append(a64[:, columns] @ dequantize(b8[:, columns], scale_b[:, blocks], 1).T)
    reference = torch.cat(parts)
    rounding = numerics.relative_residual(reference.float(), reference)
    return KGroupedProblem(m, n, k, batch, input_sets, reference, ACCURACY_FACTOR * (TENSOR_CORE_RELRES + rounding))
