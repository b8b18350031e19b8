"""The ``dense`` suite: ``deep_gemm.fp8_gemm_nt`` against cuBLASLt on DeepSeek-V3 shapes.

Per shape ``(M, N, K)``: fresh ``torch.randn`` BF16 inputs, A quantized per token (1x128)
and B per block (128x128), BF16 output. Three timings, each with L2 flushed before every
call (see :func:`deep_gemm.testing.bench_kernel`):

- ours: ``deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)`` with ``sfa`` already in the
  MN-major TMA-aligned layout, so the layout kernel is not timed;
- cuBLASLt with the same blockwise scales (``torch._scaled_mm``, 1x128 x 128x128);
- cuBLASLt per-tensor FP8 with fast accumulation (a speed bound: less exact recipe).

Memory-bound rows (M <= 128) also time our kernel on the device alone (CUPTI, the L2 flushed before each call;
column ``%copy dev``: its bytes over that time against the copy's device time), the streaming rate without the
launch that an event-timed call of a few microseconds also holds.

A speedup is ``t_cublas / t_ours`` (above 1: ours is faster). Accuracy of ours (and of the
cuBLASLt blockwise result) is checked against ``a_bf16 @ b_bf16.T`` in FP32 with
``calc_diff``; a shape above the bound is flagged, not aborted. Timings are never asserted.
"""

import json
from collections.abc import Callable
from typing import Any

import torch

from deep_gemm.bench.common import (
    copy_bandwidth_text,
    derive_throughput,
    device_copy_bandwidth,
    diff_cell,
    error_text,
    kernel_times,
    parse_int_shape,
    pct_of_copy_bandwidth,
    report_header,
)
from deep_gemm.bench.common import time_call as _time
from deep_gemm.bench.common import try_first_call as _try_first_call
from deep_gemm.bench.registry import BenchOptions, Suite, SuiteReport, register_suite
from deep_gemm.bench.report import Column, Table, fmt, geomean
from deep_gemm.testing import calc_diff, count_bytes, d2d_copy_bandwidth, gpu_idle, sm_clock_mhz
from deep_gemm.utils import mn_major_tma_aligned_reference, per_block_cast_to_fp8, per_token_cast_to_fp8

__all__ = ["DENSE_SHAPES", "parse_mnk", "run_dense"]

MAX_DIFF = 1e-3
# Rows up to this M are memory-bound (about 2 M FLOP per byte against a ridge of ~465): timed on the device too
MEMORY_BOUND_MAX_M = 128
_KERNEL = "sm90_gemm_kernel"  # our kernel's name, for the device times
_MS = (1, 16, 32, 64, 128, 4096)
_NKS = (
    (2112, 7168),
    (24576, 1536),
    (32768, 512),
    (7168, 16384),
    (4096, 7168),
    (7168, 2048),
    (576, 7168),
    (129280, 7168),
)
DENSE_SHAPES: tuple[tuple[int, int, int], ...] = tuple((m, n, k) for m in _MS for n, k in _NKS) + ((8192, 8192, 8192),)

_TABLE = Table(
    [
        Column("M", 5),
        Column("N", 6),
        Column("K", 5),
        Column("ours us", 9),
        Column("TFLOPS", 7),
        Column("GB/s", 6),
        Column("%copy", 5),
        Column("%copy dev", 9),
        Column("blockwise us", 9),
        Column("speedup", 7),
        Column("fast-accum us", 9),
        Column("speedup", 7),
        Column("SM MHz", 6),
        Column("diff", 8),
    ]
)


def parse_mnk(text: str) -> tuple[int, int, int]:
    """Parse ``"MxNxK"`` (e.g. ``"4096x7168x2048"``) into positive ints.

    Raises:
        ValueError: not three positive integers separated by ``x``.
    """
    return parse_int_shape(text, 3, "MxNxK of positive integers", "4096x7168x2048")


def _bench_shape(
    m: int, n: int, k: int, gemm: Callable[..., object], sf_layout: Callable[[torch.Tensor], torch.Tensor], options
) -> dict[str, Any]:
    row: dict[str, Any] = {"m": m, "n": n, "k": k}
    a_bf16 = torch.randn((m, k), dtype=torch.bfloat16, device="cuda")
    b_bf16 = torch.randn((n, k), dtype=torch.bfloat16, device="cuda")
    a, sfa = per_token_cast_to_fp8(a_bf16)
    b, sfb = per_block_cast_to_fp8(b_bf16)
    sfa_tma = sf_layout(sfa)
    d = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    row["bytes"] = count_bytes(a, sfa, b, sfb, d)
    row["flops"] = 2 * m * n * k
    ref = a_bf16.float() @ b_bf16.float().t()

    # Ours: the first call compiles the kernel and is checked for accuracy.
    def ours() -> torch.Tensor:
        gemm((a, sfa_tma), (b, sfb), d)
        return d

    d.fill_(float("nan"))
    out, row["ours_error"] = _try_first_call(ours)
    row["ours_diff"] = float(calc_diff(out, ref)) if out is not None else None
    row["ours_accurate"] = row["ours_diff"] is not None and row["ours_diff"] < MAX_DIFF
    row["ours"] = _time(ours, options) if out is not None else None
    row["sm_clock_mhz"] = sm_clock_mhz() if out is not None else None
    row["ours_device_us"] = None
    if out is not None and m <= MEMORY_BOUND_MAX_M:
        try:
            row["ours_device_us"] = kernel_times(ours, {"ours": _KERNEL}, options)["ours"]
        except ValueError as exc:  # no kernel seen by the profiler: under ncu, which holds CUPTI
            print(f"note: no device time for {m}x{n}x{k}: {error_text(exc)}")

    row["blockwise_error"] = row["fast_accum_error"] = None
    row["blockwise_diff"] = row["blockwise"] = row["fast_accum"] = None
    if not options.baselines:
        return row

    # cuBLASLt blockwise: scale_a (M, K/128) MN-major; scale_b.t() is a contiguous (N/128, K/128).
    scale_a, scale_b = sfa.t().contiguous().t(), sfb.contiguous().t()

    def blockwise() -> torch.Tensor:
        return torch._scaled_mm(a, b.t(), scale_a, scale_b, out_dtype=torch.bfloat16)

    out, row["blockwise_error"] = _try_first_call(blockwise)
    row["blockwise_diff"] = float(calc_diff(out, ref)) if out is not None else None
    row["blockwise"] = _time(blockwise, options) if out is not None else None
    del out, ref

    # cuBLASLt per-tensor scaling with fast accumulation: a speed bound, not the same recipe.
    one = torch.ones((), dtype=torch.float32, device="cuda")

    def fast_accum() -> torch.Tensor:
        return torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True)

    out, row["fast_accum_error"] = _try_first_call(fast_accum)
    row["fast_accum"] = _time(fast_accum, options) if out is not None else None
    return row


def _format_row(row: dict[str, Any]) -> str:
    def us(entry: dict[str, Any] | None) -> str:
        return fmt(entry["median_us"] if entry else None, ".1f")

    diff = diff_cell(row, ".1e")
    return _TABLE.row(
        [
            str(row["m"]),
            str(row["n"]),
            str(row["k"]),
            us(row["ours"]),
            fmt(row["tflops"], ".0f"),
            fmt(row["gbps"], ".0f"),
            fmt(row["pct_copy_bandwidth"], ".0f"),
            fmt(row["pct_copy_bandwidth_device"], ".0f"),
            us(row["blockwise"]),
            fmt(row["speedup_vs_blockwise"], ".2f"),
            us(row["fast_accum"]),
            fmt(row["speedup_vs_fast_accum"], ".2f"),
            fmt(row["sm_clock_mhz"]),
            diff,
        ]
    )


def run_dense(options: BenchOptions) -> SuiteReport:
    """Run the dense FP8 GEMM suite, print its table and return the JSON-ready report.

    ``report.ok`` is False when ``deep_gemm.fp8_gemm_nt`` is missing, there is no GPU, or
    any shape raised or failed the accuracy bound.
    """
    import deep_gemm

    gemm = getattr(deep_gemm, "fp8_gemm_nt", None)
    if gemm is None:
        message = "deep_gemm.fp8_gemm_nt is missing: build and install the extension first"
        print(f"dense: {message}")
        return SuiteReport(data={"suite": "dense", "error": message}, ok=False)
    if not torch.cuda.is_available():
        message = "no CUDA GPU (torch.cuda.is_available() is False)"
        print(f"dense: {message}")
        return SuiteReport(data={"suite": "dense", "error": message}, ok=False)
    sf_layout = getattr(deep_gemm, "get_mn_major_tma_aligned_tensor", None)
    if sf_layout is None:
        print("dense: deep_gemm.get_mn_major_tma_aligned_tensor is missing; using the PyTorch reference layout")
        sf_layout = mn_major_tma_aligned_reference
    shapes = [parse_mnk(s) for s in options.shapes] if options.shapes else list(DENSE_SHAPES)

    copy_bandwidth = d2d_copy_bandwidth()
    copy_bandwidth_device = device_copy_bandwidth() if any(m <= MEMORY_BOUND_MAX_M for m, _, _ in shapes) else None
    device = torch.cuda.get_device_name()
    print(f"device: {device}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(copy_bandwidth_text(copy_bandwidth, copy_bandwidth_device))
    print("speedup = cuBLASLt time / ours (above 1: ours faster); diff = calc_diff vs FP32 reference, '!' > 1e-3")
    print(_TABLE.header())
    rows = []
    for m, n, k in shapes:
        gpu_idle(options.idle_s)
        row = _bench_shape(m, n, k, gemm, sf_layout, options)
        derive_throughput(row, copy_bandwidth, ("blockwise", "fast_accum"))
        row["pct_copy_bandwidth_device"] = pct_of_copy_bandwidth(
            row["bytes"], row["ours_device_us"], copy_bandwidth_device
        )
        rows.append(row)
        print(_format_row(row), flush=True)

    geomeans = {key: geomean(r[f"speedup_vs_{key}"] for r in rows) for key in ("blockwise", "fast_accum")}
    print(f"geomean speedup vs cuBLASLt blockwise: {fmt(geomeans['blockwise'], '.3f')}")
    print(f"geomean speedup vs cuBLASLt per-tensor fast-accum: {fmt(geomeans['fast_accum'], '.3f')}")
    notes = sorted(
        {
            f"{key}: {r[f'{key}_error']}"
            for r in rows
            for key in ("ours", "blockwise", "fast_accum")
            if r[f"{key}_error"]
        }
    )
    for note in notes:
        print(f"note: {note}")
    failed = [r for r in rows if r["ours_error"] or not r["ours_accurate"]]
    if failed:
        print(
            f"{len(failed)} shape(s) failed or exceeded diff {MAX_DIFF}: "
            + ", ".join(f"{r['m']}x{r['n']}x{r['k']}" for r in failed)
        )

    data = {
        **report_header("dense", options, MAX_DIFF, copy_bandwidth, copy_bandwidth_device),
        "geomean_speedup": {"cublaslt_blockwise": geomeans["blockwise"], "cublaslt_fast_accum": geomeans["fast_accum"]},
        "rows": rows,
    }
    json.dumps(data)  # fail here, not after the run, if something is not serializable
    return SuiteReport(data=data, ok=not failed)


DENSE_SUITE = register_suite(
    Suite(
        name="dense",
        description="FP8 1D2D GEMM (fp8_gemm_nt) vs cuBLASLt blockwise and per-tensor fast-accum",
        shape_help="MxNxK, e.g. 4096x7168x2048",
        parse_shape=parse_mnk,
        run=run_dense,
    )
)
