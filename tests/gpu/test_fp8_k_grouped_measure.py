"""The weight-gradient form's sweep measurement on the GPU: the collective and the direct kernels pass the gate on
the same problem with the same bits, a wrong product fails it, and the other forms' runners refuse the problem."""

import pytest
import torch

from cutlass_ext.build import build_libraries
from cutlass_ext.fp8_block import Fp8BlockConfig, measure
from cutlass_ext.fp8_block.direct import Fp8BlockDirectConfig

pytestmark = pytest.mark.gpu

COLLECTIVE = Fp8BlockConfig(out_dtype="fp32", scale_n=1, k_grouped=True, scale_a_major="m")
DIRECT = Fp8BlockDirectConfig(out_dtype="fp32", tile=(128, 128, 128), k_grouped=True)


@pytest.fixture(scope="module", autouse=True)
def built():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU")
    failed = [r.error for r in build_libraries([(COLLECTIVE,), (DIRECT,)], "90a") if r.library is None]
    assert not failed, failed[0][:2000]


def test_both_kernels_pass_the_gate_with_the_same_bits_and_a_wrong_product_fails():
    problem = measure.make_problem(264, 200, 384, 3, mode="fp8_k_grouped")
    assert problem.flops == 2.0 * 3 * 264 * 200 * 384
    outputs = []
    for config in (COLLECTIVE, DIRECT):
        run, prepare = measure.kernel_runner(config)
        output = run(*problem.operands(prepare)[0]).clone()
        relres = problem.relres(output)
        assert 0 < relres and problem.gate("fp8_k_grouped", relres) == ("ok", ""), relres
        outputs.append(output)
    assert torch.equal(*outputs)
    wrong = outputs[0].clone()
    wrong[1] *= 1.01  # one expert's gradient scaled 1% off
    assert problem.gate("fp8_k_grouped", problem.relres(wrong))[0] == "inaccurate"
    assert list(measure.peers(problem, 3)) == []
    dense, _ = measure.kernel_runner(Fp8BlockConfig())
    with pytest.raises(ValueError, match="dense"):
        dense(*problem.operands(None)[0])
    grouped, _ = measure.kernel_runner(Fp8BlockConfig(grouped=True))
    with pytest.raises(ValueError, match="grouped"):
        grouped(*problem.operands(None)[0])
