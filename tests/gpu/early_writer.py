"""Triton kernels that make the window a programmatically launched kernel could misuse: a writer that lets the next
kernel launch at its start, then waits before it writes, and a reader launched programmatically that reads without
waiting (the control: it must see the old bytes, or the window is not there)."""

from __future__ import annotations

import functools

import torch

BLOCK_BYTES = 16384


@functools.cache
def _kernels():
    import triton
    import triton.language as tl
    import triton.language.extra.cuda  # noqa: F401  (tl.extra.cuda.gdc_launch_dependents)

    @triton.jit
    def _now():
        return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)

    @triton.jit
    def write_late(dst, src, size, delay_ns, BLOCK: tl.constexpr):
        tl.extra.cuda.gdc_launch_dependents()
        start = _now()
        now = start
        while now - start < delay_ns:
            now = _now()
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + offsets, tl.load(src + offsets, mask=offsets < size), mask=offsets < size)

    @triton.jit
    def read_early(src, out, size, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + offsets, tl.load(src + offsets, mask=offsets < size), mask=offsets < size)

    return write_late, read_early


def write_late(dst: torch.Tensor, src: torch.Tensor, delay_ns: int = 50_000) -> None:
    """dst (uint8) = src after `delay_ns`, each program having let the next kernel launch first."""
    kernel = _kernels()[0]
    kernel[(-(-dst.numel() // BLOCK_BYTES),)](dst, src, dst.numel(), delay_ns, BLOCK=BLOCK_BYTES)


def read_early(src: torch.Tensor, out: torch.Tensor) -> None:
    """out = src, launched programmatically and reading without a wait."""
    kernel = _kernels()[1]
    kernel[(-(-src.numel() // BLOCK_BYTES),)](src, out, src.numel(), BLOCK=BLOCK_BYTES, launch_pdl=True)


def arena_views(arena: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    """Tensors shaped, typed and strided as `like`, laid out one after another in the uint8 `arena` (256-byte
    aligned), so that one kernel writes them all."""
    views, offset = [], 0
    for t in like:
        nbytes = t.untyped_storage().nbytes()
        piece = arena[offset : offset + nbytes].view(t.dtype)  # as_strided's offset counts from the arena's start
        views.append(piece.as_strided(t.shape, t.stride(), piece.storage_offset() + t.storage_offset()))
        offset += -(-nbytes // 256) * 256
    return views


def arena_bytes(like: list[torch.Tensor]) -> int:
    return sum(-(-t.untyped_storage().nbytes() // 256) * 256 for t in like)


def run_after_late_writer(run, old: list[torch.Tensor], new: list[torch.Tensor]):
    """`run(*inputs)` captured in a graph right after a kernel that lets it launch at its start and writes `new` into
    the inputs (which hold `old`) 50 µs later; returns its output and whether the control, a kernel launched the same
    way that reads without waiting, saw old bytes (the window the caller relies on)."""
    size = arena_bytes(old)
    arenas = {name: torch.zeros(size, dtype=torch.uint8, device="cuda") for name in ("inputs", "old", "new", "seen")}
    inputs = arena_views(arenas["inputs"], old)
    for values, name in ((old, "old"), (new, "new")):
        for view, value in zip(arena_views(arenas[name], old), values):
            view.copy_(value)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # built, loaded and compiled before capture
        run(*inputs)
        write_late(arenas["inputs"], arenas["old"], delay_ns=0)
        read_early(arenas["inputs"], arenas["seen"])
    torch.cuda.current_stream().wait_stream(stream)
    graph, control = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        write_late(arenas["inputs"], arenas["new"])
        output = run(*inputs)
    with torch.cuda.graph(control):
        write_late(arenas["inputs"], arenas["new"])
        read_early(arenas["inputs"], arenas["seen"])
    for replay in (graph, control):
        arenas["inputs"].copy_(arenas["old"])
        torch.cuda.synchronize()
        replay.replay()
        torch.cuda.synchronize()
    return output, not torch.equal(arenas["seen"], arenas["new"])
