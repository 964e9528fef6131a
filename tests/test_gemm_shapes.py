"""gemm's torch.matmul semantics and epilogue on the CPU: the kernels' product replaced by an FP64 one, so what is
tested is the shape logic (1-D operands, broadcast batch dimensions, flattening to the kernels' 2-D and 3-D
problems), the epilogue's arguments and the gradients of a, b, bias and c."""

import importlib

import pytest
import torch

gemm_module = importlib.import_module("cutlass_ext.gemm")  # the module; `cutlass_ext.gemm` is also the function

CUDA = torch.device("cuda")


@pytest.fixture
def kernels_on_cpu(monkeypatch):
    """The kernels' product as FP64 torch ops (checking it gets what the kernels take), and gemm's device check
    told these CPU tensors are CUDA ones. Yields the list of operand shapes the product was called with."""
    calls = []

    def product(a, b, mode, source=None, alpha=1.0, beta=0.0):
        assert a.dim() in (2, 3) and b.dim() in (2, 3) and a.shape[-1] == b.shape[-2]
        assert a.dim() == 2 or b.dim() == 2 or a.shape[0] == b.shape[0]
        calls.append((tuple(a.shape), tuple(b.shape)))
        d = alpha * (a.double() @ b.double())
        if source is not None:
            d = d + beta * source.double()
        return d.float()

    check = gemm_module._check
    monkeypatch.setattr(
        gemm_module, "_check", lambda mode, a_t, b_t, a_d, b_d, *shapes: check(mode, a_t, b_t, CUDA, CUDA, *shapes)
    )
    monkeypatch.setattr(gemm_module, "_cached_runtime_plan", lambda *args: ("sm80", ["kernel"]))
    monkeypatch.setattr(
        gemm_module, "_launch", lambda plan, a, b, *epilogue: product(a, b, epilogue[-1], *epilogue[:-1])
    )
    monkeypatch.setattr(gemm_module, "_product", product)
    monkeypatch.setattr(gemm_module.registry, "binding", lambda: None)
    monkeypatch.setattr(gemm_module.ops, "gemm", lambda a, b, variants, *epilogue: product(a, b, "", *epilogue))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: False)
    gemm_module._eager_plan.cache_clear()
    yield calls
    gemm_module._eager_plan.cache_clear()


def randn(*shape, generator, requires_grad=False):
    return torch.randn(shape, generator=generator).requires_grad_(requires_grad)


SHAPES = [
    ((7,), (7,)),
    ((7,), (7, 5)),
    ((3, 7), (7,)),
    ((4, 3, 7), (7,)),
    ((7,), (4, 7, 5)),
    ((4, 3, 7), (7, 5)),
    ((3, 7), (4, 7, 5)),
    ((2, 1, 3, 7), (4, 7, 5)),
    ((1, 3, 7), (2, 4, 7, 5)),
    ((2, 4, 3, 7), (2, 4, 7, 5)),
    ((1, 1, 3, 7), (1, 7, 5)),
    ((0, 3, 7), (7, 5)),
    ((3, 0), (0, 5)),
]


@pytest.mark.parametrize("a_shape, b_shape", SHAPES)
def test_shapes_and_values_follow_torch_matmul(kernels_on_cpu, a_shape, b_shape):
    generator = torch.Generator().manual_seed(1)
    a, b = randn(*a_shape, generator=generator), randn(*b_shape, generator=generator)
    ours = gemm_module.gemm(a, b, mode="tf32tf32")
    expected = torch.matmul(a.double(), b.double())
    assert ours.shape == expected.shape
    torch.testing.assert_close(ours.double(), expected, rtol=1e-6, atol=1e-6)


def test_broadcast_operands_are_shared_or_flattened_not_copied_per_batch(kernels_on_cpu):
    generator = torch.Generator().manual_seed(2)
    gemm_module.gemm(randn(1, 3, 7, generator=generator), randn(2, 4, 7, 5, generator=generator))
    gemm_module.gemm(randn(2, 4, 3, 7, generator=generator), randn(7, 5, generator=generator))
    # a batch of one is one matrix every batch shares (batch stride 0); b's (2, 4) batches flatten to 8
    assert kernels_on_cpu == [((3, 7), (8, 7, 5)), ((8, 3, 7), (7, 5))]


@pytest.mark.parametrize("a_shape, b_shape", [((5, 3, 7), (7, 6)), ((3, 7), (7, 6)), ((2, 1, 3, 7), (4, 7, 6))])
@pytest.mark.parametrize("c_shape", [None, (6,), (3, 6), (3, 1), (1, 6)])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0), (-3.0, 1.0)])
def test_epilogue_and_gradients_equal_a_separate_pass(
    kernels_on_cpu, a_shape, b_shape, c_shape, with_bias, alpha, beta
):
    if c_shape is None and beta != 0:
        beta = 0.0
    generator = torch.Generator().manual_seed(3)
    a = randn(*a_shape, generator=generator, requires_grad=True)
    b = randn(*b_shape, generator=generator, requires_grad=True)
    bias = randn(b_shape[-1], generator=generator, requires_grad=True) if with_bias else None
    c = randn(*c_shape, generator=generator, requires_grad=True) if c_shape else None
    ours = gemm_module.gemm(a, b, bias=bias, alpha=alpha, beta=beta, c=c)
    leaves = [t for t in (a, b, bias, c) if t is not None]
    doubles = [t.detach().double().requires_grad_() for t in leaves]
    lookup = dict(zip(map(id, leaves), doubles))
    expected = alpha * torch.matmul(lookup[id(a)], lookup[id(b)])
    if c is not None:
        expected = expected + beta * lookup[id(c)]
    if bias is not None:
        expected = expected + lookup[id(bias)]
    assert ours.shape == expected.shape
    torch.testing.assert_close(ours.double(), expected, rtol=1e-6, atol=1e-6)
    weight = torch.randn(ours.shape, generator=generator)
    (ours * weight).sum().backward()
    (expected * weight.double()).sum().backward()
    for leaf, double in zip(leaves, doubles):
        grad = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)  # beta = 0: c takes no part
        torch.testing.assert_close(grad.double(), double.grad, rtol=1e-6, atol=1e-6)


def test_out_receives_the_result(kernels_on_cpu):
    generator = torch.Generator().manual_seed(4)
    a, b = randn(2, 3, 7, generator=generator), randn(7, 5, generator=generator)
    out = torch.empty(2, 3, 5)
    result = gemm_module.gemm(a, b, out=out)
    assert result is out
    torch.testing.assert_close(out.double(), a.double() @ b.double(), rtol=1e-6, atol=1e-6)


def test_out_refuses_autograd_as_torch_does(kernels_on_cpu):
    a = torch.ones(3, 7, requires_grad=True)
    with pytest.raises(RuntimeError, match="out=.*automatic differentiation"):
        gemm_module.gemm(a, torch.ones(7, 5), out=torch.empty(3, 5))


@pytest.mark.parametrize(
    "a_shape, b_shape, kwargs, error, message",
    [
        ((3, 7), (7, 5), {"bias": torch.ones(4)}, ValueError, r"bias must have shape \(5,\)"),
        ((3, 7), (7,), {"bias": torch.ones(1)}, ValueError, "bias is one value per column"),
        ((3, 7), (7, 5), {"bias": torch.ones(5, dtype=torch.float64)}, TypeError, "bias must be float32"),
        ((3, 7), (7, 5), {"bias": [1.0] * 5}, TypeError, "bias must be a torch.Tensor"),
        ((3, 7), (7, 5), {"c": torch.ones(4, 5), "beta": 1.0}, ValueError, r"c of shape \(4, 5\) does not broadcast"),
        ((3, 7), (7, 5), {"beta": 1.0}, ValueError, "beta=1.0 scales c, but no c was given"),
        ((3, 7), (7, 5), {"alpha": torch.tensor(2.0)}, TypeError, "alpha must be a real number"),
        ((3, 7), (7, 5), {"beta": "1", "c": torch.ones(5)}, TypeError, "beta must be a real number"),
        ((3, 7), (7, 5), {"out": torch.empty(5, 3)}, ValueError, r"out must have the result's shape \(3, 5\)"),
        ((2, 3, 7), (3, 7, 5), {}, ValueError, "batch sizes must match or be 1"),
        ((3, 7), (6, 5), {}, ValueError, r"a.shape\[-1\] must equal b.shape\[-2\]"),
        ((3, 7), (6,), {}, ValueError, r"a.shape\[-1\] must equal b.shape\[0\]"),
        ((), (7, 5), {}, ValueError, "a must have at least one dimension"),
    ],
)
def test_bad_epilogue_and_shapes_are_named(kernels_on_cpu, a_shape, b_shape, kwargs, error, message):
    with pytest.raises(error, match=message):
        gemm_module.gemm(torch.ones(a_shape), torch.ones(b_shape), **kwargs)


class _MatmulInTf32(torch.overrides.TorchFunctionMode):
    """Stands for `ext.precision`'s switch: a mode that would route torch.matmul elsewhere."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.matmul:
            raise AssertionError("the fp32 mode's matmul went through a TorchFunctionMode")
        return func(*args, **(kwargs or {}))


def test_fp32_mode_runs_torchs_matmul_past_any_torch_function_mode(monkeypatch):
    # the fp32 mode is torch's own matmul while torch's FP32 matmul is IEEE: not the matmul a mode would route
    monkeypatch.setattr(gemm_module.cublas, "torch_matmul_is_ieee", lambda: True)
    monkeypatch.setattr(gemm_module.cublas, "sgemm", lambda a, b, *epilogue: "the pedantic call")
    a, b = torch.randn(5, 7, dtype=torch.float64), torch.randn(7, 3, dtype=torch.float64)
    with _MatmulInTf32():
        d = gemm_module._launch(("fp32", None), a, b, None, 1.0, 0.0, "fp32")
    assert torch.equal(d, a @ b)


def test_fp32_mode_takes_the_pedantic_call_where_torchs_precision_cannot_be_read(monkeypatch):
    cublas = gemm_module.cublas
    previous = torch.backends.cuda.matmul.fp32_precision
    try:
        for precision, ieee in (("ieee", True), ("tf32", False)):
            torch.backends.cuda.matmul.fp32_precision = precision
            assert cublas.torch_matmul_is_ieee() == ieee
    finally:
        torch.backends.cuda.matmul.fp32_precision = previous

    def refuses():
        raise RuntimeError("mix of legacy and new precision settings")

    monkeypatch.setattr(cublas, "_allow_tf32", refuses)
    assert not cublas.torch_matmul_is_ieee()
    monkeypatch.setattr(cublas, "_allow_tf32", None)  # a torch without the private getter
    assert not cublas.torch_matmul_is_ieee()


def test_fp32_mode_stays_fp32_under_autocast_and_deterministic_mode(monkeypatch):
    # torch's matmul would run in 16 bits under autocast and refuse cuBLAS in deterministic mode: the pedantic call
    monkeypatch.setattr(gemm_module.cublas, "torch_matmul_is_ieee", lambda: True)
    monkeypatch.setattr(gemm_module.cublas, "sgemm", lambda a, b, *epilogue: "the pedantic call")
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    assert torch.equal(gemm_module._launch(("fp32", None), a, b, None, 1.0, 0.0, "fp32"), a @ b)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert gemm_module._launch(("fp32", None), a, b, None, 1.0, 0.0, "fp32") == "the pedantic call"
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert gemm_module._launch(("fp32", None), a, b, None, 1.0, 0.0, "fp32") == "the pedantic call"
    finally:
        torch.use_deterministic_algorithms(previous)


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [((0, 3), (2, 3, 4)), ((2, 0), (3, 0, 4)), ((2, 3, 0), (0, 4)), ((2, 3, 4), (4, 0)), ((3, 4), (4, 0))],
)
def test_gradients_of_empty_operands_are_zero_sized_as_torchs(kernels_on_cpu, a_shape, b_shape):
    leaves = [torch.randn(a_shape), torch.randn(b_shape), torch.randn(b_shape[-1])]
    ours = [t.clone().requires_grad_() for t in leaves]
    theirs = [t.double().requires_grad_() for t in leaves]
    gemm_module.gemm(ours[0], ours[1], bias=ours[2]).sum().backward()
    (torch.matmul(theirs[0], theirs[1]) + theirs[2]).sum().backward()
    for mine, torchs in zip(ours, theirs):
        assert mine.grad.shape == torchs.grad.shape
        torch.testing.assert_close(mine.grad.double(), torchs.grad)


def test_a_bool_alpha_is_refused_on_every_path(kernels_on_cpu):
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    for kwargs in ({}, {"bias": torch.randn(5)}):
        with pytest.raises(TypeError, match="alpha must be a real number; got bool"):
            gemm_module.gemm(a, b, alpha=True, **kwargs)
