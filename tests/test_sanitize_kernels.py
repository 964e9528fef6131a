"""python/sanitize_kernels.py without a GPU: what it enumerates, the commands it builds and how it reads logs."""

import csv
import importlib
import importlib.util
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "python" / "sanitize_kernels.py"


@pytest.fixture(scope="module")
def sanitize():
    spec = importlib.util.spec_from_file_location("sanitize_kernels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _listed(sanitize, capsys, *options):
    """(rows of `--list`, its last line), run in this process."""
    capsys.readouterr()
    assert sanitize.main(["--list", *options]) == 0
    lines = capsys.readouterr().out.splitlines()
    return [line.split() for line in lines[:-1]], lines[-1]


@pytest.fixture
def listed(sanitize, capsys):
    return _listed(sanitize, capsys)


def test_every_dispatchable_variant_is_listed_once_per_tool(listed):
    gemm = importlib.import_module("cutlass_ext.gemm")
    fp8 = importlib.import_module("cutlass_ext.fp8")
    tuned = importlib.import_module("cutlass_ext.tuned")
    DEFAULT_CONFIG = importlib.import_module("cutlass_ext.lowbit.kernel").DEFAULT_CONFIG
    OptimConfig = importlib.import_module("cutlass_ext.optim.config").OptimConfig

    expected = {c.name for c in gemm.dispatch_configs()} | {c.name for c in fp8.dispatch_configs()}
    expected |= {c.name for c in tuned.shipped_configs()} | set(fp8.DECODE_DEFAULTS.values())
    expected |= {DEFAULT_CONFIG.name, OptimConfig().name, OptimConfig("sgd", "kahan", "bf16").name}
    rows, total = listed
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        names = [row[3] for row in rows if row[0] == tool]
        assert len(names) == len(set(names))
        assert expected <= set(names), sorted(expected - set(names))
    assert total.startswith(f"{len(set(row[3] for row in rows))} variants")


def test_shapes_cut_every_tile_edge_and_keep_alignment(sanitize):
    from cutlass_ext.families.sm80.config import KernelConfig

    for name in sanitize.variant_names():
        config = sanitize.config_of(name)
        if not isinstance(config, KernelConfig):
            continue
        for shape in sanitize.shapes_of(name):
            m, n, k = shape[-3:]
            tile_m, tile_n, tile_k = config.threadblock
            assert m % tile_m and n % tile_n and k % tile_k, (name, shape)
            assert all(v % config.alignment == 0 for v in (m, n, k)), (name, shape)
    assert any(len(shape) == 4 for name in sanitize.variant_names() for shape in sanitize.shapes_of(name))


def test_groups_hold_one_family_and_at_most_group_size(sanitize):
    names = sanitize.variant_names()
    groups = sanitize.groups(names)
    assert sorted(name for group in groups for name in group) == sorted(names)
    for group in groups:
        assert len(group) <= sanitize.GROUP_SIZE
        assert len({sanitize.family_of(name) for name in group}) == 1


def test_initcheck_alone_checks_torchs_kernels_too(sanitize):
    group = ["tf32tf32_sm80_128x128x32_64x32x32_s3_a4", "tf32tf32_sm80_128x128x32_64x32x32_s3_a1"]
    for tool in sanitize.TOOLS:
        command = sanitize.sanitizer_command("/cs", tool, group)
        assert command[:3] == ["/cs", "--tool", tool]
        assert command[-2:] == ["--worker", ",".join(group)]
        assert ("--kernel-name-exclude" in command) == (tool != "initcheck")
        # the run's own timeout ends a hung worker; the sanitizer's attach timeout would skip a slow-starting one
        assert command[command.index("--launch-timeout") + 1] == "0"


def test_initcheck_leaves_only_the_readers_of_tma_stored_data_to_memcheck(sanitize):
    """initcheck cannot see TMA stores: the Ozaki recombination (which reads the INT8 GEMM's TMA-stored residues) is
    the one kernel it skips; torch's kernels stay checked there."""
    command = sanitize.sanitizer_command("/cs", "initcheck", ["ozaki_int8x8_128x256x128_c1x1_w8"])
    assert command[command.index("--kernel-name-exclude") + 1] == "kns=recombine_kernel"
    assert sanitize.TORCH_KERNELS not in command


def _log(*lines):
    return "\n".join(lines) + "\n"


def test_reports_are_attributed_to_the_variant_that_was_running(sanitize, monkeypatch):
    monkeypatch.setattr(sanitize, "shapes_of", lambda name: [(3, 5, 7)])
    marker = sanitize.MARKER
    text = _log(
        "========= COMPUTE-SANITIZER",
        f"{marker} run first 3x5x7",
        f"{marker} done",
        f"{marker} run second 3x5x7",
        "========= Invalid __global__ read of size 4 bytes",
        "=========     at kernel+0x70",
        "=========     Address 0x7f is out of bounds",
        "========= Invalid __global__ write of size 16 bytes",
        f"{marker} done",
        "========= ERROR SUMMARY: 2 errors",
    )
    rows = {row["variant"]: row for row in sanitize.parse_log(text, "memcheck", ["first", "second"])}
    assert rows["first"]["errors"] == 0 and rows["first"]["status"] == "ok"
    assert rows["second"]["errors"] == 2 and rows["second"]["status"] == "ok"
    assert set(rows) == {"first", "second"}


def test_racecheck_warnings_are_kept_apart_from_errors(sanitize, monkeypatch):
    monkeypatch.setattr(sanitize, "shapes_of", lambda name: [(3, 5, 7)])
    marker = sanitize.MARKER
    text = _log(
        f"{marker} run only 3x5x7",
        "========= Warning: Race reported between Write access at k+0x10 and Read access at k+0x20",
        "========= Error: Race reported between Write access at k+0x10 and Write access at k+0x30",
        f"{marker} done",
        "========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)",
    )
    (row,) = sanitize.parse_log(text, "racecheck", ["only"])
    assert (row["errors"], row["warnings"], row["status"]) == (1, 1, "ok")


def test_a_process_that_died_leaves_its_variants_not_run(sanitize, monkeypatch):
    monkeypatch.setattr(sanitize, "shapes_of", lambda name: [(3, 5, 7), (2, 3, 5, 7)])
    marker = sanitize.MARKER
    text = _log(f"{marker} run first 3x5x7", "Traceback (most recent call last):", "RuntimeError: boom")
    rows = sanitize.parse_log(text, "synccheck", ["first", "second"])
    status = {(row["variant"], row["shape"]): row["status"] for row in rows}
    assert status[("first", "3x5x7")] == "started"
    assert status[("first", "2x3x5x7")] == status[("second", "3x5x7")] == "not run"
    assert status[("(unattributed)", "")] == "no sanitizer summary"


def test_errors_the_parser_did_not_recognise_still_count(sanitize, monkeypatch):
    monkeypatch.setattr(sanitize, "shapes_of", lambda name: [(3, 5, 7)])
    marker = sanitize.MARKER
    text = _log(f"{marker} run only 3x5x7", f"{marker} done", "========= ERROR SUMMARY: 3 errors")
    rows = {row["variant"]: row for row in sanitize.parse_log(text, "initcheck", ["only"])}
    assert rows["(unattributed)"]["errors"] == 3


def test_a_missing_compute_sanitizer_is_named(sanitize, monkeypatch):
    monkeypatch.setattr(sanitize.shutil, "which", lambda name: None)
    monkeypatch.setattr(sanitize, "SANITIZER", "/nonexistent/compute-sanitizer")
    with pytest.raises(SystemExit, match="compute-sanitizer not found.*/nonexistent/compute-sanitizer"):
        sanitize.find_sanitizer()


def test_unknown_tools_variants_families_and_shards_are_refused(sanitize, capsys):
    arguments = ["--tools=memcheck,leakcheck", "--variants=tf32_sm80_nonexistent", "--families=sm80,fp9", "--shard=0/2"]
    for argument in arguments:
        with pytest.raises(SystemExit) as exit_info:
            sanitize.main([argument, "--list"])
        assert exit_info.value.code == 2
        assert argument.split("=")[1].split(",")[-1] in capsys.readouterr().err


def test_run_one_logs_the_command_and_reads_its_output(sanitize, monkeypatch, tmp_path):
    """A stand-in for compute-sanitizer that prints what the worker and the tool would."""
    monkeypatch.setattr(sanitize, "shapes_of", lambda name: [(3, 5, 7)])
    fake = tmp_path / "compute-sanitizer"
    marker = sanitize.MARKER
    fake.write_text(
        "#!/bin/sh\n"
        f"echo '{marker} run first 3x5x7'; echo '{marker} done'\n"
        f"echo '{marker} run second 3x5x7'\n"
        "echo '========= Invalid __shared__ write of size 4 bytes'\n"
        f"echo '{marker} done'\n"
        "echo '========= ERROR SUMMARY: 1 error'\n"
        'test "$PYTORCH_NO_CUDA_MEMORY_CACHING" = 1\n'
    )
    fake.chmod(0o755)
    log = tmp_path / "memcheck_group00.log"
    rows = sanitize.run_one(str(fake), "memcheck", ["first", "second"], log, timeout=30)
    assert [(row["variant"], row["errors"], row["status"]) for row in rows] == [
        ("first", 0, "ok"),
        ("second", 1, "ok"),
    ]
    text = log.read_text()
    assert text.startswith(f"$ {fake} --tool memcheck") and "# exit 0" in text


def test_a_variant_that_fails_is_named_and_the_rest_run(sanitize, monkeypatch):
    monkeypatch.setattr(sanitize, "shapes_of", lambda name: [(3, 5, 7)])
    marker = sanitize.MARKER
    text = _log(
        f"{marker} run first 3x5x7",
        f"{marker} failed RuntimeError: none of the kernel variants first can run a [3, 7] x [7, 5] product",
        f"{marker} run second 3x5x7",
        f"{marker} done",
    )
    rows = {row["variant"]: row for row in sanitize.parse_log(text, "none", ["first", "second"])}
    assert rows["first"]["status"].startswith("failed RuntimeError: none of the kernel variants")
    assert rows["second"]["status"] == "ok"
    assert set(rows) == {"first", "second"}


def test_shards_split_the_variants_without_overlap(sanitize, capsys):
    def names(*options):
        return [row[3] for row in _listed(sanitize, capsys, "--tools=memcheck", *options)[0]]

    shards = [names(f"--shard={k}/3") for k in (1, 2, 3)]
    assert sorted(sum(shards, [])) == sorted(names())
    assert all(shards)


def test_a_tool_that_misses_its_planted_error_is_reported(sanitize, monkeypatch, tmp_path):
    monkeypatch.setattr(sanitize, "build_self_check", lambda folder: folder / "self_check.so")
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$2" = memcheck ]; then echo "========= ERROR SUMMARY: 1 error"; '
        'else echo "========= ERROR SUMMARY: 0 errors"; fi\n'
    )
    fake.chmod(0o755)
    rows = {row["tool"]: row for row in sanitize.self_check(str(fake), ["memcheck", "synccheck"], tmp_path, 30)}
    assert rows["memcheck"]["errors"] == 1 and rows["memcheck"]["status"] == "ok"
    assert rows["synccheck"]["errors"] == 0 and rows["synccheck"]["status"].startswith("missed")
    assert "--self-check-worker" in (tmp_path / "self_check_memcheck.log").read_text()


def _fake_run(sanitize, monkeypatch, errors_in=None, missed=()):
    """main's GPU steps replaced: each process prints the worker's markers and a summary (errors in `errors_in`)."""
    monkeypatch.setattr(sanitize, "shapes_of", lambda name: [(3, 5, 7)])
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: "/fake/compute-sanitizer")
    monkeypatch.setattr(sanitize, "build_all", lambda names: 0)
    monkeypatch.setattr(
        sanitize,
        "self_check",
        lambda sanitizer, tools, folder, timeout: [
            {
                "tool": tool,
                "errors": 0 if tool in missed else 1,
                "status": "missed" if tool in missed else "ok",
                "log": "",
            }
            for tool in tools
        ],
    )
    code = (
        "import sys\n"
        "tool, names, bad = sys.argv[1], sys.argv[2].split(','), sys.argv[3]\n"
        "for name in names:\n"
        f"    print('{sanitize.MARKER} run', name, '3x5x7')\n"
        "    if name == bad and tool != 'none':\n"
        "        print('========= Invalid __global__ read of size 4 bytes')\n"
        f"    print('{sanitize.MARKER} done')\n"
        "if tool != 'none':\n"
        "    print('========= ERROR SUMMARY: %d errors' % (bad in names))\n"
    )
    monkeypatch.setattr(
        sanitize,
        "sanitizer_command",
        lambda sanitizer, tool, group: [sys.executable, "-c", code, tool, ",".join(group), str(errors_in)],
    )


def test_main_writes_every_variant_and_tool_and_exits_zero_when_clean(sanitize, monkeypatch, tmp_path):
    _fake_run(sanitize, monkeypatch)
    options = ["--out", str(tmp_path), "--families", "lowbit,optim", "--tools", "memcheck,synccheck"]
    assert sanitize.main(options) == 0
    rows = list(csv.DictReader(open(tmp_path / "summary.csv")))
    names = {row["variant"] for row in rows}
    low_bit = {c.name for c in importlib.import_module("cutlass_ext.lowbit.kernel").dispatch_configs()}
    # the low-bit default and tuned tiles, and the optimizers' 12 (2 kinds x 3 updates x 2 arithmetics)
    assert {name for name in names if name.startswith("lowbit_")} == low_bit and len(names - low_bit) == 12
    assert {row["tool"] for row in rows} == {"none", "memcheck", "synccheck"}
    assert all(row["status"] == "ok" and row["errors"] == "0" for row in rows)
    assert (tmp_path / "self_check.csv").is_file()


def test_main_exits_one_naming_the_variant_with_an_error(sanitize, monkeypatch, tmp_path):
    bad = importlib.import_module("cutlass_ext.optim.config").OptimConfig("sgd", "kahan", "bf16").name
    _fake_run(sanitize, monkeypatch, errors_in=bad)
    assert sanitize.main(["--out", str(tmp_path), "--families", "optim", "--tools", "memcheck"]) == 1
    rows = list(csv.DictReader(open(tmp_path / "summary.csv")))
    assert [(row["variant"], row["errors"]) for row in rows if row["errors"] != "0"] == [(bad, "1")]


def test_cached_only_builds_nothing_and_names_what_it_did_not_run(sanitize, monkeypatch, tmp_path):
    from cutlass_ext import build

    _fake_run(sanitize, monkeypatch)
    monkeypatch.setattr(sanitize, "build_all", lambda names: pytest.fail("--cached-only must build nothing"))
    monkeypatch.setattr(build, "load_binding", lambda: None)
    absent = importlib.import_module("cutlass_ext.optim.config").OptimConfig("adamw", "kahan", "fp32").name
    monkeypatch.setattr(sanitize, "uncached", lambda names: [absent])
    options = ["--out", str(tmp_path), "--families", "optim", "--tools", "memcheck", "--cached-only"]
    assert sanitize.main(options) == 1
    rows = list(csv.DictReader(open(tmp_path / "summary.csv")))
    assert {(row["tool"], row["status"]) for row in rows if row["variant"] == absent} == {
        ("none", "not run: not in the kernel cache (--cached-only)"),
        ("memcheck", "not run: not in the kernel cache (--cached-only)"),
    }
    others = [row for row in rows if row["variant"] != absent]
    assert len({row["variant"] for row in others}) == 11 and all(row["status"] == "ok" for row in others)


def test_an_empty_kernel_cache_holds_no_variant(sanitize, monkeypatch, tmp_path):
    from cutlass_ext import toolchain

    monkeypatch.setenv("CUTLASS_EXT_CACHE", str(tmp_path))
    monkeypatch.setattr(toolchain, "device_arch", lambda *args: "90a")
    names = [name for name in sanitize.variant_names() if sanitize.family_of(name) in ("sm80", "optim")][:3]
    assert sanitize.uncached(names) == names


def test_past_the_deadline_processes_are_rows_not_run(sanitize, monkeypatch, tmp_path):
    _fake_run(sanitize, monkeypatch)
    options = ["--out", str(tmp_path), "--families", "lowbit", "--tools", "memcheck", "--deadline", "1"]
    assert sanitize.main(options) == 1
    rows = [row for row in csv.DictReader(open(tmp_path / "summary.csv")) if row["tool"] == "memcheck"]
    assert rows and all(row["status"] == "not run: past --deadline" for row in rows)


def test_a_tool_that_missed_its_planted_error_fails_the_run_but_the_rest_runs(sanitize, monkeypatch, tmp_path):
    _fake_run(sanitize, monkeypatch, missed=("synccheck",))
    options = ["--out", str(tmp_path), "--families", "lowbit", "--tools", "memcheck,synccheck"]
    assert sanitize.main(options) == 1
    rows = list(csv.DictReader(open(tmp_path / "summary.csv")))
    assert {row["tool"] for row in rows} == {"none", "memcheck", "synccheck"}
    assert all(row["status"] == "ok" for row in rows)


def test_a_process_past_its_timeout_is_ended_with_what_it_started(sanitize, monkeypatch, tmp_path):
    monkeypatch.setattr(sanitize, "shapes_of", lambda name: [(3, 5, 7)])
    child = tmp_path / "child.pid"
    code = (
        "import subprocess, time\n"
        "child = subprocess.Popen(['sleep', '60'])\n"
        f"open('{child}', 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    monkeypatch.setattr(sanitize, "sanitizer_command", lambda sanitizer, tool, group: [sys.executable, "-c", code])
    row = sanitize.run_one("/fake", "memcheck", ["only"], tmp_path / "log", timeout=3)[0]
    assert "timed out after 3 s" in row["status"]
    status = Path(f"/proc/{int(child.read_text())}/status")
    for _ in range(50):  # killed: gone, or a zombie until something reaps it
        try:
            if "\nState:\tZ" in status.read_text():
                break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the process the timed-out one started is still running")


def _recording_runners(sanitize, monkeypatch, events):
    for family in sanitize._RUNNERS:
        monkeypatch.setitem(sanitize._RUNNERS, family, lambda name, shape, generator: events.append(("run", name)))


def test_the_worker_loads_binding_variants_before_it_runs_them(sanitize, monkeypatch):
    """The binding's ops (sm80, sm90, FP8) run only variants loaded into it; the ctypes families load their own."""
    import torch

    from cutlass_ext import registry

    events = []
    _recording_runners(sanitize, monkeypatch, events)
    monkeypatch.setattr(registry, "ensure_names_registered", lambda names, device: events.append(("load", *names)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    first_of = {}
    for name in sanitize.variant_names():
        first_of.setdefault(sanitize.family_of(name), name)
    assert sanitize.worker(list(first_of.values()), device="cpu") == 0
    for family, name in first_of.items():
        runs = [index for index, event in enumerate(events) if event == ("run", name)]
        loads = [index for index, event in enumerate(events) if event == ("load", name)]
        assert len(runs) == len(sanitize.shapes_of(name))
        if family in ("sm80", "sm90", "fp8"):
            assert len(loads) == len(runs) and all(load + 1 == run for load, run in zip(loads, runs)), family
        else:
            assert not loads, family


def _entry_points(sanitize):
    """(module, attribute) of what each family's runner calls: the kernels' Python entry points."""
    return {
        "sm80": [("cutlass_ext.ops", "gemm"), ("cutlass_ext.ops", "halfhalf_gemm")],
        "sm90": [("cutlass_ext.corrected_sm90", "product")],
        "fp8": [("cutlass_ext.ops", "gemm_fp8")],
        "fp8_block": [
            ("cutlass_ext.fp8_block.api", "gemm_fp8_block"),
            ("cutlass_ext.fp8_block.api", "grouped_gemm_fp8"),
            ("cutlass_ext.fp8_block.api", "k_grouped_gemm_fp8"),
        ],
        "ozaki": [("cutlass_ext.ozaki", "gemm")],
        "lowbit": [("cutlass_ext.lowbit.kernel", "matmul")],
        "optim": [],  # the optimizers' CPU path is their reference: it runs as it is
    }


def test_every_runner_calls_its_kernels_with_arguments_their_signatures_take(sanitize, monkeypatch):
    """Each family's worker path on the CPU, its kernel entry points replaced by mocks that check each call
    against the real signature (the worker's calls break here, not on the GPU, when an API changes)."""
    from unittest import mock

    import torch

    def product(a, b, *args, **kwargs):  # the low-bit runner differentiates its result
        return torch.matmul(a, b)

    calls = {}
    entry_points = _entry_points(sanitize)
    assert set(entry_points) == set(sanitize._RUNNERS)
    for family, targets in entry_points.items():
        for module_name, attribute in targets:
            module = importlib.import_module(module_name)
            fake = mock.create_autospec(getattr(module, attribute), side_effect=product if family == "lowbit" else None)
            monkeypatch.setattr(module, attribute, fake)
            calls[module_name, attribute] = fake
    names = sanitize.variant_names()
    for family in sanitize._RUNNERS:
        members = [name for name in names if sanitize.family_of(name) == family]
        assert members, f"no variant of family {family}"
        # the first and last of each family, and each block-scaled kind (dense, grouped, K-grouped: three paths)
        kinds = {
            (getattr(c, "grouped", False), getattr(c, "k_grouped", False)): n
            for n, c in zip(members, map(sanitize.config_of, members))
        }
        for name in dict.fromkeys([members[0], members[-1], *kinds.values()]):
            for shape in sanitize.shapes_of(name):
                sanitize._RUNNERS[family](name, shape, torch.Generator().manual_seed(0))
    for (module_name, attribute), fake in calls.items():
        assert fake.call_count, f"no runner called {module_name}.{attribute}"


def test_add_checks_a_candidate_dispatch_does_not_pick_beside_the_chosen(sanitize, capsys):
    candidate = "fp8_e4m3e4m3_bf16_128x128x128_c1x1_coop_promoted_w4_be"
    dispatched = {row[3] for row in _listed(sanitize, capsys, "--tools=memcheck")[0]}
    assert candidate not in dispatched
    rows, _ = _listed(sanitize, capsys, "--tools=memcheck", "--families=fp8", f"--add={candidate}")
    assert [row[2] for row in rows if row[3] == candidate] == ["fp8"]
    assert {row[3] for row in rows} - {candidate} <= dispatched
    with pytest.raises(SystemExit) as exit_info:
        sanitize.main(["--list", "--add=fp8_not_a_variant"])
    assert exit_info.value.code == 2
    assert "fp8_not_a_variant" in capsys.readouterr().err
