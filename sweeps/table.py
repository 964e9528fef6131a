"""The sweep's CSV table: one row per (variant, shape), appended and flushed as each finishes, so that Ctrl-C or
a crash loses no finished row and a rerun skips what is already there."""

from __future__ import annotations

import csv
import dataclasses
import os
from pathlib import Path

import pandas as pd

from cutlass_ext import families

# The measured columns, then provenance, then every KernelConfig field (sweeps/README.md documents them).
MEASURED = [
    "family",
    "mode",
    "name",
    "m",
    "n",
    "k",
    "batch",
    "time_us",
    "tflops",
    "repeats",
    "relres",
    "watts",
    "gflops_per_watt",
    "status",
    "detail",
]
PROVENANCE = ["gpu", "nvcc", "torch", "date"]
CONFIG_FIELDS = ["threadblock", "warp", "stages", "alignment", "layout_a", "layout_b", "operands", "swizzle"]
FP8_CONFIG_FIELDS = [
    "a_dtype",
    "b_dtype",
    "out_dtype",
    "accum",
    "tile",
    "cluster",
    "schedule",
    "scheduler",
    "splits",
    "swizzle",
    "raster",
    "promotion",
    "turns",
    "swap_ab",
    "l2_prefetch",
    "stage_epilogue",
    "weights_first",
    "buffer_epilogue",
]
SPLIT_CONFIG_FIELDS = ["tile", "cluster", "schedule", "promotion", "swizzle"]
# The column order of the tables already written; a family without an entry gets its config's fields.
FAMILY_CONFIG_FIELDS = {"sm80": CONFIG_FIELDS, "sm90_fp8": FP8_CONFIG_FIELDS, "sm90": SPLIT_CONFIG_FIELDS}
COLUMNS = MEASURED + PROVENANCE + CONFIG_FIELDS
KEY = ["name", "m", "n", "k", "batch", "gpu"]
# Columns added after tables were first written: an older table gains them (empty) when it is opened.
ADDED_LATER = {
    "repeats",
    "swizzle",
    "swap_ab",
    "l2_prefetch",
    "raster",
    "turns",
    "stage_epilogue",
    "weights_first",
    "buffer_epilogue",
    "k_grouped",
    "overlapped",
    "programmatic",
}


def config_fields(family: str) -> list[str]:
    """The config columns of a family's sweep tables."""
    if family in FAMILY_CONFIG_FIELDS:
        return FAMILY_CONFIG_FIELDS[family]
    config = families.get(family).config
    return [f.name for f in dataclasses.fields(config) if f.name not in ("family", "mode")]


def config_columns(config, fields: list[str] = CONFIG_FIELDS) -> dict:
    """A config's fields as CSV cells (tiles written as MxNxK); empty for peers."""
    if config is None:
        return dict.fromkeys(fields, "")
    values = config.to_dict()
    return {
        name: "x".join(str(v) for v in values[name]) if isinstance(values[name], (tuple, list)) else values[name]
        for name in fields
    }


class ResumableTable:
    """Rows already in `path` are kept; `done(...)` says whether a (variant, shape) was finished before.
    config_fields: the kernel family's config columns (FAMILY_CONFIG_FIELDS)."""

    def __init__(self, path: Path, config_fields: list[str] = CONFIG_FIELDS):
        self.path = Path(path)
        self.columns = MEASURED + PROVENANCE + list(config_fields)
        self.header = self.columns  # the file's columns, in its order: rows are written by it
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._done = set()
        if self.path.is_file() and self.path.stat().st_size:
            existing = pd.read_csv(self.path, dtype=str, keep_default_na=False)
            missing = [c for c in self.columns if c not in existing.columns]
            if set(missing) - ADDED_LATER:
                raise ValueError(f"{self.path}: not a sweep table (no columns {missing}); choose another --out")
            # another family's table may hold more columns: its rows keep them, ours leave them empty
            if not set(existing.columns) <= set(self.columns):
                self.header = list(existing.columns) + missing
            if missing:
                self.rewrite(existing.assign(**dict.fromkeys(missing, "")))
            self._done = {tuple(row) for row in existing[KEY].itertuples(index=False)}
        else:
            with self.path.open("w", newline="") as file:
                csv.writer(file, lineterminator="\n").writerow(self.columns)

    def done(self, name: str, m: int, n: int, k: int, batch: int, gpu: str) -> bool:
        return (name, str(m), str(n), str(k), str(batch), gpu) in self._done

    def append(self, row: dict) -> None:
        unknown = set(row) - set(self.columns)
        if unknown:
            raise ValueError(f"unknown columns {sorted(unknown)}")
        with self.path.open("a", newline="") as file:
            csv.writer(file, lineterminator="\n").writerow(
                ["" if row.get(c) is None else row.get(c) for c in self.header]
            )
            file.flush()
        self._done.add(tuple(str(row[c]) for c in KEY))

    def frame(self) -> pd.DataFrame:
        return pd.read_csv(self.path)

    def rewrite(self, frame: pd.DataFrame) -> None:
        """Replace the file with `frame` (same rows, cells filled in) atomically: a crash keeps one or the other."""
        staging = self.path.with_suffix(".csv.tmp")
        frame[self.header].to_csv(staging, index=False)
        os.replace(staging, self.path)
