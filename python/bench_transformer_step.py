"""The GEMMs of a transformer training step, through dispatch, beside cuBLAS SGEMM and TF32, eager and graph-replayed.

    python python/bench_transformer_step.py --out sweeps/results/h200/transformer_step.csv
    python python/bench_transformer_step.py --modes tf32tf32 halfhalf int8x8 --peers cutlass_3xtf32 triton_tf32x3 \
        gemmul8 --out …   # the FP32-accurate contenders (GEMMul8 with peers/gemmul8 built)

For each linear layer of a block (QKV, attention output, MLP up and down) at batch·sequence tokens T, the three
products of a training step: forward Y = X·Wᵀ (T x out x in), input gradient dX = dY·W (T x in x out) and weight
gradient dW = dYᵀ·X (out x in x T: deep K when T is large). These are the skinny, rectangular and deep-K shapes a
tuned table of cubes does not hold. Eager times are wall time per call of calls back to back (host cost included);
graph times are CUDA-graph replays (GPU time alone). Each row also holds the relative residual against an FP64
product of the first input set. Prints the ratio of each contender to cuBLAS SGEMM.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import pandas as pd
import torch

import cutlass_ext as ext
from cutlass_ext import benchmark, numerics
from cutlass_ext.gemm import check_mode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ozaki_gemmul8 import LIBRARY, Gemmul8  # noqa: E402
from script_device import checked, require_cuda  # noqa: E402

TOKENS = (512, 2048, 8192)
MODES = ("tf32tf32", "halfhalf")
PEERS = ("cutlass_3xtf32", "triton_tf32x3", "gemmul8")


def layer_products(hidden: int, mlp: int, tokens: int):
    """(layer, product, m, n, k) of one block's training-step GEMMs."""
    for layer, (inputs, outputs) in {
        "qkv": (hidden, 3 * hidden),
        "out_proj": (hidden, hidden),
        "mlp_up": (hidden, 2 * mlp),
        "mlp_down": (mlp, hidden),
    }.items():
        yield layer, "forward", tokens, outputs, inputs
        yield layer, "grad_input", tokens, inputs, outputs
        yield layer, "grad_weight", outputs, inputs, tokens


def _as_given(a, b):
    return a, b


def contenders(modes, peers):
    """(name, make, torch's FP32 matmul precision while it runs, capturable): make(input_sets) -> (run, prepare),
    prepare laying out an input set outside the timed calls (CUTLASS's example reads B column-major; Triton picks
    its tile on these inputs). GEMMul8 is not capturable (its calls fail inside a CUDA graph capture, and the
    failed capture leaves the process's CUDA state unusable): no graph time."""
    yield "cublas_fp32", lambda sets: (torch.mm, _as_given), "ieee", True
    yield "cublas_tf32", lambda sets: (torch.mm, _as_given), "tf32", True
    for mode in modes:
        yield mode, lambda sets, mode=mode: (lambda a, b: ext.gemm(a, b, mode=mode), _as_given), "ieee", True
    if {"cutlass_3xtf32", "triton_tf32x3"} & set(peers):
        from cutlass_ext import peers as peer_kernels  # imports triton
    if "cutlass_3xtf32" in peers:
        yield "cutlass_3xtf32", lambda sets: peer_kernels.cutlass_3xtf32()[1:], "ieee", True
    if "triton_tf32x3" in peers:
        yield (
            "triton_tf32x3",
            lambda sets: (peer_kernels.triton_tf32x3(sets, repeats=6)[1], _as_given),
            "ieee",
            True,
        )
    if "gemmul8" in peers:
        if not LIBRARY.is_file():
            print(f"GEMMul8 skipped: {LIBRARY} is missing (python/ozaki_gemmul8.py builds it)")
            return
        gemmul8 = Gemmul8()
        for moduli in (7, 8):
            yield (
                f"gemmul8_{moduli}_fast",
                lambda sets, moduli=moduli: (lambda a, b: gemmul8.sgemm(a, b, moduli, True), _as_given),
                "ieee",
                False,
            )


def eager_us(run, input_sets, calls: int) -> float:
    for inputs in input_sets[:2]:
        run(*inputs)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(calls):
        run(*input_sets[i % len(input_sets)])
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e6 / calls


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--mlp", type=int, default=11008, help="MLP width (the up projection is gate and up: 2x)")
    parser.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument(
        "--modes", nargs="+", type=checked(check_mode), default=list(MODES), help="ext.gemm modes (int8x<moduli> too)"
    )
    parser.add_argument("--peers", nargs="*", default=[], choices=PEERS, help="FP32-accurate peers to time beside")
    args = parser.parse_args(argv)
    require_cuda("bench_transformer_step")
    chosen = list(contenders(args.modes, args.peers))
    rows = []
    for tokens in args.tokens:
        for layer, product, m, n, k in layer_products(args.hidden, args.mlp, tokens):
            sets = benchmark.rotation_count(4 * (m * k + k * n + m * n))
            input_sets = [(torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")) for _ in range(sets)]
            exact = input_sets[0][0].double() @ input_sets[0][1].double()
            for name, make, precision, capturable in chosen:
                previous = torch.backends.cuda.matmul.fp32_precision
                torch.backends.cuda.matmul.fp32_precision = precision
                try:
                    run, prepare = make(input_sets)
                    prepared = [prepare(*inputs) for inputs in input_sets]
                    relres = numerics.relative_residual(run(*prepared[0]), exact)
                    eager = eager_us(run, prepared, args.calls)
                    graph = float("nan")
                    if capturable:
                        graph = benchmark.graph_time_us(run, prepared, calls=min(args.calls, 5), repeats=3)
                finally:
                    torch.backends.cuda.matmul.fp32_precision = previous
                del prepared
                row = {"tokens": tokens, "layer": layer, "product": product, "m": m, "n": n, "k": k, "name": name}
                row |= {"eager_us": round(eager, 2), "graph_us": round(graph, 2), "relres": relres}
                row |= {
                    "eager_tflops": round(2 * m * n * k / eager / 1e6, 2),
                    "graph_tflops": round(2 * m * n * k / graph / 1e6, 2),
                }
                rows.append(row)
                print(
                    f"T={tokens:6d} {layer:8s} {product:11s} {m}x{n}x{k} {name:12s} "
                    f"eager {eager:9.1f} us  graph {graph:9.1f} us  {row['graph_tflops']:7.1f} TFLOP/s  "
                    f"relres {relres:.1e}",
                    flush=True,
                )
            del input_sets, exact
            torch.cuda.empty_cache()
    table = pd.DataFrame(rows).assign(**benchmark.environment(), command=shlex.join(["python"] + sys.argv))
    key = ["tokens", "layer", "product"]
    sgemm = table[table["name"] == "cublas_fp32"].set_index(key)
    for column in ("eager_us", "graph_us"):
        table[f"vs_sgemm_{column.removesuffix('_us')}"] = (
            table.set_index(key).index.map(sgemm[column]) / table[column]
        ).round(3)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    summary = table.groupby("name")[["vs_sgemm_eager", "vs_sgemm_graph", "relres"]].agg(["min", "median", "max"])
    print(summary.to_string())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
