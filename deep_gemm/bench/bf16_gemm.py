"""The ``bf16`` suite: ``deep_gemm.bf16_gemm_{nt,nn,tn,tt}`` against cuBLAS (through PyTorch) on the same layouts.

Per shape ``MxNxK``: fresh ``torch.randn`` BF16 A ``[M, K]`` and B ``[N, K]``, stored as each layout reads them, and
six rows (``MxNxK@variant``: only that one), each timed with L2 flushed before every call (see :func:`deep_gemm.testing.bench_kernel`):

- ``nt``, ``nn``, ``tn``, ``tt`` with BF16 D, against ``torch.mm`` on operands of the same layout, into the same
  preallocated D: nt ``torch.mm(a, b.t())`` (b ``[N, K]``), nn ``torch.mm(a, b)`` (b ``[K, N]``), tn
  ``torch.mm(a.t(), b)`` (a ``[K, M]``), tt ``torch.mm(a.t(), b.t())``;
- ``nt+c``: FP32 D = C + A @ B.T with a distinct FP32 C, against ``torch.addmm(c, a, b.t(), out_dtype=torch.float32,
  out=d)``: cuBLAS accumulating in FP32 and adding C in its epilogue, the fastest honest cuBLAS path PyTorch offers
  (``torch.mm(..., out_dtype=torch.float32)`` followed by ``add_`` matches or trails it);
- ``nt+c=d``: the same in place (``c is d``: ours adds each tile into D by a TMA reduce-add), against
  ``torch.addmm(d, a, b.t(), out_dtype=torch.float32, out=d)``; D holds C before the first (checked) call, and the
  timed calls keep accumulating into it.

A speedup is ``t_cublas / t_ours`` (above 1: ours is faster). Accuracy of both (each call writes a NaN-poisoned D
first) is ``calc_diff`` against a float64 reference of the same BF16 values; ours is flagged above 1e-5 for BF16
D (its rounding alone gives about 1.4e-6) and 1e-8 for FP32 D (exact products accumulated in FP32 give about
1e-11; a result rounded through BF16 shows up as 1e-6). Timings are never asserted.

:func:`run_rows_suite` (shared with the ``bf16_grouped`` and ``bf16_masked`` suites) runs a suite whose shapes each
give one or more table rows.
"""

import json
from collections.abc import Callable, Sequence
from typing import Any

import torch

from deep_gemm.bench.common import derive_throughput, parse_int_shape, report_header, time_call, try_first_call
from deep_gemm.bench.registry import BenchOptions, Suite, SuiteReport, register_suite
from deep_gemm.bench.report import Column, Table, fmt, geomean
from deep_gemm.testing import calc_diff, count_bytes, d2d_copy_bandwidth, gpu_idle

__all__ = ["BF16_SHAPES", "MAX_DIFF", "VARIANTS", "measure", "parse_bf16_mnk", "run_bf16", "run_rows_suite"]

MAX_DIFF = {"bf16": 1e-5, "fp32": 1e-8}
VARIANTS = ("nt", "nn", "tn", "tt", "nt+c", "nt+c=d")
_NKS = ((2112, 7168), (24576, 1536), (7168, 16384), (4096, 7168), (7168, 2048))
BF16_SHAPES: tuple[tuple[int, int, int], ...] = tuple((m, n, k) for m in (128, 4096) for n, k in _NKS)
_BASELINE_NAMES = {"nt+c": "addmm fp32", "nt+c=d": "addmm fp32=", "nt": "mm", "nn": "mm", "tn": "mm", "tt": "mm"}

_TABLE = Table(
    [
        Column("M", 5),
        Column("N", 6),
        Column("K", 5),
        Column("layout", 6),
        Column("D", 9),
        Column("ours us", 9),
        Column("TFLOPS", 7),
        Column("GB/s", 6),
        Column("%copy", 5),
        Column("cuBLAS", 10),
        Column("cuBLAS us", 9),
        Column("speedup", 7),
        Column("diff", 8),
        Column("cuBLAS diff", 8),
    ]
)


def parse_bf16_mnk(text: str) -> tuple[int, int, int] | tuple[int, int, int, str]:
    """Parse ``"MxNxK"`` (e.g. ``"4096x7168x2048"``) into positive ints, or ``"MxNxK@VARIANT"`` (e.g.
    ``"128x2112x7168@nt+c"``: only that one of :data:`VARIANTS` is timed) into the ints and the variant.

    Raises:
        ValueError: not three positive integers separated by ``x``, or an unknown variant.
    """
    mnk, at, variant = text.partition("@")
    shape = parse_int_shape(mnk, 3, "MxNxK of positive integers", "4096x7168x2048")
    if not at:
        return shape
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r} in {text!r}: expected one of {', '.join(VARIANTS)}")
    return (*shape, variant)


def measure(
    row: dict[str, Any],
    key: str,
    fn: Callable[[], object] | None,
    diff: Callable[[], float] | None,
    options: BenchOptions,
    missing: str = "",
) -> None:
    """First call of ``fn`` (an error is recorded, not raised), then ``row[key + "_diff"] = diff()`` (None when
    ``diff`` is None), then the timing into ``row[key]``. Baselines (any ``key`` but ``"ours"``) are skipped under
    ``--no-baselines``; ``fn`` None records ``missing`` as the error."""
    if key != "ours" and not options.baselines:
        row[key], row[f"{key}_error"], row[f"{key}_diff"] = None, "not run (--no-baselines)", None
        return
    if fn is None:
        row[key], row[f"{key}_error"], row[f"{key}_diff"] = None, missing, None
        return
    out, row[f"{key}_error"] = try_first_call(fn)
    row[f"{key}_diff"] = diff() if out is not None and diff is not None else None
    row[key] = time_call(fn, options) if out is not None else None


def _us(entry: dict[str, Any] | None) -> str:
    return fmt(entry["median_us"] if entry else None, ".1f")


def _diff_cell(row: dict[str, Any], key: str) -> str:
    if row.get(f"{key}_error"):
        return "ERROR" if key == "ours" else "-"
    text = fmt(row.get(f"{key}_diff"), ".1e")
    return text + ("!" if key == "ours" and not row["ours_accurate"] else "")


def _reset(d: torch.Tensor, c: torch.Tensor | None) -> None:
    """D before a checked first call: C (in place), or NaN so that unwritten elements fail the check."""
    if c is not None:
        d.copy_(c)
    else:
        d.fill_(float("nan"))


def _bench_shape(m: int, n: int, k: int, *args: Any) -> list[dict[str, Any]]:
    """Rows of (m, n, k): every variant, or (args ``variant, options``) only the one named."""
    import deep_gemm

    *only, options = args

    a_mk = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b_nk = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    product = a_mk.double() @ b_nk.double().t()
    rows = []
    for variant in only or VARIANTS:
        layout, fp32_c, in_place = variant[:2], variant.startswith("nt+c"), variant == "nt+c=d"
        a = a_mk if layout[0] == "n" else a_mk.t().contiguous()  # [M, K] or [K, M]
        b = b_nk if layout[1] == "t" else b_nk.t().contiguous()  # [N, K] or [K, N]
        a_op = a if layout[0] == "n" else a.t()  # [M, K] views for torch.mm
        b_op = b.t() if layout[1] == "t" else b  # [K, N]
        out_dtype = torch.float32 if fp32_c else torch.bfloat16
        d = torch.empty(m, n, device="cuda", dtype=out_dtype)
        c = torch.randn(m, n, device="cuda") if fp32_c else None
        ref = product + c.double() if fp32_c else product
        gemm = getattr(deep_gemm, f"bf16_gemm_{layout}", None)
        row: dict[str, Any] = {
            "m": m,
            "n": n,
            "k": k,
            "layout": layout,
            "variant": variant,
            "out_dtype": "fp32" if fp32_c else "bf16",
            "with_c": fp32_c,
            "in_place": in_place,
            "flops": 2 * m * n * k,
            "bytes": count_bytes(a, b, d, c),
            "cublas_call": _BASELINE_NAMES[variant],
        }

        def check(d=d, ref=ref) -> float:
            return float(calc_diff(d, ref))

        def ours(gemm=gemm, a=a, b=b, d=d, c=d if in_place else c) -> torch.Tensor:
            gemm(a, b, d, c)
            return d

        if in_place:

            def cublas(a_op=a_op, b_op=b_op, d=d) -> torch.Tensor:
                return torch.addmm(d, a_op, b_op, out_dtype=torch.float32, out=d)
        elif fp32_c:

            def cublas(a_op=a_op, b_op=b_op, c=c, d=d) -> torch.Tensor:
                return torch.addmm(c, a_op, b_op, out_dtype=torch.float32, out=d)
        else:

            def cublas(a_op=a_op, b_op=b_op, d=d) -> torch.Tensor:
                return torch.mm(a_op, b_op, out=d)

        _reset(d, c if in_place else None)
        measure(row, "ours", ours if gemm else None, check, options, f"deep_gemm.bf16_gemm_{layout} is missing")
        row["ours_accurate"] = row["ours_diff"] is not None and row["ours_diff"] < MAX_DIFF[row["out_dtype"]]
        _reset(d, c if in_place else None)
        measure(row, "cublas", cublas, check, options)
        rows.append(row)
        del d, c, ref
    return rows


def _format_row(row: dict[str, Any]) -> str:
    return _TABLE.row(
        [
            str(row["m"]),
            str(row["n"]),
            str(row["k"]),
            row["layout"],
            row["out_dtype"] + ("+c" if row["with_c"] else "") + ("=d" if row["in_place"] else ""),
            _us(row["ours"]),
            fmt(row["tflops"], ".0f"),
            fmt(row["gbps"], ".0f"),
            fmt(row["pct_copy_bandwidth"], ".0f"),
            row["cublas_call"],
            _us(row["cublas"]),
            fmt(row["speedup_vs_cublas"], ".2f"),
            _diff_cell(row, "ours"),
            _diff_cell(row, "cublas"),
        ]
    )


def run_rows_suite(
    name: str,
    required: str,
    shapes: Sequence[tuple[int, ...]],
    bench_shape: Callable[..., list[dict[str, Any]]],
    table: Table,
    format_row: Callable[[dict[str, Any]], str],
    baselines: tuple[str, ...],
    options: BenchOptions,
    group_by: str | None = None,
    legend: str = "",
) -> SuiteReport:
    """Run ``bench_shape(*shape, options)`` (a list of rows with ``flops``, ``bytes``, the timings ``ours`` and each
    of ``baselines`` and ``ours_accurate``) over ``shapes`` after idling the GPU before each, print ``table`` row by
    row and the geomean speedups (overall, and per value of ``row[group_by]`` when given), return the report.

    The report is an error (exit status 2) when ``deep_gemm.<required>`` is missing or there is no GPU; ``ok`` is
    False when some row raised or was inaccurate.
    """
    import deep_gemm

    message = None
    if getattr(deep_gemm, required, None) is None:
        message = f"deep_gemm.{required} is missing: build and install the extension first"
    elif not torch.cuda.is_available():
        message = "no CUDA GPU (torch.cuda.is_available() is False)"
    if message:
        print(f"{name}: {message}")
        return SuiteReport(data={"suite": name, "error": message}, ok=False)
    copy_bandwidth = d2d_copy_bandwidth()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(f"device-to-device copy: {copy_bandwidth * 1e-9:.0f} GB/s (read + write)")
    if legend:
        print(legend)
    print(table.header())
    rows: list[dict[str, Any]] = []
    for shape in shapes:
        gpu_idle(options.idle_s)
        for row in bench_shape(*shape, options):
            derive_throughput(row, copy_bandwidth, baselines)
            print(format_row(row), flush=True)
            rows.append(row)
        torch.cuda.empty_cache()

    geomeans: dict[str, float | None] = {}
    for key in baselines:
        geomeans[key] = geomean(r[f"speedup_vs_{key}"] for r in rows)
        print(f"geomean speedup vs {key}: {fmt(geomeans[key], '.3f')}")
        if group_by is not None:
            for value in dict.fromkeys(r[group_by] for r in rows):
                geomeans[f"{key}/{value}"] = geomean(r[f"speedup_vs_{key}"] for r in rows if r[group_by] == value)
                print(f"    {group_by} {value}: {fmt(geomeans[f'{key}/{value}'], '.3f')}")
    for note in sorted(
        {f"{key}: {r[f'{key}_error']}" for r in rows for key in ("ours", *baselines) if r.get(f"{key}_error")}
    ):
        print(f"note: {note}")
    failed = [r for r in rows if r["ours_error"] or not r["ours_accurate"]]
    if failed:
        print(f"{len(failed)} row(s) raised or exceeded their diff bound")
    data = {
        **report_header(name, options, MAX_DIFF["bf16"], copy_bandwidth),
        "max_diff_by_output": MAX_DIFF,
        "geomean_speedup": geomeans,
        "rows": rows,
    }
    json.dumps(data)  # fail here, not after the run, if something is not serializable
    return SuiteReport(data=data, ok=not failed)


def run_bf16(options: BenchOptions) -> SuiteReport:
    """Run the ``bf16`` suite, print its table and return the JSON-ready report."""
    shapes = [parse_bf16_mnk(s) for s in options.shapes] if options.shapes else list(BF16_SHAPES)
    legend = (
        "speedup = cuBLAS time / ours (above 1: ours faster); cuBLAS = torch.mm on the same layout, or for FP32 D\n"
        "with C torch.addmm(c, a, b.t(), out_dtype=torch.float32); diff = calc_diff vs float64, '!' over 1e-5 (BF16 D)\n"
        "or 1e-8 (FP32 D)"
    )
    return run_rows_suite(
        "bf16", "bf16_gemm_nt", shapes, _bench_shape, _TABLE, _format_row, ("cublas",), options, "variant", legend
    )


BF16_SUITE = register_suite(
    Suite(
        name="bf16",
        description="BF16 GEMMs bf16_gemm_{nt,nn,tn,tt} (BF16 D; nt also FP32 D + C) vs cuBLAS torch.mm / addmm",
        shape_help="MxNxK, e.g. 4096x7168x2048",
        parse_shape=parse_bf16_mnk,
        run=run_bf16,
    )
)
