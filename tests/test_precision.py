"""The precision switch's routing on the CPU: which calls reach gemm, with which operands and epilogue.

gemm is replaced by an FP64 model of its contract (torch.matmul's semantics, alpha·A·B + beta·C + bias, out=) and
CPU float32 tensors are made routable, so every routing decision and every einsum lowering is checked against the
plain op here; tests/gpu/test_precision.py runs the real kernels.
"""

import importlib
import itertools
import random
import re
import threading

import pytest
import torch
import torch.nn.functional as F

import cutlass_ext as ext

precision_module = importlib.import_module("cutlass_ext.precision")


class FakeGemm:
    """gemm's contract in FP64, recording each call's mode and epilogue."""

    def __init__(self):
        self.calls = []

    def __call__(self, a, b, mode="tf32tf32", *, bias=None, alpha=1.0, beta=0.0, c=None, out=None):
        self.calls.append({"mode": mode, "a": a, "b": b, "bias": bias, "alpha": alpha, "beta": beta, "c": c})
        result = alpha * torch.matmul(a.double(), b.double())
        if c is not None:
            result = result + beta * c.double()
        if bias is not None:
            result = result + bias.double()
        result = result.float()
        if out is not None:
            return out.copy_(result)
        return result


@pytest.fixture
def fake_gemm(monkeypatch):
    fake = FakeGemm()
    monkeypatch.setattr(precision_module, "gemm", fake)
    monkeypatch.setattr(
        precision_module,
        "_routable",
        lambda t: type(t) in (torch.Tensor, torch.nn.Parameter) and t.dtype == torch.float32,
    )
    return fake


_seeds = itertools.count(1)


def fresh(*shape, requires_grad=False):
    """Normal float32 values, a new seed per tensor."""
    generator = torch.Generator().manual_seed(next(_seeds))
    return torch.randn(shape, generator=generator).requires_grad_(requires_grad)


def assert_close_to_fp64(result, expected):
    assert result.dtype == torch.float32
    assert result.shape == expected.shape
    torch.testing.assert_close(result.double(), expected, rtol=1e-6, atol=1e-6)


MATMUL_SHAPES = [
    ((5, 7), (7, 3)),
    ((7,), (7, 3)),
    ((5, 7), (7,)),
    ((7,), (7,)),
    ((2, 5, 7), (7, 3)),
    ((5, 7), (4, 7, 3)),
    ((3, 1, 5, 7), (4, 7, 2)),
    ((2, 5, 7), (7,)),
    ((7,), (2, 7, 3)),
    ((0, 7), (7, 3)),
    ((5, 0), (0, 3)),
]


@pytest.mark.parametrize("a_shape, b_shape", MATMUL_SHAPES)
@pytest.mark.parametrize("spelling", ["operator", "torch.matmul", "torch.linalg.matmul", "Tensor.matmul"])
def test_matmul_is_routed_with_its_broadcasting(fake_gemm, a_shape, b_shape, spelling):
    a, b = fresh(*a_shape), fresh(*b_shape)
    call = {
        "operator": lambda: a @ b,
        "torch.matmul": lambda: torch.matmul(a, b),
        "torch.linalg.matmul": lambda: torch.linalg.matmul(a, b),
        "Tensor.matmul": lambda: a.matmul(b),
    }
    with ext.precision("halfhalf"):
        result = call[spelling]()
    assert_close_to_fp64(result, torch.matmul(a.double(), b.double()))
    assert [c["mode"] for c in fake_gemm.calls] == ["halfhalf"]


def test_mm_bmm_and_out(fake_gemm):
    a, b = fresh(6, 4), fresh(4, 5)
    batch_a, batch_b = fresh(3, 6, 4), fresh(3, 4, 5)
    out = torch.empty(6, 5)
    with ext.precision("tf32"):
        mm, method = torch.mm(a, b), a.mm(b)
        bmm, bmm_method = torch.bmm(batch_a, batch_b), batch_a.bmm(batch_b)
        returned = torch.mm(a, b, out=out)
    for result in (mm, method, out):
        assert_close_to_fp64(result, a.double() @ b.double())
    for result in (bmm, bmm_method):
        assert_close_to_fp64(result, batch_a.double() @ batch_b.double())
    assert returned is out
    assert len(fake_gemm.calls) == 5


@pytest.mark.parametrize("input_shape", [(5,), (1, 5), (6, 1), (6, 5), ()])
@pytest.mark.parametrize("beta, alpha", [(1, 1), (0.5, 2.0), (0, 1.5), (1, -1)])
def test_addmm_epilogue(fake_gemm, input_shape, beta, alpha):
    bias, mat1, mat2 = fresh(*input_shape), fresh(6, 4), fresh(4, 5)
    with ext.precision("tf32tf32"):
        result = torch.addmm(bias, mat1, mat2, beta=beta, alpha=alpha)
        method = bias.addmm(mat1, mat2, beta=beta, alpha=alpha)
    expected = beta * bias.double() + alpha * (mat1.double() @ mat2.double())
    assert_close_to_fp64(result, expected)
    assert_close_to_fp64(method, expected)
    call = fake_gemm.calls[0]
    if beta == 0:
        assert call["c"] is None and call["bias"] is None  # input ignored, as torch does
    elif beta == 1 and input_shape == (5,):
        assert call["bias"] is bias and call["c"] is None  # fused bias
    else:
        assert call["c"] is not None and call["beta"] == beta


def test_addmm_with_beta_zero_ignores_nan_input(fake_gemm):
    with ext.precision("tf32tf32"):
        result = torch.addmm(torch.full((6, 5), float("nan")), fresh(6, 4), fresh(4, 5), beta=0)
    assert torch.isfinite(result).all()


@pytest.mark.parametrize("input_shape", [(3, 6, 5), (5,), (1, 6, 1)])
def test_baddbmm(fake_gemm, input_shape):
    c, batch1, batch2 = fresh(*input_shape), fresh(3, 6, 4), fresh(3, 4, 5)
    with ext.precision("markidis"):
        result = torch.baddbmm(c, batch1, batch2, beta=0.25, alpha=3.0)
    assert_close_to_fp64(result, 0.25 * c.double() + 3.0 * (batch1.double() @ batch2.double()))
    assert fake_gemm.calls[0]["mode"] == "markidis"


@pytest.mark.parametrize("input_shape", [(8, 6), (2, 3, 6), (6,)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_and_nn_linear_fuse_the_bias(fake_gemm, input_shape, with_bias):
    layer = torch.nn.Linear(6, 4, bias=with_bias)
    x = fresh(*input_shape)
    with ext.precision("tf32tf32"):
        functional = F.linear(x, layer.weight, layer.bias)
        module = layer(x)
    expected = x.double() @ layer.weight.double().T + (layer.bias.double() if with_bias else 0)
    assert_close_to_fp64(functional.detach(), expected)
    assert_close_to_fp64(module.detach(), expected)
    assert len(fake_gemm.calls) == 2
    assert all((c["bias"] is layer.bias) if with_bias else c["bias"] is None for c in fake_gemm.calls)


EINSUMS = [
    ("ij,jk->ik", (4, 5), (5, 3)),
    ("ij,kj->ik", (4, 5), (3, 5)),
    ("ji,jk->ki", (5, 4), (5, 3)),
    ("bij,bjk->bik", (2, 4, 5), (2, 5, 3)),
    ("bhqd,bhkd->bhqk", (2, 3, 4, 8), (2, 3, 5, 8)),
    ("bhqk,bhkd->bqhd", (2, 3, 4, 5), (2, 3, 5, 8)),
    ("ij,jk", (4, 5), (5, 3)),
    ("ba,ca", (4, 5), (3, 5)),
    ("i,i->", (7,), (7,)),
    ("i,j->ij", (4,), (3,)),
    ("ij,j->i", (4, 5), (5,)),
    ("ijk,jl->ilk", (2, 3, 4), (3, 5)),
    ("ij,jk->", (4, 5), (5, 3)),
    ("ij,jk->k", (4, 5), (5, 3)),
    ("bi,bi->b", (6, 5), (6, 5)),
    ("...ij,...jk->...ik", (2, 3, 4, 5), (3, 5, 6)),
    ("...ij,...jk->...ik", (2, 1, 4, 5), (3, 5, 6)),
    ("...ij,jk", (2, 4, 5), (5, 6)),
    ("i...j,j...->...i", (4, 2, 5), (5, 2)),
    ("b i j , b j k -> b k i", (2, 4, 5), (2, 5, 3)),
    ("ij,jk->ik", (0, 5), (5, 3)),
]


@pytest.mark.parametrize("equation, a_shape, b_shape", EINSUMS)
def test_einsum_lowers_to_one_product(fake_gemm, equation, a_shape, b_shape):
    a, b = fresh(*a_shape), fresh(*b_shape)
    with ext.precision("tf32tf32"):
        result = torch.einsum(equation, a, b)
        listed = torch.einsum(equation, [a, b])
    expected = torch.einsum(equation, a.double(), b.double())
    assert_close_to_fp64(result, expected)
    assert_close_to_fp64(listed, expected)
    assert len(fake_gemm.calls) == 2


def random_einsum(rng: random.Random):
    """A two-operand equation over a few labels (sizes 1-4), with ellipses and an explicit or implicit output,
    and operands of its shapes: torch accepts most, rejects some."""
    sizes = {label: rng.choice([1, 2, 3, 4]) for label in "abcde"}
    terms, shapes = [], []
    ellipsis = rng.random() < 0.3
    for _ in range(2):
        labels = "".join(rng.sample("abcde", rng.randint(0, 4)))
        shape = [sizes[label] for label in labels]
        if ellipsis:
            at, covered = rng.randint(0, len(labels)), [rng.choice([1, 2, 3]) for _ in range(rng.randint(0, 2))]
            labels, shape = labels[:at] + "..." + labels[at:], shape[:at] + covered + shape[at:]
        terms.append(labels)
        shapes.append(shape)
    equation = ",".join(terms)
    if rng.random() < 0.7:
        used = sorted(set(equation) - set(".,"))
        output = "".join(rng.sample(used, rng.randint(0, len(used))))
        if ellipsis and rng.random() < 0.9:
            at = rng.randint(0, len(output))
            output = output[:at] + "..." + output[at:]
        equation += "->" + output
    return equation, shapes


def test_random_einsums_agree_with_torch_or_fail_as_torch_does(fake_gemm):
    rng = random.Random(0)
    for _ in range(400):
        equation, shapes = random_einsum(rng)
        a, b = fresh(*shapes[0]), fresh(*shapes[1])
        try:
            expected = torch.einsum(equation, a.double(), b.double())
        except RuntimeError:
            expected = None
        fake_gemm.calls.clear()
        with ext.precision("tf32tf32"):
            if expected is None:
                with pytest.raises(RuntimeError):
                    torch.einsum(equation, a, b)
                assert not fake_gemm.calls, equation
                continue
            result = torch.einsum(equation, a, b)
        assert result.shape == expected.shape, equation
        torch.testing.assert_close(result.double(), expected, rtol=1e-5, atol=1e-5, msg=equation)


@pytest.mark.parametrize(
    "equation, shapes",
    [
        ("ii,ij->j", [(4, 4), (4, 3)]),  # a diagonal
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),  # three operands
        ("ij->ji", [(2, 3)]),
        ("ij,jk->iik", [(2, 3), (3, 4)]),
    ],
)
def test_einsum_outside_the_lowered_form_runs_as_torch(fake_gemm, equation, shapes):
    """What torch does with the equation outside the switch, it does inside: the same result, or the same error."""
    operands = [fresh(*shape) for shape in shapes]
    try:
        expected = torch.einsum(equation, *(t.double() for t in operands))
    except RuntimeError as error:
        with ext.precision("tf32tf32"), pytest.raises(RuntimeError, match=re.escape(str(error).splitlines()[0])):
            torch.einsum(equation, *operands)
    else:
        with ext.precision("tf32tf32"):
            result = torch.einsum(equation, *operands)
        assert_close_to_fp64(result, expected)
    assert not fake_gemm.calls


def test_einsum_sublist_form_is_routed(fake_gemm):
    a, b = fresh(4, 5), fresh(5, 3)
    with ext.precision("tf32tf32"):
        result = torch.einsum(a, [0, 1], b, [1, 2], [0, 2])
    assert len(fake_gemm.calls) == 1
    assert_close_to_fp64(result, a.double() @ b.double())


def test_other_dtypes_ops_and_bad_shapes_are_untouched(fake_gemm):
    a64, b64 = fresh(4, 5).double(), fresh(5, 3).double()
    a16, b16 = fresh(4, 5).bfloat16(), fresh(5, 3).bfloat16()
    a, b = fresh(4, 5), fresh(5, 3)
    with ext.precision("tf32tf32"):
        assert (a64 @ b64).dtype == torch.float64
        assert (a16 @ b16).dtype == torch.bfloat16
        (a + 1).relu()
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            torch.mm(a, a)  # torch's own error for torch's own shape rule
        with pytest.raises(RuntimeError):
            torch.bmm(a, b)
    assert not fake_gemm.calls


def test_cpu_tensors_are_not_routed(monkeypatch):
    fake = FakeGemm()
    monkeypatch.setattr(precision_module, "gemm", fake)  # the real routing rule: CUDA only
    a, b = fresh(4, 5), fresh(5, 3)
    with ext.precision("tf32tf32"):
        result = a @ b
        F.linear(a, b.T)
    assert not fake.calls
    torch.testing.assert_close(result, a @ b)


def test_tensor_subclasses_are_not_routed(fake_gemm):
    class Tagged(torch.Tensor):
        pass

    a, b = fresh(4, 5).as_subclass(Tagged), fresh(5, 3)
    with ext.precision("tf32tf32"):
        a @ b
    assert not fake_gemm.calls


def test_autograd_through_the_switch(fake_gemm):
    x = fresh(3, 6, requires_grad=True)
    layer = torch.nn.Linear(6, 4)
    w = fresh(4, 2, requires_grad=True)
    with ext.precision("tf32tf32"):
        loss = (layer(x) @ w).square().sum()
    loss.backward()
    x_ref = x.detach().double().requires_grad_()
    weight, bias, w_ref = (t.detach().double().requires_grad_() for t in (layer.weight, layer.bias, w))
    ((x_ref @ weight.T + bias) @ w_ref).square().sum().backward()
    for got, expected in (
        (x.grad, x_ref.grad),
        (layer.weight.grad, weight.grad),
        (layer.bias.grad, bias.grad),
        (w.grad, w_ref.grad),
    ):
        torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)


def test_modes_are_checked_by_name():
    with pytest.raises(ValueError, match="mode='bf16' is not one of"):
        ext.precision("bf16")
    with pytest.raises(TypeError, match="mode must be a str"):
        ext.set_precision(3)
    for mode in ("tf32tf32", "halfhalf", "tf32", "fp32", "markidis", "int8x8", "int8x14"):
        assert ext.precision(mode).mode == mode
    with pytest.raises(ValueError, match="moduli=15 must be an integer in 3..14"):
        ext.precision("int8x15")


def test_set_precision_sits_below_with_blocks_and_comes_off(fake_gemm):
    a, b = fresh(4, 5), fresh(5, 3)
    ext.set_precision("tf32")
    try:
        a @ b
        with ext.precision("halfhalf"):
            a @ b
            ext.set_precision("markidis")  # replaced under the block, which keeps precedence
            a @ b
        a @ b
    finally:
        ext.set_precision(None)
    a @ b
    assert [c["mode"] for c in fake_gemm.calls] == ["tf32", "halfhalf", "halfhalf", "markidis"]
    assert torch._C._len_torch_function_stack() == 0


def test_set_precision_keeps_set_default_device_at_the_bottom(fake_gemm):
    a, b = fresh(4, 5), fresh(5, 3)
    torch.set_default_device("cpu")
    try:
        ext.set_precision("tf32")
        a @ b
        torch.set_default_device(None)  # pops its mode from under the switch
        a @ b
        assert torch.empty(1).device.type == "cpu"
    finally:
        ext.set_precision(None)
        torch.set_default_device(None)
    assert [c["mode"] for c in fake_gemm.calls] == ["tf32", "tf32"]
    assert torch._C._len_torch_function_stack() == 0


def test_the_switch_is_per_thread(fake_gemm):
    a, b = fresh(4, 5), fresh(5, 3)
    other_thread_calls = []

    def other():
        before = len(fake_gemm.calls)
        a @ b
        other_thread_calls.append(len(fake_gemm.calls) - before)

    with ext.precision("tf32tf32"):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        a @ b
    assert other_thread_calls == [0]
    assert len(fake_gemm.calls) == 1


def test_a_precision_object_is_reusable(fake_gemm):
    switch = ext.precision("halfhalf")
    a, b = fresh(4, 5), fresh(5, 3)
    for _ in range(2):
        with switch:
            a @ b
    assert [c["mode"] for c in fake_gemm.calls] == ["halfhalf", "halfhalf"]


def test_compile_traces_through_the_switch_and_recompiles_per_mode(fake_gemm):
    torch._dynamo.reset()

    def step(x, layer, w):
        return (layer(x).relu() @ w).sum(-1)

    compiled = torch.compile(step, backend="eager", fullgraph=True)
    x, layer, w = fresh(3, 6), torch.nn.Linear(6, 4), fresh(4, 2)
    expected = ((x.double() @ layer.weight.double().T + layer.bias.double()).relu() @ w.double()).sum(-1)
    for mode in ("tf32tf32", "halfhalf"):
        with ext.precision(mode):
            assert_close_to_fp64(compiled(x, layer, w).detach(), expected)
    assert [c["mode"] for c in fake_gemm.calls] == ["tf32tf32"] * 2 + ["halfhalf"] * 2


def test_compile_of_a_function_that_enters_the_switch(fake_gemm):
    torch._dynamo.reset()

    def step(a, b):
        with ext.precision("markidis"):
            return torch.einsum("bij,bjk->bik", a, b).sin()

    a, b = fresh(2, 3, 4), fresh(2, 4, 5)
    result = torch.compile(step, backend="eager", fullgraph=True)(a, b)
    assert_close_to_fp64(result, torch.einsum("bij,bjk->bik", a.double(), b.double()).sin())
    assert [c["mode"] for c in fake_gemm.calls] == ["markidis"]


def test_set_precision_inside_a_device_block_outlives_the_block():
    """The block's exit pops the block's own device mode, not the switch set inside it."""
    from torch.overrides import _get_current_function_mode_stack

    try:
        with torch.device("meta"):
            ext.set_precision("tf32tf32")
        assert torch.empty(1).device.type == "cpu"
        assert [type(m).__name__ for m in _get_current_function_mode_stack()] == ["PrecisionMode"]
    finally:
        ext.set_precision(None)
    assert _get_current_function_mode_stack() == []
