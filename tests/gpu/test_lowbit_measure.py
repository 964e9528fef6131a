"""The lowbit family's sweep measurement on the GPU: a variant's step passes the bit gate, a wrong one fails it."""

import pytest
import torch

from cutlass_ext.lowbit import measure
from cutlass_ext.lowbit.kernel import LowbitKernelConfig

pytestmark = pytest.mark.gpu


def test_another_variant_passes_the_gate_and_a_changed_bit_fails_it():
    problem = measure.make_problem(200, 72, 48)
    run, prepare = measure.kernel_runner(LowbitKernelConfig(block=(32, 32, 8), thread=(2, 2), window=8))
    output = run(*problem.operands(prepare)[0])
    relres = problem.relres(output)
    assert relres == 0.0 and problem.gate("lowbit", relres) == ("ok", "")
    changed = (output[0].clone(), *output[1:])
    changed[0].view(torch.int32)[0, 0] ^= 1
    relres = problem.relres(changed)
    assert relres > 0 and problem.gate("lowbit", relres)[0] == "inaccurate"
    assert problem.flops == 3 * 2.0 * 200 * 72 * 48 and list(measure.peers(problem, 3)) == []
