"""What torch.compile needs to know about dispatch's helpers, and the package's Python-implemented ops, said without
importing torch._dynamo at import time or at an op's first call."""

from __future__ import annotations

import functools
import sys


def constant_result(fn):
    """`torch.compiler.assume_constant_result`: torch.compile calls `fn` while tracing and bakes its result into the
    graph. That function imports torch._dynamo (about 3 s) to set one attribute; this sets the same attribute
    (tests/test_dispatch.py checks they agree), so `import cutlass_ext` stays cheap."""
    fn._dynamo_marked_constant = True
    return fn


def cached_constant(fn=None, *, maxsize=None):
    """`constant_result` over a cached `fn`: torch.compile calls it while tracing, eager calls hit the cache. The mark
    goes on a plain function that calls the cache: on the cache itself torch.compile does not see it and refuses the
    call (`fullgraph=True`) or breaks the graph there."""

    def wrap(fn):
        cached = functools.lru_cache(maxsize=maxsize)(fn)

        @functools.wraps(fn)
        def call(*args):
            return cached(*args)

        call.cache_clear = cached.cache_clear
        return constant_result(call)

    return wrap(fn) if fn is not None else wrap


def _dynamo_disabled_once_loaded(fn):
    """`fn` as torch.library.custom_op runs an implementation: never traced by torch.compile. custom_op wraps it in
    `torch._disable_dynamo`, which imports torch._dynamo on the op's first call (about 3 s on a process's first call
    of the op, compiled or not). Until something has imported torch._dynamo no compiled code can be running, so
    this calls `fn` directly, and `torch._dynamo.disable(fn)` after (while another thread is still importing
    torch._dynamo, `disable` may not be bound yet: dynamo intercepts nothing before its import ends)."""
    disabled = None

    @functools.wraps(fn)
    def impl(*args, **kwargs):
        nonlocal disabled
        if disabled is None:
            disable = getattr(sys.modules.get("torch._dynamo"), "disable", None)
            if disable is None:
                return fn(*args, **kwargs)
            disabled = disable(fn, recursive=True)
        return disabled(*args, **kwargs)

    return impl


class CustomOp:
    """A functional op defined from a typed Python function, as `torch.library.custom_op` defines one (schema
    inferred from the annotations, pt2-compliant, the function as its implementation for every device,
    `register_fake`, `register_autograd`, called like the function), without custom_op's torch._dynamo import on its
    first call. Mutating ops stay with torch.library.custom_op, which also bumps the mutated tensors' versions.
    As custom_op's, the op always has an Autograd kernel: the implementation runs below autograd, and a backward
    through an op without `register_autograd` raises instead of differentiating through the implementation."""

    def __init__(self, qualname: str, fn, mutates_args):
        import torch

        if tuple(mutates_args):
            raise ValueError(f"{qualname}: compiling.custom_op defines functional ops; use torch.library.custom_op")
        namespace, name = qualname.split("::")
        self._qualname = qualname
        self._library = torch.library.Library(namespace, "FRAGMENT")
        schema = torch.library.infer_schema(fn, mutates_args=())
        self._library.define(name + schema, tags=(torch.Tag.pt2_compliant_tag,))
        self._library.impl(name, _dynamo_disabled_once_loaded(fn), "CompositeExplicitAutograd")
        self._overload = getattr(getattr(torch.ops, namespace), name).default
        self._backward = self._setup_context = None
        torch.library.register_autograd(
            qualname, self._run_backward, setup_context=self._run_setup_context, lib=self._library
        )
        functools.update_wrapper(self, fn)

    def _run_setup_context(self, ctx, inputs, output) -> None:
        if self._setup_context is not None:
            self._setup_context(ctx, inputs, output)

    def _run_backward(self, ctx, *grads):
        if self._backward is None:
            raise RuntimeError(
                f"Trying to backward through {self._qualname} but no autograd formula was registered "
                "(register_autograd)"
            )
        return self._backward(ctx, *grads)

    def __call__(self, *args, **kwargs):
        return self._overload(*args, **kwargs)

    def register_fake(self, fn):
        import torch

        torch.library.register_fake(self._qualname, fn, lib=self._library)
        return fn

    def register_autograd(self, backward, *, setup_context=None) -> None:
        """The op's backward (and what it saves), read by the Autograd kernel registered with the op."""
        self._backward, self._setup_context = backward, setup_context


def custom_op(qualname: str, *, mutates_args=()):
    """`@torch.library.custom_op(qualname, mutates_args=())` without its first call's torch._dynamo import
    (`CustomOp`)."""
    return lambda fn: CustomOp(qualname, fn, mutates_args)
