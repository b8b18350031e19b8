"""The ``hc`` suite: the HyperConnection pre-norm ``tf32_hc_prenorm_gemm`` (D = A @ B.T on TF32 tensor cores and the
row sums of A^2, one pass over A) against PyTorch.

A shape is ``MxNxK``: A BF16 [M, K], B FP32 [N, K], D FP32 [M, N], ``num_splits=None`` (the kernel's own choice). The
kernel is memory-bound: GB/s and %copy count A, B, D and sqr_sum once, against the device-to-device copy bandwidth.
Baseline, timed in the same run: ``torch.matmul(a.float(), b.T)`` with TF32 allowed plus
``a.float().square().sum(-1)`` (the two-pass form the kernel replaces). The accuracy column is the worse calc_diff of D
and sqr_sum against float64 of the unrounded inputs (B's TF32 rounding included in the difference).
"""

from typing import Any

import torch

from deep_gemm.bench.common import median_cell, parse_int_shape, run_rows, torch_cells
from deep_gemm.bench.grouped import MAX_DIFF, measure_baselines, measure_ours
from deep_gemm.bench.registry import BenchOptions, Suite, SuiteReport, register_suite
from deep_gemm.bench.report import Column, Table, fmt
from deep_gemm.testing import calc_diff

__all__ = ["HC_SHAPES", "parse_hc_shape", "run_hc"]

# The models' K (hidden x 4 streams of 1792 / 1920, and 7168 x 4), N = 24 (and 32), M from decode to prefill
HC_SHAPES = tuple((m, 24, k) for k in (7168, 7680, 28672) for m in (1, 128, 1024, 4096, 8192)) + tuple(
    (m, 32, k) for k in (7168, 28672) for m in (1024, 8192)
)

_TABLE = Table(
    [
        Column("M", 5),
        Column("N", 3),
        Column("K", 5),
        Column("ours us", 9),
        Column("GB/s", 6),
        Column("%copy", 5),
        Column("torch us", 9),
        Column("speedup", 7),
        Column("diff", 8),
    ]
)


def parse_hc_shape(text: str) -> tuple[int, int, int]:
    """Parse ``"MxNxK"`` (e.g. ``"4096x24x28672"``) into positive ints.

    Raises:
        ValueError: not three positive integers separated by ``x``.
    """
    return parse_int_shape(text, 3, "MxNxK of positive integers", "4096x24x28672")


def _bench(m: int, n: int, k: int, options: BenchOptions) -> dict[str, Any]:
    import deep_gemm

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda") * 0.05
    d = torch.full((m, n), float("nan"), device="cuda")
    sqr_sum = torch.full((m,), float("nan"), device="cuda")
    row: dict[str, Any] = {
        "m": m,
        "n": n,
        "k": k,
        "flops": 2 * m * n * k,
        "bytes": 2 * m * k + 4 * n * k + 4 * m * n + 4 * m,
    }

    def ours() -> torch.Tensor:
        deep_gemm.tf32_hc_prenorm_gemm(a, b, d, sqr_sum)
        return d

    def diffs() -> list[float]:
        a64 = a.double()
        return [float(calc_diff(d, a64 @ b.double().T)), float(calc_diff(sqr_sum, a64.square().sum(-1)))]

    measure_ours(row, ours, diffs, options)

    def torch_two_pass() -> object:
        allowed = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            a32 = a.float()
            return torch.matmul(a32, b.T), a32.square().sum(-1)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = allowed

    measure_baselines(row, {"torch": torch_two_pass}, options)
    return row


def run_hc(options: BenchOptions) -> SuiteReport:
    """Run the ``hc`` suite, print its table, return the JSON-ready report."""
    shapes = [parse_hc_shape(s) for s in options.shapes] if options.shapes else list(HC_SHAPES)

    def cells(row: dict[str, Any]) -> list[str]:
        return [str(row["m"]), str(row["n"]), str(row["k"]), median_cell(row["ours"]), fmt(row["gbps"], ".0f"),
                fmt(row["pct_copy_bandwidth"], ".0f"), *torch_cells(row, ".1e")]  # fmt: skip

    return run_rows("hc", options, shapes, lambda shape, opts: _bench(*shape, opts), _TABLE, cells, MAX_DIFF)


HC_SUITE = register_suite(
    Suite(
        name="hc",
        description="HyperConnection pre-norm tf32_hc_prenorm_gemm vs torch.matmul (TF32) + a.float().square().sum(-1)",
        shape_help="MxNxK (rows x N x K), e.g. 4096x24x28672",
        parse_shape=parse_hc_shape,
        run=run_hc,
    )
)
