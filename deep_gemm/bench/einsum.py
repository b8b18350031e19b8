"""The ``einsum`` suite: ``einsum`` (the three BF16 expressions), ``fp8_einsum`` and ``fp8_gemm_nt_skip_head_mid``
against the PyTorch calls an engine would make instead, timed in the same run (issue 43's shapes).

A shape is ``CASE:DIMS``:

- ``bhd:BxHxDxR``: ``einsum('bhr,hdr->bhd')``, A BF16 [B, H, R], B BF16 [H, D, R], D BF16 [B, H, D]; baseline
  ``torch.einsum`` (cuBLAS batched over the heads).
- ``bhr:BxHxDxR``: ``einsum('bhd,hdr->bhr')``, A [B, H, D], B [H, D, R], D [B, H, R]; baseline ``torch.einsum``.
- ``mn:SxMxNxK``: ``einsum('bmk,bnk->mn')``, A [S, M, K], B [S, N, K], D BF16 [M, N] = sum over s; baseline
  ``torch.einsum``.
- ``fp8:BxHxDxR``: ``fp8_einsum('bhr,hdr->bhd')`` with A cast per token (1 x 128) and B per 128 x 128 block of each
  head, D BF16; baseline the BF16 ``torch.einsum`` of the same shape (what the FP8 path replaces).
- ``skip:MxKxHxLEFTxMIDxRIGHT``: ``fp8_gemm_nt_skip_head_mid`` into D [M, H (LEFT + MID + RIGHT)], B [H (LEFT +
  RIGHT), K]; baselines ``fp8_gemm_nt`` into an [M, N] scratch then two strided copies into D (the composition an
  engine writes) and the BF16 ``torch.matmul`` plus the same copies (cuBLAS).

TFLOPS count 2 x the multiply-adds; GB/s count every operand and D once. The accuracy column is calc_diff against the
BF16 product of the same operands (the FP8 cases: of the dequantized values).
"""

from typing import Any

import torch

from deep_gemm.bench.common import median_cell, run_rows, torch_cells
from deep_gemm.bench.grouped import MAX_DIFF, measure_baselines, measure_ours
from deep_gemm.bench.registry import BenchOptions, Suite, SuiteReport, register_suite
from deep_gemm.bench.report import Column, Table, fmt
from deep_gemm.testing import calc_diff

__all__ = ["EINSUM_SHAPES", "parse_einsum_shape", "run_einsum"]

# Each case's dimension count
_DIMS = {"bhd": 4, "bhr": 4, "mn": 4, "fp8": 4, "skip": 6}
_PER_HEAD = tuple((b, 128, 128, 512) for b in (64, 512, 4096))
EINSUM_SHAPES: tuple[tuple, ...] = (
    tuple(("bhd", *s) for s in _PER_HEAD)
    + tuple(("bhr", *s) for s in _PER_HEAD)
    + tuple(("mn", 8, mn, mn, 4096) for mn in (4096, 7168))
    + tuple(("fp8", *s) for s in _PER_HEAD)
    # (the V3.2-style q projection: 128 heads of 128 no-RoPE columns written, 64 RoPE columns left to the caller)
    + tuple(("skip", m, 1536, 128, 128, 64, 0) for m in (128, 4096))
)

_TABLE = Table(
    [
        Column("case", 5),
        Column("shape", 24),
        Column("ours us", 9),
        Column("TFLOPS", 7),
        Column("GB/s", 6),
        Column("base us", 9),
        Column("speedup", 7),
        Column("diff", 8),
    ]
)


def parse_einsum_shape(text: str) -> tuple:
    """Parse ``"CASE:DIMS"`` (e.g. ``"bhd:4096x128x128x512"``, ``"skip:4096x1536x128x128x64x0"``) into ``(case,
    *dims)``.

    Raises:
        ValueError: an unknown case, or not the case's count of integers separated by ``x`` (positive; the skip
            case's MID and one of LEFT / RIGHT may be 0).
    """
    case, sep, dims_text = text.partition(":")
    if not sep or case not in _DIMS:
        raise ValueError(
            f"expected a shape CASE:DIMS with CASE one of {', '.join(_DIMS)}, such as "
            f"'bhd:4096x128x128x512', got {text!r}"
        )
    try:
        dims = tuple(int(p) for p in dims_text.lower().split("x"))
    except ValueError:
        dims = ()
    count = _DIMS[case]
    positive = dims[:3] if case == "skip" else dims
    if len(dims) != count or any(d <= 0 for d in positive) or any(d < 0 for d in dims):
        raise ValueError(
            f"expected a shape {case}: of {count} integers separated by 'x' (positive"
            f"{'; LEFT, MID, RIGHT non-negative' if case == 'skip' else ''}), got {text!r}"
        )
    if case == "skip" and dims[3] + dims[5] == 0:
        raise ValueError(f"expected LEFT + RIGHT > 0 in a skip shape, got {text!r}")
    return (case, *dims)


def _bf16(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


def _per_head_case(case: str, b: int, h: int, d: int, r: int) -> tuple[dict, Any, Any, Any]:
    import deep_gemm

    expr = "bhr,hdr->bhd" if case == "bhd" else "bhd,hdr->bhr"
    a = _bf16(b, h, r) if case == "bhd" else _bf16(b, h, d)
    w = _bf16(h, d, r)
    out = torch.full((b, h, d) if case == "bhd" else (b, h, r), float("nan"), device="cuda", dtype=torch.bfloat16)
    row = {"flops": 2 * b * h * d * r, "bytes": 2 * (a.numel() + w.numel() + out.numel())}

    def ours() -> torch.Tensor:
        deep_gemm.einsum(expr, a, w, out)
        return out

    def diffs() -> list[float]:
        return [float(calc_diff(out, torch.einsum(expr, a.float(), w.float())))]

    return row, ours, diffs, {"torch": lambda: torch.einsum(expr, a, w)}


def _mn_case(s: int, m: int, n: int, k: int) -> tuple[dict, Any, Any, Any]:
    import deep_gemm

    a, w = _bf16(s, m, k), _bf16(s, n, k)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    row = {"flops": 2 * s * m * n * k, "bytes": 2 * (a.numel() + w.numel() + out.numel())}

    def ours() -> torch.Tensor:
        deep_gemm.einsum("bmk,bnk->mn", a, w, out)
        return out

    def diffs() -> list[float]:
        return [float(calc_diff(out, torch.einsum("bmk,bnk->mn", a.float(), w.float())))]

    return row, ours, diffs, {"torch": lambda: torch.einsum("bmk,bnk->mn", a, w)}


def _fp8_case(b: int, h: int, d: int, r: int) -> tuple[dict, Any, Any, Any]:
    import deep_gemm
    from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8

    a_bf16, w_bf16 = _bf16(b, h, r), _bf16(h, d, r)
    a, sfa = per_token_cast_to_fp8(a_bf16.view(b * h, r), use_ue8m0=False)
    a, sfa = a.view(b, h, r), sfa.view(b, h, -1)
    w, sfw = per_block_cast_to_fp8(w_bf16, use_ue8m0=False)
    out = torch.full((b, h, d), float("nan"), device="cuda", dtype=torch.bfloat16)
    num_bytes = a.numel() + w.numel() + 4 * (sfa.numel() + sfw.numel()) + 2 * out.numel()
    row = {"flops": 2 * b * h * d * r, "bytes": num_bytes}

    def ours() -> torch.Tensor:
        deep_gemm.fp8_einsum("bhr,hdr->bhd", (a, sfa), (w, sfw), out)
        return out

    def diffs() -> list[float]:
        a_deq = a.float() * sfa.float().repeat_interleave(128, dim=2)[:, :, :r]
        w_deq = w.float() * sfw.float().repeat_interleave(128, dim=1).repeat_interleave(128, dim=2)[:, :d, :r]
        return [float(calc_diff(out, torch.einsum("bhr,hdr->bhd", a_deq, w_deq)))]

    return row, ours, diffs, {"torch": lambda: torch.einsum("bhr,hdr->bhd", a_bf16, w_bf16)}


def _skip_case(m: int, k: int, h: int, left: int, mid: int, right: int) -> tuple[dict, Any, Any, Any]:
    import deep_gemm
    from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8

    n, width = h * (left + right), left + mid + right
    x_bf16, w_bf16 = _bf16(m, k), _bf16(n, k)
    a, w = per_token_cast_to_fp8(x_bf16, use_ue8m0=False), per_block_cast_to_fp8(w_bf16, use_ue8m0=False)
    out = torch.full((m, h * width), float("nan"), device="cuda", dtype=torch.bfloat16)
    scratch = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    row = {"flops": 2 * m * n * k, "bytes": m * k + n * k + 2 * m * n}

    def place(gemm: torch.Tensor) -> torch.Tensor:
        heads, by_head = out.view(m, h, width), gemm.view(m, h, left + right)
        heads[:, :, :left].copy_(by_head[:, :, :left])
        heads[:, :, left + mid :].copy_(by_head[:, :, left:])
        return out

    def ours() -> torch.Tensor:
        deep_gemm.fp8_gemm_nt_skip_head_mid(a, w, out, (left, mid, right))
        return out

    def fp8_then_copies() -> torch.Tensor:
        deep_gemm.fp8_gemm_nt(a, w, scratch)
        return place(scratch)

    def diffs() -> list[float]:
        a_deq = a[0].float() * a[1].float().repeat_interleave(128, dim=1)[:, :k]
        w_deq = w[0].float() * w[1].float().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[:n, :k]
        written = out.view(m, h, width)
        ref = (a_deq @ w_deq.T).view(m, h, left + right)
        return [float(calc_diff(torch.cat([written[:, :, :left], written[:, :, left + mid :]], dim=2), ref))]

    baselines = {"fp8_copies": fp8_then_copies, "torch": lambda: place(torch.matmul(x_bf16, w_bf16.T))}
    return row, ours, diffs, baselines


def _bench(shape: tuple, options: BenchOptions) -> dict[str, Any]:
    case, *dims = shape
    if case in ("bhd", "bhr"):
        row, ours, diffs, baselines = _per_head_case(case, *dims)
    elif case == "mn":
        row, ours, diffs, baselines = _mn_case(*dims)
    elif case == "fp8":
        row, ours, diffs, baselines = _fp8_case(*dims)
    else:
        row, ours, diffs, baselines = _skip_case(*dims)
    row = {"case": case, "dims": list(dims), **row}
    measure_ours(row, ours, diffs, options)
    measure_baselines(row, baselines, options)
    return row


def run_einsum(options: BenchOptions) -> SuiteReport:
    """Run the ``einsum`` suite, print its table, return the JSON-ready report."""
    shapes = [parse_einsum_shape(s) for s in options.shapes] if options.shapes else list(EINSUM_SHAPES)

    def cells(row: dict[str, Any]) -> list[str]:
        return [row["case"], "x".join(map(str, row["dims"])), median_cell(row["ours"]), fmt(row["tflops"], ".0f"),
                fmt(row["gbps"], ".0f"), *torch_cells(row, ".1e")]  # fmt: skip

    return run_rows(
        "einsum",
        options,
        shapes,
        _bench,
        _TABLE,
        cells,
        MAX_DIFF,
        baselines=("torch", "fp8_copies"),
        group_of=lambda row: row["case"],
    )


EINSUM_SUITE = register_suite(
    Suite(
        name="einsum",
        description="einsum (three BF16 expressions), fp8_einsum and fp8_gemm_nt_skip_head_mid vs torch.einsum / "
        "torch.matmul (cuBLAS) and fp8_gemm_nt + copies",
        shape_help="CASE:DIMS with CASE bhd|bhr|fp8 (BxHxDxR), mn (SxMxNxK), skip (MxKxHxLEFTxMIDxRIGHT), "
        "e.g. bhd:4096x128x128x512",
        parse_shape=parse_einsum_shape,
        run=run_einsum,
    )
)
