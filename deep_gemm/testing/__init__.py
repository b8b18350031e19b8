"""Helpers for tests and benchmarks, as the reference API's ``deep_gemm.testing``, plus our richer timers.

The reference's functions: ``bench``, ``bench_kineto`` (:mod:`.drop_in_bench`), ``calc_diff``,
``assert_bitwise_equal`` (:mod:`.numeric`), ``count_bytes``, ``get_arch_major``, ``test_filter``,
``ignore_env`` (:mod:`.selection`), ``empty_suppress``, ``suppress_stdout_stderr``
(:mod:`.output_capture`). Ours: ``bench_kernel``/``BenchResult`` (every sample, an L2 flush before
each call), ``kineto_kernel_times`` (``{name: seconds}``), ``d2d_copy_bandwidth``, ``gpu_idle``,
``sm_clock_mhz`` (:mod:`.timing`).
"""

from deep_gemm.testing.drop_in_bench import bench, bench_kineto
from deep_gemm.testing.numeric import assert_bitwise_equal, calc_diff
from deep_gemm.testing.output_capture import empty_suppress, suppress_stdout_stderr
from deep_gemm.testing.selection import get_arch_major, ignore_env, test_filter
from deep_gemm.testing.timing import (
    BenchResult,
    bench_kernel,
    count_bytes,
    d2d_copy_bandwidth,
    gpu_idle,
    kineto_kernel_times,
    sm_clock_mhz,
)

# CTAs that whole clusters of 1 .. 8 CTAs fill on an H200 (132 SMs; as DG_PRINT_CONFIGS=1 prints them there): the
# `cluster_ctas` the GEMM heuristic plans with there, for CPU-side checks of its picks
H200_CLUSTER_CTAS = [132, 132, 117, 120, 110, 102, 105, 120]

__all__ = [
    "H200_CLUSTER_CTAS",
    "BenchResult",
    "assert_bitwise_equal",
    "bench",
    "bench_kernel",
    "bench_kineto",
    "calc_diff",
    "count_bytes",
    "d2d_copy_bandwidth",
    "empty_suppress",
    "get_arch_major",
    "gpu_idle",
    "ignore_env",
    "kineto_kernel_times",
    "sm_clock_mhz",
    "suppress_stdout_stderr",
    "test_filter",
]
