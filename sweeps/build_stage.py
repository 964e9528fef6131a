"""Build the surviving variants in parallel: several per translation unit (header parsing dominates a
one-variant compile), ninja across all cores, and compile failures recorded rather than raised."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from cutlass_ext import build, codegen
from cutlass_ext.families.sm80.config import KernelConfig


@dataclass(frozen=True)
class Built:
    """A variant's library, or why it has none."""

    config: KernelConfig
    library: Path | None
    error: str | None = None


def _groups(configs: list, size: int) -> list[tuple]:
    """Runs of up to `size` configs that can share a translation unit (codegen.translation_unit_key), in order."""
    groups = []
    for key in dict.fromkeys(codegen.translation_unit_key(c) for c in configs):
        alike = [c for c in configs if codegen.translation_unit_key(c) == key]
        groups.extend(tuple(alike[i : i + size]) for i in range(0, len(alike), size))
    return groups


def first_error_line(log: str) -> str:
    """The compiler's first `error` line (the table's detail column), or the log's last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower():
            return line[:300]
    return lines[-1][:300] if lines else "no compiler output"


# A translation unit costs ~8 s of parsing and host compilation before its first variant and ~0.6 s per variant after it
# (sm_90a, nvcc 13.0: 8 variants in 2 units 34.8 s, in 1 unit 12.8 s; docs/design-notes.md, the sweep), so units are as
# large as keeps every core busy, up to this many variants (a failed unit is rebuilt one variant at a time).
MAX_GROUP_SIZE = 32


def auto_group_size(variants: int, jobs: int) -> int:
    """Variants per translation unit: one unit per core, at most MAX_GROUP_SIZE variants each."""
    return max(1, min(MAX_GROUP_SIZE, -(-variants // max(1, jobs))))


def build_all(
    configs: list[KernelConfig], arch: str, jobs: int, group_size: int | None = None
) -> tuple[list[Built], float]:
    """Every config's library (cached ones are found, not rebuilt) and the seconds it took.

    One ninja run compiles every library (no core waits for a batch to finish). A group that fails to compile is
    rebuilt one variant per library, so one bad variant costs only itself.
    """
    start = time.perf_counter()
    group_size = group_size or auto_group_size(len(configs), jobs)
    groups = _groups(configs, group_size)
    built: list[Built] = []
    retry: list[KernelConfig] = []
    with tqdm(total=len(groups), desc=f"build ({group_size} variants per library)", unit="library") as progress:
        results = build.build_libraries(groups, arch, jobs=jobs, verbose=False, on_finished=_advance(progress))
        progress.update(len(groups) - progress.n)
    for result in results:
        if result.library is not None:
            built.extend(Built(c, result.library) for c in result.configs)
        elif len(result.configs) == 1:
            built.append(Built(result.configs[0], None, first_error_line(result.error or "")))
        else:
            retry.extend(result.configs)
    if retry:
        with tqdm(total=len(retry), desc="rebuild failed groups singly", unit="library") as progress:
            singles = build.build_libraries([(c,) for c in retry], arch, jobs, False, _advance(progress))
        for result in singles:
            error = None if result.library else first_error_line(result.error or "")
            built.append(Built(result.configs[0], result.library, error))
    order = {c: i for i, c in enumerate(configs)}
    built.sort(key=lambda b: order[b.config])
    return built, time.perf_counter() - start


def _advance(progress):
    """Move a progress bar to the number of finished libraries (cached ones finish at once)."""

    def on_finished(finished: int) -> None:
        progress.update(max(0, finished - progress.n))

    return on_finished
