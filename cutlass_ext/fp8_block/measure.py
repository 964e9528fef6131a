"""The sm90_fp8_block family's sweep measurement for one shape: e4m3 operands with DeepSeek-V3's block scales (1x128
activations, 128x128 weights), rotated past L2, the FP64 product of the dequantized operands, an accuracy gate and
the peers. Times are CUDA-graph replays (the sweep driver's timing stages, sweeps/measure.py).

Every variant gets the K-major activation scales `quantize_fp8` writes: an M-major (`_am`) variant's time includes
the transposition dispatch hands it, as a call from a model pays it (timed from prepared M-major scales, those
variants won shapes where they then ran slower).

The gate: relres within 1.1x of what rounding the exact product to the output type alone gives (or of
`torch._scaled_mm`'s with the same block scales, where this torch runs it, if that is larger): the FP32 promotion of
each 128-deep k-block leaves the bf16 output's rounding as the error that shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import benchmark, numerics, peers_fp8
from ..families.sm80.measure import SEED_RELRES_LIMIT
from . import measure_k_grouped
from .api import K_GROUPED_MODE, OUT_DTYPES, gemm_fp8_block, grouped_gemm_fp8, k_grouped_gemm_fp8
from .config import Fp8BlockConfig
from .quantize import block_scaled_reference, quantize_block

ACCURACY_FACTOR = 1.1
REFERENCE_ROWS = 256  # the FP64 reference covers the first rows (all of M = 4096 x N = 32768 would take 1 GB)
_OUT_DTYPES = {name: dtype for dtype, name in OUT_DTYPES.items()}


@dataclass
class Fp8BlockProblem:
    """One shape's (a8, b8, scale_a, scale_b) sets, the FP64 reference of the first set's first rows and the relres
    bound of the gate."""

    m: int
    n: int
    k: int
    batch: int  # the experts of a grouped problem (m tokens each), else 1
    input_sets: list
    reference: torch.Tensor
    bound: float

    @property
    def graph_calls(self) -> int:
        return 10 if self.flops < 1e12 else 3

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k

    def operands(self, prepare) -> list:
        return self.input_sets

    def relres(self, output: torch.Tensor) -> float:
        rows = self.reference.shape[0] // self.batch  # per expert (one "expert" when dense)
        taken = torch.cat([output[g * self.m : g * self.m + rows] for g in range(self.batch)])
        return numerics.relative_residual(taken, self.reference)

    def gate(self, mode: str, relres: float) -> tuple[str, str]:
        if not math.isfinite(relres) or relres > SEED_RELRES_LIMIT or relres > self.bound:
            return "inaccurate", f"relres {relres:.3g} > {self.bound:.3g}"
        return "ok", ""


def _scaled_mm_relres(a8, b8, scale_a, scale_b, reference) -> float:
    """torch._scaled_mm's relres with these block scales; 0 where this torch does not run the shape."""
    try:
        out = peers_fp8.scaled_mm_block()(a8, b8, scale_a, scale_b)
    except RuntimeError:
        return 0.0
    return numerics.relative_residual(out[: reference.shape[0]], reference)


def make_problem(
    m: int, n: int, k: int, batch: int = 1, seed: int = 0, out_dtype: str = "bf16", mode: str | None = None
):
    """Activations from N(0, 1) and weights from N(0, 1/K), block-quantized to e4m3, fresh per shape. batch > 1: a
    mixture-of-experts layer of `batch` experts with m tokens each (contiguous layout: a (batch·m, K), the experts'
    weights (batch, N, K), their offsets); the reference covers the first rows of every expert. mode
    "fp8_k_grouped": that layer's weight gradients instead, k tokens per expert (measure_k_grouped.py)."""
    if mode == K_GROUPED_MODE:
        return measure_k_grouped.make_problem(m, n, k, batch, seed)
    generator = torch.Generator(device="cuda").manual_seed(seed * 1_000_003 + m * 31 + n * 17 + k + batch * 7)
    grouped = batch > 1
    rows_total = m * batch
    offsets = torch.arange(1, batch + 1, device="cuda", dtype=torch.int32) * m
    input_sets = []
    for _ in range(benchmark.rotation_count(rows_total * k + batch * n * k + 2 * rows_total * n)):
        activations = torch.randn(rows_total, k, generator=generator, device="cuda")
        weights = torch.randn(*((batch,) if grouped else ()), n, k, generator=generator, device="cuda") / math.sqrt(k)
        a8, scale_a = quantize_block(activations, torch.float8_e4m3fn, (1, 128))
        b8, scale_b = quantize_block(weights, torch.float8_e4m3fn, (128, 128))
        input_sets.append((a8, b8, scale_a, scale_b, offsets) if grouped else (a8, b8, scale_a, scale_b))
    a8, b8, scale_a, scale_b = input_sets[0][:4]
    rows = min(m, max(1, REFERENCE_ROWS // batch))  # the first rows of every expert
    parts = [
        block_scaled_reference(
            a8[g * m : g * m + rows],
            b8[g] if grouped else b8,
            scale_a[g * m : g * m + rows],
            scale_b[g] if grouped else scale_b,
            128,
        )
        for g in range(batch)
    ]
    reference = torch.cat(parts)
    rounding = numerics.relative_residual(reference.to(_OUT_DTYPES[out_dtype]), reference)
    peer = 0.0
    if out_dtype == "bf16" and not grouped:
        peer = _scaled_mm_relres(a8, b8, scale_a, scale_b, reference)
    return Fp8BlockProblem(m, n, k, batch, input_sets, reference, ACCURACY_FACTOR * max(rounding, peer))


def kernel_runner(config: Fp8BlockConfig):
    """(run, prepare): the variant's kernel through gemm_fp8_block (which transposes the scales for `_am` variants),
    grouped, grouped_gemm_fp8 (contiguous layout), or its weight-gradient form k_grouped_gemm_fp8 (accumulating)."""
    out_dtype = _OUT_DTYPES[config.out_dtype]
    name = config.name
    if config.k_grouped:

        def run_k_grouped(a8, b8, scale_a, scale_b, offsets=None, out=None):
            if out is None:
                raise ValueError(f"{name} is the weight-gradient form: it measures mode {K_GROUPED_MODE}'s problems")
            return k_grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets, out=out, accumulate=True, variant=name)

        return run_k_grouped, None
    if config.grouped:

        def run_grouped(a8, b8, scale_a, scale_b, offsets=None, *rest):
            if offsets is None or rest:
                raise ValueError(f"{name} is grouped: it measures [tokens per expert, N, K, experts > 1] shapes")
            return grouped_gemm_fp8(a8, b8, scale_a, scale_b, offsets=offsets, out_dtype=out_dtype, variant=name)

        return run_grouped, None

    def run(a8, b8, scale_a, scale_b, *offsets):
        if offsets:
            raise ValueError(f"{name} is dense: it measures [M, N, K] shapes, not grouped ones")
        return gemm_fp8_block(a8, b8, scale_a, scale_b, out_dtype, variant=name)

    return run, None


def peers(problem: Fp8BlockProblem, repeats: int):
    """(family, mode, name, run): cuBLAS's blockwise FP8 GEMM (torch._scaled_mm) where this torch runs it; none for
    grouped problems (torch._scaled_grouped_mm takes no block scales) nor weight-gradient ones."""
    if isinstance(problem, Fp8BlockProblem) and problem.batch == 1:
        yield "cublas", "fp8_block", "torch._scaled_mm block", peers_fp8.scaled_mm_block()
