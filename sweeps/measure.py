"""The sweep's timing stages, for every family: a row's accuracy gate and time (CUDA events or graph replay), and
the finalists' re-timing. The problems, kernel runners and peers are the families' `measure` plug-ins
(cutlass_ext/families/<family>/measure.py).
"""

from __future__ import annotations

import inspect

from cutlass_ext import benchmark


def make_problem(plugin, shape, mode: str | None = None):
    """The family plug-in's problem for one shape, told `mode` where its make_problem takes one: a family whose
    shapes mean different problems per mode (the block-scaled family's [m, n, k, experts] is a mixture-of-experts
    layer or, in mode fp8_k_grouped, that layer's weight gradients)."""
    if mode is not None and "mode" in inspect.signature(plugin.make_problem).parameters:
        return plugin.make_problem(*shape, mode=mode)
    return plugin.make_problem(*shape)


def measure(mode: str, run, prepare, problem, repeats: int, warmup: int = 3) -> dict:
    """The measured columns of one row: relres and gate, then (if it passed) time and TFLOP/s over `repeats`."""
    sets = problem.operands(prepare)
    try:
        relres = problem.relres(run(*sets[0]))
    except RuntimeError as error:  # the variant cannot run this problem (alignment, shape, registers)
        return {"status": "cannot_run", "detail": str(error).splitlines()[0][:200]}
    status, detail = problem.gate(mode, relres)
    row = {"relres": relres, "status": status, "detail": detail}
    if status == "ok":
        row.update(timed(run, sets, problem, repeats, warmup))
    return row


def retime(run, prepare, problem, repeats: int) -> dict:
    """Time a row again with more repeats (a finalist of the screening pass)."""
    return timed(run, problem.operands(prepare), problem, repeats, warmup=3)


def timed(run, sets, problem, repeats: int, warmup: int) -> dict:
    if problem.graph_calls:
        time_us = benchmark.graph_time_us(run, sets, calls=problem.graph_calls, repeats=repeats)
    else:
        time_us = benchmark.median_time_us(run, sets, warmup=warmup, repeats=repeats)
    return {"time_us": round(time_us, 2), "tflops": round(problem.flops / time_us / 1e6, 2), "repeats": repeats}
