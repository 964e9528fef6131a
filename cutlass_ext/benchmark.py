"""Timing and provenance for benchmarks: CUDA events, warm-up, median, inputs rotated past the L2 cache."""

from __future__ import annotations

import contextlib
import datetime
import statistics
import time

import torch

from . import toolchain

# Bytes of other inputs, in L2 sizes, read between two calls on the same input set. Three are enough while L2 evicts
# by age; the decode kernels load their weights evict-first, so lines read without that hint (their L2 prefetch, 16-32
# MB a call) outlive three L2 sizes of weights (ncu: 6-8 of 67 MB a call came from L2) but not ten (under 0.5 MB).
ROTATION_L2_SIZES = 10


def rotation_count(bytes_per_set: int, device=None) -> int:
    """How many input sets to cycle through so that each call finds its inputs outside L2 (at least 2)."""
    l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
    return max(2, -(-ROTATION_L2_SIZES * l2_bytes // max(bytes_per_set, 1)))


def spin_up(seconds: float = 1.0, device=None) -> None:
    """Keep the GPU busy for `seconds` (bf16 matmuls) so that the first timed case does not meet idle clocks: an
    H200 starts a run at 345 MHz, and the first shape of a round-robin benchmark once ran 10-20% slow for every
    contender, all three of its rounds included. `device`: a CUDA device (default: the current one)."""
    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    x = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            x = torch.mm(x, x).clamp_(-1, 1)
        torch.cuda.synchronize(device)


def pass_order(items, pass_index: int) -> list:
    """The order in which round-robin pass `pass_index` times `items`: as given on even passes, reversed on odd
    ones. Under the 700 W cap a GEMM timed right after a light contender (a plain read, another shape's last row)
    runs at higher clocks than one timed after a heavy GEMM; in a fixed order the same contender always gets that
    place (seen at 256 x 57344 x 8192: 3-5% to the one listed first). Reversing changes every contender's
    predecessor on alternate passes."""
    items = list(items)
    return items[::-1] if pass_index % 2 else items


def median_time_us(run, input_sets: list, warmup: int = 5, repeats: int = 30) -> float:
    """Median over `repeats` of one call `run(*inputs)`, each timed with CUDA events on the current stream."""
    for i in range(warmup):
        run(*input_sets[i % len(input_sets)])
    times = []
    for i in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        inputs = input_sets[i % len(input_sets)]
        start.record()
        run(*inputs)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def enqueued_time_us(run, input_sets: list, warmup: int = 5, repeats: int = 30) -> float:
    """Median over `repeats` of one call `run(*inputs)` among calls enqueued back to back (CUDA events around each,
    one synchronise at the end, as triton.testing.do_bench does): the GPU time of a call in a loop that keeps the GPU
    busy, where `median_time_us`'s synchronise before each call also counts the host's time to its first launch
    (0.2-0.3 ms for a multi-kernel product's planning and allocations on a slow host CPU)."""
    for i in range(warmup):
        run(*input_sets[i % len(input_sets)])
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for i, (start, end) in enumerate(events):
        start.record()
        run(*input_sets[i % len(input_sets)])
        end.record()
    events[-1][1].synchronize()
    return statistics.median(start.elapsed_time(end) * 1000.0 for start, end in events)


def graph_time_us(run, input_sets: list, calls: int = 20, repeats: int = 10) -> float:
    """Median time of one call when `calls` calls (cycling through the input sets) replay from one CUDA graph:
    the GPU's time without the host's launch gaps (seed 003 section 5)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for inputs in input_sets[:2]:
            run(*inputs)  # warm-up off the capture: builds, autotuning and workspace allocations happen here
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            run(*input_sets[i % len(input_sets)])
    graph.replay()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / calls)
    del graph
    return statistics.median(times)


# graph length for sustained timing: about this much GPU time per replay, so replays are few and the GPU never idles
SUSTAINED_GRAPH_SECONDS = 0.02


def sustained_time_us(run, input_sets: list, seconds: float, warm_seconds: float = 1.0, during=None) -> float:
    """Time of one call while calls run back to back for `seconds`, after `warm_seconds` of the same: the rate a
    large GEMM keeps once the board's power cap sets the clock (within milliseconds on the H100), which a few
    calls after an idle gap do not see. `during`, a context manager (a power sampler), spans the timed window."""
    run(*input_sets[0])
    torch.cuda.synchronize()
    once_us = median_time_us(run, input_sets, warmup=1, repeats=3)
    calls = max(1, round(SUSTAINED_GRAPH_SECONDS * 1e6 / once_us))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            run(*input_sets[i % len(input_sets)])
    replays = max(2, round(seconds * 1e6 / (once_us * calls)))
    warm_start = time.perf_counter()
    while time.perf_counter() - warm_start < warm_seconds:
        graph.replay()
        torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with during or contextlib.nullcontext():
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
    del graph
    return start.elapsed_time(end) * 1000.0 / (replays * calls)


def environment(device=None) -> dict:
    """Where a measurement was taken: the columns every results CSV carries."""
    try:
        nvcc = toolchain.nvcc_version()
    except (FileNotFoundError, OSError):
        nvcc = "none"
    return {
        "gpu": torch.cuda.get_device_name(device),
        "nvcc": nvcc,
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
