"""halfhalf's exact power-of-two range scaling (cutlass_ext.scaling), on the CPU."""

import torch

from cutlass_ext import numerics, scaling


def test_scaled_operands_fit_fp16_and_come_out_row_major():
    generator = torch.Generator().manual_seed(0)
    a = numerics.exp_rand((64, 48), -100, -35, generator=generator).t()  # a transposed view, far below FP16
    b = numerics.exp_rand((64, 32), 20, 60, generator=generator)  # far above FP16
    a_scaled, b_scaled, row_shift, column_shift = scaling.scaled_operands(a, b)
    assert a_scaled.is_contiguous() and b_scaled.is_contiguous()  # the view is copied in the scaling pass
    assert torch.equal(a_scaled, a * scaling.power_of_two(row_shift))
    assert torch.equal(b_scaled, b * scaling.power_of_two(column_shift))
    # each row of A and column of B: its largest magnitude in [2^14, 2^15), the top binade under FP16's 65504
    for largest in (a_scaled.abs().amax(dim=1), b_scaled.abs().amax(dim=0)):
        assert (largest >= 2**14).all() and (largest < 2**15).all()
    assert torch.isfinite(a_scaled.half()).all() and torch.isfinite(b_scaled.half()).all()
    assert row_shift.shape == (48, 1) and column_shift.shape == (1, 32)


def test_scaling_then_unscaling_is_exact():
    generator = torch.Generator().manual_seed(1)
    a = numerics.exp_rand((40, 24), -60, 60, generator=generator)
    b = numerics.exp_rand((24, 16), -60, 60, generator=generator)
    a_scaled, b_scaled, row_shift, column_shift = scaling.scaled_operands(a, b)
    product = a_scaled.double() @ b_scaled.double()
    unscaled = scaling.unscale(product.float(), row_shift, column_shift)
    assert torch.equal(unscaled, (product.float().double() * 2.0 ** -(row_shift + column_shift).double()).float())
    assert numerics.relative_residual(unscaled, a.double() @ b.double()) < 1e-7
