"""The confirmation stage (sweeps/confirm.py) without a GPU: which variants it re-times, how its passes become a
row, and how its runs take precedence in the tuned table."""

import argparse
from pathlib import Path

import pandas as pd
import pytest

from cutlass_ext import families, tuned
from sweeps import confirm
from sweeps import sweep as sweep_module

GPU = "NVIDIA H100 80GB HBM3"
C1 = "fp8_e4m3e4m3_bf16_64x16x256_c1x1_pp_fast_swap_l2pf8"
C2 = "fp8_e4m3e4m3_bf16_64x16x256_c2x1_pp_fast_swap_l2pf8"
N8 = "fp8_e4m3e4m3_bf16_64x8x256_c2x1_pp_fast_swap_l2pf8"
SLOW = "fp8_e4m3e4m3_bf16_64x32x256_c1x1_pp_fast_swap"


def rows(entries, date="2026-11-23T00:00:00Z", family="sm90_fp8"):
    """A sweep-like frame from (mode, m, name, tflops[, status]) at N = K = 8192."""
    return pd.DataFrame(
        [
            {
                "family": "cublas" if name.startswith("torch") else family,
                "mode": mode,
                "name": name,
                "m": m,
                "n": 8192,
                "k": 8192,
                "batch": 1,
                "tflops": tflops,
                "status": rest[0] if rest else "ok",
                "gpu": GPU,
                "date": date,
            }
            for mode, m, name, tflops, *rest in entries
        ]
    )


SWEEPS = rows(
    [
        ("fp8_fast", 4, C1, 22.2),
        ("fp8_fast", 4, SLOW, 21.0),
        ("fp8_fast", 8, N8, 44.3),
        ("fp8_fast", 8, SLOW, 50.0, "inaccurate"),
        ("fp8_fast", 8, "torch._scaled_mm fast", 60.0),
        ("fp8_fast", 16, C2, 87.3),
        ("fp8_fast", 16, C1, 86.6),
    ]
)


def test_candidates_are_each_shapes_leaders_and_those_of_the_other_confirmed_m():
    shapes = [(4, 8192, 8192, 1), (8, 8192, 8192, 1), (16, 8192, 8192, 1), (8, 10240, 8192, 1)]
    chosen = confirm.candidates(SWEEPS, shapes, ["fp8_fast", "fp8_promoted"], top=1)
    # M = 8's own leader first, then the leaders at M = 4 and 16 (never run at M = 8); not the peer, nor the
    # variant that failed the gate; no promoted rows, no N = 10240 rows: no candidates there
    assert chosen == {
        ("fp8_fast", (4, 8192, 8192, 1)): [C1, N8, C2],
        ("fp8_fast", (8, 8192, 8192, 1)): [N8, C1, C2],
        ("fp8_fast", (16, 8192, 8192, 1)): [C2, C1, N8],
    }
    alone = confirm.candidates(SWEEPS, [(16, 8192, 8192, 1)], ["fp8_fast"], top=2)
    assert alone == {("fp8_fast", (16, 8192, 8192, 1)): [C2, C1]}  # shapes outside the set lend none


def test_a_latest_tables_own_leaders_join_the_candidates():
    latest = rows([("fp8_fast", 16, SLOW, 80.0), ("fp8_fast", 16, C1, 70.0)], date="2026-11-24T00:00:00Z")
    chosen = confirm.candidates(SWEEPS, [(16, 8192, 8192, 1)], ["fp8_fast"], top=1, latest=(latest,))
    assert chosen == {("fp8_fast", (16, 8192, 8192, 1)): [C2, SLOW]}  # SLOW trails C2 in the union


def test_the_tuned_tables_row_is_re_timed_beside_the_leaders():
    # the run's winner replaces the table's row, so the row it would replace is among what it times
    incumbents = pd.DataFrame(
        [
            {"mode": "fp8_fast", "m": 16, "n": 8192, "k": 8192, "batch": 1, "name": N8},
            {"mode": "fp8_fast", "m": 32, "n": 8192, "k": 8192, "batch": 1, "name": SLOW},
        ]
    )
    for shape, expected in [
        ((16, 8192, 8192, 1), [C2, N8]),
        ((32, 8192, 8192, 1), [SLOW]),
        ((64, 8192, 8192, 1), None),
    ]:
        chosen = confirm.candidates(SWEEPS, [shape], ["fp8_fast"], top=1, incumbents=incumbents)
        assert chosen.get(("fp8_fast", shape)) == expected  # at M = 32 no sweep row: the table's row alone


def test_a_results_folder_of_confirmation_runs_alone_derives_its_winners(tmp_path):
    rows([("fp8_fast", 8, N8, 44.0), ("fp8_fast", 8, C1, 45.0)]).assign(family="sm90_fp8").to_csv(
        tmp_path / "confirm_decode.csv", index=False
    )
    path = sweep_module.write_tuned(tmp_path, GPU, tmp_path / "tuned.csv")
    assert pd.read_csv(path)["name"].tolist() == [C1]


def test_a_confirmed_shape_takes_its_latest_runs_winner_and_the_rest_keep_the_sweeps():
    confirmations = pd.concat(
        [
            rows([("fp8_fast", 8, N8, 44.0), ("fp8_fast", 8, C1, 43.0)], date="2026-11-24T00:00:00Z"),
            rows([("fp8_fast", 8, N8, 44.5), ("fp8_fast", 8, C1, 45.0)], date="2026-11-24T05:00:00Z"),
            rows([("fp8_fast", 16, C2, 99.0, "inaccurate"), ("fp8_fast", 16, C1, 86.0)], date="2026-11-24T05:00:00Z"),
        ]
    )
    table = tuned.confirmed_winners(SWEEPS, confirmations)
    picked = {(r.mode, r.m): (r.name, r.tflops) for r in table.itertuples()}
    assert picked == {
        ("fp8_fast", 4): (C1, 22.2),  # not confirmed: the sweeps' fastest
        ("fp8_fast", 8): (C1, 45.0),  # the later run's, over the sweeps' N8 and the earlier run's pick
        ("fp8_fast", 16): (C1, 86.0),  # the gated rows of the run, though the sweeps had C2 faster
    }
    assert tuned.confirmed_winners(SWEEPS, confirmations.iloc[:0]).equals(tuned.winners(SWEEPS))


def test_the_sweeps_tuned_table_reads_the_folders_confirmation_runs(tmp_path):
    SWEEPS.to_csv(tmp_path / "sweep_decode.csv", index=False)
    rows([("fp8_fast", 16, C1, 86.0)], date="2026-11-24T05:00:00Z").to_csv(tmp_path / "confirm_x.csv", index=False)
    table = pd.read_csv(sweep_module.write_tuned(tmp_path, GPU, tmp_path / "tuned.csv"))
    assert {(r.m, r.name) for r in table.itertuples()} == {(4, C1), (8, N8), (16, C1)}


def pins(entries, pinned):
    """A pinned.csv-like frame from (m, name, tflops) at N = K = 8192, fp8_fast."""
    frame = rows([("fp8_fast", m, name, tflops) for m, name, tflops in entries], date="2026-11-20T00:00:00Z")
    return frame.drop(columns=["family", "status"]).assign(pinned=pinned, evidence="an A/B run")


def test_a_pin_takes_its_shape_until_a_newer_confirmation_run_measures_it():
    confirmations = rows([("fp8_fast", 16, C1, 86.0)], date="2026-11-24T05:00:00Z")
    winners = tuned.confirmed_winners(SWEEPS, confirmations)
    pinned = pins([(4, SLOW, 21.0), (16, C2, 87.3)], pinned="2026-11-24T00:00:00Z")
    picked = {(r.m, r.name) for r in tuned.pinned_winners(winners, pinned, confirmations).itertuples()}
    assert picked == {(4, SLOW), (8, N8), (16, C1)}  # M = 16 was confirmed after the pin
    later = pinned.assign(pinned="2026-11-25T00:00:00Z")
    picked = {(r.m, r.name) for r in tuned.pinned_winners(winners, later, confirmations).itertuples()}
    assert picked == {(4, SLOW), (8, N8), (16, C2)}
    assert tuned.pinned_winners(winners, later.iloc[:0], confirmations).equals(winners)


def test_the_shipped_tables_are_what_their_results_folders_derive(tmp_path):
    """Every row of a shipped tuned table comes from the committed sweep, confirmation and pinned tables: a sweep
    or confirmation run on that GPU rewrites no row it did not measure."""
    for shipped in sorted(tuned.TUNED_DIR.glob("*.csv")):
        folder = Path(__file__).parents[1] / "sweeps" / "results" / shipped.stem
        gpu = pd.read_csv(shipped)["gpu"].iloc[0]
        derived = sweep_module.write_tuned(folder, gpu, tmp_path / shipped.name)
        assert pd.read_csv(derived).equals(pd.read_csv(shipped)), shipped.name


@pytest.fixture
def timed_order(monkeypatch):
    """Fakes the kernels (each returns its name) and the graph timer, which takes its times from `times` and
    records which variant it timed, in order."""
    order, times = [], []

    def graph_time_us(run, sets, calls, repeats):
        order.append(run.__name__)
        return times.pop(0)

    def runner(config):
        def run(*inputs):
            return config.name

        run.__name__ = config.name
        return run, None

    monkeypatch.setattr(confirm.benchmark, "graph_time_us", graph_time_us)
    monkeypatch.setattr(families.get("sm90_fp8").plugin("measure"), "kernel_runner", runner)
    return order, times


def test_a_rows_time_is_the_median_of_its_round_robin_passes(timed_order):
    order, times = timed_order
    times.extend([24.0, 23.0, 25.0])
    problem = argparse.Namespace(graph_calls=10, flops=2.0 * 8 * 8192 * 8192, operands=lambda prepare: [("set",)])
    problem.relres = lambda output: 1e-3 if output == C1 else 1.0
    problem.gate = lambda mode, relres: ("ok", "") if relres < 0.1 else ("inaccurate", "relres over the bound")
    measured = confirm.confirm(problem, "fp8_fast", [C1, C2], rounds=3, repeats=10)
    assert order == [C1, C1, C1]  # C2 failed the gate: never timed
    assert measured[C2]["status"] == "inaccurate" and "time_us" not in measured[C2]
    assert measured[C1]["time_us"] == 24.0 and measured[C1]["repeats"] == 30
    assert measured[C1]["tflops"] == round(2.0 * 8 * 8192 * 8192 / 24.0 / 1e6, 2)
    assert "23.00-25.00" in measured[C1]["detail"]


def test_every_other_pass_times_the_variants_in_reverse(timed_order):
    """Under the power cap the variant timed after a light one reads fast: no variant always follows the same one."""
    order, times = timed_order
    times.extend([10.0] * 9)
    problem = argparse.Namespace(graph_calls=10, flops=1.0, operands=lambda prepare: [("set",)])
    problem.relres = lambda output: 1e-3
    problem.gate = lambda mode, relres: ("ok", "")
    confirm.confirm(problem, "fp8_fast", [C1, N8, C2], rounds=3, repeats=10)
    assert order == [C1, N8, C2, C2, N8, C1, C1, N8, C2]


def test_added_variants_join_every_shape_of_their_mode():
    shapes = [(4, 8192, 8192, 1), (16, 8192, 8192, 1)]
    promoted = "fp8_e4m3e4m3_bf16_64x16x128_c1x1_pp_promoted_swap_l2pf16"
    chosen = confirm.candidates(SWEEPS, shapes, ["fp8_fast", "fp8_promoted"], top=1, added=(SLOW, C1, promoted))
    assert chosen == {
        ("fp8_fast", (4, 8192, 8192, 1)): [C1, C2, SLOW],  # C1 leads already: not timed twice
        ("fp8_fast", (16, 8192, 8192, 1)): [C2, C1, SLOW],
        ("fp8_promoted", (4, 8192, 8192, 1)): [promoted],  # no sweep rows: the added variant alone
        ("fp8_promoted", (16, 8192, 8192, 1)): [promoted],
    }


def test_sustained_passes_time_back_to_back_calls_and_record_the_power(monkeypatch):
    problem = argparse.Namespace(graph_calls=3, flops=2.0 * 8192**3, operands=lambda prepare: [("set",)])
    problem.relres = lambda output: 1e-3
    problem.gate = lambda mode, relres: ("ok", "")
    passes = iter([900.0, 880.0, 890.0])
    calls = []

    class Sampler:
        def summary(self):
            return {"watts": 700.0}

    def sustained_time_us(run, sets, seconds, during=None):
        calls.append((seconds, type(during).__name__))
        return next(passes)

    monkeypatch.setattr(confirm, "Sampler", Sampler)
    monkeypatch.setattr(confirm.benchmark, "sustained_time_us", sustained_time_us)
    monkeypatch.setattr(confirm.benchmark, "graph_time_us", lambda *a, **k: 1 / 0)  # never the short replay
    monkeypatch.setattr(
        families.get("sm90_fp8").plugin("measure"), "kernel_runner", lambda config: (lambda *i: 0, None)
    )
    measured = confirm.confirm(problem, "fp8_promoted", [C1], rounds=3, repeats=10, seconds=1.5)[C1]
    assert calls == [(1.5, "Sampler")] * 3
    assert measured["time_us"] == 890.0 and measured["watts"] == 700.0
    assert measured["gflops_per_watt"] == round(measured["tflops"] * 1e3 / 700.0, 2)
    assert "sustained (1.5 s)" in measured["detail"] and "880.00-900.00" in measured["detail"]


def test_add_takes_several_names_and_repeats():
    base = "fp8_e4m3e4m3_bf16_128x128x128_c1x1_coop_promoted"
    args = confirm.parse_args(["--shapes", "s.yaml", "--add", f"{base}_be", f"{base}_w8_be", "--add", f"{base}_w4_be"])
    assert args.add == [f"{base}_be", f"{base}_w8_be", f"{base}_w4_be"]


def test_a_name_no_family_builds_is_refused_naming_add(capsys):
    with pytest.raises(SystemExit):
        confirm.parse_args(["--shapes", "s.yaml", "--add", "fp8_not_a_variant"])
    assert "--add fp8_not_a_variant" in capsys.readouterr().err


def test_a_folder_without_sweep_tables_is_refused_naming_it(tmp_path):
    with pytest.raises(SystemExit, match=f"--sweeps {tmp_path}: no sweep_"):
        confirm.read_sweeps(tmp_path)
    SWEEPS.to_csv(tmp_path / "sweep_fp8.csv", index=False)
    assert len(confirm.read_sweeps(tmp_path)) == len(SWEEPS)


def test_a_sibling_gpus_leaders_and_winners_are_re_timed_with_any_gpu_and_incumbents(tmp_path):
    SWEEPS.to_csv(tmp_path / "sweep_fp8.csv", index=False)  # measured on the H100
    sibling = tmp_path / "h100.csv"
    pd.DataFrame([{"mode": "fp8_fast", "m": 4, "n": 8192, "k": 8192, "batch": 1, "name": SLOW}]).to_csv(sibling)
    out = tmp_path / "h200"
    base = ["--shapes", "s.yaml", "--sweeps", str(tmp_path), "--out", str(out)]
    sweeps, _, incumbents, tuned_path = confirm.sources(confirm.parse_args(base), "NVIDIA H200", out)
    assert sweeps.empty  # another GPU's rows: none without --any-gpu
    assert tuned_path == out / "tuned_h200.csv"
    args = confirm.parse_args([*base, "--any-gpu", "--incumbents", str(sibling)])
    sweeps, _, incumbents, _ = confirm.sources(args, "NVIDIA H200", out)
    assert len(sweeps) == len(SWEEPS) and list(incumbents["name"]) == [SLOW]
    chosen = confirm.candidates(sweeps, [(4, 8192, 8192, 1)], ["fp8_fast"], top=1, incumbents=incumbents)
    assert SLOW in chosen["fp8_fast", (4, 8192, 8192, 1)]
    with pytest.raises(SystemExit, match="--incumbents"):
        confirm.sources(confirm.parse_args([*base, "--incumbents", str(tmp_path / "none.csv")]), "NVIDIA H200", out)


def test_unusable_tables_are_refused_naming_the_option_and_file(tmp_path):
    SWEEPS.to_csv(tmp_path / "sweep_fp8.csv", index=False)
    (tmp_path / "sweep_killed_at_once.csv").write_text("")  # a sweep killed before its first row: skipped
    garbage, empty = tmp_path / "garbage.csv", tmp_path / "empty.csv"
    garbage.write_text("a,b\n1,2\n")
    empty.write_text("")
    out = tmp_path / "h100"
    base = ["--shapes", "s.yaml", "--sweeps", str(tmp_path), "--out", str(out)]
    assert len(confirm.sources(confirm.parse_args(base), "NVIDIA H100 80GB HBM3", out)[0]) == len(SWEEPS)
    for extra, message in (
        (["--incumbents", str(garbage)], rf"--incumbents {garbage}: not a table of this kind \(it lacks \['mode'"),
        (["--incumbents", str(empty)], f"--incumbents {empty}: cannot be read as a CSV table"),
        (["--latest", str(garbage)], rf"--latest {garbage}: not a table of this kind \(it lacks \['gpu'"),
        (["--tuned-out", str(tmp_path / "sweep_fp8.csv")], "--tuned-out .*sweep_fp8.csv is not a tuned table"),
    ):
        with pytest.raises(SystemExit, match=message):
            confirm.sources(confirm.parse_args([*base, *extra]), "NVIDIA H100 80GB HBM3", out)


def test_the_default_tuned_table_is_named_as_such_and_an_empty_one_holds_no_incumbents(tmp_path):
    SWEEPS.to_csv(tmp_path / "sweep_fp8.csv", index=False)
    out = tmp_path / "h100"
    out.mkdir()
    default = out / "tuned_h100.csv"
    default.write_text("")
    args = confirm.parse_args(["--shapes", "s.yaml", "--sweeps", str(tmp_path), "--out", str(out)])
    assert confirm.sources(args, "NVIDIA H100 80GB HBM3", out)[2] is None
    SWEEPS.to_csv(default, index=False)  # a sweep table where the tuned table goes
    with pytest.raises(SystemExit, match=f"the tuned table {default} is not a tuned table"):
        confirm.sources(args, "NVIDIA H100 80GB HBM3", out)
    default.write_text("mode,m,n,k,name,tflops,gpu,date\nfp8_fast,4,8192,8192,x,1,g,d\n")  # an older table
    assert list(confirm.sources(args, "NVIDIA H100 80GB HBM3", out)[2]["batch"]) == [1]
