"""Build the surviving variants in parallel: several per translation unit (header parsing dominates a
one-variant compile), ninja across all cores, and compile failures recorded rather than raised."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from cutlass_ext import build
from cutlass_ext.config import KernelConfig


@dataclass(frozen=True)
class Built:
    """A variant's library, or why it has none."""

    config: KernelConfig
    library: Path | None
    error: str | None = None


def _groups(configs: list[KernelConfig], size: int) -> list[tuple[KernelConfig, ...]]:
    return [tuple(configs[i : i + size]) for i in range(0, len(configs), size)]


def first_error_line(log: str) -> str:
    """The compiler's first `error` line (the table's detail column), or the log's last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower():
            return line[:300]
    return lines[-1][:300] if lines else "no compiler output"


def build_all(configs: list[KernelConfig], arch: str, jobs: int, group_size: int) -> tuple[list[Built], float]:
    """Every config's library (cached ones are found, not rebuilt) and the seconds it took.

    A group that fails to compile is rebuilt one variant per library, so one bad variant costs only itself.
    """
    start = time.perf_counter()
    groups = _groups(configs, group_size)
    built: list[Built] = []
    retry: list[KernelConfig] = []
    # chunks of a few groups per core keep the progress bar moving without starving ninja of parallel work
    chunk = max(1, 2 * jobs)
    with tqdm(total=len(configs), desc="build", unit="variant") as progress:
        for i in range(0, len(groups), chunk):
            for result in build.build_libraries(groups[i : i + chunk], arch, jobs=jobs, verbose=False):
                if result.library is not None:
                    built.extend(Built(c, result.library) for c in result.configs)
                elif len(result.configs) == 1:
                    built.append(Built(result.configs[0], None, first_error_line(result.error or "")))
                else:
                    retry.extend(result.configs)
                progress.update(len(result.configs))
    if retry:
        for result in tqdm(
            build.build_libraries([(c,) for c in retry], arch, jobs=jobs, verbose=False), desc="rebuild singly"
        ):
            built.append(
                Built(
                    result.configs[0], result.library, None if result.library else first_error_line(result.error or "")
                )
            )
    order = {c: i for i, c in enumerate(configs)}
    built.sort(key=lambda b: order[b.config])
    return built, time.perf_counter() - start
