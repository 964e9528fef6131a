"""The NVML sampler (sweeps/power.py) without a GPU: what it reports without NVML and from its samples."""

import math

from sweeps import power


def test_without_nvml_the_summary_is_nan(monkeypatch):
    def no_nvml(device_index):
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    monkeypatch.setattr(power, "_nvml_handle", no_nvml)
    with power.Sampler(device_index=0) as sampler:
        pass
    assert all(math.isnan(value) for value in sampler.summary().values())


def test_the_summary_averages_the_settled_samples(monkeypatch):
    monkeypatch.setattr(power, "_nvml_handle", lambda device_index: (None, None))
    sampler = power.Sampler(device_index=0)
    # the first tenth (one sample of ten) can still read the idle rail: left out
    sampler.samples = [(80.0, 345, False)] + [(700.0, 1300, True)] * 6 + [(690.0, 1400, False)] * 3
    summary = sampler.summary()
    assert summary["watts"] == (6 * 700.0 + 3 * 690.0) / 9
    assert summary["sm_mhz"] == (6 * 1300 + 3 * 1400) / 9
    assert summary["power_capped"] == 6 / 9
