"""Tuned tables: per GPU, the sweep's fastest variant per (mode, shape), which `ext.gemm` dispatches from.

A table is a CSV with columns mode, m, n, k, batch, name, tflops (and provenance). Lookup takes the entry of
the nearest shape (distance in log2 of m, n and k) among those within a factor of 4 in each. The table used is, in order: the one given to
`set_tuned_table(path)`, the file named by the environment variable CUTLASS_EXT_TUNED_TABLE, the one shipped for
this GPU (cutlass_ext/tuned/<gpu>.csv, e.g. h100.csv); with none, `ext.gemm` uses its default variants.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pandas as pd

from . import variants
from .config import DEFAULT_OPERANDS, KernelConfig

TUNED_DIR = Path(__file__).resolve().parent / "tuned"
TABLE_ENV = "CUTLASS_EXT_TUNED_TABLE"
COLUMNS = ["mode", "m", "n", "k", "batch", "name", "tflops", "gpu", "date"]
PEER_FAMILIES = ("cublas", "triton")

_override: Path | None = None
_loaded: dict[str, list[tuple] | None] = {}  # gpu name -> [(mode, m, n, k, name)] or None
_chosen: dict[tuple, KernelConfig | None] = {}  # (gpu name, mode, m, n, k) -> lookup's answer: ext.gemm asks per call
_generation = 0  # counts table changes: callers that cache what lookup answered key their caches with it


def _forget() -> None:
    global _generation
    _loaded.clear()
    _chosen.clear()
    _generation += 1


def generation() -> int:
    """Changes whenever the table dispatch reads may have changed (set_tuned_table)."""
    return _generation


def gpu_key(gpu_name: str) -> str:
    """Table name of a GPU: `NVIDIA H100 80GB HBM3` -> `h100`, `NVIDIA A100-SXM4-80GB` -> `a100`."""
    tokens = [t for t in re.split(r"[^a-z0-9]+", gpu_name.lower()) if t and t != "nvidia"]
    for token in tokens:
        if re.fullmatch(r"[a-z]+\d+[a-z]*", token):
            return token
    return "_".join(tokens) or "unknown"


def set_tuned_table(path: str | os.PathLike | None) -> None:
    """Dispatch from this table (None: back to the environment variable or the shipped table)."""
    global _override
    if path is not None and not Path(path).is_file():
        raise FileNotFoundError(f"tuned table {path} does not exist")
    _override = Path(path) if path is not None else None
    _forget()


def winners(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (mode, m, n, k, batch) the fastest variant of a sweep table that passed the accuracy gate. A tie goes to
    the earlier measurement (then the name): a later sweep that only equals a winner does not replace it, and the
    table does not depend on the order its sweep tables are read in."""
    ours = frame[~frame["family"].isin(PEER_FAMILIES) & (frame["status"] == "ok")]
    if ours.empty:
        return pd.DataFrame(columns=COLUMNS)
    order = ours.sort_values(["tflops", "date", "name"], ascending=[False, True, True], kind="stable")
    best = order.groupby(["mode", "m", "n", "k", "batch"]).head(1)
    return best[COLUMNS].sort_values(["mode", "m", "n", "k", "batch"]).reset_index(drop=True)


def confirmed_winners(sweeps: pd.DataFrame, confirmations: pd.DataFrame) -> pd.DataFrame:
    """`winners` of the sweep tables, except where a confirmation run (sweeps/confirm.py: a shape's leading
    variants re-timed side by side, round-robin) measured the (mode, shape): there its latest run picks. The sweep
    tables are a union of runs taken at different clocks, and their fastest row is partly the luck of its run."""
    if confirmations.empty:
        return winners(sweeps)
    key = ["mode", "m", "n", "k", "batch"]
    ok = confirmations[confirmations["status"] == "ok"]
    latest = ok[ok["date"] == ok.groupby(key)["date"].transform("max")]
    confirmed = winners(latest)
    rest = winners(sweeps)
    rest = rest[~rest.set_index(key).index.isin(confirmed.set_index(key).index)]
    return pd.concat([confirmed, rest]).sort_values(key).reset_index(drop=True)


def write_table(table: pd.DataFrame, path: Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    table[COLUMNS].to_csv(path, index=False)
    _forget()


def _table_path(gpu_name: str) -> Path | None:
    if _override is not None:
        return _override
    if os.environ.get(TABLE_ENV):
        return Path(os.environ[TABLE_ENV])
    shipped = TUNED_DIR / f"{gpu_key(gpu_name)}.csv"
    return shipped if shipped.is_file() else None


def _entries(gpu_name: str) -> list[tuple] | None:
    if gpu_name not in _loaded:
        path = _table_path(gpu_name)
        if path is None:
            _loaded[gpu_name] = None
        else:
            table = pd.read_csv(path)
            missing = [c for c in ("mode", "m", "n", "k", "name") if c not in table.columns]
            if missing:
                raise ValueError(f"tuned table {path} lacks columns {missing}")
            _loaded[gpu_name] = [
                (mode, int(m), int(n), int(k), name)
                for mode, m, n, k, name in table[["mode", "m", "n", "k", "name"]].itertuples(index=False)
            ]
    return _loaded[gpu_name]


# A table entry serves shapes within this factor of it in each of m, n and k; farther shapes (a deep-K product
# near a square bucket, say) get the defaults: a tile's speed and its split-K, which sets tf32tf32's summation
# length, were measured for the bucket's proportions only.
MAX_RATIO = 4.0


def lookup(gpu_name: str, mode: str, m: int, n: int, k: int, m_bucket_above: bool = False):
    """The tuned variant for the nearest shape of `mode` within MAX_RATIO per dimension, if this GPU has one.

    m_bucket_above: among those, prefer entries tuned for at least m rows (M buckets are upper bounds). FP8
    decode wants it: a tile tuned for fewer tokens than m covers them in several column tiles and streams the
    weights once per column tile (M = 32 on the M = 16 winner's 16-wide tile read them twice).
    """
    key = (gpu_name, mode, m, n, k, m_bucket_above)
    if key not in _chosen:
        _chosen[key] = _nearest(gpu_name, mode, m, n, k, m_bucket_above)
    return _chosen[key]


def _nearest(gpu_name: str, mode: str, m: int, n: int, k: int, m_bucket_above: bool = False):

    def gaps(entry):
        return [abs(math.log2(max(a, 1)) - math.log2(max(b, 1))) for a, b in zip(entry[1:4], (m, n, k))]

    limit = math.log2(MAX_RATIO)
    entries = [e for e in (_entries(gpu_name) or []) if e[0] == mode and max(gaps(e)) <= limit]
    if m_bucket_above:
        entries = [e for e in entries if e[1] >= m] or entries
    if not entries:
        return None
    config = variants.from_name(min(entries, key=lambda e: sum(gaps(e)))[4])
    # the mode's operand format is fixed by its pipeline (halfhalf packs): a table for another is not for us
    if isinstance(config, KernelConfig) and config.operands != DEFAULT_OPERANDS.get(mode, "fp32"):
        return None
    return config


def shipped_configs() -> list:
    """Every variant named by a shipped table (what `--prebuild` builds besides the defaults)."""
    configs = []
    for path in sorted(TUNED_DIR.glob("*.csv")):
        configs.extend(variants.from_name(name) for name in pd.read_csv(path)["name"])
    return list(dict.fromkeys(configs))
