"""Batched matmul operands: checked, broadcast and flattened to one batch so that the product reshapes back."""

import subprocess
import sys

import pytest
import torch

from cutlass_ext.batched import batch_shape, broadcast_operands, flatten_batch


@pytest.mark.parametrize(
    "a_shape, b_shape, batch",
    [
        ((3, 5), (5, 2), ()),
        ((4, 3, 5), (5, 2), (4,)),
        ((3, 5), (2, 1, 5, 7), (2, 1)),
        ((2, 1, 3, 5), (6, 5, 1), (2, 6)),
    ],
)
def test_the_flattened_product_is_torch_matmul(a_shape, b_shape, batch):
    # Small integers: every product and sum is exact, so any summation order gives the same bits.
    a, b = (torch.randint(-8, 9, shape).to(torch.float64) for shape in (a_shape, b_shape))
    shape, a3, b3 = flatten_batch(a, b)
    assert shape == batch
    assert a3.dim() == b3.dim() == 3 and a3.shape[0] == b3.shape[0]
    product = torch.bmm(a3, b3).reshape(*shape, a3.shape[-2], b3.shape[-1])
    torch.testing.assert_close(product, torch.matmul(a, b), rtol=0, atol=0)


def test_broadcast_operands_are_views():
    a, b = torch.randn(3, 5), torch.randn(4, 5, 2)
    a4, b4 = broadcast_operands(a, b)
    assert a4.shape == (4, 3, 5) and a4.stride(0) == 0 and a4.data_ptr() == a.data_ptr() and b4 is not b


@pytest.mark.parametrize(
    "a, b, message",
    [
        (torch.randn(5), torch.randn(5, 2), "at least 2 dimensions"),
        (torch.randn(3, 4), torch.randn(5, 2), "must agree on K"),
        (torch.randn(2, 3, 5), torch.randn(3, 5, 2), "do not broadcast"),
        (torch.randn(3, 5), torch.randn(5, 2, device="meta"), "one device"),
    ],
)
def test_bad_operands_are_named(a, b, message):
    with pytest.raises(ValueError, match=message):
        flatten_batch(a, b)


@pytest.mark.parametrize("a_batch, b_batch", [((), ()), ((4,), ()), ((2, 1), (6,)), ((0,), (1,)), ((3,), (3,))])
def test_batch_shape_is_torchs_broadcast(a_batch, b_batch):
    assert batch_shape(torch.Size(a_batch), torch.Size(b_batch)) == torch.broadcast_shapes(a_batch, b_batch)


@pytest.mark.parametrize("a_batch, b_batch", [((2,), (3,)), ((0,), (2,)), ((2, 3), (4, 3))])
def test_batch_shape_refuses_what_torch_refuses(a_batch, b_batch):
    with pytest.raises(RuntimeError):
        torch.broadcast_shapes(a_batch, b_batch)
    with pytest.raises(RuntimeError):
        batch_shape(torch.Size(a_batch), torch.Size(b_batch))


def test_batch_shape_traces_symbolic_sizes():
    from torch.fx.experimental.proxy_tensor import make_fx

    def product_shape(a, b):
        return flatten_batch(a, b)[1]

    traced = make_fx(product_shape, tracing_mode="symbolic")(torch.randn(2, 1, 3, 5), torch.randn(4, 5, 2))
    _, a3, _ = flatten_batch(torch.randn(3, 1, 2, 5), torch.randn(6, 5, 2))
    assert traced(torch.randn(3, 1, 2, 5), torch.randn(6, 5, 2)).shape == a3.shape


def test_eager_broadcast_imports_no_sympy():
    # torch.broadcast_shapes's first call imports sympy: seconds of a fresh process's first low-bit call
    code = (
        "import sys, torch; from cutlass_ext.batched import flatten_batch; before = 'sympy' in sys.modules; "
        "flatten_batch(torch.randn(2, 3, 5), torch.randn(5, 4)); "
        "flatten_batch(torch.randn(3, 5), torch.randn(3, 5, 4)); "
        "print(before or 'sympy' not in sys.modules)"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "True"
    )
