"""Board power while a GEMM repeats (seed 000 section 4.3): NVML samples every 20 ms over at least 2 s."""

from __future__ import annotations

import statistics
import threading
import time

import torch

SAMPLE_SECONDS = 0.02
MIN_SECONDS = 2.0


def _nvml_handle(device_index: int):
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    return pynvml, pynvml.nvmlDeviceGetHandleByIndex(device_index)


def mean_watts(run, inputs, seconds: float = MIN_SECONDS, device_index: int | None = None) -> float:
    """Mean power in W over `seconds` (at least 2) of back-to-back `run(*inputs)` calls; NaN without NVML."""
    try:
        pynvml, handle = _nvml_handle(torch.cuda.current_device() if device_index is None else device_index)
    except Exception:  # noqa: BLE001 - no NVML (no driver library, no permission): the power columns stay empty
        return float("nan")
    samples: list[float] = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            samples.append(pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)  # mW -> W
            time.sleep(SAMPLE_SECONDS)

    run(*inputs)  # warm: clocks up, kernels loaded
    torch.cuda.synchronize()
    sampler = threading.Thread(target=sample, daemon=True)
    start = time.perf_counter()
    sampler.start()
    try:
        while time.perf_counter() - start < max(seconds, MIN_SECONDS):
            for _ in range(8):
                run(*inputs)
            torch.cuda.synchronize()
    finally:
        stop.set()
        sampler.join()
    # the first samples can still read the idle level before the power rail settles
    settled = samples[len(samples) // 10 :] or samples
    return statistics.mean(settled) if settled else float("nan")
