"""The block-scaled FP8 family's sweep plug-ins and tuned dispatch without a GPU: the space file's product, the
filter rule, the plan a tuned table gives (types carried over, defaults off the table, a winner that cannot load)."""

import warnings
from pathlib import Path

import pytest
import yaml

from cutlass_ext import device, tuned
from cutlass_ext.explain import explain
from cutlass_ext.families.rules import DeviceLimits, apply_rules
from cutlass_ext.families.spaces import SpaceError
from cutlass_ext.fp8_block import Fp8BlockConfig, api, filters, space
from cutlass_ext.prebuild import prebuild_configs

ROOT = Path(__file__).resolve().parent.parent
H100 = device.named("NVIDIA H100 80GB HBM3")
SWAP_32 = "fp8block_e4m3e4m3_bf16_128x32x128_c1x1_coop_sb128_streamk_swap"


def _load(tmp_path, document):
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(document))
    return space.load_space(path, document)


def test_shipped_space_holds_the_defaults_and_only_kernels():
    path = ROOT / "configs" / "sm90_fp8_block.yaml"
    document = yaml.safe_load(path.read_text())
    configs = space.load_space(path, document)
    assert len(configs) == len(set(configs)) == 29
    assert {c for _, c in api.DENSE_BY_M} <= set(configs)
    assert all(Fp8BlockConfig.from_name(c.name) == c and c.mode == api.MODE for c in configs)
    assert all(c.schedule == ("pingpong" if c.tile[0] == 64 else "cooperative") for c in configs)
    assert not any(c.swap_ab and c.scale_a_major == "m" for c in configs)
    survivors = apply_rules(configs, DeviceLimits.for_arch("90a"), filters.RULES).survivors
    assert len(survivors) == 25 and not any(c.swap_ab and c.tile[:2] == (128, 128) for c in survivors)
    shapes = yaml.safe_load((ROOT / "configs" / document["shapes"]).read_text())["shapes"]
    assert [64, 2112, 7168] in shapes and len(shapes) == 36


def test_grouped_space_holds_grouped_kernels_over_moe_shapes(tmp_path):
    path = ROOT / "configs" / "sm90_fp8_grouped.yaml"
    document = yaml.safe_load(path.read_text())
    configs = space.load_space(path, document)
    assert len(configs) == 8 and all(c.grouped and c.mode == api.GROUPED_MODE for c in configs)
    assert Fp8BlockConfig.from_name(api.grouped_variant("e4m3", "e4m3", "bf16", 128)) in configs
    shapes = yaml.safe_load((ROOT / "configs" / document["shapes"]).read_text())["shapes"]
    assert [128, 4096, 7168, 8] in shapes and all(len(shape) == 4 for shape in shapes)
    # one kind of kernel per space: its shapes are either dense or [tokens per expert, N, K, experts]
    with pytest.raises(SpaceError, match="takes dense kernels only"):
        _load(tmp_path, {"family": "sm90_fp8_block", "modes": ["fp8_block"], "space": {"grouped": [True]}})
    with pytest.raises(SpaceError, match="one of .* per space"):
        _load(tmp_path, {"family": "sm90_fp8_block", "modes": ["fp8_block", "fp8_grouped"], "space": {}})
    with pytest.raises(SpaceError, match="takes grouped kernels only"):
        _load(tmp_path, {"family": "sm90_fp8_block", "modes": ["fp8_grouped"], "space": {"grouped": [False]}})


def test_weight_gradient_spaces_hold_k_grouped_kernels_over_wgrad_shapes(tmp_path):
    from cutlass_ext.fp8_block import direct, measure_k_grouped

    path = ROOT / "configs" / "sm90_fp8_k_grouped.yaml"
    document = yaml.safe_load(path.read_text())
    configs = space.load_space(path, document)
    assert len(configs) == 8 and all(c.k_grouped and c.mode == api.K_GROUPED_MODE for c in configs)
    assert Fp8BlockConfig.from_name(api.k_grouped_variant("e4m3", "e4m3", "fp32")) in configs
    path = ROOT / "configs" / "sm90_fp8_k_grouped_direct.yaml"
    direct_configs = direct.load_space(path, yaml.safe_load(path.read_text()))
    assert len(direct_configs) == 8 and all(c.k_grouped and c.mode == api.K_GROUPED_MODE for c in direct_configs)
    shapes = yaml.safe_load((ROOT / "configs" / document["shapes"]).read_text())["shapes"]
    assert [4096, 7168, 2048, 16] in shapes and all(len(shape) == 4 and shape[2] % 128 == 0 for shape in shapes)
    with pytest.raises(ValueError, match="multiple of 128"):  # before any GPU memory
        measure_k_grouped.make_problem(128, 128, 200, 2)
    with pytest.raises(SpaceError, match="takes weight-gradient"):
        _load(tmp_path, {"family": "sm90_fp8_block", "modes": ["fp8_k_grouped"], "space": {"grouped": [True]}})


def test_the_weight_gradient_winner_runs_for_calls_of_its_types(tmp_path):
    wide = "fp8block_e4m3e4m3_fp32_128x128x128_c2x1_coop_sb1_kgrouped_am"
    direct = "fp8direct_e4m3e4m3_fp32_128x128x128_kgrouped"
    path = tmp_path / "h100.csv"
    rows = [
        f"fp8_k_grouped,4096,7168,2048,16,{wide},700.0,H100,d",
        f"fp8_k_grouped,4096,7168,2048,4,{direct},7,H,d",
        f"fp8_grouped,4096,7168,2048,16,{wide},9.0,H100,d",  # a row of the wrong form: never taken
    ]
    path.write_text("mode,m,n,k,batch,name,tflops,gpu,date\n" + "\n".join(rows) + "\n")
    tuned.set_tuned_table(path)
    try:
        name, source = api.k_grouped_plan(H100, "e4m3", "e4m3", "fp32", 4096, 7168, 2200, 16)
        assert name == wide and str(path) in source
        # the experts' count picks between rows of one (M, N, tokens per expert)
        assert api.k_grouped_plan(H100, "e4m3", "e4m3", "fp32", 4096, 7168, 2200, 5)[0] == direct
        # other output types, and the other grouped forms, never take it
        default = api.k_grouped_variant("e4m3", "e4m3", "bf16")
        assert api.k_grouped_plan(H100, "e4m3", "e4m3", "bf16", 4096, 7168, 2048, 16) == (
            default,
            f"default ({source}, measured for e4m3/e4m3/fp32/1)",
        )
        name, source = api.grouped_plan(H100, "e4m3", "e4m3", "fp32", 1, 4096, 7168, 2048, 16)
        assert name == api.grouped_variant("e4m3", "e4m3", "fp32", 1) and "fp8_k_grouped kernel" in source
        assert explain("NVIDIA H100 80GB HBM3", "gemm_fp8", "k_grouped", (4096, 7168, 2048, 16))[2] == f"runs: {wide}"
    finally:
        tuned.set_tuned_table(None)


def test_splits_go_to_split_k_only_and_unknown_fields_are_named(tmp_path):
    configs = _load(
        tmp_path,
        {
            "family": "sm90_fp8_block",
            "modes": ["fp8_block"],
            "space": {"tile": {"m": [128], "n": [128], "k": [128]}, "scheduler": ["streamk", "splitk"], "splits": [3]},
        },
    )
    assert [(c.scheduler, c.splits) for c in configs] == [("streamk", 1), ("splitk", 3)]
    with pytest.raises(SpaceError, match="space.raster"):
        _load(tmp_path, {"family": "sm90_fp8_block", "modes": ["fp8_block"], "space": {"raster": ["m"]}})
    with pytest.raises(SpaceError, match="modes"):
        _load(tmp_path, {"family": "sm90_fp8_block", "modes": ["fp8_fast"], "space": {}})


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "h100.csv"
    path.write_text(f"mode,m,n,k,batch,name,tflops,gpu,date\nfp8_block,64,2112,7168,1,{SWAP_32},100.0,H100,d\n")
    tuned.set_tuned_table(path)
    yield path
    tuned.set_tuned_table(None)


def test_the_tuned_winner_runs_for_the_types_it_was_measured_with(table):
    name, source = api.dense_plan(H100, "e4m3", "e4m3", "bf16", 128, 48, 2048, 7168)
    assert name == SWAP_32 and str(table) in source
    # other types (not measured, not verified): the default for the size
    for types in (("e5m2", "e4m3", "bf16", 128), ("e4m3", "e4m3", "fp32", 128), ("e4m3", "e4m3", "bf16", 1)):
        name, source = api.dense_plan(H100, *types, 48, 2048, 7168)
        assert name == api.dense_variant(*types, 48) and "measured for e4m3/e4m3/bf16/128" in source
    # more rows than any entry was tuned for (a 64-token winner stretched over 100 or 4096): the default
    for m in (100, 4096):
        name, source = api.dense_plan(H100, "e4m3", "e4m3", "bf16", 128, m, 2112, 7168)
        assert name == api.dense_variant("e4m3", "e4m3", "bf16", 128, m) and source.startswith("default")
    assert explain("NVIDIA H100 80GB HBM3", "gemm_fp8", "block", (64, 2112, 7168))[2] == f"runs: {SWAP_32}"


def test_the_grouped_winner_runs_for_grouped_calls_of_its_types(tmp_path):
    pingpong = "fp8block_e4m3e4m3_bf16_64x128x128_c1x1_pp_sb128_grouped"
    path = tmp_path / "h100.csv"
    clustered = "fp8block_e4m3e4m3_bf16_128x128x128_c1x2_coop_sb128_grouped"
    rows = [f"fp8_grouped,128,4096,7168,8,{pingpong},500.0,H100,d", f"fp8_grouped,128,4096,7168,32,{clustered},5,H,d"]
    path.write_text("mode,m,n,k,batch,name,tflops,gpu,date\n" + "\n".join(rows) + "\n")
    tuned.set_tuned_table(path)
    try:
        name, source = api.grouped_plan(H100, "e4m3", "e4m3", "bf16", 128, 100, 4096, 7168, 8)
        assert name == pingpong and str(path) in source
        # the experts' count picks between rows of one (tokens, N, K)
        assert api.grouped_plan(H100, "e4m3", "e4m3", "bf16", 128, 100, 4096, 7168, 24)[0] == clustered
        default = api.grouped_variant("e4m3", "e4m3", "fp16", 128)
        assert api.grouped_plan(H100, "e4m3", "e4m3", "fp16", 128, 100, 4096, 7168)[0] == default
        # dense calls never take a grouped winner, nor grouped calls a dense one
        assert api.dense_plan(H100, "e4m3", "e4m3", "bf16", 128, 100, 4096, 7168)[0] != pingpong
        assert explain("NVIDIA H100 80GB HBM3", "gemm_fp8", "grouped", (128, 4096, 7168, 8))[2] == f"runs: {pingpong}"
        assert explain("NVIDIA H100 80GB HBM3", "gemm_fp8", "grouped", (128, 4096, 7168, 32))[2] == f"runs: {clustered}"
    finally:
        tuned.set_tuned_table(None)


def test_a_winner_that_does_not_load_falls_back_to_the_default_once(monkeypatch):
    calls = []

    def failing(config, device):
        calls.append(config.name)
        raise RuntimeError("building kernel failed")

    monkeypatch.setattr(api.native, "library", failing)
    api._loadable.cache_clear()
    default = api.dense_variant("e4m3", "e4m3", "bf16", 128, 64)
    try:
        with pytest.warns(RuntimeWarning, match="falling back to"):
            assert api._loadable(SWAP_32, default, 0) == default
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert api._loadable(SWAP_32, default, 0) == default
        assert calls == [SWAP_32]
    finally:
        api._loadable.cache_clear()


def test_torch_compile_calls_the_plan_while_tracing(table, monkeypatch):
    """fullgraph=True: the plan (table look-up, library load) is a constant to torch.compile, not traced."""
    import torch

    monkeypatch.setattr(api.device_info, "info", lambda index: H100)
    monkeypatch.setattr(api.native, "library", lambda config, device: None)
    api._planned.cache_clear()
    api._loadable.cache_clear()
    try:

        def planned(t):
            name = api._planned(0, "e4m3", "e4m3", "bf16", 128, 48, 2048, 7168, tuned.generation())
            return t * (2 if name == SWAP_32 else 3)

        assert torch.equal(torch.compile(planned, fullgraph=True)(torch.ones(2)), torch.full((2,), 2.0))
    finally:
        api._planned.cache_clear()
        api._loadable.cache_clear()


def test_prebuild_builds_the_block_defaults_and_the_shipped_winners():
    names = {c.name for c in prebuild_configs(["fp8_block"])}
    assert {c.name for _, c in api.DENSE_BY_M} <= names
    assert api.grouped_variant("e4m3", "e4m3", "bf16", 128) in names
    rows = (ROOT / "cutlass_ext" / "tuned" / "h100.csv").read_text().splitlines()  # the shipped winners
    winners = {row.split(",")[5] for row in rows[1:] if row.startswith("fp8_block,")}
    assert winners and winners <= names


def test_the_sweep_hands_a_ctypes_familys_library_to_native_not_to_the_binding(tmp_path, monkeypatch):
    """The sweep builds libraries itself and registers them: a ctypes family's is what native.library returns
    (nothing built again, the torch binding never asked)."""
    import shutil
    import subprocess

    import torch

    from cutlass_ext import native, registry
    from cutlass_ext.families.sm90_fp8.config import Fp8Config
    from cutlass_ext.once import OnceMap

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    source, library = tmp_path / "tiny.c", tmp_path / "libtiny.so"
    source.write_text("int cutlass_ext_tiny(void) { return 7; }\n")
    subprocess.run([compiler, "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    monkeypatch.setattr(registry, "device_arch", lambda device: "90a")
    monkeypatch.setattr(registry, "build_one", lambda *_: pytest.fail("built again"))
    monkeypatch.setattr(registry, "binding", lambda: pytest.fail("asked the torch binding"))
    monkeypatch.setattr(registry, "_libraries", OnceMap())  # the process's own maps stay as they were
    monkeypatch.setattr(registry, "_registered", OnceMap())
    config = Fp8BlockConfig.from_name(SWAP_32)
    registry.register_library([config], library, torch.device("cuda", 0))
    assert native.library(config, torch.device("cuda", 0)).cutlass_ext_tiny() == 7
    loaded = []
    monkeypatch.setattr(registry, "binding", lambda: loaded.append("binding"))
    monkeypatch.setattr(registry, "_load_into_binding", lambda name, arch, path: loaded.append((name, arch)))
    binding_config = Fp8Config()
    registry.register_library([binding_config], library, torch.device("cuda", 0))
    assert loaded == ["binding", (binding_config.name, "90a")]


def test_the_cublas_block_peer_finds_the_weight_scale_layout_torch_takes_once(monkeypatch):
    """torch._scaled_mm's blockwise path takes one of two weight-scale layouts depending on the torch version: the
    peer tries both on its first call and keeps the one that ran; a shape neither takes raises."""
    import torch

    from cutlass_ext import peers_fp8

    calls = []

    def scaled_mm(a, b, scale_a, scale_b, out_dtype):
        calls.append(scale_b.is_contiguous())
        if not scale_b.is_contiguous():
            raise RuntimeError("Invalid scaling configuration.")
        return torch.zeros(a.shape[0], b.shape[1], dtype=out_dtype)

    monkeypatch.setattr(torch, "_scaled_mm", scaled_mm)
    run = peers_fp8.scaled_mm_block()
    a, b = torch.zeros(4, 256), torch.zeros(384, 256)
    scale_a, scale_b = torch.ones(4, 2), torch.ones(3, 2)
    assert run(a, b, scale_a, scale_b).shape == (4, 384)
    assert run(a, b, scale_a, scale_b).shape == (4, 384)
    assert calls == [False, True, True]  # the transposed view refused once, the contiguous copy kept
    monkeypatch.setattr(torch, "_scaled_mm", lambda *args, **kwargs: (_ for _ in ()).throw(RuntimeError("no")))
    with pytest.raises(RuntimeError, match="^no$"):  # both layouts refused: the peer's own error
        peers_fp8.scaled_mm_block()(a, b, scale_a, scale_b)
