"""What torch.compile needs to know about dispatch's helpers, said without importing torch._dynamo at import time."""

from __future__ import annotations


def constant_result(fn):
    """`torch.compiler.assume_constant_result`: torch.compile calls `fn` while tracing and bakes its result into the
    graph. That function imports torch._dynamo (about 3 s) to set one attribute; this sets the same attribute
    (tests/test_dispatch.py checks they agree), so `import cutlass_ext` stays cheap."""
    fn._dynamo_marked_constant = True
    return fn
