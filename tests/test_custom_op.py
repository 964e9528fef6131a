"""The package's functional Python-implemented ops (`compiling.custom_op`) behave as torch.library.custom_op's do
(schema, fake kernel, autograd, torch.compile, as opcheck sees them) without importing torch._dynamo on their first
call."""

import subprocess
import sys
import types

import pytest
import torch

from cutlass_ext.compiling import _dynamo_disabled_once_loaded, custom_op


@custom_op("cutlass_ext_test::scaled", mutates_args=())
def scaled(x: torch.Tensor, factor: float) -> torch.Tensor:
    return x * factor


@scaled.register_fake
def _(x, factor):
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    ctx.factor = inputs[1]


scaled.register_autograd(lambda ctx, grad: (grad * ctx.factor, None), setup_context=_setup_context)


def test_an_op_passes_opcheck_computes_differentiates_and_compiles():
    x = torch.randn(5, 3, requires_grad=True)
    torch.library.opcheck(torch.ops.cutlass_ext_test.scaled.default, (x, 2.5))
    y = scaled(x, 2.5)
    y.sum().backward()
    assert torch.equal(y, x.detach() * 2.5) and torch.equal(x.grad, torch.full_like(x, 2.5))
    compiled = torch.compile(lambda t: scaled(t, 3.0) + 1, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x.detach()), x.detach() * 3.0 + 1)
    assert torch.equal(scaled(x.detach(), 2.0), x.detach() * 2.0)  # eager once torch._dynamo is loaded


@custom_op("cutlass_ext_test::doubled")
def doubled(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@doubled.register_fake
def _(x):
    return torch.empty_like(x)


def test_an_op_without_a_backward_refuses_to_differentiate_eagerly_and_compiled():
    """As custom_op's: the implementation runs below autograd (no gradient through it), and backward raises."""
    x = torch.randn(4, requires_grad=True)
    torch.library.opcheck(torch.ops.cutlass_ext_test.doubled.default, (x,), test_utils=("test_autograd_registration",))
    y = doubled(x)
    assert y.requires_grad and torch.equal(y, x.detach() * 2)
    with pytest.raises(RuntimeError, match="no autograd formula"):
        y.sum().backward()
    compiled = torch.compile(lambda t: doubled(t).sum(), backend="aot_eager")
    with pytest.raises(RuntimeError, match="no autograd formula"):
        compiled(x).backward()


def test_a_call_while_another_thread_imports_dynamo_runs_the_implementation(monkeypatch):
    """torch._dynamo in sys.modules but not yet initialized (another thread importing it): call fn directly."""
    monkeypatch.setitem(sys.modules, "torch._dynamo", types.ModuleType("torch._dynamo"))
    op = _dynamo_disabled_once_loaded(lambda x: x + 1)
    assert op(1) == 2


def test_a_mutating_op_is_left_to_torch_library_custom_op():
    with pytest.raises(ValueError, match="functional ops"):
        custom_op("cutlass_ext_test::add_into", mutates_args=("out",))(lambda out, x: None)
    assert torch.Tag.pt2_compliant_tag in torch.ops.cutlass_ext_test.scaled.default.tags


def test_first_calls_of_the_packages_ops_do_not_import_dynamo():
    code = (
        "import sys, torch, cutlass_ext as ext\n"
        "a = torch.randn(32, 48); b = torch.randn(48, 16)\n"
        "ext.lowbit.matmul(a, b, ext.lowbit.LowbitConfig(ext.lowbit.LowbitFormat.make(7, 4, chunk=16)))\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False", result.stderr
