"""The sweep's GPU stages for the lowbit family: one training step's GEMM work per row — the forward with an M7E4
accumulator (Table 2: b_acc = 10, b_prod = 12, chunk 16, underflow on) and both gradients under the immediate-DIFF
STE (the seed's recommendation) — gated on equality with the default variant's bits, which the GPU tests hold
equal to the reference. TFLOP/s-equivalent counts the three products: 3 · 2·M·N·K per step. No peer computes
this arithmetic at these sizes (the PyTorch emulation runs ~45 GFLOP/s forward only: python/bench_lowbit.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .format import LowbitFormat
from .kernel import DEFAULT_CONFIG, LowbitKernelConfig, matmul

FORMAT = LowbitFormat.make(7, 4, 10, 12, chunk=16)
STE = "immediate-diff"


def _step(config: LowbitKernelConfig, a: torch.Tensor, b: torch.Tensor, g: torch.Tensor) -> tuple:
    out = matmul(a, b, FORMAT, STE, config=config)
    return (out.detach(), *torch.autograd.grad(out, (a, b), g))


@dataclass
class LowbitProblem:
    """One shape's operands (a, b requiring gradients; g the output's gradient) and the default variant's bits."""

    m: int
    n: int
    k: int
    batch: int
    input_sets: list
    reference: tuple

    # a step takes milliseconds: CUDA events time it, no graph replay needed
    graph_calls = 0

    @property
    def flops(self) -> float:
        return 3 * 2.0 * self.m * self.n * self.k * self.batch

    def operands(self, prepare) -> list:
        return self.input_sets

    def relres(self, output: tuple) -> float:
        """The fraction of elements of (out, grad_a, grad_b) whose bits differ from the default variant's."""
        differing = sum(int((x.view(torch.int32) != y.view(torch.int32)).sum()) for x, y in zip(output, self.reference))
        return differing / sum(x.numel() for x in self.reference)

    def gate(self, mode: str, relres: float) -> tuple[str, str]:
        if relres != 0.0:
            return "inaccurate", f"{relres:.3g} of the elements differ from {DEFAULT_CONFIG.name}'s bits"
        return "ok", ""


def make_problem(m: int, n: int, k: int, batch: int = 1, seed: int = 0) -> LowbitProblem:
    """A ~ N(0, 1), B ~ N(0, 1/K), G ~ N(0, 1), fresh per shape (operands of 4096² floats already pass L2)."""
    generator = torch.Generator(device="cuda").manual_seed(seed * 1_000_003 + m * 31 + n * 17 + k)
    lead = (batch,) if batch > 1 else ()
    a = torch.randn(*lead, m, k, generator=generator, device="cuda").requires_grad_()
    b = (torch.randn(*lead, k, n, generator=generator, device="cuda") / k**0.5).requires_grad_()
    g = torch.randn(*lead, m, n, generator=generator, device="cuda")
    return LowbitProblem(m, n, k, batch, [(a, b, g)], _step(DEFAULT_CONFIG, a, b, g))


def kernel_runner(config: LowbitKernelConfig):
    """(run, prepare): the variant's forward and both gradients, (out, grad_a, grad_b)."""

    def run(a, b, g):
        return _step(config, a, b, g)

    return run, None


def peers(problem: LowbitProblem, repeats: int):
    """No peer: see the module docstring."""
    return iter(())
