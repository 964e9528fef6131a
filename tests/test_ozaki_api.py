"""cutlass_ext.ozaki.gemm on CPU tensors (the reference behind the same op): its checks, broadcasting, autograd
and the op's registration (schema, fake kernel, autograd) as torch.library.opcheck sees them."""

import pytest
import torch

import cutlass_ext as ext
from cutlass_ext import ozaki
from cutlass_ext.ozaki.reference import ozaki_matmul


def urand(*shape):
    return torch.rand(shape) * 2 - 1


def test_cpu_gemm_is_the_reference():
    a, b = urand(2, 9, 33), urand(33, 7)
    assert torch.equal(ozaki.gemm(a, b, moduli=7), ozaki_matmul(a, b, 7))


def test_autograd_runs_two_more_products():
    a, b = urand(6, 20).requires_grad_(), urand(20, 5).requires_grad_()
    grad = urand(6, 5)
    ozaki.gemm(a, b).backward(grad)
    assert torch.equal(a.grad, ozaki_matmul(grad, b.detach().T.contiguous(), 8))
    assert torch.equal(b.grad, ozaki_matmul(a.detach().T.contiguous(), grad, 8))


def test_broadcast_batch_gradients_sum():
    a, b = urand(3, 4, 10).requires_grad_(), urand(10, 2).requires_grad_()
    ozaki.gemm(a, b).sum().backward()
    assert b.grad.shape == (10, 2)
    torch.testing.assert_close(b.grad, a.detach().sum((0, 1)).unsqueeze(1).expand(10, 2), rtol=1e-6, atol=1e-6)


def test_opcheck():
    a, b = urand(2, 5, 12), urand(2, 12, 3)
    torch.library.opcheck(torch.ops.cutlass_ext.ozaki_gemm, (a, b, ozaki.OzakiConfig().name))


def test_argument_errors():
    a, b = urand(4, 8), urand(8, 3)
    with pytest.raises(TypeError, match="a must be float32"):
        ozaki.gemm(a.double(), b)
    with pytest.raises(TypeError, match="b must be a torch.Tensor"):
        ozaki.gemm(a, 1.0)
    with pytest.raises(ValueError, match="b must have at least 2 dimensions"):
        ozaki.gemm(a, urand(8))
    with pytest.raises(ValueError, match="must agree on K"):
        ozaki.gemm(a, urand(7, 3))
    with pytest.raises(ValueError, match="do not broadcast"):
        ozaki.gemm(urand(2, 4, 8), urand(3, 8, 3))
    with pytest.raises(ValueError, match="moduli=2 must be an integer"):
        ozaki.gemm(a, b, moduli=2)
    with pytest.raises(TypeError, match="config must be an OzakiConfig"):
        ozaki.gemm(a, b, config="ozaki_int8x8_128x256x128_c1x1_w8")
    with pytest.raises(ValueError, match="config.moduli=8 differs from moduli=6"):
        ozaki.gemm(a, b, moduli=6, config=ozaki.OzakiConfig())


def test_config_names_round_trip():
    config = ozaki.OzakiConfig(moduli=7, tile=(128, 128, 128), cluster=(1, 2), swizzle=1)
    assert config.name == "ozaki_int8x7_128x128x128_c1x2"
    assert ozaki.OzakiConfig.from_name(config.name) == config
    assert ozaki.OzakiConfig().name == "ozaki_int8x8_128x256x128_c1x1_w8"
    products = ozaki.OzakiConfig(output="products")
    assert ozaki.OzakiConfig.from_name(products.name) == products and products.name.endswith("_w8_p32")
    with pytest.raises(ValueError, match="not an Ozaki-II variant name"):
        ozaki.OzakiConfig.from_name("int8x8")
    with pytest.raises(ValueError, match="tile=.*multiple"):
        ozaki.OzakiConfig(tile=(100, 256, 128))


def test_gemm_mode_shapes_and_epilogue():
    a, b, c, bias = urand(5, 12), urand(12, 4), urand(5, 4), urand(4)
    assert ozaki.is_mode("int8x8") and not ozaki.is_mode("int8x") and not ozaki.is_mode("tf32tf32")
    product = ozaki_matmul(a, b, 7)
    result = ozaki.gemm_mode(a, b, "int8x7", bias=bias, alpha=2.0, beta=0.5, c=c)
    assert torch.equal(result, product * 2.0 + 0.5 * c + bias)
    assert torch.equal(ozaki.gemm_mode(a[0], b, "int8x7"), product[0])
    assert torch.equal(ozaki.gemm_mode(a, b[:, 0], "int8x7"), product[:, 0])
    assert ozaki.gemm_mode(a[0], b[:, 0], "int8x7").shape == ()
    out = torch.empty(5, 4)
    assert ozaki.gemm_mode(a, b, "int8x7", out=out) is out and torch.equal(out, product)


def test_ext_gemm_in_an_ozaki_mode_names_a_bad_epilogue_argument():
    a, b = urand(5, 12), urand(12, 4)
    with pytest.raises(ValueError, match=r"bias must have shape \(4,\)"):
        ext.gemm(a, b, mode="int8x8", bias=urand(3))
    with pytest.raises(TypeError, match="bias must be float32"):
        ext.gemm(a, b, mode="int8x8", bias=urand(4).double())
    with pytest.raises(ValueError, match="does not broadcast to the result's shape"):
        ext.gemm(a, b, mode="int8x8", beta=1.0, c=urand(5, 3))
    with pytest.raises(ValueError, match="beta=0.5 scales c, but no c was given"):
        ext.gemm(a, b, mode="int8x8", beta=0.5)
    with pytest.raises(ValueError, match=r"out must have the result's shape \(5, 4\)"):
        ext.gemm(a, b, mode="int8x8", out=torch.empty(4, 5))
    with pytest.raises(TypeError, match="alpha must be a real number"):
        ext.gemm(a, b, mode="int8x8", alpha="2")
    with pytest.raises(TypeError, match="a must be float32"):
        ext.gemm(a.int(), b, mode="int8x8", bias=urand(4))
    with pytest.raises(ValueError, match="moduli=99 must be an integer in 3..14"):
        ext.gemm(a, b, mode="int8x99")
    with pytest.raises(TypeError, match="alpha must be a real number; got bool"):
        ext.gemm(a, b, mode="int8x8", alpha=True)
    with pytest.raises(ValueError, match=r"a is \(12,\) and b is \(5,\): a.shape\[-1\] must equal b.shape\[0\]"):
        ext.gemm(urand(12), urand(5), mode="int8x8")  # the shapes given, not the matrices they become
    with pytest.raises(RuntimeError, match="out=... arguments don't support automatic differentiation"):
        ext.gemm(a.requires_grad_(), b, mode="int8x8", out=torch.empty(5, 4))  # as torch's out= and the other modes
    with torch.no_grad():
        out = torch.empty(5, 4)
        assert ext.gemm(a, b, mode="int8x8", out=out) is out and torch.equal(out, ozaki_matmul(a.detach(), b, 8))
    a = a.detach()
    # the epilogue's arguments that are right still give the reference's bits
    bias = urand(4)
    assert torch.equal(ext.gemm(a, b, mode="int8x8", bias=bias), ozaki_matmul(a, b, 8) + bias)


def test_the_modes_error_lists_the_ozaki_modes():
    with pytest.raises(ValueError, match=r"mode='int8' is not one of \[.*\] or int8x<moduli>"):
        ext.gemm(urand(2, 2), urand(2, 2), mode="int8")
    assert ext.nn.Linear(4, 3, mode="int8x8").mode == "int8x8"
    model = ext.nn.convert(torch.nn.Sequential(torch.nn.Linear(4, 3)), mode="int8x7")
    assert model[0].mode == "int8x7"
    with pytest.raises(ValueError, match="moduli=2 must be an integer in 3..14"):
        ext.nn.Linear(4, 3, mode="int8x2")
    for spelling in ("int8x08", "int8x\u0668"):  # one spelling per count: no leading zero, ASCII digits
        with pytest.raises(ValueError, match="is not one of"):
            ext.precision(spelling)
    with pytest.raises(ValueError, match="a must have at least 1 dimension"):
        ext.gemm(torch.tensor(1.0), urand(1, 2), mode="int8x8")


def test_the_kernels_are_launched_directly_only_where_nothing_must_see_the_op():
    """An eager call without autograd skips the op's dispatch; gradients, torch.func's transforms, torch.jit.trace,
    fake tensors and dispatch modes get the op (they record it, or their tensors have no storage)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode

    from cutlass_ext.ozaki import _untraced

    a, b = torch.randn(4, 5), torch.randn(5, 3)
    assert _untraced(a, b)
    assert not _untraced(a.requires_grad_(), b)
    with torch.no_grad():
        assert _untraced(a, b)
    a = a.detach()
    seen = []
    torch.func.vmap(lambda x: seen.append(_untraced(x, b)) or x)(a)
    torch.func.jvp(lambda x: seen.append(_untraced(x, b)) or x, (a,), (torch.ones_like(a),))
    torch.jit.trace(lambda x: seen.append(_untraced(x, b)) or x * 1, (a,), check_trace=False)
    with FakeTensorMode() as mode:
        seen.append(_untraced(mode.from_tensor(a), mode.from_tensor(b)))

    class Watching(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Watching():
        seen.append(_untraced(a, b))
    assert seen == [False] * 5
