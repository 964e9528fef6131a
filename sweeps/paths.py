"""Where a sweep writes: its results folder and the tuned table it merges into, and the checks that keep it from
writing into what it must not (a file as --out, a sweep table as --tuned-out)."""

from __future__ import annotations

from pathlib import Path

from cutlass_ext import tuned

RESULTS = Path(__file__).resolve().parent / "results"  # the repository's, wherever the sweep runs from


def results_folder(gpu: str, out: Path | None) -> Path:
    """`--out`, else sweeps/results/<gpu>/."""
    return Path(out) if out is not None else RESULTS / tuned.gpu_key(gpu)


def tuned_table_path(gpu: str, out: Path | None, tuned_out: Path | None) -> Path:
    """Where a sweep writes its tuned table: `--tuned-out` if given; with `--out DIR`, DIR/tuned_<gpu>.csv (the
    shipped tables stay as they are); else the shipped table of this GPU, cutlass_ext/tuned/<gpu>.csv."""
    if tuned_out is not None:
        return Path(tuned_out)
    if out is not None:
        return Path(out) / f"tuned_{tuned.gpu_key(gpu)}.csv"
    return tuned.TUNED_DIR / f"{tuned.gpu_key(gpu)}.csv"


def check_outputs(out: Path | None, tuned_out: Path | None, gpu: str | None = None) -> None:
    """ValueError for an `--out` that is a file, or a tuned table path that is not a tuned table or a new file
    (`--tuned-out`, or with `gpu` the default one), naming what the user gave."""
    if out is not None and Path(out).exists() and not Path(out).is_dir():
        raise ValueError(f"--out {out} is a file, not a results folder")
    if tuned_out is not None:
        tuned.check_output_table(tuned_out, "--tuned-out")
    elif gpu is not None:
        tuned.check_output_table(tuned_table_path(gpu, out, None), "the tuned table")
