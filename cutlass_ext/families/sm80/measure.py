"""The sm80 family's sweep measurement for one shape: fresh inputs and their FP64 reference, the accuracy gate, the
peers (cuBLAS FP32 / TF32, Triton tf32x3) every row is measured beside on the same inputs, so that ratios in the
table compare like with like. The timing stages are the sweep driver's (sweeps/measure.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ... import benchmark, numerics, ops
from ... import peers as peers_module
from .config import KernelConfig

# seed 000 section 3.5.1, its third filter: variants whose relres exceeds this are broken, not just inaccurate
SEED_RELRES_LIMIT = 0.1
# the corrected families' bound: within 1.1x of cuBLAS SGEMM's relres on the same inputs (docs/design-notes.md, §2)
CORRECTED_MODES = {"tf32tf32", "halfhalf"}
FP32_LEVEL_FACTOR = 1.1


@dataclass
class Problem:
    """One shape's inputs (rotated past L2), the FP64 reference of the first set, and cuBLAS FP32's relres."""

    m: int
    n: int
    k: int
    batch: int
    input_sets: list
    reference: torch.Tensor
    cublas_fp32_relres: float
    _prepared: dict = field(default_factory=dict, repr=False)
    # 0: each call timed with CUDA events; n > 0: n calls replayed from a CUDA graph (FP8 decode shapes)
    graph_calls: int = 0

    def operands(self, prepare) -> list:
        """The input sets as a kernel reads them: `prepare`d once per shape (another family's runner may want its
        operands converted outside the timed call), or as drawn when `prepare` is None (this family's variants)."""
        if prepare is None:
            return self.input_sets
        if prepare not in self._prepared:
            self._prepared[prepare] = [prepare(*inputs) for inputs in self.input_sets]
        return self._prepared[prepare]

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch

    def relres(self, output: torch.Tensor) -> float:
        return numerics.relative_residual(output, self.reference)

    def gate(self, mode: str, relres: float) -> tuple[str, str]:
        return gate(mode, relres, self)


def make_problem(m: int, n: int, k: int, batch: int = 1, seed: int = 0) -> Problem:
    """urand(-1, 1) operands, fresh per shape and seed; batch > 1 gives 3-D operands."""
    generator = torch.Generator(device="cuda").manual_seed(seed * 1_000_003 + m * 31 + n * 17 + k)
    lead = (batch,) if batch > 1 else ()

    def draw(*shape):
        return torch.rand(*lead, *shape, generator=generator, device="cuda") * 2 - 1

    bytes_per_set = 4 * batch * (m * k + k * n + m * n)
    input_sets = [(draw(m, k), draw(k, n)) for _ in range(benchmark.rotation_count(bytes_per_set))]
    a, b = input_sets[0]
    reference = a.double() @ b.double()
    cublas_relres = numerics.relative_residual(peers_module.cublas("ieee")(a, b), reference)
    return Problem(m, n, k, batch, input_sets, reference, cublas_relres)


def kernel_runner(config: KernelConfig):
    """(run, prepare) for one variant as `ext.gemm` runs it: a packed `halfhalf` variant with its operand pass
    (range shifts, scaling, packing) and unscaling, as the Hopper family's rows include its split pass, so that the
    two families' rows at a shape compare what dispatch would run; other variants' kernel on the inputs as drawn."""
    if config.operands == "packed":

        def run(a, b):
            return ops.halfhalf_gemm(a, b, [config.name])

        return run, None

    def run(a, b):
        return ops.gemm(a, b, [config.name])

    return run, None


def peers(problem: Problem, repeats: int):
    """(family, mode, name, run) of the peers every variant of the shape is compared with."""
    yield "cublas", "fp32", "torch.matmul ieee", peers_module.cublas("ieee")
    yield "cublas", "tf32", "torch.matmul tf32", peers_module.cublas("tf32")
    if problem.batch == 1:
        name, run = peers_module.triton_tf32x3(problem.input_sets, repeats)
        yield "triton", "tf32x3", "triton " + name, run


def gate(mode: str, relres: float, problem: Problem) -> tuple[str, str]:
    """(status, detail): `ok`, or `inaccurate` with the bound it broke."""
    if not math.isfinite(relres) or relres > SEED_RELRES_LIMIT:
        return "inaccurate", f"relres {relres:.3g} > {SEED_RELRES_LIMIT} (seed 000's filter)"
    if mode in CORRECTED_MODES and relres > FP32_LEVEL_FACTOR * problem.cublas_fp32_relres:
        return "inaccurate", (
            f"relres {relres:.3g} > {FP32_LEVEL_FACTOR} x cuBLAS FP32's {problem.cublas_fp32_relres:.3g}"
        )
    return "ok", ""
