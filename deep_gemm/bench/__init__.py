"""Benchmark suites run by ``python -m deep_gemm.bench``.

A suite is a :class:`Suite` in the registry; importing its module registers it. To add
one (e.g. grouped GEMMs), write ``deep_gemm/bench/<name>.py`` that calls
:func:`register_suite`, and import it below.
"""

from deep_gemm.bench import (
    bf16_gemm,
    bf16_grouped,
    einsum,
    fp4_gemm,
    fp8_gemm,
    grouped,
    hc,
    k_grouped,
    mega_moe,
    mega_moe_dist,
    mqa,
    quant,
)
from deep_gemm.bench.registry import BenchOptions, Suite, SuiteReport, get_suite, register_suite, suite_names

__all__ = [
    "BenchOptions",
    "Suite",
    "SuiteReport",
    "bf16_gemm",
    "bf16_grouped",
    "einsum",
    "fp4_gemm",
    "fp8_gemm",
    "get_suite",
    "grouped",
    "hc",
    "k_grouped",
    "mega_moe",
    "mega_moe_dist",
    "mqa",
    "quant",
    "register_suite",
    "suite_names",
]
