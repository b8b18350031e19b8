"""The ``grouped`` and ``masked`` suites: the MoE FP8 GEMMs against cuBLASLt run group by group.

A shape is ``GxMxNxK``: G groups (experts) of about M rows each, B ``[G, N, K]``.

- ``grouped`` (``m_grouped_fp8_gemm_nt_contiguous``, per-row layout): each group's row count drawn from
  U(0.7, 1.3) x M (about one group in five empty; seeded by the shape), segments aligned to
  ``get_mk_alignment_for_contiguous_layout()``.
- ``masked`` (``m_grouped_fp8_gemm_nt_masked``, max_m = 4096): with G <= 4 every group holds exactly M
  rows (prefill-like), otherwise U(0.7, 1.3) x M (decode-like; some groups empty).

Baselines, timed in the same run on the same FP8 data: cuBLASLt through ``torch._scaled_mm`` run group by
group, with the same 1x128 / 128x128 block scales and with per-tensor scales and fast accumulation
(each group's rows padded to a multiple of 16 for cuBLASLt, inside the padding of the layout); for
``masked`` also one ``torch._scaled_grouped_mm`` call with per-row scales where PyTorch has it. TFLOPS
and GB/s count valid rows only, and B once per active group.
"""

import json
import random
from collections.abc import Callable
from typing import Any

import torch

from deep_gemm.bench.common import (
    derive_throughput,
    diff_cell,
    parse_int_shape,
    report_header,
    time_call,
    try_first_call,
)
from deep_gemm.bench.registry import BenchOptions, Suite, SuiteReport, register_suite
from deep_gemm.bench.report import Column, Table, fmt, geomean
from deep_gemm.testing import calc_diff, d2d_copy_bandwidth, gpu_idle
from deep_gemm.utils import align, ceil_div, per_block_cast_to_fp8, per_token_cast_to_fp8

__all__ = [
    "CONTIGUOUS_SHAPES",
    "GROUPED_COLUMNS",
    "contiguous_layout",
    "row_counts",
    "MASKED_SHAPES",
    "measure_baselines",
    "measure_ours",
    "parse_gmnk",
    "run_contiguous",
    "run_grouped_suite",
    "run_masked",
]

MAX_DIFF = 1e-3
MASKED_MAX_M = 4096
_NKS = ((4096, 7168), (7168, 2048), (6144, 7168), (7168, 3072))
CONTIGUOUS_SHAPES = tuple((g, m, n, k) for g, m in ((4, 8192), (8, 4096), (32, 256), (256, 64)) for n, k in _NKS)
MASKED_SHAPES = tuple(
    (g, m, n, k)
    for g, m in ((1, 1024), (2, 512), (4, 256), (32, 192), (6, 1024), (32, 20), (6, 20))
    for n, k in _NKS[:2]
)

# The leading columns every grouped suite's table shares (this module's and the BF16 ones)
GROUPED_COLUMNS = [
    Column("G", 4),
    Column("M", 5),
    Column("N", 5),
    Column("K", 5),
    Column("rows", 7),
    Column("ours us", 9),
    Column("TFLOPS", 7),
    Column("GB/s", 6),
    Column("%copy", 5),
]

_TABLE = Table(
    [
        *GROUPED_COLUMNS,
        Column("blockwise us", 9),
        Column("speedup", 7),
        Column("fast us", 9),
        Column("speedup", 7),
        Column("grouped_mm us", 9),
        Column("speedup", 7),
        Column("diff", 8),
    ]
)


def parse_gmnk(text: str) -> tuple[int, int, int, int]:
    """Parse ``"GxMxNxK"`` (e.g. ``"8x4096x7168x2048"``) into positive ints.

    Raises:
        ValueError: not four positive integers separated by ``x``.
    """
    return parse_int_shape(text, 4, "GxMxNxK of positive integers", "8x4096x7168x2048")


def row_counts(g: int, m: int, exact: bool, seed: int) -> list[int]:
    """Rows per group: exactly m each, or U(0.7, 1.3) x m with about one group in five empty (seeded)."""
    rng = random.Random(seed)
    if exact:
        return [m] * g
    return [0 if rng.random() < 0.2 else max(1, int(m * rng.uniform(0.7, 1.3))) for _ in range(g)]


def contiguous_layout(counts: list[int]) -> tuple[list[int], int, torch.Tensor]:
    """The contiguous layout of groups with these row counts: each segment starting at a multiple of
    ``get_mk_alignment_for_contiguous_layout()``; returns the starts, the total (padded) row count and the per-row
    group ids (int32, -1 for padding rows) on the GPU."""
    import deep_gemm

    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    starts, row = [], 0
    for c in counts:
        starts.append(row)
        row = align(row + c, alignment)
    total = max(row, alignment)
    layout = torch.full((total,), -1, device="cuda", dtype=torch.int32)
    for i, (s, c) in enumerate(zip(starts, counts, strict=True)):
        layout[s : s + c] = i
    return starts, total, layout


def _quantized_b(g: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b_bf16 = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)
    b = torch.empty(g, n, k, device="cuda", dtype=torch.float8_e4m3fn)
    sfb = torch.empty(g, ceil_div(n, 128), ceil_div(k, 128), device="cuda")
    for i in range(g):
        b[i], sfb[i] = per_block_cast_to_fp8(b_bf16[i])
    return b_bf16, b, sfb


def _per_group_baselines(a_rows: list[tuple[torch.Tensor, torch.Tensor]], b, sfb) -> dict[str, Callable[[], object]]:
    """cuBLASLt group by group: ``a_rows[g]`` is group g's (A rows padded to 16, their 1x128 scales) or None."""
    one = torch.ones((), dtype=torch.float32, device="cuda")
    blockwise_args, fast_args = [], []
    for g, rows in enumerate(a_rows):
        if rows is None:
            continue
        a_g, sfa_g = rows
        blockwise_args.append((a_g, b[g].t(), sfa_g.t().contiguous().t(), sfb[g].contiguous().t()))
        fast_args.append((a_g, b[g].t()))

    def blockwise() -> object:
        return [torch._scaled_mm(a, bt, sa, sb, out_dtype=torch.bfloat16) for a, bt, sa, sb in blockwise_args]

    def fast_accum() -> object:
        return [torch._scaled_mm(a, bt, one, one, out_dtype=torch.bfloat16, use_fast_accum=True) for a, bt in fast_args]

    return {"blockwise": blockwise, "fast_accum": fast_accum}


def _new_row(g: int, m: int, n: int, k: int, counts: list[int]) -> dict[str, Any]:
    """A shape's row: FLOPs and bytes over valid rows only (A, its scales and D per row; B once per active group)."""
    valid_rows = sum(counts)
    active = sum(c > 0 for c in counts)
    return {
        "g": g,
        "m": m,
        "n": n,
        "k": k,
        "valid_rows": valid_rows,
        "flops": 2 * valid_rows * n * k,
        "bytes": valid_rows * (k + 2 * n + 4 * ceil_div(k, 128)) + active * n * k,
    }


def measure_ours(
    row: dict[str, Any], ours: Callable[[], object], group_diffs: Callable[[], list[float]], options: BenchOptions
) -> None:
    """First call (checked: the worst group's calc_diff against the BF16 product), then the timing."""
    out, row["ours_error"] = try_first_call(ours)
    if out is not None:
        diffs = group_diffs()
        row["ours_diff"] = max(diffs) if diffs else 0.0
    else:
        row["ours_diff"] = None
    row["ours_accurate"] = row["ours_diff"] is not None and row["ours_diff"] < MAX_DIFF
    row["ours"] = time_call(ours, options) if out is not None else None


def measure_baselines(row: dict[str, Any], calls: dict[str, Callable[[], object]], options: BenchOptions) -> None:
    """Time each baseline of ``calls`` into ``row[name]`` (None, with ``row[name + "_error"]``, if it raised or
    ``--no-baselines`` was given)."""
    for key, fn in calls.items():
        if not options.baselines:
            row[key], row[f"{key}_error"] = None, "not run (--no-baselines)"
            continue
        out, row[f"{key}_error"] = try_first_call(fn)
        row[key] = time_call(fn, options) if out is not None else None


def _finish_row(row: dict[str, Any], copy_bandwidth: float) -> None:
    derive_throughput(row, copy_bandwidth, ("blockwise", "fast_accum", "grouped_mm"))
    print(
        _TABLE.row(
            [
                str(row["g"]),
                str(row["m"]),
                str(row["n"]),
                str(row["k"]),
                str(row["valid_rows"]),
                fmt(row["ours"]["median_us"] if row["ours"] else None, ".1f"),
                fmt(row["tflops"], ".0f"),
                fmt(row["gbps"], ".0f"),
                fmt(row["pct_copy_bandwidth"], ".0f"),
                fmt(row["blockwise"]["median_us"] if row.get("blockwise") else None, ".1f"),
                fmt(row["speedup_vs_blockwise"], ".2f"),
                fmt(row["fast_accum"]["median_us"] if row.get("fast_accum") else None, ".1f"),
                fmt(row["speedup_vs_fast_accum"], ".2f"),
                fmt(row["grouped_mm"]["median_us"] if row.get("grouped_mm") else None, ".1f"),
                fmt(row["speedup_vs_grouped_mm"], ".2f"),
                diff_cell(row, ".1e"),
            ]
        ),
        flush=True,
    )


def _bench_contiguous(g: int, m: int, n: int, k: int, options: BenchOptions) -> dict[str, Any]:
    import deep_gemm

    counts = row_counts(g, m, exact=False, seed=g * 7919 + m + n + k)
    starts, total, layout = contiguous_layout(counts)
    a_bf16 = torch.randn(total, k, device="cuda", dtype=torch.bfloat16)
    a, sfa = per_token_cast_to_fp8(a_bf16)
    b_bf16, b, sfb = _quantized_b(g, n, k)
    sfa_tma = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    d = torch.full((total, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    row = _new_row(g, m, n, k, counts)

    def ours() -> torch.Tensor:
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa_tma), (b, sfb), d, layout)
        return d

    measure_ours(
        row,
        ours,
        lambda: [
            float(calc_diff(d[s : s + c], a_bf16[s : s + c].float() @ b_bf16[i].float().t()))
            for i, (s, c) in enumerate(zip(starts, counts, strict=False))
            if c > 0
        ],
        options,
    )
    a_rows = [
        (a[s : s + align(c, 16)], sfa[s : s + align(c, 16)]) if c > 0 else None
        for s, c in zip(starts, counts, strict=False)
    ]
    measure_baselines(row, _per_group_baselines(a_rows, b, sfb), options)
    return row


def _bench_masked(g: int, m: int, n: int, k: int, options: BenchOptions) -> dict[str, Any]:
    import deep_gemm

    max_m = MASKED_MAX_M
    counts = [min(c, max_m) for c in row_counts(g, m, exact=g <= 4, seed=g * 104729 + m + n + k)]
    a_bf16 = torch.randn(g, max_m, k, device="cuda", dtype=torch.bfloat16)
    a, sfa = per_token_cast_to_fp8(a_bf16.view(-1, k))
    sfa_tma = deep_gemm.get_mn_major_tma_aligned_tensor(sfa).view(g, max_m, -1)
    a, sfa = a.view(g, max_m, k), sfa.view(g, max_m, -1)
    b_bf16, b, sfb = _quantized_b(g, n, k)
    masked_m = torch.tensor(counts, device="cuda", dtype=torch.int32)
    d = torch.full((g, max_m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    row = _new_row(g, m, n, k, counts)

    def ours() -> torch.Tensor:
        deep_gemm.m_grouped_fp8_gemm_nt_masked((a, sfa_tma), (b, sfb), d, masked_m, m)
        return d

    measure_ours(
        row,
        ours,
        lambda: [
            float(calc_diff(d[i, :c], a_bf16[i, :c].float() @ b_bf16[i].float().t())) for i, c in enumerate(counts) if c
        ],
        options,
    )
    a_rows = [(a[i, : align(c, 16)], sfa[i, : align(c, 16)]) if c > 0 else None for i, c in enumerate(counts)]
    calls = _per_group_baselines(a_rows, b, sfb)
    if hasattr(torch, "_scaled_grouped_mm"):
        # One call over all groups with per-row scales (a coarser recipe), rows of every group as given
        row_a = a_bf16.float().abs().amax(dim=2).clamp(min=1e-4) / 448.0
        row_b = b_bf16.float().abs().amax(dim=2).clamp(min=1e-4) / 448.0
        a_pr = (a_bf16.float() / row_a.unsqueeze(2)).to(torch.float8_e4m3fn)
        b_pr = (b_bf16.float() / row_b.unsqueeze(2)).to(torch.float8_e4m3fn)

        def grouped_mm() -> object:
            return torch._scaled_grouped_mm(a_pr, b_pr.transpose(1, 2), row_a, row_b, out_dtype=torch.bfloat16)

        calls["grouped_mm"] = grouped_mm
    else:
        row["grouped_mm"], row["grouped_mm_error"] = None, "this PyTorch has no torch._scaled_grouped_mm"
    measure_baselines(row, calls, options)
    return row


def run_grouped_suite(
    name: str, default_shapes, bench_one, options: BenchOptions, parse: Callable[[str], tuple] = parse_gmnk
) -> SuiteReport:
    """Run ``bench_one(g, m, n, k, options)`` (a row as ``_new_row`` makes, with timings of ours and the
    baselines) over the shapes after idling the GPU before each, print the table and the geomeans."""

    if not torch.cuda.is_available():
        message = "no CUDA GPU (torch.cuda.is_available() is False)"
        print(f"{name}: {message}")
        return SuiteReport(data={"suite": name, "error": message}, ok=False)
    shapes = [parse(s) for s in options.shapes] if options.shapes else list(default_shapes)
    copy_bandwidth = d2d_copy_bandwidth()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(f"device-to-device copy: {copy_bandwidth * 1e-9:.0f} GB/s (read + write)")
    print(_TABLE.header())
    rows = []
    for g, m, n, k in shapes:
        gpu_idle(options.idle_s)
        row = bench_one(g, m, n, k, options)
        _finish_row(row, copy_bandwidth)
        rows.append(row)
        torch.cuda.empty_cache()
    geomeans = {
        key: geomean(r.get(f"speedup_vs_{key}") for r in rows) for key in ("blockwise", "fast_accum", "grouped_mm")
    }
    for key, value in geomeans.items():
        print(f"geomean speedup vs {key}: {fmt(value, '.3f')}")
    for note in sorted(
        {
            f"{key}: {r[f'{key}_error']}"
            for r in rows
            for key in ("ours", "blockwise", "fast_accum", "grouped_mm")
            if r.get(f"{key}_error")
        }
    ):
        print(f"note: {note}")
    failed = [r for r in rows if r["ours_error"] or not r["ours_accurate"]]
    data = {
        **report_header(name, options, MAX_DIFF, copy_bandwidth),
        "geomean_speedup": geomeans,
        "rows": rows,
    }
    json.dumps(data)
    return SuiteReport(data=data, ok=not failed)


def run_contiguous(options: BenchOptions) -> SuiteReport:
    """Run the ``grouped`` suite (m-grouped contiguous), print its table, return the JSON-ready report."""
    return run_grouped_suite("grouped", CONTIGUOUS_SHAPES, _bench_contiguous, options)


def run_masked(options: BenchOptions) -> SuiteReport:
    """Run the ``masked`` suite (m-grouped masked), print its table, return the JSON-ready report."""
    return run_grouped_suite("masked", MASKED_SHAPES, _bench_masked, options)


GROUPED_SUITE = register_suite(
    Suite(
        name="grouped",
        description="MoE m-grouped contiguous FP8 GEMM vs cuBLASLt group by group",
        shape_help="GxMxNxK (groups x rows per group x N x K), e.g. 8x4096x7168x2048",
        parse_shape=parse_gmnk,
        run=run_contiguous,
    )
)
MASKED_SUITE = register_suite(
    Suite(
        name="masked",
        description="MoE m-grouped masked FP8 GEMM vs cuBLASLt group by group and _scaled_grouped_mm",
        shape_help="GxMxNxK (groups x expected rows x N x K), e.g. 32x192x4096x7168",
        parse_shape=parse_gmnk,
        run=run_masked,
    )
)
