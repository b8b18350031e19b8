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

# CTAs that whole clusters of 1 .. 8 CTAs fill on an H200 (132 SMs; as DG_PRINT_CONFIGS=1 prints them there): the
# `cluster_ctas` the GEMM heuristic plans with there, for CPU-side checks of its picks
H200_CLUSTER_CTAS = [132, 132, 117, 120, 110, 102, 105, 120]

__all__ = [
    "H200_CLUSTER_CTAS",
    "BenchResult",
    "bench_kernel",
    "bench_kineto",
    "calc_diff",
    "count_bytes",
    "d2d_copy_bandwidth",
    "gpu_idle",
    "sm_clock_mhz",
]
