"""What torch.compile needs to know about dispatch's helpers, said without importing torch._dynamo at import time."""

from __future__ import annotations

import functools


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
