"""The ``bf16_grouped`` and ``bf16_masked`` suites: the MoE BF16 GEMMs against cuBLAS run group by group and
``torch._grouped_mm``.

A shape is ``GxMxNxK``: G groups (experts) of about M rows each, B ``[G, N, K]``, BF16 D.

- ``bf16_grouped`` (``m_grouped_bf16_gemm_nt_contiguous``, per-row layout): each group's row count drawn from
  U(0.7, 1.3) x M (about one group in five empty; seeded by the shape), segments aligned to
  ``get_mk_alignment_for_contiguous_layout()``.
- ``bf16_masked`` (``m_grouped_bf16_gemm_nt_masked``, max_m = 4096): with G <= 4 every group holds exactly M rows
  (prefill-like), otherwise U(0.7, 1.3) x M (decode-like; some groups empty).

Baselines, on the same BF16 data: ``loop``, one ``torch.matmul`` per active group over its valid rows, into the
same D (its accuracy is checked like ours); ``grouped_mm``, one ``torch._grouped_mm`` call (where PyTorch has it)
over the valid rows packed back to back with ``offs`` their cumulative ends (the packing is not timed: it is the
layout that API wants). TFLOPS and GB/s count valid rows only, and B once per active group.
"""

from collections.abc import Callable, Sequence
from typing import Any

import torch

from deep_gemm.bench.bf16_gemm import MAX_DIFF, measure, run_rows_suite
from deep_gemm.bench.common import diff_cell
from deep_gemm.bench.grouped import GROUPED_COLUMNS, contiguous_layout, parse_gmnk, row_counts
from deep_gemm.bench.registry import BenchOptions, Suite, SuiteReport, register_suite
from deep_gemm.bench.report import Column, Table, fmt
from deep_gemm.testing import calc_diff

__all__ = ["BF16_CONTIGUOUS_SHAPES", "BF16_MASKED_SHAPES", "run_bf16_contiguous", "run_bf16_masked"]

MASKED_MAX_M = 4096
_NKS = ((4096, 7168), (7168, 2048), (6144, 7168), (7168, 3072))
BF16_CONTIGUOUS_SHAPES = tuple((g, m, n, k) for g, m in ((4, 8192), (8, 4096), (32, 256), (256, 64)) for n, k in _NKS)
BF16_MASKED_SHAPES = tuple(
    (g, m, n, k)
    for g, m in ((1, 1024), (2, 512), (4, 256), (32, 192), (6, 1024), (32, 20), (6, 20))
    for n, k in _NKS[:2]
)
_BASELINES = ("loop", "grouped_mm")

_TABLE = Table(
    [
        *GROUPED_COLUMNS,
        Column("loop us", 9),
        Column("speedup", 7),
        Column("grouped_mm us", 9),
        Column("speedup", 7),
        Column("diff", 8),
    ]
)


def _new_row(g: int, m: int, n: int, k: int, counts: list[int]) -> dict[str, Any]:
    valid_rows, active = sum(counts), sum(c > 0 for c in counts)
    return {
        "g": g,
        "m": m,
        "n": n,
        "k": k,
        "valid_rows": valid_rows,
        "flops": 2 * valid_rows * n * k,
        "bytes": 2 * valid_rows * (k + n) + 2 * active * n * k,
    }


def _grouped_mm_call(a_rows: list[torch.Tensor], b: torch.Tensor, counts: list[int]):
    """One torch._grouped_mm over the valid rows packed back to back, or None where PyTorch has no such op."""
    if not hasattr(torch, "_grouped_mm"):
        return None
    packed = torch.cat(a_rows) if a_rows else b.new_empty(0, b.shape[2])
    offs = torch.tensor(counts, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
    b_kn = b.transpose(1, 2)  # [G, K, N] views of the K-major weights

    def grouped_mm() -> torch.Tensor:
        return torch._grouped_mm(packed, b_kn, offs=offs)

    return grouped_mm


def _measure_all(row, d, ours, loop, grouped_mm, segments, a_of, b, options: BenchOptions) -> None:
    """Ours and the loop (both write d: poisoned first, then every group's rows checked), then grouped_mm."""

    def worst_diff() -> float:
        diffs = [float(calc_diff(d_g, a_g.double() @ b[g].double().t())) for g, d_g, a_g in segments(d, a_of)]
        return max(diffs, default=0.0)

    d.fill_(float("nan"))
    measure(row, "ours", ours, worst_diff, options)
    row["ours_accurate"] = row["ours_diff"] is not None and row["ours_diff"] < MAX_DIFF["bf16"]
    d.fill_(float("nan"))
    measure(row, "loop", loop, worst_diff, options)
    measure(row, "grouped_mm", grouped_mm, None, options, "this PyTorch has no torch._grouped_mm")


def _bench_contiguous(g: int, m: int, n: int, k: int, options: BenchOptions) -> list[dict[str, Any]]:
    import deep_gemm

    counts = row_counts(g, m, exact=False, seed=g * 7919 + m + n + k)
    starts, total, layout = contiguous_layout(counts)
    a = torch.randn(total, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(total, n, device="cuda", dtype=torch.bfloat16)
    active = [(i, s, c) for i, (s, c) in enumerate(zip(starts, counts, strict=True)) if c > 0]
    row = _new_row(g, m, n, k, counts)

    def ours() -> torch.Tensor:
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout)
        return d

    def loop() -> torch.Tensor:
        for i, s, c in active:
            torch.matmul(a[s : s + c], b[i].t(), out=d[s : s + c])
        return d

    def segments(out, a_of):
        return [(i, out[s : s + c], a_of[s : s + c]) for i, s, c in active]

    grouped_mm = _grouped_mm_call([a[s : s + c] for _, s, c in active], b, counts)
    _measure_all(row, d, ours, loop, grouped_mm, segments, a, b, options)
    return [row]


def _bench_masked(g: int, m: int, n: int, k: int, options: BenchOptions) -> list[dict[str, Any]]:
    import deep_gemm

    max_m = MASKED_MAX_M
    counts = [min(c, max_m) for c in row_counts(g, m, exact=g <= 4, seed=g * 104729 + m + n + k)]
    a = torch.randn(g, max_m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)
    masked_m = torch.tensor(counts, device="cuda", dtype=torch.int32)
    d = torch.empty(g, max_m, n, device="cuda", dtype=torch.bfloat16)
    active = [(i, c) for i, c in enumerate(counts) if c > 0]
    row = _new_row(g, m, n, k, counts)

    def ours() -> torch.Tensor:
        deep_gemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, m)
        return d

    def loop() -> torch.Tensor:
        for i, c in active:
            torch.matmul(a[i, :c], b[i].t(), out=d[i, :c])
        return d

    def segments(out, a_of):
        return [(i, out[i, :c], a_of[i, :c]) for i, c in active]

    grouped_mm = _grouped_mm_call([a[i, :c] for i, c in active], b, counts)
    _measure_all(row, d, ours, loop, grouped_mm, segments, a, b, options)
    return [row]


def _format_row(row: dict[str, Any]) -> str:
    def us(key: str) -> str:
        return fmt(row[key]["median_us"] if row.get(key) else None, ".1f")

    diff = diff_cell(row, ".1e")
    return _TABLE.row(
        [
            str(row["g"]),
            str(row["m"]),
            str(row["n"]),
            str(row["k"]),
            str(row["valid_rows"]),
            us("ours"),
            fmt(row["tflops"], ".0f"),
            fmt(row["gbps"], ".0f"),
            fmt(row["pct_copy_bandwidth"], ".0f"),
            us("loop"),
            fmt(row["speedup_vs_loop"], ".2f"),
            us("grouped_mm"),
            fmt(row["speedup_vs_grouped_mm"], ".2f"),
            diff,
        ]
    )


_LEGEND = (
    "speedup = baseline time / ours (above 1: ours faster); loop = torch.matmul per group; grouped_mm = one\n"
    "torch._grouped_mm over the valid rows packed; diff = worst group's calc_diff vs float64, '!' over 1e-5"
)


def _run_suite(
    suite: str,
    function: str,
    default_shapes: Sequence[tuple[int, int, int, int]],
    bench: Callable[..., list[dict[str, Any]]],
    options: BenchOptions,
) -> SuiteReport:
    """One of the two suites: its shapes (the options' or ``default_shapes``), timed by ``bench``."""
    shapes = [parse_gmnk(s) for s in options.shapes] if options.shapes else list(default_shapes)
    return run_rows_suite(suite, function, shapes, bench, _TABLE, _format_row, _BASELINES, options, legend=_LEGEND)


def run_bf16_contiguous(options: BenchOptions) -> SuiteReport:
    """Run the ``bf16_grouped`` suite (m-grouped contiguous BF16), print its table, return the JSON-ready report."""
    return _run_suite(
        "bf16_grouped", "m_grouped_bf16_gemm_nt_contiguous", BF16_CONTIGUOUS_SHAPES, _bench_contiguous, options
    )


def run_bf16_masked(options: BenchOptions) -> SuiteReport:
    """Run the ``bf16_masked`` suite (m-grouped masked BF16), print its table, return the JSON-ready report."""
    return _run_suite("bf16_masked", "m_grouped_bf16_gemm_nt_masked", BF16_MASKED_SHAPES, _bench_masked, options)


BF16_GROUPED_SUITE = register_suite(
    Suite(
        name="bf16_grouped",
        description="MoE m-grouped contiguous BF16 GEMM vs torch.matmul per group and torch._grouped_mm",
        shape_help="GxMxNxK (groups x rows per group x N x K), e.g. 8x4096x7168x2048",
        parse_shape=parse_gmnk,
        run=run_bf16_contiguous,
    )
)
BF16_MASKED_SUITE = register_suite(
    Suite(
        name="bf16_masked",
        description="MoE m-grouped masked BF16 GEMM vs torch.matmul per group and torch._grouped_mm",
        shape_help="GxMxNxK (groups x expected rows x N x K), e.g. 32x192x4096x7168",
        parse_shape=parse_gmnk,
        run=run_bf16_masked,
    )
)
