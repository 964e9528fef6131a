"""`import cutlass_ext` adds at most 0.3 s to `import torch` (no pandas, dynamo or triton at import), timed on the
GPU machine, whose cores are not shared: the best of five fresh interpreters."""

import subprocess
import sys

import pytest

CODE = (
    "import time\nimport torch\nstart = time.perf_counter()\nimport cutlass_ext\nprint(time.perf_counter() - start)\n"
)


@pytest.mark.gpu
def test_import_adds_at_most_0_3_s_to_torch():
    seconds = [
        float(subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True).stdout)
        for _ in range(5)
    ]
    assert min(seconds) <= 0.3, f"import cutlass_ext took {min(seconds):.2f} s over import torch ({seconds})"
