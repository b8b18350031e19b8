"""The ``fp4`` suite: ``deep_gemm.fp8_fp4_gemm_nt`` with a packed FP4 B against our own FP8 GEMM on the same shapes.

Per shape ``(M, N, K)``: fresh ``torch.randn`` inputs; A quantized per token (1x128, FP8) for both; B quantized to
FP4 (e2m1, UE8M0 per 1x32, the scales packed four to an int32 so that no scale pass runs on the host) and, for the
baseline, to FP8 per 128x128 block (``deep_gemm.fp8_gemm_nt``). Both timed with the L2 flushed before every call;
``speedup`` is ``t_fp8 / t_fp4`` (above 1: FP4 faster). GB/s and ``%copy`` count the bytes the FP4 call moves.
``a1x32`` and ``fp4xfp4``: the same call with A given with packed UE8M0 1x32 scales, and A in FP4 (1x32), each
including the pre-pass that folds A's scales to 1x128 (accuracy is the GPU tests' job: tests/test_fp4_gemm.py).
Accuracy of the FP4 result against the float64 product of its quantized operands (``calc_diff``); timings are never
asserted. Issue targets: M <= 64 at least 1.6x FP8 and 80 % of the copy bandwidth; M = 4096 at least 0.9x FP8.
"""

import json
from typing import Any

import torch

from deep_gemm.bench.common import copy_bandwidth_text, derive_throughput, diff_cell, median_cell, report_header
from deep_gemm.bench.common import time_call as _time
from deep_gemm.bench.common import try_first_call as _try_first_call
from deep_gemm.bench.fp8_gemm import parse_mnk
from deep_gemm.bench.registry import BenchOptions, Suite, SuiteReport, register_suite
from deep_gemm.bench.report import Column, Table, fmt, geomean
from deep_gemm.testing import calc_diff, count_bytes, d2d_copy_bandwidth, gpu_idle
from deep_gemm.utils import (
    cast_back_from_fp4,
    get_mn_major_tma_aligned_tensor,
    per_block_cast_to_fp8,
    per_token_cast_to_fp4,
    per_token_cast_to_fp8,
)
from deep_gemm.utils.casts import pack_scales_along_k

__all__ = ["FP4_SHAPES", "run_fp4"]

MAX_DIFF = 1e-5
_MS = (1, 16, 32, 64, 128, 4096)
_NKS = ((2112, 7168), (576, 7168), (4096, 7168), (7168, 2048), (24576, 1536), (7168, 16384))
FP4_SHAPES: tuple[tuple[int, int, int], ...] = tuple((m, n, k) for m in _MS for n, k in _NKS)

_TABLE = Table(
    [
        Column("M", 5),
        Column("N", 6),
        Column("K", 5),
        Column("fp4 us", 9),
        Column("TFLOPS", 7),
        Column("GB/s", 6),
        Column("%copy", 5),
        Column("fp8 us", 9),
        Column("speedup", 7),
        Column("diff", 8),
        Column("a1x32 us", 9),
        Column("fp4xfp4 us", 10),
    ]
)


def _bench_shape(m: int, n: int, k: int, options: BenchOptions) -> dict[str, Any]:
    import deep_gemm

    row: dict[str, Any] = {"m": m, "n": n, "k": k}
    a, sfa = per_token_cast_to_fp8(torch.randn((m, k), dtype=torch.bfloat16, device="cuda"))
    sfa = get_mn_major_tma_aligned_tensor(sfa)
    b_bf16 = torch.randn((n, k), dtype=torch.bfloat16, device="cuda")
    b4, sfb4 = per_token_cast_to_fp4(b_bf16, use_ue8m0=True, gran_k=32)
    sfb4_packed = pack_scales_along_k(sfb4)
    b8, sfb8 = per_block_cast_to_fp8(b_bf16)
    d = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    row["bytes"] = count_bytes(a, sfa, b4, sfb4_packed, d)
    row["flops"] = 2 * m * n * k
    ref = (a.double() * sfa.double().repeat_interleave(128, dim=1)[:, :k]) @ cast_back_from_fp4(
        b4, sfb4, gran_k=32
    ).double().t()

    def fp4() -> torch.Tensor:
        deep_gemm.fp8_fp4_gemm_nt((a, sfa), (b4, sfb4_packed), d)
        return d

    d.fill_(float("nan"))
    out, row["ours_error"] = _try_first_call(fp4)
    row["ours_diff"] = float(calc_diff(out, ref)) if out is not None else None
    row["ours_accurate"] = row["ours_diff"] is not None and row["ours_diff"] < MAX_DIFF
    row["ours"] = _time(fp4, options) if out is not None else None
    del ref

    def fp8() -> torch.Tensor:
        deep_gemm.fp8_gemm_nt((a, sfa), (b8, sfb8), d)
        return d

    out, row["fp8_error"] = _try_first_call(fp8)
    row["fp8"] = _time(fp8, options) if out is not None else None

    # A with 1x32 scales (packed UE8M0), and A in FP4: the same GEMM after the fold pre-pass (timed with it)
    x = torch.randn((m, k), dtype=torch.bfloat16, device="cuda")
    a_1x32 = per_token_cast_to_fp8(x, use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)
    a4, sfa4 = per_token_cast_to_fp4(x, use_ue8m0=True, gran_k=32)
    a_fp4 = (a4, pack_scales_along_k(sfa4))
    for key, a_pair in (("a1x32", a_1x32), ("fp4xfp4", a_fp4)):

        def call(a_pair=a_pair) -> torch.Tensor:
            deep_gemm.fp8_fp4_gemm_nt(a_pair, (b4, sfb4_packed), d)
            return d

        out, row[f"{key}_error"] = _try_first_call(call)
        row[key] = _time(call, options) if out is not None else None
    return row


def _format_row(row: dict[str, Any]) -> str:
    diff = diff_cell(row, ".1e")
    return _TABLE.row(
        [
            str(row["m"]),
            str(row["n"]),
            str(row["k"]),
            median_cell(row["ours"]),
            fmt(row["tflops"], ".0f"),
            fmt(row["gbps"], ".0f"),
            fmt(row["pct_copy_bandwidth"], ".0f"),
            median_cell(row["fp8"]),
            fmt(row["speedup_vs_fp8"], ".2f"),
            diff,
            median_cell(row["a1x32"]),
            median_cell(row["fp4xfp4"]),
        ]
    )


def run_fp4(options: BenchOptions) -> SuiteReport:
    """Run the FP8 x FP4 suite, print its table and return the JSON-ready report.

    ``report.ok`` is False when there is no GPU, or any shape raised or failed the accuracy bound.
    """
    if not torch.cuda.is_available():
        message = "no CUDA GPU (torch.cuda.is_available() is False)"
        print(f"fp4: {message}")
        return SuiteReport(data={"suite": "fp4", "error": message}, ok=False)
    shapes = [parse_mnk(s) for s in options.shapes] if options.shapes else list(FP4_SHAPES)
    copy_bandwidth = d2d_copy_bandwidth()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(copy_bandwidth_text(copy_bandwidth, None))
    print(
        "speedup = our FP8 GEMM's time / FP8 x FP4 (above 1: FP4 faster); diff = calc_diff vs float64, "
        f"'!' > {MAX_DIFF}"
    )
    print(_TABLE.header())
    rows = []
    for m, n, k in shapes:
        gpu_idle(options.idle_s)
        row = _bench_shape(m, n, k, options)
        derive_throughput(row, copy_bandwidth, ("fp8",))
        rows.append(row)
        print(_format_row(row), flush=True)
    print(f"geomean speedup vs FP8: {fmt(geomean(r['speedup_vs_fp8'] for r in rows), '.3f')}")
    keys = ("ours", "fp8", "a1x32", "fp4xfp4")
    for note in sorted({f"{key}: {r[f'{key}_error']}" for r in rows for key in keys if r[f"{key}_error"]}):
        print(f"note: {note}")
    failed = [r for r in rows if r["ours_error"] or not r["ours_accurate"]]
    if failed:
        print(
            f"{len(failed)} shape(s) failed or exceeded diff {MAX_DIFF}: "
            + ", ".join(f"{r['m']}x{r['n']}x{r['k']}" for r in failed)
        )
    data = {**report_header("fp4", options, MAX_DIFF, copy_bandwidth), "rows": rows}
    json.dumps(data)
    return SuiteReport(data=data, ok=not failed)


FP4_SUITE = register_suite(
    Suite(
        name="fp4",
        description="FP8 x FP4 GEMM (fp8_fp4_gemm_nt, packed FP4 B) vs our FP8 GEMM on the same shapes",
        shape_help="MxNxK, e.g. 64x7168x2048 (K a multiple of 32)",
        parse_shape=parse_mnk,
        run=run_fp4,
    )
)
