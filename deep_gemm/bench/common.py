"""Helpers shared by the benchmark suites: one timed callable, a first call that records failures."""

from collections.abc import Callable
from typing import Any

import torch

from deep_gemm.bench.registry import BenchOptions
from deep_gemm.testing import bench_kernel

__all__ = ["error_text", "time_call", "try_first_call"]


def error_text(exc: BaseException) -> str:
    """``"TypeName: first line of the message"``, at most 200 characters (for tables and JSON)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:200]


def time_call(fn: Callable[[], object], options: BenchOptions) -> dict[str, Any]:
    """Time ``fn`` (which must already have run once successfully): median, fastest and every sample, in µs."""
    result = bench_kernel(fn, num_warmups=options.num_warmups, num_tests=options.num_tests, flush_l2=options.flush_l2)
    return {"median_us": result.median_us, "min_us": result.min_us, "samples_us": [s * 1e6 for s in result.samples_s]}


def try_first_call(fn: Callable[[], Any]) -> tuple[Any, str | None]:
    """Run ``fn`` once and synchronize: ``(result, None)``, or ``(None, error text)`` if it raised."""
    try:
        out = fn()
        torch.cuda.synchronize()
        return out, None
    except Exception as exc:  # any failure is recorded and the run goes on
        return None, error_text(exc)
