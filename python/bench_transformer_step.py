"""The GEMMs of a transformer training step, through dispatch, beside cuBLAS SGEMM and TF32, eager and graph-replayed.

    python python/bench_transformer_step.py --out sweeps/results/h200/transformer_step.csv

For each linear layer of a block (QKV, attention output, MLP up and down) at batch·sequence tokens T, the three
products of a training step: forward Y = X·Wᵀ (T x out x in), input gradient dX = dY·W (T x in x out) and weight
gradient dW = dYᵀ·X (out x in x T: deep K when T is large). These are the skinny, rectangular and deep-K shapes a
tuned table of cubes does not hold. Eager times are wall time per call of calls back to back (host cost included);
graph times are CUDA-graph replays (GPU time alone). Prints the ratio of each mode to cuBLAS SGEMM.
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
from cutlass_ext import benchmark

TOKENS = (512, 2048, 8192)
MODES = ("tf32tf32", "halfhalf")


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


def contenders():
    """(name, run, torch's FP32 matmul precision while it runs)."""
    yield "cublas_fp32", torch.mm, "ieee"
    yield "cublas_tf32", torch.mm, "tf32"
    for mode in MODES:
        yield mode, lambda a, b, mode=mode: ext.gemm(a, b, mode=mode), "ieee"


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
    args = parser.parse_args(argv)
    rows = []
    for tokens in args.tokens:
        for layer, product, m, n, k in layer_products(args.hidden, args.mlp, tokens):
            sets = benchmark.rotation_count(4 * (m * k + k * n + m * n))
            input_sets = [(torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")) for _ in range(sets)]
            for name, run, precision in contenders():
                previous = torch.backends.cuda.matmul.fp32_precision
                torch.backends.cuda.matmul.fp32_precision = precision
                try:
                    eager = eager_us(run, input_sets, args.calls)
                    graph = benchmark.graph_time_us(run, input_sets, calls=min(args.calls, 5), repeats=3)
                finally:
                    torch.backends.cuda.matmul.fp32_precision = previous
                row = {"tokens": tokens, "layer": layer, "product": product, "m": m, "n": n, "k": k, "name": name}
                row |= {"eager_us": round(eager, 2), "graph_us": round(graph, 2)}
                row |= {"graph_tflops": round(2 * m * n * k / graph / 1e6, 2)}
                rows.append(row)
                print(
                    f"T={tokens:6d} {layer:8s} {product:11s} {m}x{n}x{k} {name:12s} "
                    f"eager {eager:9.1f} us  graph {graph:9.1f} us  {row['graph_tflops']:7.1f} TFLOP/s",
                    flush=True,
                )
            del input_sets
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
    summary = table.groupby("name")[["vs_sgemm_eager", "vs_sgemm_graph"]].agg(["min", "median", "max"])
    print(summary.to_string())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
