"""Board power (and SM clock) while a GEMM repeats (seed 000 section 4.3): NVML samples every 20 ms."""

from __future__ import annotations

import math
import statistics
import threading
import time
from typing import Self

import torch

SAMPLE_SECONDS = 0.02
MIN_SECONDS = 2.0


def _nvml_handle(device_index: int):
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    return pynvml, pynvml.nvmlDeviceGetHandleByIndex(device_index)


class Sampler:
    """Samples board power (W), SM clock (MHz) and whether the software power cap is holding the clocks down, every
    20 ms in a background thread while the `with` block runs. Without NVML (no driver library, no permission) it
    samples nothing and `summary()` is all NaN."""

    def __init__(self, device_index: int | None = None):
        self.samples: list[tuple[float, float, bool]] = []
        self._stop = threading.Event()
        try:
            self._nvml, self._handle = _nvml_handle(
                torch.cuda.current_device() if device_index is None else device_index
            )
        except Exception:  # noqa: BLE001 - no NVML: the power columns stay empty
            self._nvml = None

    def _sample(self) -> None:
        nvml = self._nvml
        while not self._stop.is_set():
            watts = nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0  # mW -> W
            mhz = nvml.nvmlDeviceGetClockInfo(self._handle, nvml.NVML_CLOCK_SM)
            reasons = nvml.nvmlDeviceGetCurrentClocksEventReasons(self._handle)
            self.samples.append((watts, mhz, bool(reasons & nvml.nvmlClocksEventReasonSwPowerCap)))
            time.sleep(SAMPLE_SECONDS)

    def __enter__(self) -> Self:
        if self._nvml is not None:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._nvml is not None:
            self._stop.set()
            self._thread.join()

    def summary(self) -> dict:
        """Means over the settled samples (the first tenth can still read the idle level before the rail settles):
        `watts`, `sm_mhz`, and `power_capped`, the fraction of samples with the power cap active."""
        settled = self.samples[len(self.samples) // 10 :] or self.samples
        if not settled:
            return {"watts": math.nan, "sm_mhz": math.nan, "power_capped": math.nan}
        watts, mhz, capped = zip(*settled)
        return {
            "watts": statistics.mean(watts),
            "sm_mhz": statistics.mean(mhz),
            "power_capped": statistics.mean(capped),
        }


def mean_watts(run, inputs, seconds: float = MIN_SECONDS, device_index: int | None = None) -> float:
    """Mean power in W over `seconds` (at least 2) of back-to-back `run(*inputs)` calls; NaN without NVML."""
    run(*inputs)  # warm: clocks up, kernels loaded
    torch.cuda.synchronize()
    with Sampler(device_index) as sampler:
        start = time.perf_counter()
        while time.perf_counter() - start < max(seconds, MIN_SECONDS):
            for _ in range(8):
                run(*inputs)
            torch.cuda.synchronize()
    return sampler.summary()["watts"]
