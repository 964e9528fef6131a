"""cutlass_ext: kernels are compiled at first use (or by `python -m cutlass_ext.build --prebuild`), not here."""

from setuptools import find_packages, setup

setup(
    name="cutlass_ext",
    version="0.1.0",
    description="CUTLASS GEMM kernels for PyTorch: FP32-accurate GEMM on Tensor Cores, FP8, accumulation studies",
    license="BSD-3-Clause",
    python_requires=">=3.10",
    packages=find_packages(include=["cutlass_ext", "cutlass_ext.*"]) + ["cutlass_ext.kernels"],
    # The shared CUDA sources live at the top level (kernels/ holds no Python) and ship inside the package; each
    # family's templates ship from its folder.
    package_dir={"cutlass_ext.kernels": "kernels"},
    package_data={
        "cutlass_ext.kernels": ["*.h", "*.hpp", "*.cuh", "*.in", "*.cpp"],
        "cutlass_ext": ["tuned/*.csv", "families/*/*.in", "*/*.in"],
    },
    install_requires=[
        "torch>=2.9",  # torch.backends.cuda.matmul.fp32_precision
        "nvidia-cutlass==4.2.0.0",  # its C++ headers are the CUTLASS the kernels are built against
        "ninja",
        "filelock",
        "PyYAML",
        "pandas",
        "nvidia-ml-py",
        "tqdm",
    ],
    # tests import the Triton peers
    extras_require={
        "test": ["pytest", "hypothesis", "triton", "ruff", "scikit-learn", "matplotlib"],
        "report": ["matplotlib"],
    },
)
