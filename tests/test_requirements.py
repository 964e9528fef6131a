"""The version floors, with the versions found mocked: each check passes at its floor and names what it found
below it."""

import re

import pytest

from cutlass_ext import requirements, toolchain

NVCC_13 = """nvcc: NVIDIA (R) Cuda compiler driver
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""
NVCC_11 = """nvcc: NVIDIA (R) Cuda compiler driver
Cuda compilation tools, release 11.8, V11.8.89
Build cuda_11.8.r11.8/compiler.31833905_0
"""


@pytest.mark.parametrize("version", ["2.9.0", "2.9.0+cu128", "2.11.0+cu130", "2.13.0+cpu", "3.0.0a0"])
def test_torch_at_or_above_the_floor_passes(version):
    requirements.check_torch(version)


@pytest.mark.parametrize("version", ["2.8.0+cu126", "2.4.1", "1.13.1"])
def test_torch_below_the_floor_names_the_version_found(version):
    with pytest.raises(ImportError, match=r"torch >= 2\.9.*found torch " + re.escape(version)):
        requirements.check_torch(version)


def test_the_installed_torch_passes_at_import():
    requirements.check_torch()


def test_nvcc_release_is_read_from_either_line():
    assert requirements.nvcc_release(NVCC_13) == (13, 0)
    assert requirements.nvcc_release("Build cuda_12.4.r12.4/compiler.34097967_0") == (12, 4)
    with pytest.raises(RuntimeError, match="cannot read the CUDA release"):
        requirements.nvcc_release("clang version 18")


def test_nvcc_below_the_floor_fails_naming_its_release_and_path():
    assert requirements.check_nvcc(NVCC_13) == (13, 0)
    with pytest.raises(RuntimeError, match=r"nvcc >= 12\.0.*/opt/cuda-11\.8/bin/nvcc is release 11\.8"):
        requirements.check_nvcc(NVCC_11, "/opt/cuda-11.8/bin/nvcc")


def test_the_build_checks_nvcc_when_it_asks_its_version(monkeypatch):
    monkeypatch.setattr(toolchain, "nvcc", lambda: "/opt/cuda-11.8/bin/nvcc")

    class Completed:
        stdout = NVCC_11

    monkeypatch.setattr(toolchain.subprocess, "run", lambda *args, **kwargs: Completed())
    toolchain.nvcc_version_text.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"release 11\.8"):
            toolchain.nvcc_version()
    finally:
        toolchain.nvcc_version_text.cache_clear()


@pytest.mark.parametrize(
    "driver, toolkit",
    [((13, 0), (13, 0)), ((13, 2), (13, 0)), ((13, 0), (13, 1)), ((12, 4), (12, 8)), ((12, 0), None)],
)
def test_a_driver_of_the_toolkits_major_version_runs_its_kernels(driver, toolkit):
    requirements.check_driver_version(driver, toolkit)


@pytest.mark.parametrize("driver, toolkit", [((12, 8), (13, 0)), ((11, 8), (12, 0)), ((11, 8), None)])
def test_an_older_driver_fails_naming_both_versions(driver, toolkit):
    found = ".".join(map(str, driver))
    with pytest.raises(RuntimeError, match=rf"driver supports CUDA {found}.*update the NVIDIA driver"):
        requirements.check_driver_version(driver, toolkit)


def test_driver_version_reads_cuDriverGetVersion(monkeypatch):
    class Library:
        @staticmethod
        def cuDriverGetVersion(pointer):
            pointer._obj.value = 12080
            return 0

    monkeypatch.setattr(requirements.ctypes, "CDLL", lambda name: Library())
    assert requirements.driver_version() == (12, 8)


def test_a_missing_driver_library_is_named():
    with pytest.raises(RuntimeError, match="libcuda_missing.so.1 cannot be loaded"):
        requirements.driver_version("libcuda_missing.so.1")


def test_the_driver_check_runs_once_at_first_gpu_use(monkeypatch):
    asked = []
    monkeypatch.setattr(requirements, "driver_version", lambda: asked.append(1) or (12, 8))

    def nvcc_version():
        return "Build cuda_13.0.r13.0/compiler.36424714_0"

    requirements.check_driver.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"CUDA 12\.8.*nvcc 13\.0"):
            requirements.check_driver(nvcc_version)
        with pytest.raises(RuntimeError):
            requirements.check_driver(nvcc_version)  # a failed check is asked again, not cached as passed
    finally:
        requirements.check_driver.cache_clear()
    assert len(asked) == 2


def test_without_nvcc_the_driver_floor_alone_applies(monkeypatch):
    monkeypatch.setattr(requirements, "driver_version", lambda: (12, 0))

    def no_nvcc():
        raise FileNotFoundError("nvcc not found")

    requirements.check_driver.cache_clear()
    try:
        requirements.check_driver(no_nvcc)
    finally:
        requirements.check_driver.cache_clear()


def test_import_does_not_ask_the_driver_or_nvcc():
    import subprocess
    import sys

    code = (
        "import cutlass_ext.requirements as r, cutlass_ext.toolchain as t, cutlass_ext;"
        "print(r.check_driver.cache_info().currsize, t.nvcc_version_text.cache_info().currsize)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["0", "0"]


def test_the_first_kernel_for_a_device_checks_the_driver(monkeypatch):
    """registry.build_one, which every first use of a variant on a device goes through before anything is built or
    loaded (outside torch.compile's tracing), raises the driver's error."""
    from cutlass_ext import build, registry

    def old_driver(nvcc_version):
        raise RuntimeError("cutlass_ext: the CUDA driver supports CUDA 12.2, but ...")

    monkeypatch.setattr(requirements, "check_driver", old_driver)
    monkeypatch.setattr(build, "build_libraries", lambda *args, **kwargs: pytest.fail("built before the check"))
    with pytest.raises(RuntimeError, match=r"driver supports CUDA 12\.2"):
        registry.build_one(object(), "90a")
