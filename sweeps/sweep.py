"""One sweep on the GPU: build the survivors, then per shape the peers and every variant, rows appended to a
resumable table; power for each mode's fastest; winners to the tuned table."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd
import torch
from tqdm import tqdm

from cutlass_ext import benchmark, families, registry, tuned

from . import build_stage, measure, multi_gpu, paths
from .power import mean_watts
from .space import family_of, modes_of
from .table import ResumableTable, config_columns, config_fields


def write_tuned(folder: Path, gpu: str, path: Path) -> Path | None:
    """The tuned table from a results folder's sweep tables, confirmation runs (tuned.confirmed_winners) and pinned
    rows (tuned.pinned_winners), this GPU's rows, merged into the table at `path`: rows of the (mode, shape)s
    measured are replaced, every other row (other families', other shapes') is kept."""

    def rows(pattern: str) -> pd.DataFrame:
        # an empty file (a table created by a run killed before its first row) holds nothing
        tables = [pd.read_csv(table) for table in sorted(Path(folder).glob(pattern)) if table.stat().st_size]
        # a file of the pattern that holds no kernels' rows (the multi-GPU run's sweep_gpus.csv) has nothing to add
        tables = [table for table in tables if {"gpu", "name"} <= set(table.columns)]
        frame = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=["gpu", "status"])
        return frame[frame["gpu"] == gpu]

    confirmations = rows("confirm_*.csv")
    sweeps = rows("sweep_*.csv")
    winners = tuned.confirmed_winners(sweeps, confirmations)
    winners = tuned.pinned_winners(winners, rows("pinned.csv"), confirmations)
    # shapes measured where every variant failed its gate: an older winner there must not stay (a shape whose
    # variants failed to build or could not run was not measured: a broken toolchain keeps the old winners)
    ours = pd.concat([sweeps, confirmations], ignore_index=True)
    ours = ours[~ours["family"].isin(tuned.PEER_FAMILIES)] if "family" in ours.columns else ours.iloc[:0]
    ours = ours[ours["status"].isin(["ok", "inaccurate"])]
    ours = tuned.entries_only(ours)
    measured = ours[[c for c in tuned.KEY if c in ours.columns]].drop_duplicates() if len(ours) else None
    if winners.empty and (measured is None or not Path(path).is_file()):
        return None
    tuned.merge_table(winners, path, measured)
    return path


class Sweep:
    def __init__(self, args, limits):
        self.args = args
        self.arch = limits.arch
        self.environment = benchmark.environment()
        self.gpu = self.environment["gpu"]
        out = paths.results_folder(self.gpu, args.out)
        paths.check_outputs(args.out, args.tuned_out, self.gpu)
        family = family_of(args.space)
        self.family = families.get(family).plugin("measure")  # its problems, kernel runners, peers
        self.config_fields = config_fields(family)
        self.table = ResumableTable(Path(out) / f"sweep_{Path(args.space).stem}.csv", self.config_fields)
        self.runnable: list = []
        # the space's one mode (after --mode), which a family's problems may depend on; None where it has several
        modes = [m for m in modes_of(args.space) if not getattr(args, "mode", None) or m in args.mode]
        self.problem_mode = modes[0] if len(modes) == 1 else None

    def _row(self, config, family, mode, name, problem_shape, measured) -> dict:
        m, n, k, batch = problem_shape
        return {
            "family": family,
            "mode": mode,
            "name": name,
            "m": m,
            "n": n,
            "k": k,
            "batch": batch,
            **measured,
            **{key: self.environment[key] for key in ("gpu", "nvcc", "torch", "date")},
            **config_columns(config, self.config_fields),
        }

    def _pending(self, config_name: str, shapes) -> list:
        return [s for s in shapes if not self.table.done(config_name, *s, self.gpu)]

    def build(self, survivors: list, shapes) -> float:
        """Build what still has rows to measure; a variant that fails to compile gets a row per shape."""
        todo = [c for c in survivors if self._pending(c.name, shapes)]
        print(f"{len(survivors) - len(todo)} variants already measured; building {len(todo)}")
        if not todo:
            return 0.0
        jobs = self.args.jobs or os.cpu_count() or 1
        built, seconds = build_stage.build_all(todo, self.arch, jobs, self.args.group_size)
        failed = 0
        for item in built:
            if item.library is None:
                failed += 1
                for shape in self._pending(item.config.name, shapes):
                    self.table.append(
                        self._row(
                            item.config,
                            item.config.family,
                            item.config.mode,
                            item.config.name,
                            shape,
                            {"status": "build_failed", "detail": item.error},
                        )
                    )
            else:
                registry.register_library([item.config], item.library, torch.device("cuda"))
                self.runnable.append(item.config)
        print(f"built {len(built) - failed} variants in {seconds:.0f} s; {failed} failed to compile (in the table)")
        return seconds

    def measure(self, shapes) -> float:
        """Per shape: the peers, a short screening time of every variant, full timing of each mode's finalists,
        then power."""
        start = time.perf_counter()
        phases = dict.fromkeys(("peers", "screening", "finalists", "power"), 0.0)

        def timed(phase, step, *args):
            began = time.perf_counter()
            result = step(*args)
            phases[phase] += time.perf_counter() - began
            return result

        for index, shape in enumerate(shapes):
            problem = self._make_problem(shape)
            peers = multi_gpu.measures_peers(self.args, index)
            peer_runs = timed("peers", self._measure_peers, problem, shape) if peers else {}
            timed("screening", self._screen, problem, shape)
            timed("finalists", self._finals, problem, shape)
            timed("power", self._power, problem, shape, peer_runs)
            del problem
            torch.cuda.empty_cache()
        print("measured in " + ", ".join(f"{phase} {seconds:.0f} s" for phase, seconds in phases.items()))
        return time.perf_counter() - start

    def _make_problem(self, shape):
        return measure.make_problem(self.family, shape, self.problem_mode)

    def _measure_peers(self, problem, shape) -> dict:
        peer_runs = {}
        for family, mode, name, run in self._peers(problem):
            peer_runs[name] = run
            if not self.table.done(name, *shape, self.gpu):
                measured = measure.measure(mode, run, None, problem, self.args.repeats)
                self.table.append(self._row(None, family, mode, name, shape, measured))
        return peer_runs

    def _screen(self, problem, shape) -> None:
        """Gate and time every variant with `--screen-repeats` calls: enough to rank them, cheap enough for all."""
        configs = [c for c in self.runnable if not self.table.done(c.name, *shape, self.gpu)]
        label = "x".join(str(v) for v in shape[:3])
        for config in tqdm(configs, desc=f"measure {label}", unit="variant"):
            run, prepare = self.family.kernel_runner(config)
            # the gate's call is the warm-up (module load, first launch)
            measured = measure.measure(config.mode, run, prepare, problem, self.args.screen_repeats, warmup=0)
            self.table.append(self._row(config, config.family, config.mode, config.name, shape, measured))

    def _finals(self, problem, shape) -> None:
        """Each mode's `--finalists` fastest rows of this shape timed again with `--repeats` calls; the table is
        rewritten after each (atomically), so an interrupted run finishes the rest on resume."""
        frame = self.table.frame()
        here = self._rows_of(frame, shape)
        here = here[~here["family"].isin(tuned.PEER_FAMILIES)]
        chosen = here.sort_values("tflops", ascending=False).groupby("mode").head(self.args.finalists)
        others = multi_gpu.sibling_rows(multi_gpu.sibling_tables(self.args, self.table.path))
        if others is not None:  # a --part run: the rows the other parts beat --finalists times over are no finalists
            others = self._rows_of(others, shape)
            # a variant in this part's table too was dealt to another part by an earlier run: count it once
            others = others[~others["family"].isin(tuned.PEER_FAMILIES) & ~others["name"].isin(here["name"])]
            chosen = multi_gpu.among_fastest(chosen, others, self.args.finalists)
        chosen = chosen[~(chosen["repeats"] >= self.args.repeats)]  # an empty cell (older table) counts as short
        runnable = {c.name: c for c in self.runnable}
        for index, row in tqdm(list(chosen.iterrows()), desc="finalists", unit="row"):
            if row["name"] not in runnable:
                continue  # measured by an earlier run whose variant is not built in this one
            run, prepare = self.family.kernel_runner(runnable[row["name"]])
            for column, value in measure.retime(run, prepare, problem, self.args.repeats).items():
                frame.loc[index, column] = value
            self.table.rewrite(frame)

    def _rows_of(self, frame, shape):
        """The rows of one shape on this GPU that passed the gate."""
        return frame[
            (frame["m"] == shape[0])
            & (frame["n"] == shape[1])
            & (frame["k"] == shape[2])
            & (frame["batch"] == shape[3])
            & (frame["gpu"] == self.gpu)
            & (frame["status"] == "ok")
        ]

    def _peers(self, problem):
        return self.family.peers(problem, self.args.repeats)

    def _power(self, problem, shape, peer_runs: dict) -> None:
        """Power for the peers and each mode's fastest variants of this shape that have none yet; the table is
        rewritten in place (atomically), so an interrupted run fills in the rest on resume."""
        if self.args.power_top <= 0:
            return
        frame = self.table.frame()
        here = self._rows_of(frame, shape)
        chosen = here.sort_values("tflops", ascending=False).groupby(["family", "mode"]).head(self.args.power_top)
        chosen = chosen[chosen["watts"].isna()]
        runnable = {c.name: c for c in self.runnable}
        for index, row in tqdm(list(chosen.iterrows()), desc="power", unit="row"):
            if row["name"] in runnable:
                run, prepare = self.family.kernel_runner(runnable[row["name"]])
            elif row["name"] in peer_runs:
                run, prepare = peer_runs[row["name"]], None
            else:
                continue  # measured by an earlier run whose variant is not built in this one
            inputs = problem.operands(prepare)[0]
            watts = mean_watts(run, inputs, seconds=self.args.power_seconds)
            frame.loc[index, "watts"] = round(watts, 1)
            frame.loc[index, "gflops_per_watt"] = round(row["tflops"] * 1e3 / watts, 2)
        self.table.rewrite(frame)

    def write_tuned(self) -> Path | None:
        """Winners over every sweep table in this table's folder (this GPU's rows): a sweep of one space keeps the
        faster variants that a sweep of another space found; confirmation runs pick where they measured."""
        path = paths.tuned_table_path(self.gpu, self.args.out, self.args.tuned_out)
        return write_tuned(self.table.path.parent, self.gpu, path)

    def print_summary(self) -> None:
        """Each mode's fastest row per shape on this GPU, with its ratio to cuBLAS FP32 (report.best_per_shape)."""
        from .report import best_per_shape

        frame = self.table.frame()
        best = best_per_shape(frame[frame["gpu"] == self.gpu])
        columns = ["shape", "family", "mode", "name", "tflops", "relres", "watts", "vs_cublas_fp32", "vs_cublas"]
        with pd.option_context("display.width", 200, "display.max_colwidth", 50):
            print(best[columns].to_string(index=False))
