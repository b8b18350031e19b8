"""Helpers for tests and benchmarks: numeric comparison and GPU timing."""

from deep_gemm.testing.bench import (
    BenchResult,
    bench_kernel,
    bench_kineto,
    count_bytes,
    d2d_copy_bandwidth,
    gpu_idle,
    sm_clock_mhz,
)
from deep_gemm.testing.numeric import calc_diff

__all__ = [
    "BenchResult",
    "bench_kernel",
    "bench_kineto",
    "calc_diff",
    "count_bytes",
    "d2d_copy_bandwidth",
    "gpu_idle",
    "sm_clock_mhz",
]
