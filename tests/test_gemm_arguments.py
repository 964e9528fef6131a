"""ext.gemm rejects bad arguments with errors that name them (checked before anything is built)."""

import importlib

import pytest
import torch

import cutlass_ext as ext


@pytest.mark.parametrize(
    "a, b, kwargs, error, message",
    [
        (torch.ones(4, 4), torch.ones(4, 4), {"mode": "fp64"}, ValueError, "mode='fp64'"),
        (torch.ones(4, 4, dtype=torch.float16), torch.ones(4, 4), {}, TypeError, "a must be float32"),
        (torch.ones(4, 4), torch.ones(4, 4, dtype=torch.float64), {}, TypeError, "b must be float32"),
        (torch.ones(4, 4), torch.ones(4, 4), {}, ValueError, "a must be a CUDA tensor"),
        ([[1.0]], torch.ones(4, 4), {}, TypeError, "a must be a torch.Tensor"),
    ],
)
def test_bad_arguments_are_named(a, b, kwargs, error, message):
    with pytest.raises(error, match=message):
        ext.gemm(a, b, **kwargs)


def test_schema_and_fake_kernel_exist_without_a_build():
    schema = torch.ops.cutlass_ext.gemm.default._schema
    assert str(schema) == (
        "cutlass_ext::gemm(Tensor a, Tensor b, Tensor? c, float alpha, float beta, str[] variants) -> Tensor"
    )


def test_linear_rejects_unknown_mode():
    with pytest.raises(ValueError, match="mode='bf16'"):
        ext.nn.Linear(4, 4, mode="bf16")


def test_sm90_bias_variants_are_twins_whose_plain_names_are_unchanged():
    from cutlass_ext.families.sm90.config import DEFAULTS, Sm90Config

    gemm_module = importlib.import_module("cutlass_ext.gemm")
    plain = [config.name for config in DEFAULTS.values()]
    assert plain == ["tf32tf32_sm90_128x128x32_c1x1_coop_p1", "halfhalf_sm90_128x128x64_c1x1_coop_p1"]
    twins = gemm_module._with_bias_epilogue(tuple(plain + ["halfhalf_sm90_128x128x64_c2x1_coop_p2_w4"]))
    assert twins == [name + "_bias" for name in plain] + ["halfhalf_sm90_128x128x64_c2x1_coop_p2_w4_bias"]
    assert all(Sm90Config.from_name(name).epilogue == "bias" for name in twins)
    assert all(Sm90Config.from_name(name).epilogue == "plain" for name in plain)


@pytest.mark.parametrize("alpha", [1, 1.0, 2])
def test_a_bias_with_an_int_or_float_alpha_is_checked_once_per_signature(monkeypatch, alpha):
    # nn.Linear's call (gemm's default alpha is the int 1) must not run the per-call epilogue checks
    gemm_module = importlib.import_module("cutlass_ext.gemm")
    launched = []
    monkeypatch.setattr(gemm_module, "_check_epilogue", lambda *args: pytest.fail("per-call epilogue check"))
    monkeypatch.setattr(gemm_module, "_launch", lambda plan, a, b, bias, alpha, scale, mode: launched.append(alpha))
    a, b, bias = torch.ones(4, 3), torch.ones(3, 5), torch.ones(5)
    gemm_module._kernel_call(a, b, "tf32tf32", bias, alpha, 0, ("sm80", ["variant"]))
    assert launched == [float(alpha)] and type(launched[0]) is float


def test_a_bool_alpha_is_rejected_with_a_bias():
    gemm_module = importlib.import_module("cutlass_ext.gemm")
    a, b, bias = torch.ones(4, 3), torch.ones(3, 5), torch.ones(5)
    with pytest.raises(TypeError, match="alpha must be a real number"):
        gemm_module._kernel_call(a, b, "tf32tf32", bias, True, 0, ("sm80", ["variant"]))
