import os

import pytest
import torch
from hypothesis import HealthCheck, settings

# Property tests: CI draws the same examples every run; the GPU run (`--hypothesis-profile=gpu`) draws more, fresh
# ones (a failure prints its falsifying example and reproduction blob; keep it as an @example). The gpu profile's
# whole run (tests/gpu/test_fuzz_*.py) is sized to about two minutes on one H100 with the kernels built; tests
# whose reference runs on the CPU take a share of max_examples (tests/gpu/fuzz_inputs.examples).
settings.register_profile("ci", derandomize=True, max_examples=20, deadline=None, print_blob=True)
settings.register_profile(
    "gpu", max_examples=100, deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")


def pytest_configure(config):
    # Under pytest-xdist every worker would start torch's default of one CPU thread per core: 12 workers on 16 cores
    # ran 192 threads, and the CPU references (the optimizer's Philox, the low-bit emulation) crawled. Split the
    # cores between the workers instead.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
