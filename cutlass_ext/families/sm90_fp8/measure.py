"""The sm90_fp8 family's sweep measurement for one shape: e4m3 inputs with per-tensor scales, rotated past L2,
their FP64 reference, the accuracy gate against cuBLAS FP8 (torch._scaled_mm) with the same accumulation, and the
peers. Times are CUDA-graph replays.

The timing stages are the sweep driver's (sweeps/measure.py), shared with the FP32 families.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ... import benchmark, numerics, ops, peers_fp8
from ..sm80.measure import SEED_RELRES_LIMIT
from .config import OUT_DTYPES, Fp8Config

# the FP8 accuracy bound: relres within 1.1x of torch._scaled_mm's with the same accumulation
SCALED_MM_FACTOR = 1.1
# The gate's reference covers the first rows: an FP64 product of all of M=16384 x N=57344 would take 7.5 GB.
REFERENCE_ROWS = 256


@dataclass
class Fp8Problem:
    """One shape's (a, b, scale_a, scale_b) sets, the FP64 reference of the first set's first rows, and cuBLAS
    FP8's relres there per accumulation (`fast`, `promoted`)."""

    m: int
    n: int
    k: int
    batch: int
    input_sets: list
    reference: torch.Tensor
    scaled_mm_relres: dict

    @property
    def graph_calls(self) -> int:
        """Rows are timed by CUDA-graph replay (seed 003 section 5): a decode kernel takes ~20 µs, less than
        launching it from Python, so per-call events would time the host. Few calls per graph for long ones."""
        return 10 if self.flops < 1e12 else 3

    def operands(self, prepare) -> list:
        return self.input_sets

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    def relres(self, output: torch.Tensor) -> float:
        return numerics.relative_residual(output[: self.reference.shape[0]], self.reference)

    def gate(self, mode: str, relres: float) -> tuple[str, str]:
        """(status, detail): `ok`, or `inaccurate` with the bound it broke (modes are fp8_fast / fp8_promoted)."""
        if not math.isfinite(relres) or relres > SEED_RELRES_LIMIT:
            return "inaccurate", f"relres {relres:.3g} > {SEED_RELRES_LIMIT}"
        peer = self.scaled_mm_relres[mode.removeprefix("fp8_")]
        if relres > SCALED_MM_FACTOR * peer:
            return "inaccurate", f"relres {relres:.3g} > {SCALED_MM_FACTOR} x torch._scaled_mm's {peer:.3g}"
        return "ok", ""


def make_problem(m: int, n: int, k: int, batch: int = 1, seed: int = 0, sets: int | None = None) -> Fp8Problem:
    """Activations from N(0, 1) and weights from N(0, 1/K), quantized to e4m3 per tensor, fresh per shape; `sets`
    input sets to cycle through (default: enough that each call finds its inputs outside L2)."""
    if batch != 1:
        raise ValueError(f"FP8 sweeps take unbatched shapes; got batch={batch}")
    from ...fp8 import quantize_fp8

    generator = torch.Generator(device="cuda").manual_seed(seed * 1_000_003 + m * 31 + n * 17 + k)
    input_sets = []
    for _ in range(sets or benchmark.rotation_count(m * k + n * k + 2 * m * n)):
        a, scale_a = quantize_fp8(torch.randn(m, k, generator=generator, device="cuda"))
        b, scale_b = quantize_fp8(torch.randn(n, k, generator=generator, device="cuda") / math.sqrt(k))
        input_sets.append((a, b, scale_a, scale_b))
    a, b, scale_a, scale_b = input_sets[0]
    rows = min(m, REFERENCE_ROWS)
    reference = numerics.dequantized_product(a[:rows], b, scale_a, scale_b)
    peer_relres = {
        accum: numerics.relative_residual(peers_fp8.scaled_mm(torch.bfloat16, accum)(*input_sets[0])[:rows], reference)
        for accum in ("fast", "promoted")
    }
    return Fp8Problem(m, n, k, batch, input_sets, reference, peer_relres)


def kernel_runner(config: Fp8Config):
    """(run, prepare) for one variant's kernel alone."""
    out_dtype = OUT_DTYPES[config.out_dtype]

    def run(a, b, scale_a, scale_b):
        return ops.gemm_fp8(a, b, scale_a.reshape(1), scale_b.reshape(1), None, out_dtype, [config.name])

    return run, None


def peers(problem: Fp8Problem, repeats: int):
    """(family, mode, name, run): cuBLAS FP8 in both accumulations and the TK-GEMM-style Triton split-K kernel."""
    for accum in ("fast", "promoted"):
        yield "cublas", f"fp8_{accum}", f"torch._scaled_mm {accum}", peers_fp8.scaled_mm(torch.bfloat16, accum)
    name, run = peers_fp8.triton_splitk(problem.input_sets, torch.bfloat16, repeats)
    yield "triton", "fp8_fast", name, run
