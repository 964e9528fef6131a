"""Named rules that remove low-bit GEMM configs (kernels/lowbit_gemm.cuh) that would spill or cannot launch,
before anything is compiled (`cutlass_ext.families.rules` applies them)."""

from __future__ import annotations

from ..families.rules import Rule
from .kernel import LowbitKernelConfig

# A forward thread keeps two FP32 sums (chunk and total) and, for the recursive STE, an int32 per output: the
# 4x4 tile takes up to 202 registers (ptxas, sm_90a), so more than 32 outputs per thread spill.
MAX_THREAD_OUTPUTS = 32
STATIC_SHARED_BYTES = 48 * 1024  # the forward's tiles are static shared memory


def forward_shared_bytes(config: LowbitKernelConfig) -> int:
    """A and B k-tiles, each row padded by 4 floats (LowbitGemm::kPitchM, kPitchN)."""
    block_m, block_n, block_k = config.block
    return 4 * block_k * (block_m + 4 + block_n + 4)


def threads(config: LowbitKernelConfig) -> int:
    (block_m, block_n, _), (thread_m, thread_n) = config.block, config.thread
    return (block_m // thread_m) * (block_n // thread_n)


RULES = (
    Rule(
        "thread_tile_over_32_outputs",
        f"more than {MAX_THREAD_OUTPUTS} outputs per thread: the chains' sums spill",
        lambda c, _: c.thread[0] * c.thread[1] > MAX_THREAD_OUTPUTS,
    ),
    Rule(
        "under_one_warp",
        "fewer than 32 threads per CTA: a partial warp idles lanes on every FMAq",
        lambda c, _: threads(c) < 32,
    ),
    Rule(
        "static_shared_memory_over_48k",
        "the forward's staged k-tiles exceed 48 KB of static shared memory",
        lambda c, limits: forward_shared_bytes(c) > min(STATIC_SHARED_BYTES, limits.shared_memory_bytes),
    ),
)
