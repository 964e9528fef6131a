"""Tuned tables: per GPU, the sweep's fastest variant per (mode, shape), which dispatch reads.

A table is a CSV with columns mode, m, n, k, batch, name, tflops (and provenance). Lookup takes the entry of
the nearest shape (distance in log2 of m, n and k) among those within a factor of 4 in each. The tables asked, in
order (each offers its nearest entry for the mode; the nearest of those answers, the earlier table on a tie):
1. the one given to `set_tuned_table(path)`, else the file named by the environment variable
   CUTLASS_EXT_TUNED_TABLE; with either set, no other table is asked;
2. the one shipped for this GPU (cutlass_ext/tuned/<gpu>.csv, e.g. h100.csv);
3. the shipped tables of other GPUs of the same architecture (an H100 PCIe or GH200 reads h100.csv, then h200.csv,
   until it has its own; sm80-class GPUs share among 80/86/87/89).
Entries the device cannot run (Hopper-only kernels elsewhere, tiles over its shared memory) are skipped. With no
entry, dispatch uses the architecture's built-in defaults. Which table answered is logged once per GPU and table
(logger `cutlass_ext.dispatch`); `python -m cutlass_ext.explain` prints it for a shape.
"""

from __future__ import annotations

import csv
import functools
import logging
import math
import os
import re
import threading
from pathlib import Path

from . import device as device_info
from . import families
from .families.sm80.config import DEFAULT_OPERANDS, KernelConfig

TUNED_DIR = Path(__file__).resolve().parent / "tuned"
TABLE_ENV = "CUTLASS_EXT_TUNED_TABLE"
COLUMNS = ["mode", "m", "n", "k", "batch", "name", "tflops", "gpu", "date"]
KEY = COLUMNS[:5]  # one row per (mode, shape)
PEER_FAMILIES = ("cublas", "triton")

_log = logging.getLogger("cutlass_ext.dispatch")

_override: Path | None = None
_loaded: dict[Path, list[tuple]] = {}  # table path -> [(mode, m, n, k, name)]
_chosen: dict[tuple, tuple] = {}  # (gpu, arch, mode, m, n, k, bucket) -> (config, source): dispatch asks per call
_logged: set[tuple] = set()
_lock = threading.Lock()
_generation = 0  # counts table changes: callers that cache what lookup answered key their caches with it
_environment = os.environ.get(TABLE_ENV)  # the variable's value the cached answers were read under


def _forget() -> None:
    global _generation
    with _lock:
        _loaded.clear()
        _chosen.clear()
        _logged.clear()
        _generation += 1


def generation() -> int:
    """Changes whenever the table dispatch reads may have changed (set_tuned_table, or CUTLASS_EXT_TUNED_TABLE
    set to another file while the process runs)."""
    global _environment
    named = os.environ.get(TABLE_ENV)
    if named != _environment:
        _environment = named
        _forget()
    return _generation


# Boards that share a chip's name with another of other clocks and power: each has a table of its own.
_FORM_FACTORS = ("pcie", "nvl")


def gpu_key(gpu_name: str) -> str:
    """Table name of a GPU: `NVIDIA H100 80GB HBM3` -> `h100`, `NVIDIA A100-SXM4-80GB` -> `a100`, `NVIDIA H100
    PCIe` -> `h100_pcie` (its own table: it reads the SXM board's, h100.csv, as its architecture's until then)."""
    tokens = [t for t in re.split(r"[^a-z0-9]+", gpu_name.lower()) if t and t != "nvidia"]
    for token in tokens:
        if re.fullmatch(r"[a-z]+\d+[a-z]*", token):
            return "_".join([token, *(t for t in _FORM_FACTORS if t in tokens)])
    return "_".join(tokens) or "unknown"


def set_tuned_table(path: str | os.PathLike | None) -> None:
    """Dispatch from this table (None: back to the environment variable or the shipped table)."""
    global _override
    if path is not None and not Path(path).is_file():
        what = "is a directory, not a CSV file" if Path(path).is_dir() else "does not exist"
        raise FileNotFoundError(f"tuned table {path} {what}")
    _override = Path(path) if path is not None else None
    _forget()


def winners(frame):
    """Per (mode, m, n, k, batch) the fastest variant of a sweep table that passed the accuracy gate. A tie goes to
    the earlier measurement (then the name): a later sweep that only equals a winner does not replace it, and the
    table does not depend on the order its sweep tables are read in."""
    import pandas as pd

    if frame.empty:  # e.g. a results folder holding confirmation runs only
        return pd.DataFrame(columns=COLUMNS)
    ours = entries_only(
        frame[~frame["family"].isin(PEER_FAMILIES) & (frame["status"] == "ok") & frame["tflops"].notna()]
    )
    if ours.empty:
        return pd.DataFrame(columns=COLUMNS)
    order = ours.sort_values(["tflops", "date", "name"], ascending=[False, True, True], kind="stable")
    best = order.groupby(KEY).head(1)
    return best[COLUMNS].sort_values(KEY).reset_index(drop=True)


@functools.lru_cache(maxsize=None)
def table_entry(name: str, mode: str) -> bool:
    """Whether a swept variant may be its (mode, shape)'s entry. The tables have no layout or operand column, and
    dispatch takes an sm80 entry only in its mode's operand format and for the caller's layouts: a row-major-only
    or other-operand winner would push out the one that serves the plain call. Names it cannot parse stay (the
    lookup names them)."""
    try:
        config = families.from_name(name)
    except ValueError:
        return True
    plain = not isinstance(config, KernelConfig) or (config.layout_a, config.layout_b) == ("row", "row")
    return plain and _in_mode_operands(config, mode)


def entries_only(frame):
    """The rows of a sweep frame whose variant may be a table's entry (`table_entry`)."""
    return frame[[table_entry(name, mode) for name, mode in zip(frame["name"], frame["mode"])]] if len(frame) else frame


def _in_mode_operands(config, mode: str) -> bool:
    """The mode's operand format is fixed by its pipeline (halfhalf packs): an sm80 variant for another is not its."""
    return not isinstance(config, KernelConfig) or config.operands == DEFAULT_OPERANDS.get(mode, "fp32")


def check_output_table(path, option: str) -> None:
    """Refuse, before a run, a path that a tuned table may not be merged into: a directory, or a file that is not
    a tuned table (a sweep table would lose its measured columns). A new or empty file is fine."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{option} {path} is a directory, not a CSV file")
    if not path.is_file() or path.stat().st_size == 0:
        return
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            header = next(csv.reader(handle), [])
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{option} {path} cannot be read: {error}") from None
    if not set(COLUMNS) - {"batch"} <= set(header) or set(header) - set(COLUMNS):
        raise ValueError(
            f"{option} {path} is not a tuned table (columns {header}, not {COLUMNS}): name a tuned table or a new file"
        )


def confirmed_winners(sweeps, confirmations):
    """`winners` of the sweep tables, except where a confirmation run (sweeps/confirm.py: a shape's leading
    variants re-timed side by side, round-robin) measured the (mode, shape): there its latest run picks. The sweep
    tables are a union of runs taken at different clocks, and their fastest row is partly the luck of its run."""
    import pandas as pd

    if confirmations.empty:
        return winners(sweeps)
    ok = confirmations[confirmations["status"] == "ok"]
    latest = ok[ok["date"] == ok.groupby(KEY)["date"].transform("max")]
    confirmed = winners(latest)
    rest = winners(sweeps)
    rest = rest[~rest.set_index(KEY).index.isin(confirmed.set_index(KEY).index)]
    return pd.concat([confirmed, rest]).sort_values(KEY).reset_index(drop=True)


def pinned_winners(winners, pins, confirmations):
    """`winners` with the pinned rows in place (`pinned.csv` of a results folder: variants chosen on evidence the
    sweep and confirmation tables do not hold, e.g. same-process A/B runs; each row is a tuned-table row with the
    date it was pinned, `pinned`, and its `evidence`), except where a confirmation run newer than the pin measured
    that (mode, shape): the latest measurement picks."""
    import pandas as pd

    if pins.empty:
        return winners
    confirmations = confirmations[confirmations["status"] == "ok"]
    if not confirmations.empty:
        latest = confirmations.groupby(KEY)["date"].max().rename("confirmed").reset_index()
        pins = pins.merge(latest, on=KEY, how="left")
        pins = pins[pins["confirmed"].isna() | (pins["confirmed"] <= pins["pinned"])]
    rest = winners[~winners.set_index(KEY).index.isin(pins.set_index(KEY).index)]
    return pd.concat([rest, pins[COLUMNS]]).sort_values(KEY).reset_index(drop=True)


def write_table(table, path: Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    table[COLUMNS].to_csv(path, index=False)
    _forget()


def merge_table(table, path: Path, measured=None) -> None:
    """Write `table`'s rows into the table at `path`, replacing rows of the same (mode, m, n, k, batch) and keeping
    every other row (other families' and shapes' winners), so a sweep of one space never drops what it did not
    measure. measured: a frame of (mode, m, n, k, batch) keys re-measured with no winner (every row failed its
    gate): their old rows go too. A table without a batch column, or with empty cells, reads as batch 1."""
    import pandas as pd

    path = Path(path)
    table = with_batch(table)
    if path.is_file():
        existing = with_batch(pd.read_csv(path))
        replaced = table.set_index(KEY).index
        if measured is not None and not measured.empty:
            replaced = replaced.append(with_batch(measured).set_index(KEY).index)
        kept = existing[~existing.set_index(KEY).index.isin(replaced)]
        table = pd.concat([kept[COLUMNS], table[COLUMNS]]).sort_values(KEY).reset_index(drop=True)
    write_table(table, path)


def with_batch(frame):
    frame = frame.copy()
    frame["batch"] = frame["batch"].fillna(1).astype(int) if "batch" in frame.columns else 1
    return frame


def _shipped() -> dict[str, Path]:
    return {path.stem: path for path in sorted(TUNED_DIR.glob("*.csv"))}


def table_chain(gpu: device_info.DeviceInfo) -> list[tuple[Path, str]]:
    """The tables dispatch asks for this GPU, in order, each with the reason it is asked."""
    if _override is not None:
        return [(_override, "set_tuned_table")]
    if os.environ.get(TABLE_ENV):
        return [(Path(os.environ[TABLE_ENV]), TABLE_ENV)]
    shipped = _shipped()
    own = gpu_key(gpu.name)
    chain = [(shipped[own], "this GPU's table")] if own in shipped else []
    if gpu.arch is not None:
        same_arch = []
        for key, path in shipped.items():
            arch = device_info.arch_of_name(key)
            if key != own and arch is not None and arch[0] == gpu.arch[0]:
                same_arch.append((arch != gpu.arch, key, path))  # the exact arch first, then by name
        chain += [(path, f"architecture fallback (sm{gpu.arch}: {key}'s table)") for _, key, path in sorted(same_arch)]
    return chain


def _read_rows(path: Path, reason: str) -> list[dict]:
    """A table's rows as dicts; a file that cannot be read names the table and why it was asked."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:  # -sig: a spreadsheet's byte-order mark
            return list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError) as error:
        cause = error.strerror if isinstance(error, OSError) and error.strerror else "not UTF-8 text"
        raise ValueError(f"tuned table {path} ({reason}) cannot be read: {cause}") from None


def _entry(path: Path, line: int, row: dict) -> tuple:
    try:
        sizes = [int(row[column]) for column in ("m", "n", "k")] + [int(row.get("batch") or 1)]
    except (TypeError, ValueError):
        raise ValueError(f"tuned table {path}, line {line}: m, n, k and batch must be integers; got {row}") from None
    if not row["mode"] or not row["name"] or min(sizes) < 1:
        raise ValueError(f"tuned table {path}, line {line}: needs a mode, a name and sizes >= 1; got {row}")
    return (row["mode"], *sizes[:3], row["name"], sizes[3])


def _entries(path: Path, reason: str = "") -> list[tuple]:
    """The (mode, m, n, k, name, batch) rows of a table, read once (a concurrent first read may read it twice: same
    rows); batch 1 where the table has no such column."""
    found = _loaded.get(path)
    if found is None:
        generation_before = _generation
        rows = _read_rows(path, reason)
        missing = [c for c in ("mode", "m", "n", "k", "name") if rows and c not in rows[0]]
        if missing:
            raise ValueError(f"tuned table {path} lacks columns {missing}")
        found = [_entry(path, line, row) for line, row in enumerate(rows, start=2)]
        with _lock:
            if _generation == generation_before:
                _loaded[path] = found
    return found


# A table entry serves shapes within this factor of it in each of m, n and k; farther shapes (a deep-K product
# near a square bucket, say) get the defaults: a tile's speed and its split-K, which sets tf32tf32's summation
# length, were measured for the bucket's proportions only.
MAX_RATIO = 4.0


def runs_on(config, gpu: device_info.DeviceInfo) -> bool:
    """Whether `gpu` can run the variant: a family built for named archs on those only (the Hopper families on
    sm_90a), sm80 tiles within its shared memory."""
    archs = families.of(config).archs
    if archs is not None:
        return gpu.arch in archs
    limit = gpu.shared_memory_bytes
    return not isinstance(config, KernelConfig) or limit is None or config.shared_memory_bytes <= limit


def lookup(gpu_name: str, mode: str, m: int, n: int, k: int, m_bucket_above: bool = False, gpu=None):
    """The tuned variant for the nearest shape of `mode` within MAX_RATIO per dimension over the tables of
    `table_chain` (each offering its nearest entry the GPU can run; the earlier table on a tie); None if none has
    one (dispatch then uses its defaults).

    gpu: the DeviceInfo of the GPU (default: described from `gpu_name`).
    m_bucket_above: among those, prefer entries tuned for at least m rows (M buckets are upper bounds). FP8
    decode wants it: a tile tuned for fewer tokens than m covers them in several column tiles and streams the
    weights once per column tile (M = 32 on the M = 16 winner's 16-wide tile read them twice).
    """
    return resolve(gpu_name, mode, m, n, k, m_bucket_above, gpu)[0]


def resolve(
    gpu_name: str,
    mode: str,
    m: int,
    n: int,
    k: int,
    m_bucket_above: bool = False,
    gpu=None,
    m_buckets_only=False,
    batch: int | None = None,
):
    """(config or None, where it came from): `lookup` with the table and entry that answered. m_buckets_only: only
    entries tuned for at least m rows (within MAX_RATIO) answer; none, no entry (a family whose winners change
    kind with M, so that a winner is not stretched over M it was not measured at). batch: the entries' batch
    column counts in the distance too (the experts of a grouped product); None: it does not."""
    gpu = gpu or device_info.named(gpu_name)
    generation()  # forget answers read under another CUTLASS_EXT_TUNED_TABLE
    key = (gpu_name, gpu.arch, mode, m, n, k, m_bucket_above, m_buckets_only, batch)
    found = _chosen.get(key)
    if found is None:
        generation_before = _generation
        found = _resolve(gpu, mode, m, n, k, m_bucket_above, m_buckets_only, batch)
        with _lock:
            if _generation == generation_before:  # a table changed meanwhile: answer, but remember nothing stale
                _chosen[key] = found
    return found


def _resolve(gpu, mode, m, n, k, m_bucket_above, m_buckets_only=False, batch=None):
    """The nearest usable entry over the chain's tables, each table offering its nearest; on equal distance the
    earlier table answers. So this GPU's own table answers where it measured the shape (or as near a one as the
    others), and an entry it holds 4x away does not hide a sibling GPU's entry at the shape itself (an H200 table
    of decode winners at M = 16 must not answer M = 64, where the H100's holds an M = 64 winner)."""
    best = None
    for index, (path, reason) in enumerate(table_chain(gpu)):
        usable = [
            (entry, config)
            for entry in _near(_entries(path, reason), mode, m, n, k, m_buckets_only)
            if (config := _usable(path, entry, mode, gpu)) is not None
        ]
        if not usable:
            continue
        entry, config = min(usable, key=lambda pair: _rank(pair[0], m, n, k, m_bucket_above, batch))
        rank = (_rank(entry, m, n, k, m_bucket_above, batch), index)
        if best is None or rank < best[0]:
            best = (rank, entry, path, reason, config)
    if best is None:
        return None, "no tuned entry"
    _, entry, path, reason, config = best
    if (gpu.name, path) not in _logged:
        _logged.add((gpu.name, path))
        _log.info("cutlass_ext: %s dispatches from %s (%s)", gpu.name, path, reason)
    shape = f"{entry[1]}x{entry[2]}x{entry[3]}" + (f"x{entry[5]}" if batch is not None else "")
    return config, f"{path} ({reason}), entry {entry[0]} {shape}"


def _gaps(entry, m, n, k) -> list[float]:
    return [abs(math.log2(max(a, 1)) - math.log2(max(b, 1))) for a, b in zip(entry[1:4], (m, n, k))]


def _distance(entry, m, n, k, batch) -> float:
    """log2 distance of an entry's shape (and, where asked, its batch) from the problem's."""
    extra = 0 if batch is None else abs(math.log2(max(entry[5], 1)) - math.log2(max(batch, 1)))
    return sum(_gaps(entry, m, n, k)) + extra


def _rank(entry, m, n, k, m_bucket_above, batch) -> tuple:
    """How an entry is preferred: tuned for at least m rows first where that is asked, then the nearest."""
    below = m_bucket_above and entry[1] < m
    return (below, _distance(entry, m, n, k, batch))


def _near(entries, mode: str, m: int, n: int, k: int, m_buckets_only=False) -> list:
    """The entries of `mode` within MAX_RATIO of the shape in every dimension (tuned for at least m rows where
    only those answer)."""
    limit = math.log2(MAX_RATIO)
    near = [e for e in entries if e[0] == mode and max(_gaps(e, m, n, k)) <= limit]
    return [e for e in near if e[1] >= m] if m_buckets_only else near


def _usable(path: Path, entry, mode: str, gpu):
    """The entry's variant if this GPU can run it for `mode`, else None: a table's nearest entry that cannot
    (too much shared memory for an sm86, another mode's operands) leaves its other entries to answer."""
    try:
        config = families.from_name(entry[4])
    except ValueError as error:
        raise ValueError(f"tuned table {path}: entry {entry[0]} {entry[1]}x{entry[2]}x{entry[3]}: {error}") from None
    return config if _in_mode_operands(config, mode) and runs_on(config, gpu) else None


def shipped_configs(gpu=None) -> list:
    """Every variant named by the shipped tables dispatch asks for `gpu` (all shipped tables if None): what
    `--prebuild` builds besides the defaults."""
    paths = [path for path, _ in table_chain(gpu)] if gpu is not None else list(_shipped().values())
    configs = []
    for path in paths:
        configs.extend(families.from_name(entry[4]) for entry in _entries(path))
    return [c for c in dict.fromkeys(configs) if gpu is None or runs_on(c, gpu)]
