"""GEMMul8 (RIKEN-RCCS/GEMMul8: Ozaki scheme II on INT8 through cuBLAS) as a ctypes peer of `cutlass_ext.ozaki`.

Build on a machine without a GPU (its library is one translation unit that compiles for ~10 minutes), then carry
`peers/gemmul8/libgemmul8_peer.so` to the GPU machine:

    python python/ozaki_gemmul8.py --source <GEMMul8 checkout> --cublas <dir with include/ and lib/ of cuBLAS 13>

`--cublas` defaults to the `nvidia/cu13` folder of an installed nvidia-cublas wheel. The library links cuBLAS by
its soname; at run time it uses the copy torch has loaded. `load()` gives `sgemm(a, b, moduli, fast)` on row-major
CUDA tensors.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import subprocess
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "peers" / "gemmul8"
LIBRARY = OUT / "libgemmul8_peer.so"
SHIM = ROOT / "kernels" / "ozaki_gemmul8_peer.cu"


def _default_cublas() -> Path | None:
    spec = importlib.util.find_spec("nvidia")
    for location in spec.submodule_search_locations if spec else []:
        if (Path(location) / "cu13" / "include" / "cublas_v2.h").is_file():
            return Path(location) / "cu13"
    return None


def build(source: Path, cublas: Path, arch: str = "90", nvcc: str = "nvcc") -> Path:
    """Compile GEMMul8's library object and our C interface, link them into LIBRARY (skips a step whose output
    exists: the library object is the ten-minute one)."""
    OUT.mkdir(parents=True, exist_ok=True)
    gemmul8 = source / "GEMMul8" if (source / "GEMMul8").is_dir() else source
    includes = [f"-I{cublas / 'include'}", f"-I{gemmul8 / 'include'}"]
    flags = [
        "-std=c++20",
        "-O3",
        "-diag-suppress",
        "177",
        "-Xcompiler",
        "-fPIC",
        f"-gencode=arch=compute_{arch},code=sm_{arch}",
    ]
    steps = [
        (OUT / "gemmul8.o", [nvcc, *flags, *includes, "-c", str(gemmul8 / "src" / "gemmul8.cu")]),
        (OUT / "peer.o", [nvcc, *flags, *includes, "-c", str(SHIM)]),
    ]
    for target, command in steps:
        if not target.is_file():
            subprocess.run([*command, "-o", str(target) + ".partial"], check=True)
            Path(str(target) + ".partial").rename(target)
    link = [nvcc, "-shared", "-o", str(LIBRARY), str(OUT / "gemmul8.o"), str(OUT / "peer.o"), f"-L{cublas / 'lib'}"]
    subprocess.run([*link, "-l:libcublas.so.13", "-l:libcublasLt.so.13", "-lcudart"], check=True)
    return LIBRARY


class Gemmul8:
    """GEMMul8's SGEMM emulation on row-major float32 CUDA tensors."""

    def __init__(self, library: Path = LIBRARY):
        if not library.is_file():
            raise FileNotFoundError(f"{library} is missing: build it with python/ozaki_gemmul8.py")
        torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")  # cuBLAS loaded before the library needs it
        cublas = _default_cublas()  # torch's own copy, found by its soname when the library loads
        for name in ("libcublasLt.so.13", "libcublas.so.13"):
            if cublas is not None and (cublas / "lib" / name).is_file():
                ctypes.CDLL(str(cublas / "lib" / name), mode=ctypes.RTLD_GLOBAL)
        self._library = ctypes.CDLL(str(library))
        self._library.gemmul8_sgemm_workspace_size.restype = ctypes.c_size_t
        self._library.gemmul8_sgemm_workspace_size.argtypes = [ctypes.c_size_t] * 3 + [ctypes.c_uint]
        self._library.gemmul8_sgemm.argtypes = (
            [ctypes.c_size_t] * 3
            + [ctypes.c_void_p, ctypes.c_size_t] * 3
            + [ctypes.c_uint, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        )
        self._workspaces: dict[tuple, torch.Tensor] = {}

    def sgemm(self, a: torch.Tensor, b: torch.Tensor, moduli: int = 8, fast: bool = True) -> torch.Tensor:
        """a (m, k) @ b (k, n), both row-major contiguous: GEMMul8's column-major Cᵀ = Bᵀ·Aᵀ on the same memory."""
        (m, k), n = a.shape, b.shape[1]
        if not (a.is_contiguous() and b.is_contiguous()):
            raise ValueError("a and b must be contiguous row-major tensors")
        key = (m, n, k, moduli)
        if key not in self._workspaces:
            size = self._library.gemmul8_sgemm_workspace_size(n, m, k, moduli)
            self._workspaces[key] = torch.empty(size, dtype=torch.uint8, device=a.device)
        out = torch.empty((m, n), dtype=torch.float32, device=a.device)
        stream = torch.cuda.current_stream(a.device).cuda_stream
        status = self._library.gemmul8_sgemm(
            n,
            m,
            k,
            b.data_ptr(),
            n,
            a.data_ptr(),
            k,
            out.data_ptr(),
            n,
            moduli,
            int(fast),
            self._workspaces[key].data_ptr(),
            stream,
        )
        if status != 0:
            raise RuntimeError(f"GEMMul8 failed with CUDA error {status}")
        return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, required=True, help="a GEMMul8 checkout")
    parser.add_argument("--cublas", type=Path, default=_default_cublas(), help="cuBLAS 13 headers and libraries")
    parser.add_argument("--arch", default="90")
    args = parser.parse_args(argv)
    if args.cublas is None:
        parser.error("--cublas: no nvidia-cublas wheel found; name a folder with include/ and lib/")
    print(f"built {build(args.source, args.cublas, args.arch)}")


if __name__ == "__main__":
    main()
