"""The ``quant`` suite: the FP8 (and FP4) cast kernels against their PyTorch forms (deep_gemm.utils.casts).

A shape is ``MxK``: BF16 activations [M, K] (for ``silu_mul`` the input is [M, 2K], gate then up, and K is the
intermediate size). Each shape runs every case:

* ``token128``: ``per_token_quant_fp8`` with 1 x 128 FP32 scales (K-major, as ``per_token_cast_to_fp8`` returns);
* ``token128_mn``: the same, scales written MN-major TMA-aligned (what the GEMMs read); baseline: the PyTorch cast
  followed by ``get_mn_major_tma_aligned_tensor``;
* ``token32_ue8m0``: 1 x 32 UE8M0 scales packed four to an int32;
* ``block128``: ``per_block_quant_fp8``, 128 x 128 FP32 scales;
* ``fp4_g32``: ``per_token_quant_fp4``, e2m1 two to a byte, 1 x 32 UE8M0 scales packed;
* ``silu_mul``: ``silu_and_mul_quant_fp8`` with row weights, 1 x 128 FP32 scales MN-major; baseline: the PyTorch
  SwiGLU (``silu_and_mul_reference``) then the PyTorch cast and the layout transform.

The kernels are memory-bound: GB/s and %copy count the input, the e4m3 output and the scales once, against the
device-to-device copy bandwidth. The diff column counts the bytes (values and scales) that differ from the PyTorch
form's: the kernels are bit-exact, so anything above 0 fails the row.
"""

from typing import Any

import torch

from deep_gemm.bench.common import median_cell, parse_int_shape, run_rows, torch_cells
from deep_gemm.bench.grouped import MAX_DIFF, measure_baselines, measure_ours
from deep_gemm.bench.registry import BenchOptions, Suite, SuiteReport, register_suite
from deep_gemm.bench.report import Column, Table, fmt

__all__ = ["QUANT_CASES", "QUANT_SHAPES", "parse_quant_shape", "run_quant"]

# DeepSeek-V3 hidden 7168 and intermediate 2048 (per expert) / 18432 (dense), decode to prefill rows
QUANT_SHAPES = ((4096, 7168), (128, 7168), (16384, 7168), (4096, 2048), (4096, 18432))
QUANT_CASES = ("token128", "token128_mn", "token32_ue8m0", "block128", "fp4_g32", "silu_mul")

_TABLE = Table(
    [
        Column("case", 13),
        Column("M", 5),
        Column("K", 5),
        Column("ours us", 9),
        Column("GB/s", 6),
        Column("%copy", 5),
        Column("torch us", 9),
        Column("speedup", 7),
        Column("diff", 6),
    ]
)


def parse_quant_shape(text: str) -> tuple[int, int]:
    """Parse ``"MxK"`` (e.g. ``"4096x7168"``) into positive ints.

    Raises:
        ValueError: not two positive integers separated by ``x``.
    """
    return parse_int_shape(text, 2, "MxK of positive integers", "4096x7168")


def _differing_bytes(ours: tuple[torch.Tensor, torch.Tensor], ref: tuple[torch.Tensor, torch.Tensor]) -> float:
    count = 0
    for a, b in zip(ours, ref, strict=True):
        if a.shape != b.shape:
            return float("inf")
        count += int((a.contiguous().view(torch.uint8) != b.contiguous().view(torch.uint8)).sum())
    return float(count)


def _bench(case: str, m: int, k: int, options: BenchOptions) -> dict[str, Any]:
    import deep_gemm
    from deep_gemm.utils.casts import (
        per_block_cast_to_fp8_reference,
        per_token_cast_to_fp8_reference,
        silu_and_mul_reference,
    )
    from deep_gemm.utils.fp4_casts import per_token_cast_to_fp4_reference

    in_cols = 2 * k if case == "silu_mul" else k
    x = torch.randn(m, in_cols, device="cuda", dtype=torch.bfloat16)
    weights = torch.rand(m, device="cuda")
    gran_k = 32 if case in ("token32_ue8m0", "fp4_g32") else 128
    sf_bytes = 4 * m * -(-k // gran_k) if case != "block128" else 4 * -(-m // 128) * -(-k // 128)
    if case in ("token32_ue8m0", "fp4_g32"):
        sf_bytes //= 4  # (UE8M0 bytes)
    out_bytes = m * k // 2 if case == "fp4_g32" else m * k
    row: dict[str, Any] = {"case": case, "m": m, "k": k, "flops": 0, "bytes": 2 * m * in_cols + out_bytes + sf_bytes}

    calls = {
        "token128": (lambda: deep_gemm.per_token_quant_fp8(x), lambda: per_token_cast_to_fp8_reference(x)),
        "token128_mn": (
            lambda: deep_gemm.per_token_quant_fp8(x, sf_mn_major=True),
            lambda: (lambda q: (q[0], deep_gemm.get_mn_major_tma_aligned_tensor(q[1])))(
                per_token_cast_to_fp8_reference(x)
            ),
        ),
        "token32_ue8m0": (
            lambda: deep_gemm.per_token_quant_fp8(x, True, 32, True),
            lambda: per_token_cast_to_fp8_reference(x, True, 32, True),
        ),
        "block128": (lambda: deep_gemm.per_block_quant_fp8(x), lambda: per_block_cast_to_fp8_reference(x)),
        "fp4_g32": (
            lambda: deep_gemm.per_token_quant_fp4(x, True, 32, True),
            lambda: per_token_cast_to_fp4_reference(x, True, 32, True),
        ),
        "silu_mul": (
            lambda: deep_gemm.silu_and_mul_quant_fp8(x, row_weights=weights),
            lambda: (lambda q: (q[0], deep_gemm.get_mn_major_tma_aligned_tensor(q[1])))(
                per_token_cast_to_fp8_reference(silu_and_mul_reference(x, weights))
            ),
        ),
    }
    ours, theirs = calls[case]
    measure_ours(row, ours, lambda: [_differing_bytes(ours(), theirs())], options)
    measure_baselines(row, {"torch": theirs}, options)
    return row


def run_quant(options: BenchOptions) -> SuiteReport:
    """Run the ``quant`` suite, print its table, return the JSON-ready report."""
    shapes = [parse_quant_shape(s) for s in options.shapes] if options.shapes else list(QUANT_SHAPES)
    items = [(case, m, k) for m, k in shapes for case in QUANT_CASES]

    def cells(row: dict[str, Any]) -> list[str]:
        return [row["case"], str(row["m"]), str(row["k"]), median_cell(row["ours"]), fmt(row["gbps"], ".0f"),
                fmt(row["pct_copy_bandwidth"], ".0f"), *torch_cells(row, ".0f")]  # fmt: skip

    return run_rows("quant", options, items, lambda item, opts: _bench(*item, opts), _TABLE, cells, MAX_DIFF)


QUANT_SUITE = register_suite(
    Suite(
        name="quant",
        description="FP8 cast kernels (per-token, per-block, SwiGLU + per-token) vs their PyTorch forms",
        shape_help="MxK (rows x K; for silu_mul K is the intermediate size, the input [M, 2K]), e.g. 4096x7168",
        parse_shape=parse_quant_shape,
        run=run_quant,
    )
)
