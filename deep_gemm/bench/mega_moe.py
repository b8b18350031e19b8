"""The ``mega_moe`` suite: one MoE layer on one GPU (a group of size 1), ``fp8_mega_moe``, ``fp8_fp4_mega_moe`` (dtype
``fp4``: FP4 expert weights) and ``bf16_mega_moe`` against the unfused pipeline built from deep_gemm's own kernels, in
the same run.

A shape is ``TxExKxHxI``: T tokens, E local experts, top-K, hidden H, intermediate I (default: the issue's
T in {64, 256, 1024, 4096}, E = 32, K = 8, H = 7168, I = 2048). Routing: uniform random top-K of E (seeded).

Baseline (unfused): gather each expert's token rows (``index_select``), the m-grouped contiguous GEMM (L1), SwiGLU
and (FP8) the 1x128 quantization (FP8 x FP4: UE8M0 1x32) in PyTorch, the m-grouped GEMM (L2), a weighted ``index_add_`` into y. Its routing
metadata (the gather indices and the grouped layout) is computed once, outside the timing, which favours it.
Ours: the call alone; the buffer is filled (``mega_moe_pre_dispatch_sm90`` or copies) outside the timing.
Columns: time, speedup over the baseline, and the weights' bytes (the experts that received rows, L1 + L2) per
second as a share of the device-to-device copy bandwidth (the decode target: >= 75 %).
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from deep_gemm.bench.common import parse_int_shape, report_header, time_call, try_first_call
from deep_gemm.bench.registry import BenchOptions, Suite, SuiteReport, register_suite
from deep_gemm.bench.report import Column, Table, fmt, geomean
from deep_gemm.testing import calc_diff, d2d_copy_bandwidth, gpu_idle
from deep_gemm.utils import align, per_block_cast_to_fp8, per_token_cast_to_fp4, per_token_cast_to_fp8

__all__ = ["MEGA_MOE_SHAPES", "parse_mega_shape", "run_mega_moe"]

MAX_DIFF = 1e-3
MEGA_MOE_SHAPES = tuple((t, 32, 8, 7168, 2048) for t in (64, 256, 1024, 4096))

_TABLE = Table(
    [
        Column("dtype", 5),
        Column("T", 5),
        Column("E", 3),
        Column("K", 2),
        Column("H", 5),
        Column("I", 5),
        Column("ours us", 9),
        Column("unfused us", 10),
        Column("speedup", 7),
        Column("W GB/s", 6),
        Column("%copy", 5),
        Column("diff", 8),
    ]
)


def parse_mega_shape(text: str) -> tuple[int, ...]:
    """Parse ``"TxExKxHxI"`` (e.g. ``"256x32x8x7168x2048"``).

    Raises:
        ValueError: not five positive integers separated by ``x``.
    """
    return parse_int_shape(text, 5, "TxExKxHxI of positive integers", "256x32x8x7168x2048")


def _routing(t: int, e: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device="cpu").manual_seed(seed)
    idx = torch.rand(t, e, generator=gen).topk(k, dim=1).indices
    weights = torch.rand(t, k, generator=gen)
    return idx.cuda(), (weights / weights.sum(dim=1, keepdim=True)).cuda()


def _unfused_layout(idx: torch.Tensor, e: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """The baseline's routing metadata: per padded row its token (-1: padding) and slot, and the per-row layout."""
    import deep_gemm

    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    flat = idx.flatten().cpu()
    tokens, slots, groups = [], [], []
    for expert in range(e):
        entries = (flat == expert).nonzero().flatten().tolist()
        padded = align(len(entries), alignment)
        tokens += [i // idx.shape[1] for i in entries] + [-1] * (padded - len(entries))
        slots += [i % idx.shape[1] for i in entries] + [0] * (padded - len(entries))
        groups += [expert] * len(entries) + [-1] * (padded - len(entries))
    rows = max(len(groups), alignment)
    pad = rows - len(groups)
    to_cuda = lambda v, fill: torch.tensor(v + [fill] * pad, dtype=torch.int64, device="cuda")  # noqa: E731
    return to_cuda(tokens, -1), to_cuda(slots, 0), to_cuda(groups, -1).int(), rows


@dataclass
class _Layer:
    """One dtype's layer, set up outside the timing: our call, the unfused baseline, the buffer, the weight bytes of
    one expert (L1 + L2)."""

    ours: Callable[[], torch.Tensor]
    unfused: Callable[[], torch.Tensor]
    buffer: Any
    weight_bytes_per_expert: int


@dataclass
class _Inputs:
    """What every dtype's layer shares: the tokens, routing, FP32 weights and the baseline's routing metadata."""

    t: int
    e: int
    k: int
    h: int
    inter: int
    x: torch.Tensor
    idx: torch.Tensor
    weights: torch.Tensor
    w1: torch.Tensor
    w2: torch.Tensor
    gather_rows: torch.Tensor
    slot_weights: torch.Tensor
    groups: torch.Tensor
    y: torch.Tensor
    l1_out: torch.Tensor
    l2_out: torch.Tensor
    y_ref: torch.Tensor

    def combine(self) -> torch.Tensor:
        """The baseline's last step: the slots' L2 rows times their routing weights, summed into y_ref."""
        self.y_ref.zero_().index_add_(
            0, self.gather_rows, (self.l2_out.float() * self.slot_weights[:, None]).to(torch.bfloat16)
        )
        return self.y_ref


def _fp8_layer(p: _Inputs) -> _Layer:
    import deep_gemm
    from deep_gemm import mega

    w1q, s1 = per_block_cast_to_fp8(p.w1)
    w2q, s2 = per_block_cast_to_fp8(p.w2)
    buffer = mega.get_symm_buffer_for_sm90_mega_moe(None, p.e, p.t, p.k, p.h, p.inter)
    l1, l2 = mega.transform_weights_for_mega_moe_sm90((w1q, s1), (w2q, s2))
    mega.mega_moe_pre_dispatch_sm90(p.x, p.idx, p.weights, buffer.x, buffer.x_sf, buffer.topk_idx,
                                    buffer.topk_weights, p.t)  # fmt: skip
    x_fp8, x_sf = buffer.x[: p.t], buffer.x_sf[: p.t]

    def ours() -> torch.Tensor:
        mega.fp8_mega_moe(p.y, l1, l2, buffer)
        return p.y

    def unfused() -> torch.Tensor:
        a = x_fp8.index_select(0, p.gather_rows)
        a_sf = deep_gemm.get_mn_major_tma_aligned_tensor(x_sf.index_select(0, p.gather_rows))
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, a_sf), (w1q, s1), p.l1_out, p.groups)
        g, u = p.l1_out[:, : p.inter].float(), p.l1_out[:, p.inter :].float()
        act_fp8, act_sf = per_token_cast_to_fp8(torch.nn.functional.silu(g) * u)
        act_sf = deep_gemm.get_mn_major_tma_aligned_tensor(act_sf)
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous((act_fp8, act_sf), (w2q, s2), p.l2_out, p.groups)
        return p.combine()

    return _Layer(ours, unfused, buffer, 2 * p.inter * p.h + p.h * p.inter)


def _fp4_layer(p: _Inputs) -> _Layer:
    """FP8 activations (UE8M0 1x32, packed) x FP4 weights (UE8M0 1x32): fp8_fp4_mega_moe on a packed_x_sf buffer; the
    baseline runs the FP8 x FP4 grouped GEMM on the gathered rows (their 1x32 scales folded by the GEMM's pre-pass)."""
    import deep_gemm
    from deep_gemm import mega

    def fp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        e, n, kk = w.shape
        packed, sf = per_token_cast_to_fp4(w.reshape(e * n, kk), use_ue8m0=True, gran_k=32)
        return packed.view(e, n, kk // 2), sf.view(e, n, kk // 32)

    (w1q, s1), (w2q, s2) = fp4(p.w1), fp4(p.w2)
    buffer = mega.get_symm_buffer_for_mega_moe(None, p.e, p.t, p.k, p.h, p.inter, packed_x_sf=True)
    l1, l2 = mega.transform_weights_for_mega_moe((w1q, s1), (w2q, s2))
    mega.mega_moe_pre_dispatch_sm90(p.x, p.idx, p.weights, buffer.x, buffer.x_sf, buffer.topk_idx,
                                    buffer.topk_weights, p.t)  # fmt: skip
    x_fp8, x_sf = buffer.x[: p.t], buffer.x_sf[: p.t]

    def ours() -> torch.Tensor:
        mega.fp8_fp4_mega_moe(p.y, l1, l2, buffer)
        return p.y

    def unfused() -> torch.Tensor:
        a, a_sf = x_fp8.index_select(0, p.gather_rows), x_sf.index_select(0, p.gather_rows)
        deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, a_sf), (w1q, s1), p.l1_out, p.groups)
        g, u = p.l1_out[:, : p.inter].float(), p.l1_out[:, p.inter :].float()
        act = per_token_cast_to_fp8(torch.nn.functional.silu(g) * u, use_ue8m0=True, gran_k=32)
        deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous(act, (w2q, s2), p.l2_out, p.groups)
        return p.combine()

    # (e2m1 two a byte, one UE8M0 byte per 32)
    return _Layer(ours, unfused, buffer, (2 * p.inter * p.h + p.h * p.inter) * 17 // 32)


def _bf16_layer(p: _Inputs) -> _Layer:
    import deep_gemm
    from deep_gemm import mega

    w1b, w2b = p.w1.to(torch.bfloat16), p.w2.to(torch.bfloat16)
    buffer = mega.get_symm_buffer_for_mega_moe(None, p.e, p.t, p.k, p.h, p.inter, mma_type="bf16xbf16")
    l1, l2 = mega.transform_weights_for_mega_moe(w1b, w2b)
    buffer.x[: p.t].copy_(p.x)
    buffer.topk_idx[: p.t].copy_(p.idx)
    buffer.topk_weights[: p.t].copy_(p.weights)

    def ours() -> torch.Tensor:
        mega.bf16_mega_moe(p.y, l1, l2, buffer)
        return p.y

    def unfused() -> torch.Tensor:
        a = p.x.index_select(0, p.gather_rows)
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, w1b, p.l1_out, p.groups)
        g, u = p.l1_out[:, : p.inter].float(), p.l1_out[:, p.inter :].float()
        act = (torch.nn.functional.silu(g) * u).to(torch.bfloat16)
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(act, w2b, p.l2_out, p.groups)
        return p.combine()

    return _Layer(ours, unfused, buffer, 2 * (2 * p.inter * p.h + p.h * p.inter))


_LAYERS = {"fp8": _fp8_layer, "fp4": _fp4_layer, "bf16": _bf16_layer}


def _bench_one(dtype: str, t: int, e: int, k: int, h: int, inter: int, options: BenchOptions) -> dict[str, Any]:
    idx, weights = _routing(t, e, k, seed=t * 31 + e + k)
    tokens, slots, groups, rows = _unfused_layout(idx, e)
    valid = tokens >= 0
    gather_rows = tokens.clamp(min=0)
    inputs = _Inputs(
        t, e, k, h, inter,
        x=torch.randn(t, h, device="cuda").to(torch.bfloat16),
        idx=idx,
        weights=weights,
        w1=torch.randn(e, 2 * inter, h, device="cuda") / h**0.5,
        w2=torch.randn(e, h, inter, device="cuda") / inter**0.5,
        gather_rows=gather_rows,
        slot_weights=torch.where(valid, weights[gather_rows, slots], torch.zeros((), device="cuda")),
        groups=groups,
        y=torch.full((t, h), float("nan"), dtype=torch.bfloat16, device="cuda"),
        l1_out=torch.empty(rows, 2 * inter, dtype=torch.bfloat16, device="cuda"),
        l2_out=torch.empty(rows, h, dtype=torch.bfloat16, device="cuda"),
        y_ref=torch.empty(t, h, dtype=torch.bfloat16, device="cuda"),
    )  # fmt: skip
    layer = _LAYERS[dtype](inputs)
    inputs.w1 = inputs.w2 = None  # (the FP32 weights: not needed past the casts)

    active = int(torch.bincount(idx.flatten(), minlength=e).gt(0).sum())
    row: dict[str, Any] = {
        "dtype": dtype,
        "t": t,
        "e": e,
        "k": k,
        "h": h,
        "i": inter,
        "weight_bytes": active * layer.weight_bytes_per_expert,
    }
    out, row["ours_error"] = try_first_call(layer.ours)
    ref, row["unfused_error"] = try_first_call(layer.unfused)
    row["diff"] = float(calc_diff(out.float(), ref.float())) if out is not None and ref is not None else None
    row["ours"] = time_call(layer.ours, options) if out is not None else None
    row["unfused"] = time_call(layer.unfused, options) if ref is not None else None
    layer.buffer.destroy()
    return row


def run_mega_moe(options: BenchOptions) -> SuiteReport:
    """Run the ``mega_moe`` suite (FP8, FP8 x FP4 and BF16 for each shape), print its table, return the JSON-ready
    report."""
    name = "mega_moe"
    if not torch.cuda.is_available():
        message = "no CUDA GPU (torch.cuda.is_available() is False)"
        print(f"{name}: {message}")
        return SuiteReport(data={"suite": name, "error": message}, ok=False)
    shapes = [parse_mega_shape(s) for s in options.shapes] if options.shapes else list(MEGA_MOE_SHAPES)
    copy_bandwidth = d2d_copy_bandwidth()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(f"device-to-device copy: {copy_bandwidth * 1e-9:.0f} GB/s (read + write)")
    print(_TABLE.header())
    rows = []
    for dtype in _LAYERS:
        for t, e, k, h, inter in shapes:
            gpu_idle(options.idle_s)
            row = _bench_one(dtype, t, e, k, h, inter, options)
            ours_s = row["ours"]["median_us"] * 1e-6 if row["ours"] else None
            row["speedup"] = row["unfused"]["median_us"] * 1e-6 / ours_s if ours_s and row["unfused"] else None
            row["weight_gbps"] = row["weight_bytes"] / ours_s * 1e-9 if ours_s else None
            row["pct_copy_bandwidth"] = row["weight_bytes"] / ours_s / copy_bandwidth * 100 if ours_s else None
            row["accurate"] = row["diff"] is not None and row["diff"] < MAX_DIFF
            print(_TABLE.row([
                row["dtype"], str(t), str(e), str(k), str(h), str(inter),
                fmt(row["ours"]["median_us"] if row["ours"] else None, ".1f"),
                fmt(row["unfused"]["median_us"] if row["unfused"] else None, ".1f"),
                fmt(row["speedup"], ".2f"), fmt(row["weight_gbps"], ".0f"), fmt(row["pct_copy_bandwidth"], ".0f"),
                "ERROR" if row["ours_error"] else fmt(row["diff"], ".1e") + ("" if row["accurate"] else "!"),
            ]), flush=True)  # fmt: skip
            rows.append(row)
            torch.cuda.empty_cache()
    for key in ("ours_error", "unfused_error"):
        for note in sorted({r[key] for r in rows if r[key]}):
            print(f"note: {key}: {note}")
    speedups = {dtype: geomean(r["speedup"] for r in rows if r["dtype"] == dtype) for dtype in _LAYERS}
    for dtype, value in speedups.items():
        print(f"geomean speedup over the unfused pipeline ({dtype}): {fmt(value, '.3f')}")
    data = {**report_header(name, options, MAX_DIFF, copy_bandwidth), "geomean_speedup": speedups, "rows": rows}
    json.dumps(data)
    return SuiteReport(data=data, ok=not any(r["ours_error"] or not r["accurate"] for r in rows))


MEGA_MOE_SUITE = register_suite(
    Suite(
        name="mega_moe",
        description="Mega MoE layer (fp8_mega_moe, fp8_fp4_mega_moe, bf16_mega_moe; one GPU) vs the unfused pipeline of "
        "our kernels",
        shape_help="TxExKxHxI (tokens x local experts x top-k x hidden x intermediate), e.g. 256x32x8x7168x2048",
        parse_shape=parse_mega_shape,
        run=run_mega_moe,
    )
)
