import os

import pytest
import torch

# Under pytest-xdist the workers share one GPU: memory a large test freed stays in its worker's caching allocator,
# and a later large test in another worker then runs out. Hand cached memory back after any test that left much.
_SHARED_GPU = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1
_CACHED_LIMIT = 2 << 30


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(autouse=True)
def _return_cached_gpu_memory():
    yield
    if _SHARED_GPU and torch.cuda.is_initialized() and torch.cuda.memory_reserved() > _CACHED_LIMIT:
        torch.cuda.empty_cache()
