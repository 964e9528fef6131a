"""Block-scaled FP8 GEMM benchmark at DeepSeek-V3's shapes, dense and mixture-of-experts, in one run:

    python python/bench_fp8_block.py --out sweeps/results/h200/fp8_block.csv

Dense rows: (N, K) of DeepSeek-V3's projections x M; 1x128 activation and 128x128 weight scales, e4m3 inputs,
bf16 output. Contenders: `ext.gemm_fp8` (the block kernel dispatch picks; `--variants` adds named ones),
`torch._scaled_mm` with the same block scales where this torch and cuBLAS take them, and with `--deepgemm`
DeepGEMM's `fp8_gemm_nt` (built by python/deepgemm_build.py; its JIT compiles a kernel per shape on first
use), launched plainly and with programmatic dependent launch (`DeepGEMM native pdl`, its `set_pdl(True)`), each
contender handed the activation scales in the layout it reads (ours K-major as quantize_fp8 writes them, DeepGEMM
its M-major TMA-aligned one, laid out before the timed calls: dense and MoE rows named `DeepGEMM` without
`native`, from runs until 2026-11-29, were handed K-major scales and timed with its per-call transposition; the
weight-gradient rows' `DeepGEMM` is handed its M-/N-major layout). MoE rows: G experts x M
tokens each, (N, K) of the experts' up and down projections; ours contiguous
(offsets) and masked (counts), DeepGEMM's contiguous (its row-to-expert index) and masked layouts, and
`torch._scaled_grouped_mm` with row-wise scales (timing only: other scales) where it runs. Weight-gradient rows
(`--wgrad`): G experts' D_g (M, N) += over their tokens (K, padded to 128 per expert), 1x128 scales along K on
both operands, FP32 accumulated in place: ours (`ext.k_grouped_gemm_fp8`) and DeepGEMM's
`k_grouped_fp8_gemm_nt_contiguous`, at DeepGEMM's own k-grouped cases.
Each row is the GPU's time of one call replayed from a CUDA graph (`us`, inputs rotated past L2), TFLOP/s of the
useful work, and relres = |D - D_64|_F / |D_64|_F against the FP64 product of the dequantized inputs over the
first rows. A contender that fails records its error in `note`. A PNG of TFLOP/s beside the CSV.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from pathlib import Path

import pandas as pd
import torch
from script_device import require_cuda

import cutlass_ext as ext
from cutlass_ext import benchmark, fp8_block, peers_fp8
from cutlass_ext.build import build_libraries
from cutlass_ext.fp8_block.variant import config_of

DENSE_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
DENSE_M = [1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
MOE_GROUPS = [8, 32]
MOE_M = [64, 128, 256, 512]
MOE_NK = [(4096, 7168), (7168, 2048)]
# The weight-gradient form (groups along K): DeepGEMM's own k-grouped cases, (G, M, N, mean tokens per expert)
WGRAD = [
    (4, 4096, 7168, 8192),
    (4, 7168, 2048, 8192),
    (8, 4096, 7168, 4096),
    (8, 7168, 2048, 4096),
    (16, 4096, 7168, 2048),
    (16, 7168, 2048, 2048),
]
REFERENCE_ROWS = 64
# Named variants timed beside the dispatch's choice (e4m3, bf16 output, 128x128 weight blocks): whole tiles without
# stream-K, TMA multicast of the weights, 64-row ping-pong tiles, M-major activation scales, 256-row tiles (each
# warpgroup's rows promoted 64 at a time) multicasting the activations, swapped operands for decode.
DENSE_VARIANTS = [
    "fp8block_e4m3e4m3_bf16_128x128x128_c1x1_coop_sb128",
    "fp8block_e4m3e4m3_bf16_128x128x128_c2x1_coop_sb128",
    "fp8block_e4m3e4m3_bf16_64x128x128_c1x1_pp_sb128",
    "fp8block_e4m3e4m3_bf16_128x128x128_c1x1_coop_sb128_am",
    "fp8block_e4m3e4m3_bf16_256x128x128_c1x2_coop_sb128_am",
    "fp8block_e4m3e4m3_bf16_128x32x128_c1x1_coop_sb128_streamk_swap",
    "fp8block_e4m3e4m3_bf16_128x64x128_c1x1_coop_sb128_streamk_swap",
]
GROUPED_VARIANTS = ["fp8block_e4m3e4m3_bf16_64x128x128_c1x1_pp_sb128_grouped"]


def relres(out: torch.Tensor, reference: torch.Tensor) -> float:
    return ((out.double() - reference).norm() / reference.norm()).item()


def quantize_sets(m, n, k, groups, seed):
    """Rotated input sets (a8, b8, scale_a, scale_b) past L2: a (m, k), b (n, k) or (groups, n, k)."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    b_shape = (n, k) if groups is None else (groups, n, k)
    count = benchmark.rotation_count(m * k + (groups or 1) * n * k + 2 * m * n)
    sets = []
    for _ in range(count):
        a8, scale_a = ext.quantize_fp8(
            torch.randn(m, k, generator=generator, device="cuda"), granularity="block", block=(1, 128)
        )
        b8, scale_b = ext.quantize_fp8(
            torch.randn(b_shape, generator=generator, device="cuda") / k**0.5, granularity="block", block=(128, 128)
        )
        sets.append((a8, b8, scale_a, scale_b))
    return sets


def dense_contenders(variants):
    """(label, run, prepare): `prepare` lays out the activation scales before the timed calls (None: K-major, as
    quantize_fp8 writes them), as the quantizer feeding that contender would write them."""
    yield "ours", lambda a8, b8, sa, sb: ext.gemm_fp8(a8, b8, sa, sb), None
    for variant in variants:
        run = lambda a8, b8, sa, sb, v=variant: fp8_block.gemm_fp8_block(a8, b8, sa, sb, variant=v)  # noqa: E731
        yield f"ours {variant}", run, fp8_block.api.m_major if variant.endswith("_am") else None

    yield "torch._scaled_mm block", peers_fp8.scaled_mm_block(), None
    deep_gemm = _deep_gemm()
    if deep_gemm is not None:

        def deepgemm(a8, b8, sa, sb, pdl=False):
            out = torch.empty(a8.shape[0], b8.shape[0], dtype=torch.bfloat16, device="cuda")
            deep_gemm.set_pdl(pdl)  # read at each launch (captured launches keep it)
            deep_gemm.fp8_gemm_nt((a8, sa), (b8, sb), out, disable_ue8m0_cast=True)
            deep_gemm.set_pdl(False)
            return out

        # its own layout (M-major, TMA-aligned), which its users' quantizers write: handed K-major scales it
        # transposes them in a kernel of its own at every call (1.6-2.4 us on the H200)
        native = deep_gemm.get_mn_major_tma_aligned_tensor
        yield "DeepGEMM native", deepgemm, native
        # its kernels wait for the grid before them too; launched programmatically they start while it drains
        yield "DeepGEMM native pdl", lambda a8, b8, sa, sb: deepgemm(a8, b8, sa, sb, pdl=True), native


def _failure(error: Exception) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"


def measure_shape(contenders, environment, repeats, rounds):
    """Rows of one shape's contenders, each (label, run, sets, first, flops, extra): `first(run)` calls it once and
    returns its relres (or None). The timing then goes round-robin: `rounds` rounds, every contender once in each,
    and each row's time is the median of its rounds, so that a clock or power shift while the shape is timed reaches
    every contender alike instead of the one timed then. A contender that cannot run the case records why."""
    rows, live = [], []
    for label, run, sets, first, flops, extra in contenders:
        row = {**environment, "contender": label, **extra, "us": None, "tflops": None, "relres": None, "note": ""}
        try:
            row["relres"] = first(run)
            live.append((row, run, sets, flops, []))
        except Exception as error:
            row["note"] = _failure(error)
        torch.cuda.synchronize()
        rows.append(row)
    for _ in range(rounds):
        for row, run, sets, _, times in live:
            if not row["note"]:
                try:
                    times.append(benchmark.graph_time_us(run, sets, repeats=repeats))
                except Exception as error:
                    row["note"] = _failure(error)
                torch.cuda.synchronize()
    for row, _, _, flops, times in live:
        if times and not row["note"]:
            row["us"] = statistics.median(times)
            row["tflops"] = flops / row["us"] / 1e6
    return rows


def bench_dense(ms, nks, variants, environment, repeats, rounds, rows, save):
    for n, k in nks:
        for m in ms:
            sets = quantize_sets(m, n, k, None, seed=m + n + k)
            a8, b8, sa, sb = sets[0]
            r = slice(0, min(m, REFERENCE_ROWS))
            reference = fp8_block.block_scaled_reference(a8[r], b8, sa[r], sb, 128)
            extra = {"kind": "dense", "m": m, "n": n, "k": k, "groups": 1}
            contenders = []
            for label, run, prepare in dense_contenders(variants):
                given = prepared(sets, prepare)
                contenders.append((label, run, given, _first(given, r, reference), 2 * m * n * k, extra))
            rows += measure_shape(contenders, environment, repeats, rounds)
            for row in rows[-len(contenders) :]:
                print(_line(row), flush=True)
            del sets, contenders
            save(rows)


def prepared(sets, prepare):
    """The input sets with the activation scales laid out by `prepare` (outside the timed calls), or as they are."""
    return sets if prepare is None else [(a8, b8, prepare(sa), sb) for a8, b8, sa, sb in sets]


def _first(sets, r, reference, scored=True):
    """A contender's one call on the first input set and its relres on rows r (unless not `scored`: row-wise peers
    read other scales, their time is what compares)."""

    def first(run):
        out = run(*sets[0])
        return relres(out[r], reference) if scored else None

    return first


def moe_contenders(groups, m_per_group, variants):
    """(label, run, prepare), as dense_contenders."""
    offsets = torch.arange(1, groups + 1, dtype=torch.int32, device="cuda") * m_per_group
    counts = torch.full((groups,), m_per_group, dtype=torch.int32, device="cuda")
    yield "ours contiguous", lambda a8, b8, sa, sb: ext.grouped_gemm_fp8(a8, b8, sa, sb, offsets=offsets), None
    for variant in variants:

        def named(a8, b8, sa, sb, variant=variant):
            return ext.grouped_gemm_fp8(a8, b8, sa, sb, offsets=offsets, variant=variant)

        yield f"ours contiguous {variant}", named, None

    def masked(a8, b8, sa, sb):
        shape = (groups, m_per_group)
        return ext.grouped_gemm_fp8(a8.view(*shape, -1), b8, sa.view(*shape, -1), sb, masked_counts=counts).view(
            groups * m_per_group, -1
        )

    yield "ours masked", masked, None

    def scaled_grouped_mm(a8, b8, sa, sb):
        # row-wise scales (its only form on sm90): each row's and each expert-column's largest block scale
        return torch._scaled_grouped_mm(
            a8,
            b8.transpose(-2, -1),
            sa.amax(1),
            sb.amax(-1).repeat_interleave(128, -1)[:, : b8.shape[1]],
            offs=offsets,
            out_dtype=torch.bfloat16,
        )

    yield "torch._scaled_grouped_mm row", scaled_grouped_mm, None
    deep_gemm = _deep_gemm()
    if deep_gemm is not None:
        m_indices = torch.arange(groups, dtype=torch.int32, device="cuda").repeat_interleave(m_per_group)

        def deepgemm_contiguous(a8, b8, sa, sb):
            out = torch.empty(a8.shape[0], b8.shape[1], dtype=torch.bfloat16, device="cuda")
            deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a8, sa), (b8, sb), out, m_indices, disable_ue8m0_cast=True)
            return out

        def deepgemm_masked(a8, b8, sa, sb):
            shape = (groups, m_per_group)
            out = torch.empty(*shape, b8.shape[1], dtype=torch.bfloat16, device="cuda")
            deep_gemm.m_grouped_fp8_gemm_nt_masked(
                (a8.view(*shape, -1), sa.view(*shape, -1)),
                (b8, sb),
                out,
                counts,
                m_per_group,
                disable_ue8m0_cast=True,
            )
            return out.view(groups * m_per_group, -1)

        # scales in its own layout, per expert for the masked kernel (see dense_contenders)
        native = deep_gemm.get_mn_major_tma_aligned_tensor
        if m_per_group % deep_gemm.get_mk_alignment_for_contiguous_layout() == 0:
            yield "DeepGEMM native contiguous", deepgemm_contiguous, native
        yield "DeepGEMM native masked", deepgemm_masked, lambda sa: native(sa.view(groups, m_per_group, -1))


def bench_moe(group_counts, ms, nks, variants, environment, repeats, rounds, rows, save):
    for n, k in nks:
        for groups in group_counts:
            for m_per_group in ms:
                m = groups * m_per_group
                sets = quantize_sets(m, n, k, groups, seed=m + n + k)
                a8, b8, sa, sb = sets[0]
                r = slice(0, min(m_per_group, REFERENCE_ROWS))  # rows of the first expert
                reference = fp8_block.block_scaled_reference(a8[r], b8[0], sa[r], sb[0], 128)
                extra = {"kind": "moe", "m": m_per_group, "n": n, "k": k, "groups": groups}
                contenders = []
                for label, run, prepare in moe_contenders(groups, m_per_group, variants):
                    given = prepared(sets, prepare)
                    first = _first(given, r, reference, scored=not label.endswith(" row"))
                    contenders.append((label, run, given, first, 2 * m * n * k, extra))
                rows += measure_shape(contenders, environment, repeats, rounds)
                for row in rows[-len(contenders) :]:
                    print(_line(row), flush=True)
                del sets, contenders
                save(rows)


def wgrad_sizes(groups: int, mean: int, seed: int) -> list[int]:
    """Tokens per expert: mean · U(0.7, 1.3), padded to 128 (DeepGEMM's generator; both kernels ask for it)."""
    generator = torch.Generator().manual_seed(seed)
    factors = torch.rand(groups, generator=generator) * 0.6 + 0.7
    return [int(-(-int(mean * f) // 128) * 128) for f in factors.tolist()]


def bench_wgrad(cases, variants, environment, repeats, rounds, rows, save):
    """D_g = C_g + A_g·B_gᵀ over each expert's tokens (K), FP32 out accumulated in place, 1x128 scales along K
    on both operands: ours from (M, ΣK) operands, DeepGEMM from its layout (each group's (M, K_g) block packed)."""
    deep_gemm = _deep_gemm()
    for groups, m, n, mean in cases:
        sizes = wgrad_sizes(groups, mean, seed=groups + m + n)
        k = sum(sizes)
        offsets = torch.tensor(sizes).cumsum(0).to(torch.int32).cuda()
        generator = torch.Generator(device="cuda").manual_seed(k)
        sets = []
        for _ in range(benchmark.rotation_count((m + n) * k + 8 * groups * m * n)):
            a8, sa = ext.quantize_fp8(torch.randn(m, k, generator=generator, device="cuda"), granularity="block")
            b8, sb = ext.quantize_fp8(
                torch.randn(n, k, generator=generator, device="cuda") / k**0.5, granularity="block"
            )
            sa, sb = sa.t().contiguous().t(), sb.t().contiguous().t()  # M- and N-contiguous, as both read them
            packed_a = torch.cat([part.flatten() for part in a8.split(sizes, dim=1)])
            packed_b = torch.cat([part.flatten() for part in b8.split(sizes, dim=1)])
            d = torch.zeros(groups, m, n, device="cuda")
            sets.append((a8, b8, sa, sb, packed_a, packed_b, d))
        a8, b8, sa, sb = sets[0][:4]
        r = slice(0, REFERENCE_ROWS)
        columns = slice(0, sizes[0])
        reference = fp8_block.dequantize(a8[r, columns], sa[r, : -(-sizes[0] // 128)], 1)
        reference = reference @ fp8_block.dequantize(b8[:, columns], sb[:, : -(-sizes[0] // 128)], 1).T

        def ours(a8, b8, sa, sb, packed_a, packed_b, d, offsets=offsets):
            return ext.k_grouped_gemm_fp8(a8, b8, sa, sb, offsets, out=d, accumulate=True)

        contenders = [("ours", ours)]
        for variant in variants:

            def named(a8, b8, sa, sb, packed_a, packed_b, d, offsets=offsets, variant=variant):
                return fp8_block.k_grouped_gemm_fp8(a8, b8, sa, sb, offsets, out=d, accumulate=True, variant=variant)

            contenders.append((f"ours {variant}", named))
        if deep_gemm is not None:
            layout = torch.tensor(sizes, dtype=torch.int32, device="cuda")

            def deepgemm(a8, b8, sa, sb, packed_a, packed_b, d, sizes=sizes, layout=layout):
                deep_gemm.k_grouped_fp8_gemm_nt_contiguous(
                    (packed_a, sa), (packed_b, sb), d, sizes, layout, d, recipe=(1, 1, 128)
                )
                return d

            contenders.append(("DeepGEMM", deepgemm))

        def first(run, sets=sets, r=r, reference=reference):
            sets[0][-1].zero_()  # D accumulates in place
            return relres(run(*sets[0])[0, r], reference)

        extra = {"kind": "wgrad", "m": m, "n": n, "k": k, "groups": groups}
        timed = [(label, run, sets, first, 2 * m * n * k, extra) for label, run in contenders]
        rows += measure_shape(timed, environment, repeats, rounds)
        for row in rows[-len(timed) :]:
            print(_line(row), flush=True)
        del sets, timed
        save(rows)


def build(variants) -> None:
    """The dispatch defaults and the named variants, built in parallel before any timing."""
    names = [fp8_block.api.dense_variant("e4m3", "e4m3", "bf16", 128)]
    names += [fp8_block.api.grouped_variant("e4m3", "e4m3", "bf16", 128), *variants]
    names.append(fp8_block.api.k_grouped_variant("e4m3", "e4m3", "fp32"))
    configs = [config_of(name) for name in dict.fromkeys(names)]
    for result in build_libraries([(c,) for c in configs], "90a"):
        if result.library is None:
            print(f"{result.configs[0].name} failed to build:\n{result.error}", file=sys.stderr)


_DEEP_GEMM = []


def _deep_gemm():
    """The deep_gemm module, or None where it is not built (python/deepgemm_build.py)."""
    if not _DEEP_GEMM:
        try:
            import deep_gemm
        except Exception as error:
            print(f"DeepGEMM not measured: {type(error).__name__}: {error}", file=sys.stderr)
            deep_gemm = None
        _DEEP_GEMM.append(deep_gemm)
    return _DEEP_GEMM[0]


def _line(row) -> str:
    if row["us"] is None:
        return f"{row['kind']} m={row['m']} n={row['n']} k={row['k']} {row['contender']}: {row['note']}"
    relres_text = "" if row["relres"] is None else f" relres {row['relres']:.2e}"
    us = f"{row['us']:9.1f} us {row['tflops']:7.1f} TFLOP/s{relres_text}"
    shape = f"{row['kind']:5s} G={row['groups']:<3d} m={row['m']:<5d} n={row['n']:<6d} k={row['k']:<6d}"
    return f"{shape} {row['contender']:32s} {us}"


def plot(frame: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("dense", nk) for nk in frame[frame.kind == "dense"][["n", "k"]].drop_duplicates().itertuples(index=False)
    ]
    panels += [("moe", nk) for nk in frame[frame.kind == "moe"][["n", "k"]].drop_duplicates().itertuples(index=False)]
    if (frame.kind == "wgrad").any():
        panels.append(("wgrad", None))
    columns = 3
    figure, axes = plt.subplots(-(-len(panels) // columns), columns, figsize=(15, 4 * -(-len(panels) // columns)))
    for axis, (kind, nk) in zip(axes.flat, panels):
        if kind == "wgrad":  # one bar group per case
            part = frame[(frame.kind == "wgrad") & frame.tflops.notna()]
            cases = part[["groups", "m", "n"]].drop_duplicates().itertuples(index=False)
            labels = [f"G={g} {m}x{n}" for g, m, n in cases]
            for i, (contender, line) in enumerate(part.groupby("contender")):
                axis.bar([j + 0.4 * i for j in range(len(line))], line.tflops, width=0.4, label=contender)
            axis.set_xticks(range(len(labels)), labels, rotation=30, fontsize=6)
            axis.set_title("weight gradients, groups along K")
            axis.set_ylabel("TFLOP/s")
            axis.legend(fontsize=6)
            continue
        n, k = nk
        part = frame[(frame.kind == kind) & (frame.n == n) & (frame.k == k) & frame.tflops.notna()]
        if kind == "dense" and part.m.nunique() == 1:  # one M: a bar per contender (a line needs two points)
            axis.bar(part.contender, part.tflops, color=[f"C{i}" for i in range(len(part))])
            axis.tick_params(axis="x", labelsize=7)
            axis.set_title(f"{kind} M={part.m.iloc[0]} N={n} K={k}")
            axis.set_ylabel("TFLOP/s")
            continue
        for (contender, groups), line in part.groupby(["contender", "groups"]):
            label = contender if kind == "dense" else f"{contender} G={groups}"
            line = line.sort_values("m")  # rows of several runs joined in one CSV come in run order
            axis.plot(line.m, line.tflops, marker="o", label=label)
        axis.set_xscale("log", base=2)
        axis.set_title(f"{kind} N={n} K={k}")
        axis.set_xlabel("M" if kind == "dense" else "M per expert")
        axis.set_ylabel("TFLOP/s")
        axis.legend(fontsize=6)
    for axis in list(axes.flat)[len(panels) :]:
        axis.remove()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def _pairs(text: str) -> list[tuple[int, int]]:
    return [tuple(int(v) for v in pair.split("x")) for pair in text.split(",") if pair]


def _variant(kind: str):
    """argparse type: a variant name of `kind` (dense, grouped or k_grouped), refused by name before GPU setup."""

    def parse(text: str) -> str:
        try:
            config = config_of(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        found = "k_grouped" if config.k_grouped else "grouped" if config.grouped else "dense"
        if found != kind:
            raise argparse.ArgumentTypeError(f"{text!r} is a {found} variant, not a {kind} one")
        return text

    return parse


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="CSV path; the PNG goes beside it")
    parser.add_argument("--dense-m", type=_ints, default=DENSE_M, help="comma-separated M values")
    parser.add_argument("--dense-nk", type=_pairs, default=DENSE_NK, help="comma-separated NxK pairs")
    parser.add_argument("--moe-groups", type=_ints, default=MOE_GROUPS)
    parser.add_argument("--moe-m", type=_ints, default=MOE_M, help="tokens per expert")
    parser.add_argument("--moe-nk", type=_pairs, default=MOE_NK)
    parser.add_argument(
        "--variants",
        nargs="*",
        type=_variant("dense"),
        default=DENSE_VARIANTS,
        help="dense variant names timed beside ours",
    )
    parser.add_argument(
        "--grouped-variants",
        nargs="*",
        type=_variant("grouped"),
        default=GROUPED_VARIANTS,
        help="grouped ones (contiguous)",
    )
    parser.add_argument(
        "--wgrad",
        type=lambda t: [tuple(map(int, c.split("x"))) for c in t.split(",") if c],
        default=WGRAD,
        help="weight-gradient cases GxMxNxTOKENS (mean tokens per expert), comma-separated; '' for none",
    )
    parser.add_argument(
        "--wgrad-variants", nargs="*", type=_variant("k_grouped"), default=[], help="weight-gradient (_kgrouped) ones"
    )
    parser.add_argument("--repeats", type=int, default=10, help="graph replays per round (median)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per shape (median of rounds)")
    parser.add_argument("--plot-only", action="store_true", help="draw the PNG from an existing --out CSV")
    parser.add_argument(
        "--deepgemm", action="store_true", help="time DeepGEMM too (JIT-compiles a kernel per shape on first use)"
    )
    args = parser.parse_args(argv)
    if args.plot_only:
        plot(pd.read_csv(args.out), args.out.with_suffix(".png"))
        return 0
    require_cuda("bench_fp8_block")
    environment = {**benchmark.environment(), "command": shlex.join(["python", *sys.argv])}
    build(args.variants + args.grouped_variants + args.wgrad_variants)
    if not args.deepgemm:
        _DEEP_GEMM.append(None)
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save(rows):  # after every shape: a run cut short keeps what it measured
        pd.DataFrame(rows).to_csv(args.out, index=False)

    rows = []
    timing = (environment, args.repeats, args.rounds, rows, save)
    benchmark.spin_up()
    bench_dense(args.dense_m, args.dense_nk, args.variants, *timing)
    bench_moe(args.moe_groups, args.moe_m, args.moe_nk, args.grouped_variants, *timing)
    bench_wgrad(args.wgrad, args.wgrad_variants, *timing)
    plot(pd.DataFrame(rows), args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
