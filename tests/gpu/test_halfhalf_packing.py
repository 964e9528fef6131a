"""halfhalf's passes around its GEMM (kernels/halfhalf_operands.cuh) against their torch references, and the
packed-operand kernels against the kernels that split FP32 operands in registers."""

import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import numerics, ops, registry, scaling
from cutlass_ext.families.sm80.config import default_configs

from .helpers import operands

PACKED = default_configs("halfhalf", operands="packed")
REGISTER_SPLIT = default_configs("halfhalf", operands="fp32")


@pytest.fixture(scope="module", autouse=True)
def libraries_loaded():
    # the passes are exported by every kernel library: load the ones these tests compare with
    registry.ensure_registered(PACKED + REGISTER_SPLIT, torch.device("cuda"))


def unpack(packed: torch.Tensor):
    """(hi, lo·2^11) as float16 tensors from the packed words."""
    halves = packed.contiguous().view(torch.int16).view(*packed.shape, 2).view(torch.float16)
    return halves[..., 0], halves[..., 1]


def reference_split(x: torch.Tensor):
    hi = x.half()
    remainder = torch.where(hi.float().isfinite(), x - hi.float(), torch.zeros_like(x))
    return hi, (remainder * 2048).half()


LAYOUTS = {
    "row": lambda t: t,
    "col": lambda t: t.mT.contiguous().mT,
    "strided": lambda t: torch.stack([t, t], dim=-1)[..., 0],  # every other element of a wider buffer
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape, shift_dim", [((37, 53), -1), ((37, 53), -2), ((3, 17, 9), -1), ((3, 17, 9), -2)])
def test_pack_equals_the_torch_split_of_the_scaled_values(layout, shape, shift_dim):
    generator = torch.Generator(device="cuda").manual_seed(21)
    x = LAYOUTS[layout](numerics.exp_rand(shape, -40, 40, generator=generator))
    x[..., 0, 0] = float("nan")
    x[..., 0, 1] = float("inf")
    shift = scaling.fp16_range_shift(x, dim=shift_dim)
    packed = ops.halfhalf_pack(x, shift)
    assert packed.shape == x.shape and packed.dtype == torch.float32 and packed.is_contiguous()
    hi, lo = unpack(packed)
    expected_hi, expected_lo = reference_split(x * scaling.power_of_two(shift))
    assert torch.equal(hi.view(torch.int16), expected_hi.view(torch.int16))
    assert torch.equal(lo.view(torch.int16), expected_lo.view(torch.int16))
    # a slice holding Inf or NaN makes its outputs non-finite anyway; every other slice must fit FP16
    finite_slices = x.isfinite().all(dim=shift_dim, keepdim=True).expand(x.shape)
    assert finite_slices.any() and hi.isfinite()[finite_slices].all(), "scaled values must fit FP16"


@pytest.mark.parametrize("batch", [None, 3])
def test_unscale_is_exact_over_the_whole_shift_range(batch):
    generator = torch.Generator(device="cuda").manual_seed(22)
    shape = (batch, 45, 61) if batch else (45, 61)
    c = numerics.exp_rand(shape, -60, 60, generator=generator)
    row_shift = torch.randint(-126, 127, (*shape[:-1], 1), generator=generator, device="cuda", dtype=torch.int32)
    column_shift = torch.randint(-126, 127, (1, shape[-1]), generator=generator, device="cuda", dtype=torch.int32)
    ours = ops.halfhalf_unscale(c, row_shift, column_shift)
    expected = scaling.unscale(c, row_shift, column_shift)  # float64 factor, one rounding
    assert torch.equal(ours, expected)
    assert (ours != 0).any() and ours.isfinite().any() and (ours.abs() < 2**-126).any()  # subnormals reached


@pytest.mark.parametrize("m, n, k", [(256, 384, 512), (67, 45, 1031)])
def test_packed_kernel_equals_the_register_split_kernel_bit_for_bit(m, n, k):
    a, b = operands("type1", m, n, k, seed=23)  # inside FP16's range: no scaling needed
    expected = ops.gemm(a, b, [c.name for c in REGISTER_SPLIT])
    zero_a = torch.zeros((m, 1), dtype=torch.int32, device="cuda")
    zero_b = torch.zeros((1, n), dtype=torch.int32, device="cuda")
    ours = ops.gemm(ops.halfhalf_pack(a, zero_a), ops.halfhalf_pack(b, zero_b), [c.name for c in PACKED])
    assert torch.isfinite(ours).all() and ours.abs().max() > 0
    assert torch.equal(ours, expected)


@pytest.mark.parametrize("layout_a", LAYOUTS)
@pytest.mark.parametrize("layout_b", LAYOUTS)
@pytest.mark.parametrize("batched", [False, True])
def test_views_give_bit_identical_products(layout_a, layout_b, batched):
    """The packing pass writes row-major from any strides, so a view runs the very same kernel on the same
    packed words as its contiguous copy."""
    a, b = operands("type2", 70, 90, 300, seed=24)
    if batched:
        a = torch.stack([a, -a, 2 * a])
    expected = ext.gemm(a, b, mode="halfhalf")
    ours = ext.gemm(LAYOUTS[layout_a](a), LAYOUTS[layout_b](b), mode="halfhalf")
    assert torch.isfinite(ours).all()
    assert torch.equal(ours, expected)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    "shape, dim",
    [((37, 53), -1), ((37, 53), -2), ((3, 17, 9), -1), ((3, 17, 9), -2), ((2, 5, 70000), -1), ((4100, 70), -2)],
)
def test_range_shift_equals_the_torch_reference(layout, shape, dim):
    """One launch computes what fp16_range_shift computes with torch ops, NaN, Inf, zero slices and both reading
    directions (along the unit stride and across it) included."""
    generator = torch.Generator(device="cuda").manual_seed(25)
    x = LAYOUTS[layout](numerics.exp_rand(shape, -126, 120, generator=generator))
    x[..., 0, 0] = float("nan")
    x[..., 1, 1] = float("inf")
    x[..., 2, :] = 0.0
    x[..., :, 2] = -0.0
    ours = ops.range_shift(x, dim)
    assert ours.dtype == torch.int32
    assert torch.equal(ours, scaling.fp16_range_shift(x, dim=dim).to(torch.int32))


@pytest.mark.parametrize("batched", [False, True])
def test_fused_halfhalf_equals_its_passes_one_by_one(batched):
    a, b = operands("type4", 130, 70, 257, seed=26)
    if batched:
        a, b = torch.stack([a, 3 * a]), torch.stack([b, -b])
    names = [c.name for c in PACKED]
    row_shift, column_shift = scaling.fp16_range_shift(a, dim=-1), scaling.fp16_range_shift(b, dim=-2)
    packed_a, packed_b = ops.halfhalf_pack(a, row_shift), ops.halfhalf_pack(b, column_shift)
    expected = ops.halfhalf_unscale(ops.gemm(packed_a, packed_b, names), row_shift, column_shift)
    assert torch.equal(ops.halfhalf_gemm(a, b, names), expected)


@pytest.mark.parametrize("layout_a", LAYOUTS)
@pytest.mark.parametrize("layout_b", LAYOUTS)
@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((37, 53), (53, 45)),
        ((3, 17, 40), (40, 33)),
        ((67, 131), (3, 131, 45)),
        ((64, 4096), (4096, 48)),  # few long slices: the chunked pass
        ((2, 40, 5000), (5000, 70)),  # chunked, batched, K not a multiple of a chunk
        ((64, 4096), (3, 4096, 48)),  # chunked, B batched and A shared
    ],
)
def test_fused_operand_pass_equals_range_shift_and_pack_from_any_strides(layout_a, layout_b, a_shape, b_shape):
    """The operand pass (one launch, or chunked for few long slices) reads rows and columns both ways through its
    tiles; NaN, Inf and zero slices give what range_shift and halfhalf_pack give; the kernel that unscales in its
    epilogue gives what the unscaling pass gives (deep K: serial split-K, where the kernel and the pass run)."""
    generator = torch.Generator(device="cuda").manual_seed(27)
    a = LAYOUTS[layout_a](numerics.exp_rand(a_shape, -60, 60, generator=generator))
    b = LAYOUTS[layout_b](numerics.exp_rand(b_shape, -60, 60, generator=generator))
    a[..., 0, 0] = float("nan")
    b[..., 1, 1] = float("inf")
    a[..., 1, -1] = float("nan")  # and in a slice's last chunk where the pass is chunked
    b[..., -1, 2] = float("-inf")
    a[..., 2, :] = 0.0
    names = [c.name for c in PACKED]
    row_shift, column_shift = ops.range_shift(a, -1), ops.range_shift(b, -2)
    product = ops.gemm(ops.halfhalf_pack(a, row_shift), ops.halfhalf_pack(b, column_shift), names)
    expected = ops.halfhalf_unscale(product, row_shift, column_shift)
    ours = ops.halfhalf_gemm(a, b, names)
    assert torch.equal(ours.view(torch.int32), expected.view(torch.int32))  # NaN where expected has it, same bits


def test_fused_epilogue_is_one_multiply_add_after_the_unscaling():
    a, b = operands("type2", 70, 90, 300, seed=28)
    c = torch.randn(70, 90, device="cuda")
    names = [config.name for config in PACKED]
    unscaled = ops.halfhalf_gemm(a, b, names)
    # alpha a power of two: alpha·unscaled is exact, so torch's two roundings equal the kernel's fused one
    assert torch.equal(ops.halfhalf_gemm(a, b, names, c, -0.5, 3.0), -0.5 * unscaled + 3.0 * c)
    bias = torch.randn(90, device="cuda")
    assert torch.equal(ops.halfhalf_gemm(a, b, names, bias, 1.0, 1.0), unscaled + bias)
