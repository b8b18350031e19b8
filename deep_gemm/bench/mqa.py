"""The ``mqa`` suite: ``deep_gemm.fp8_mqa_logits`` (the V3.2 lightning indexer, prefill) against a chunked
PyTorch implementation of the same math.

A shape is ``SxS_kv[xH[xD]][-pattern]`` (H = 64, D = 128 by default; pattern ``causal`` (default),
``cp`` or ``window``: see :func:`make_key_ranges`), or ``paged:BxNEXT_NxCONTEXT`` for one paged-decode row. Inputs: q cast to FP8 directly, kv with one FP32 scale per key, FP32 weights,
clean FP32 logits ``[S, S_kv]``.

- ours: one ``fp8_mqa_logits`` call (no host check of ks/ke unless ``DG_DEBUG_CHECKS=1``, which the suite
  clears so that a synchronization is never timed); also timed with ``clean_logits=False``: the difference is
  what writing -inf outside [ks, ke) costs (column ``clean %``, of the clean call);
- torch: :func:`torch_mqa_logits`, chunks of queries, each against only the keys one of its queries sees: one FP8
  ``torch._scaled_mm`` per chunk with the kv scales as per-column scales (so that they are applied before the
  relu, as the semantics need; BF16 ``matmul`` where ``_scaled_mm`` is unavailable), relu in place, the head sum
  as a batched matmul with the weights, then -inf outside [ks, ke) (the chunks' bounds read from ks/ke once,
  outside the timing).

TFLOPS count 2 * H * D per valid (i, j) pair; GB/s count q, kv, scales, weights and the logits written.
Accuracy of ours is checked with ``calc_diff`` against the torch result in float32 on the valid positions,
and the -inf positions must match; a shape off the bound is flagged, not aborted. Timings are never asserted.

Paged decode (run after the prefill shapes when no shapes are given): ``fp8_paged_mqa_logits`` (H = 64,
D = 128, block_kv = 64, clean_logits=False as engines call it) for batch x next_n x context in
:data:`PAGED_SHAPES`, every request of the same context length, blocks in random cache order, the schedule
built once outside the timing; the schedule kernel (``get_paged_mqa_logits_metadata``) and the call with
``clean_logits=True`` are timed too (columns ``meta %``: its time over the kernel's, ``meta us``: its time; ``clean
%``: the extra time of the clean call over the kernel's); so is a 1-element fill, the floor of any launch under this
protocol (printed as ``launch floor``). Both kernels are also timed on the device alone (CUPTI, the schedule kernel
then the paged kernel per call, L2 flushed before each pair; columns ``dev us``: the paged kernel's mean, ``meta
%dev``: the schedule kernel's over it), which leaves out the host's launch cost the event timings include. TFLOPS
count 2 * H * D per valid (token, key) pair; GB/s count the kv cache blocks read, q, weights and the valid logits
written, also as a percentage of the device-to-device copy bandwidth measured in the same run (``% copy``: event
times of both; ``% copy dev``: the paged kernel's device time against the copy's, each without a launch). Accuracy:
``calc_diff`` against a float64 reference of the first and last requests.
"""

import json
import os
from typing import Any

import torch

from deep_gemm.bench.common import (
    copy_bandwidth_text,
    derive_throughput,
    device_copy_bandwidth,
    diff_cell,
    error_text,
    kernel_times,
    pct_of_copy_bandwidth,
    report_header,
    time_call,
    try_first_call,
)
from deep_gemm.bench.registry import BenchOptions, Suite, SuiteReport, register_suite
from deep_gemm.bench.report import Column, Table, fmt, geomean
from deep_gemm.testing import calc_diff, d2d_copy_bandwidth, gpu_idle, sm_clock_mhz
from deep_gemm.utils import per_token_cast_to_fp8

__all__ = [
    "MQA_SHAPES",
    "PAGED_SHAPES",
    "make_key_ranges",
    "make_paged_inputs",
    "parse_mqa_shape",
    "run_mqa",
    "torch_mqa_chunks",
    "torch_mqa_logits",
]

_PAGED_PREFIX = "paged:"

MAX_DIFF = 1e-3
MQA_SHAPES: tuple[tuple[int, int, int, int, str], ...] = tuple(
    (s, s_kv, 64, 128, pattern)
    for pattern in ("causal", "cp", "window")
    for s in (2048, 8192)
    for s_kv in (8192, 65536)
) + ((4096, 16384, 32, 128, "causal"), (4096, 16384, 16, 64, "causal"))
_PATTERNS = ("causal", "cp", "window")
# The patterns an indexer meets in prefill (the issue's target geomean); "window" is a stress pattern
_TARGET_PATTERNS = ("causal", "cp")
# Paged decode: (batch, next_n, context), H = 64, D = 128, block_kv = 64
PAGED_SHAPES: tuple[tuple[int, int, int], ...] = tuple(
    (b, t, ctx) for b in (64, 256) for t in (1, 2) for ctx in (8192, 65536)
)
# The long contexts of the issue's bandwidth target (the kv cache streamed at >= 85 % of the copy bandwidth)
_LONG_CONTEXT = 65536
_PAGED_TABLE = Table(
    [
        Column("B", 4),
        Column("next_n", 6),
        Column("ctx", 6),
        Column("ours us", 9),
        Column("TFLOPS", 7),
        Column("GB/s", 6),
        Column("% copy", 6),
        Column("meta %", 6),
        Column("meta us", 7),
        Column("dev us", 8),
        Column("% copy dev", 10),
        Column("meta %dev", 9),
        Column("clean %", 7),
        Column("SM MHz", 6),
        Column("diff", 8),
    ]
)

_TABLE = Table(
    [
        Column("S", 5),
        Column("S_kv", 6),
        Column("H", 3),
        Column("D", 4),
        Column("pattern", 7),
        Column("pairs", 10),
        Column("ours us", 9),
        Column("TFLOPS", 7),
        Column("GB/s", 6),
        Column("torch us", 9),
        Column("speedup", 7),
        Column("clean %", 7),
        Column("SM MHz", 6),
        Column("diff", 8),
    ]
)


def parse_mqa_shape(text: str) -> tuple[int, int, int, int, str] | tuple[int, int, int]:
    """Parse ``"SxS_kv[xH[xD]][-pattern]"`` (e.g. ``"2048x8192"``, ``"2048x65536x64x128-cp"``) into
    ``(S, S_kv, H, D, pattern)``, or ``"paged:BxNEXT_NxCONTEXT"`` (e.g. ``"paged:64x1x65536"``) into
    ``(batch, next_n, context)``.

    Raises:
        ValueError: not 2 to 4 positive integers separated by ``x``, H not in {16, 32, 64}, D not in
            {64, 128}, or an unknown pattern; a paged shape not 3 positive integers.
    """
    if text.lower().startswith(_PAGED_PREFIX):
        try:
            paged = [int(p) for p in text[len(_PAGED_PREFIX) :].split("x")]
        except ValueError:
            paged = []
        if len(paged) != 3 or min(paged) <= 0:
            raise ValueError(f"expected a paged shape paged:BxNEXT_NxCONTEXT such as paged:64x1x65536, got {text!r}")
        return paged[0], paged[1], paged[2]
    body, _, pattern = text.lower().partition("-")
    pattern = pattern or "causal"
    try:
        values = [int(p) for p in body.split("x")]
    except ValueError:
        values = []
    if not 2 <= len(values) <= 4 or min(values) <= 0:
        raise ValueError(f"expected a shape SxS_kv[xH[xD]][-pattern] such as 2048x8192x64x128-causal, got {text!r}")
    s, s_kv, h, d = (values + [64, 128][len(values) - 2 :])[:4]
    if h not in (16, 32, 64) or d not in (64, 128) or pattern not in _PATTERNS:
        raise ValueError(f"H must be 16, 32 or 64, D 64 or 128 and the pattern one of {_PATTERNS}, got {text!r}")
    return s, s_kv, h, d, pattern


def make_key_ranges(s: int, s_kv: int, pattern: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ks, ke)`` int32 ``[S]`` on the CPU: query i sees keys ``[ks[i], ke[i])``.

    - ``causal``: the queries are the last S of the S_kv tokens: ks = 0, ke = S_kv - S + i + 1.
    - ``cp``: context parallelism with the zig-zag split that balances causal work over ranks, as prefill of
      V3.2 runs it: the S_kv tokens are cut into 2P chunks of S / 2 (P = max(S_kv // S, 1) ranks) and this
      rank (r = P // 3, any rank would do) holds the queries of chunks r and 2P - 1 - r; query t of chunk c
      sees keys [0, c S / 2 + t + 1) (ks = 0: the sequence starts at key 0). With S = S_kv this is causal.
    - ``window``: a stress pattern no engine produces: two halves of the queries whose ends step S_kv / S keys
      per query from 0 and from S_kv / 2, each with its own start a random S_kv / 8 .. S_kv / 2 keys back,
      so 8 neighbouring queries share few of their keys (1.4x the valid pairs in the union of their ranges).

    Raises:
        ValueError: an unknown pattern.
    """
    i = torch.arange(s, dtype=torch.int64)
    half = max(s // 2, 1)
    if pattern == "causal":
        ke = (s_kv - s + i + 1).clamp(min=0, max=s_kv)
        ks = torch.zeros_like(ke)
    elif pattern == "cp":
        ranks = max(s_kv // s, 1)
        rank = ranks // 3
        chunk = torch.where(i < half, rank, 2 * ranks - 1 - rank)
        ke = (chunk * half + i % half + 1).clamp(max=s_kv)
        ks = torch.zeros_like(ke)
    elif pattern == "window":
        g = torch.Generator().manual_seed(seed)
        offset = torch.where(i < half, torch.zeros_like(i), torch.full_like(i, s_kv // 2))
        ke = (offset + (i % half) * (s_kv // 2) // half + 1).clamp(max=s_kv)
        ks = (ke - torch.randint(s_kv // 8, s_kv // 2 + 1, (s,), generator=g)).clamp(min=0)
    else:
        raise ValueError(f"make_key_ranges: pattern must be one of {_PATTERNS}, got {pattern!r}")
    return ks.int(), ke.int()


def torch_mqa_chunks(
    ks: torch.Tensor, ke: torch.Tensor, num_heads: int, chunk_elements: int = 1 << 28
) -> list[tuple[int, int, int, int]]:
    """The chunks :func:`torch_mqa_logits` computes: ``(c0, c1, k0, k1)``, queries ``[c0, c1)`` against keys
    ``[k0, k1)``, the union of their rows' ``[ks, ke)`` (``k0 == k1`` when none has a key). Consecutive queries
    join a chunk while its ``[queries, H, keys]`` intermediate stays within ``chunk_elements`` (one query at least),
    so causal and context-parallel rows skip the keys no query of a chunk sees. Reads ks/ke on the host."""
    starts, ends = ks.tolist(), ke.tolist()
    chunks = []
    c0 = 0
    while c0 < len(starts):
        lo, hi, c1 = 1 << 62, 0, c0  # the union of the chunk's non-empty ranges (none while lo >= hi)
        while c1 < len(starts):
            a, b = (starts[c1], ends[c1]) if starts[c1] < ends[c1] else (lo, hi)
            new_lo, new_hi = min(lo, a), max(hi, b)
            if c1 > c0 and (c1 + 1 - c0) * num_heads * max(new_hi - new_lo, 0) > chunk_elements:
                break
            lo, hi, c1 = new_lo, new_hi, c1 + 1
        chunks.append((c0, c1, lo, hi) if lo < hi else (c0, c1, 0, 0))
        c0 = c1
    return chunks


def torch_mqa_logits(
    q: torch.Tensor,
    kv: tuple[torch.Tensor, torch.Tensor],
    weights: torch.Tensor,
    ks: torch.Tensor,
    ke: torch.Tensor,
    chunk_elements: int = 1 << 28,
    chunks: list[tuple[int, int, int, int]] | None = None,
) -> torch.Tensor:
    """The same math as ``fp8_mqa_logits`` (clean FP32 logits ``[S, S_kv]``) in chunked PyTorch.

    Per chunk of queries (:func:`torch_mqa_chunks`), only the keys some query of the chunk sees: one FP8
    ``torch._scaled_mm`` with the kv scales as per-column scales (BF16 ``matmul`` where it is unavailable), relu
    in place, the head sum as a batched matmul with the weights; then -inf outside each row's ``[ks, ke)``.

    Args:
        q: float8_e4m3fn ``[S, H, D]``.
        kv: ``(kv float8_e4m3fn [S_kv, D], scales FP32 [S_kv])``.
        weights: FP32 ``[S, H]``.
        ks, ke: int32 ``[S]``, valid keys ``[ks, ke)``.
        chunk_elements: bound on the ``[chunk, H, keys]`` intermediate per chunk of queries.
        chunks: :func:`torch_mqa_chunks` of these ks/ke, computed once outside a timed loop; computed here (a
            host synchronization) when None.

    Returns:
        FP32 ``[S, S_kv]``, -inf outside ``[ks[i], ke[i])``.
    """
    kv_fp8, scales = kv
    s, h, d = q.shape
    s_kv = kv_fp8.shape[0]
    if chunks is None:
        chunks = torch_mqa_chunks(ks, ke, h, chunk_elements)
    out = torch.empty(s, s_kv, device=q.device, dtype=torch.float32)
    ones = torch.ones(max((c1 - c0 for c0, c1, _, _ in chunks), default=1) * h, 1, device=q.device)
    scale_b = scales.float().view(1, s_kv)
    kv_scaled_bf16 = None
    for c0, c1, k0, k1 in chunks:
        if k1 <= k0:
            continue
        # Whole 16-key groups (what _scaled_mm needs of its dimensions and keeps its operands 16-byte aligned)
        k0, k1 = k0 // 16 * 16, min(s_kv, (k1 + 15) // 16 * 16)
        q2 = q[c0:c1].reshape((c1 - c0) * h, d)
        try:
            x = torch._scaled_mm(
                q2, kv_fp8[k0:k1].t(), ones[: q2.shape[0]], scale_b[:, k0:k1], out_dtype=torch.bfloat16
            )
        except (RuntimeError, AttributeError) as exc:
            if kv_scaled_bf16 is None:
                if q.is_cuda:  # expected on the CPU only: say so where the torch timings would change meaning
                    print(f"note: torch._scaled_mm failed ({error_text(exc)}); the torch version runs BF16 matmuls")
                kv_scaled_bf16 = (kv_fp8.float() * scales.float()[:, None]).bfloat16()
            x = q2.bfloat16() @ kv_scaled_bf16[k0:k1].t()
        x = x.view(c1 - c0, h, k1 - k0).relu_()
        out[c0:c1, k0:k1] = torch.bmm(weights[c0:c1, None, :].to(x.dtype), x).squeeze(1).float()
    j = torch.arange(s_kv, device=q.device)
    invalid = (j[None, :] < ks[:, None]) | (j[None, :] >= ke[:, None])
    return out.masked_fill_(invalid, float("-inf"))


def _bench_shape(s: int, s_kv: int, h: int, d: int, pattern: str, mqa, options: BenchOptions) -> dict[str, Any]:
    row: dict[str, Any] = {"s": s, "s_kv": s_kv, "h": h, "d": d, "pattern": pattern}
    torch.manual_seed(0)
    q = torch.randn(s, h, d, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
    kv, scales = per_token_cast_to_fp8(torch.randn(s_kv, d, device="cuda", dtype=torch.bfloat16))
    scales = scales[:, 0].contiguous()
    weights = torch.randn(s, h, device="cuda", dtype=torch.float32)
    ks, ke = (t.cuda() for t in make_key_ranges(s, s_kv, pattern))
    pairs = int((ke - ks).clamp(min=0).sum())
    row["pairs"] = pairs
    row["flops"] = 2 * h * d * pairs
    row["bytes"] = q.numel() + kv.numel() + 4 * (scales.numel() + weights.numel() + s * s_kv)

    def ours() -> torch.Tensor:
        return mqa(q, (kv, scales), weights, ks, ke)

    out, row["ours_error"] = try_first_call(ours)
    row["ours"] = time_call(ours, options) if out is not None else None
    row["sm_clock_mhz"] = sm_clock_mhz() if out is not None else None
    row["ours_no_clean"] = (
        time_call(lambda: mqa(q, (kv, scales), weights, ks, ke, clean_logits=False), options)
        if out is not None
        else None
    )
    row["clean_pct"] = _extra_pct(row["ours"], row["ours_no_clean"])
    row["torch"] = row["torch_error"] = row["ours_diff"] = None
    row["ours_accurate"] = False

    chunks = torch_mqa_chunks(ks, ke, h)

    def torch_version() -> torch.Tensor:
        return torch_mqa_logits(q, (kv, scales), weights, ks, ke, chunks=chunks)

    ref, row["torch_error"] = try_first_call(torch_version)
    if ref is not None and out is not None:
        valid = torch.isfinite(ref)
        same_inf = bool(torch.equal(torch.isneginf(out), ~valid))
        row["ours_diff"] = float(calc_diff(out[valid], ref[valid])) if valid.any() else 0.0
        row["ours_accurate"] = same_inf and row["ours_diff"] < MAX_DIFF
    del out, ref
    if options.baselines and row["torch_error"] is None:
        row["torch"] = time_call(torch_version, options)
    return row


def _extra_pct(longer: dict[str, Any] | None, shorter: dict[str, Any] | None) -> float | None:
    """(longer - shorter) / longer in percent, from two timings' medians (None if either is missing)."""
    if not longer or not shorter:
        return None
    return 100.0 * (longer["median_us"] - shorter["median_us"]) / longer["median_us"]


def _format_row(row: dict[str, Any]) -> str:
    def us(entry: dict[str, Any] | None) -> str:
        return fmt(entry["median_us"] if entry else None, ".1f")

    diff = diff_cell(row, ".1e")
    return _TABLE.row(
        [
            str(row["s"]),
            str(row["s_kv"]),
            str(row["h"]),
            str(row["d"]),
            row["pattern"],
            str(row["pairs"]),
            us(row["ours"]),
            fmt(row["tflops"], ".0f"),
            fmt(row["gbps"], ".0f"),
            us(row["torch"]),
            fmt(row["speedup_vs_torch"], ".2f"),
            fmt(row["clean_pct"], ".1f"),
            fmt(row["sm_clock_mhz"]),
            diff,
        ]
    )


def make_paged_inputs(
    batch: int, next_n: int, ctx: int, h: int = 64, d: int = 128, block_kv: int = 64
) -> dict[str, Any]:
    """The paged-decode bench's inputs on the current GPU (seeded, so every call builds the same): ``q`` FP8
    ``[batch, next_n, h, d]``, ``cache`` uint8 ``[num_blocks, block_kv, 1, d + 4]`` (finite FP8 values, positive
    FP32 scales), ``weights`` FP32 ``[batch * next_n, h]``, ``lens`` int32 ``[batch]`` all ``ctx``, ``table`` int32
    ``[batch, ceil(ctx / block_kv)]`` (the blocks in random cache order), and the counts ``pairs`` (valid (token,
    key) pairs), ``flops`` (2 h d a pair) and ``bytes`` (kv blocks read, q, weights, valid logits written)."""
    torch.manual_seed(0)
    blocks_per_request = (ctx + block_kv - 1) // block_kv
    num_blocks = batch * blocks_per_request
    table = torch.randperm(num_blocks, device="cuda").int().view(batch, blocks_per_request)
    cache = torch.randint(0, 256, (num_blocks, block_kv * (d + 4)), device="cuda", dtype=torch.uint8)
    # Scales: positive FP32 in place of the random bytes; values: finite FP8 (clear the 0x7f/0xff NaN codes)
    cache[:, block_kv * d :] = (
        torch.rand(num_blocks, block_kv, device="cuda").add_(0.5).view(torch.uint8).view(num_blocks, block_kv * 4)
    )
    cache[:, : block_kv * d] &= 0xF7
    cache = cache.view(num_blocks, block_kv, 1, d + 4)
    q = torch.randn(batch, next_n, h, d, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
    weights = torch.randn(batch * next_n, h, device="cuda", dtype=torch.float32)
    lens = torch.full((batch,), ctx, device="cuda", dtype=torch.int32)
    pairs = batch * sum(ctx - next_n + 1 + t for t in range(next_n))
    return {
        "q": q,
        "cache": cache,
        "weights": weights,
        "lens": lens,
        "table": table,
        "pairs": pairs,
        "flops": 2 * h * d * pairs,
        "bytes": num_blocks * block_kv * (d + 4) + q.numel() + 4 * (weights.numel() + pairs),
    }


def _bench_paged(batch: int, next_n: int, ctx: int, mqa_paged, options: BenchOptions) -> dict[str, Any]:
    import deep_gemm

    h, d, block_kv = 64, 128, 64
    row: dict[str, Any] = {"batch": batch, "next_n": next_n, "ctx": ctx, "h": h, "d": d, "block_kv": block_kv}
    inputs = make_paged_inputs(batch, next_n, ctx, h, d, block_kv)
    q, cache, weights, lens, table = (inputs[k] for k in ("q", "cache", "weights", "lens", "table"))
    num_blocks = cache.shape[0]
    row["pairs"], row["flops"], row["bytes"] = inputs["pairs"], inputs["flops"], inputs["bytes"]

    def schedule() -> torch.Tensor:
        return deep_gemm.get_paged_mqa_logits_metadata(lens, block_kv, deep_gemm.get_num_sms())

    meta, row["ours_error"] = try_first_call(schedule)

    def ours() -> torch.Tensor:
        return mqa_paged(q, cache, weights, lens, table, meta, ctx)

    out = None
    if meta is not None:
        out, row["ours_error"] = try_first_call(ours)
    row["ours"] = time_call(ours, options) if out is not None else None
    row["sm_clock_mhz"] = sm_clock_mhz() if out is not None else None
    row["metadata"] = row["clean"] = row["device_us"] = None
    if out is not None:
        row["metadata"] = time_call(schedule, options)
        try:
            row["device_us"] = kernel_times(
                lambda: (schedule(), ours()),
                {"metadata": "paged_mqa_schedule_kernel", "paged": "sm90_fp8_paged_mqa_logits_kernel"},
                options,
            )
        except ValueError as exc:  # no kernel seen by the profiler: under ncu, which holds CUPTI
            print(f"note: no device times: {error_text(exc)}")
        row["clean"] = time_call(
            lambda: mqa_paged(q, cache, weights, lens, table, meta, ctx, clean_logits=True), options
        )
    row["meta_pct"] = (
        100.0 * row["metadata"]["median_us"] / row["ours"]["median_us"] if row["metadata"] and row["ours"] else None
    )
    row["meta_pct_device"] = (
        100.0 * row["device_us"]["metadata"] / row["device_us"]["paged"] if row["device_us"] else None
    )
    row["clean_pct"] = _extra_pct(row["clean"], row["ours"])
    row["ours_diff"], row["ours_accurate"] = None, False
    if out is not None:
        # float64 reference of the first and last requests
        values = cache.view(num_blocks, -1)[:, : block_kv * d].contiguous().view(torch.float8_e4m3fn)
        scales = cache.view(num_blocks, -1)[:, block_kv * d :].contiguous().view(torch.float32)
        diffs = []
        for b in (0, batch - 1):
            ids = table[b].long()
            kv = (values[ids].double().view(-1, block_kv, d) * scales[ids].double()[..., None]).view(-1, d)[:ctx]
            ref = (torch.einsum("thd,jd->thj", q[b].double(), kv).relu_() * weights[b * next_n : (b + 1) * next_n, :, None]
                   .double()).sum(1)  # fmt: skip
            got = out[b * next_n : (b + 1) * next_n].double()
            valid = (
                torch.arange(ctx, device="cuda")[None, :] <= ctx - next_n + torch.arange(next_n, device="cuda")[:, None]
            )
            diffs.append(float(calc_diff(got[valid], ref[valid])))
        row["ours_diff"] = max(diffs)
        row["ours_accurate"] = row["ours_diff"] < MAX_DIFF
    del out
    return row


def _run_paged(
    options: BenchOptions,
    copy_bandwidth: float,
    copy_bandwidth_device: float | None,
    shapes: list[tuple[int, int, int]],
) -> list[dict[str, Any]]:
    import deep_gemm

    mqa_paged = getattr(deep_gemm, "fp8_paged_mqa_logits", None)
    if mqa_paged is None:
        print("mqa: deep_gemm.fp8_paged_mqa_logits is missing")
        return []
    print(
        "paged decode: H = 64, D = 128, block_kv = 64; TFLOPS over valid (token, key) pairs; % copy = GB/s / d2d copy"
    )
    # The floor of any launch under this protocol (cold L2, events around the call): a 1-element fill
    tiny = torch.empty(1, device="cuda")
    tiny.zero_()
    launch_floor_us = time_call(tiny.zero_, options)["median_us"]
    # The same fill's device time alone, and that of a 1-element copy (a kernel that reads one value from a cold L2,
    # as the schedule kernel reads the lengths): PyTorch's FillFunctor and neg kernels (a same-dtype copy_ would be a
    # memcpy, not a kernel)
    tiny_src = torch.ones(1, device="cuda")
    floors: dict[str, float | None] = {"fill": None, "copy": None}
    for name, fn, kernel in (
        ("fill", tiny.zero_, "FillFunctor"),
        ("copy", lambda: torch.neg(tiny_src, out=tiny), "neg_kernel"),
    ):
        try:
            floors[name] = kernel_times(fn, {name: kernel}, options)[name]
        except ValueError as exc:  # another PyTorch may name its kernels differently
            print(f"note: no device time for the 1-element {name}: {exc}")
    print(f"launch floor (a 1-element fill timed the same way): {launch_floor_us:.1f} us; on the device alone: "
          f"{fmt(floors['fill'], '.2f')} us, a 1-element negated copy {fmt(floors['copy'], '.2f')} us")  # fmt: skip
    print(_PAGED_TABLE.header())
    rows = []
    for shape in shapes:
        gpu_idle(options.idle_s)
        row = _bench_paged(*shape, mqa_paged, options)
        row["launch_floor_us"] = launch_floor_us
        row["device_floor_us"], row["device_copy_floor_us"] = floors["fill"], floors["copy"]
        derive_throughput(row, copy_bandwidth, ())
        # The kernel's own device time against the copy's (both without the launch the event timings include)
        paged_us = row["device_us"]["paged"] if row["device_us"] else None
        row["pct_copy_bandwidth_device"] = pct_of_copy_bandwidth(row["bytes"], paged_us, copy_bandwidth_device)
        rows.append(row)
        diff = diff_cell(row, ".1e")
        cells = [str(row["batch"]), str(row["next_n"]), str(row["ctx"])]
        cells += [fmt(row["ours"]["median_us"] if row["ours"] else None, ".1f"), fmt(row["tflops"], ".0f")]
        cells += [fmt(row["gbps"], ".0f"), fmt(row["pct_copy_bandwidth"], ".1f"), fmt(row["meta_pct"], ".1f")]
        cells += [fmt(row["metadata"]["median_us"] if row["metadata"] else None, ".1f")]
        cells += [
            fmt(row["device_us"]["paged"] if row["device_us"] else None, ".1f"),
            fmt(row["pct_copy_bandwidth_device"], ".1f"),
            fmt(row["meta_pct_device"], ".1f"),
        ]
        cells += [fmt(row["clean_pct"], ".1f"), fmt(row["sm_clock_mhz"]), diff]
        print(_PAGED_TABLE.row(cells), flush=True)
        torch.cuda.empty_cache()
    return rows


def run_mqa(options: BenchOptions) -> SuiteReport:
    """Run the MQA-logits suite, print its table and return the JSON-ready report.

    ``report.ok`` is False when ``deep_gemm.fp8_mqa_logits`` is missing, there is no GPU, or any shape
    raised, had -inf positions different from the torch version's, or a ``calc_diff`` above 1e-3.
    """
    import deep_gemm

    mqa = getattr(deep_gemm, "fp8_mqa_logits", None)
    if mqa is None or not torch.cuda.is_available():
        message = "deep_gemm.fp8_mqa_logits is missing" if mqa is None else "no CUDA GPU"
        print(f"mqa: {message}")
        return SuiteReport(data={"suite": "mqa", "error": message}, ok=False)
    parsed = [parse_mqa_shape(x) for x in options.shapes] if options.shapes else None
    shapes = [p for p in parsed if len(p) == 5] if parsed is not None else list(MQA_SHAPES)
    paged_shapes = [p for p in parsed if len(p) == 3] if parsed is not None else list(PAGED_SHAPES)
    os.environ.pop("DG_DEBUG_CHECKS", None)  # (the debug checks synchronize on every call)

    copy_bandwidth = d2d_copy_bandwidth()
    device = torch.cuda.get_device_name()
    print(f"device: {device}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print("TFLOPS over valid (i, j) pairs (2 H D each); speedup = torch time / ours; diff vs torch, '!' > 1e-3")
    print(_TABLE.header())
    rows = []
    for shape in shapes:
        gpu_idle(options.idle_s)
        row = _bench_shape(*shape, mqa, options)
        derive_throughput(row, copy_bandwidth, ("torch",))
        rows.append(row)
        print(_format_row(row), flush=True)
        torch.cuda.empty_cache()

    main = [r for r in rows if (r["h"], r["d"]) == (64, 128)]
    geomeans = {
        "tflops_h64_d128": geomean(r["tflops"] for r in main if r["pattern"] in _TARGET_PATTERNS),
        "tflops_h64_d128_window": geomean(r["tflops"] for r in main if r["pattern"] == "window"),
        "speedup_vs_torch": geomean(r["speedup_vs_torch"] for r in rows),
    }
    print(f"geomean TFLOPS (H = 64, D = 128, {' and '.join(_TARGET_PATTERNS)}): "
          f"{fmt(geomeans['tflops_h64_d128'], '.0f')}; window: {fmt(geomeans['tflops_h64_d128_window'], '.0f')}")  # fmt: skip
    print(f"geomean speedup vs chunked torch: {fmt(geomeans['speedup_vs_torch'], '.2f')}")
    for note in sorted({f"{k}: {r[f'{k}_error']}" for r in rows for k in ("ours", "torch") if r[f"{k}_error"]}):
        print(f"note: {note}")
    copy_bandwidth_device = device_copy_bandwidth() if paged_shapes else None
    if paged_shapes:
        print(copy_bandwidth_text(copy_bandwidth, copy_bandwidth_device))
    paged_rows = _run_paged(options, copy_bandwidth, copy_bandwidth_device, paged_shapes) if paged_shapes else []
    if paged_rows:
        geomeans["paged_tflops"] = geomean(r["tflops"] for r in paged_rows)
        geomeans["paged_pct_copy_bandwidth"] = geomean(r["pct_copy_bandwidth"] for r in paged_rows)
        long_rows = [r for r in paged_rows if r["ctx"] >= _LONG_CONTEXT]
        geomeans["paged_long_min_pct_copy_bandwidth_device"] = min(
            (r["pct_copy_bandwidth_device"] for r in long_rows if r["pct_copy_bandwidth_device"] is not None),
            default=None,
        )
        print(f"paged decode geomean TFLOPS: {fmt(geomeans['paged_tflops'], '.0f')}, "
              f"% of copy bandwidth: {fmt(geomeans['paged_pct_copy_bandwidth'], '.1f')}; "
              f"lowest on the device alone at >= {_LONG_CONTEXT} keys: "
              f"{fmt(geomeans['paged_long_min_pct_copy_bandwidth_device'], '.1f')} %")  # fmt: skip
    failed = [r for r in rows if r["ours_error"] or not r["ours_accurate"]]
    failed_paged = [r for r in paged_rows if r["ours_error"] or not r["ours_accurate"]]
    if failed_paged:
        print(f"{len(failed_paged)} paged shape(s) failed: " + ", ".join(
            f"{r['batch']}x{r['next_n']}x{r['ctx']}" for r in failed_paged))  # fmt: skip
    if failed:
        print(f"{len(failed)} shape(s) failed: " + ", ".join(f"{r['s']}x{r['s_kv']}x{r['h']}x{r['d']}" for r in failed))
    data = {
        **report_header("mqa", options, MAX_DIFF, copy_bandwidth, copy_bandwidth_device),
        "geomeans": geomeans,
        "rows": rows,
        "paged_rows": paged_rows,
    }
    json.dumps(data)
    return SuiteReport(data=data, ok=not failed and not failed_paged)


MQA_SUITE = register_suite(
    Suite(
        name="mqa",
        description="FP8 MQA logits (fp8_mqa_logits, V3.2 indexer prefill) vs chunked PyTorch",
        shape_help="SxS_kv[xH[xD]][-causal|-cp|-window], e.g. 2048x65536x64x128-cp",
        parse_shape=parse_mqa_shape,
        run=run_mqa,
    )
)
