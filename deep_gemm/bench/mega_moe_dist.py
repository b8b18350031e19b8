"""The ``mega_moe_dist`` suite: one MoE layer with its experts spread over R GPUs (one process per GPU, NCCL,
``NCCL_NVLS_ENABLE=0``), ``fp8_mega_moe`` and ``bf16_mega_moe`` against an all-to-all pipeline in the same run.

A shape is ``RxTxExKxHxI``: R ranks, T tokens per rank, E experts over all ranks, top-K, hidden H, intermediate I
(default, for each R in {2, 4, 8} up to the visible GPUs: T in {64, 256, 1024, 4096}, E = 256, K = 8, H = 7168,
I = 2048). Routing: uniform random top-K of E per rank (seeded), every slot routed. The suite spawns the R ranks
itself (``deep_gemm.testing.launch``), once per R; a failed R is reported and the next one runs.

Baseline (same run, same quantized tokens): ``torch.distributed.all_to_all_single`` dispatch of each routed entry's
row (FP8 rows and their 1x128 scales, or BF16 rows), deep_gemm's m-grouped contiguous GEMM (L1), SwiGLU (+ 1x128 FP8
quantization) in PyTorch, the m-grouped GEMM (L2), ``all_to_all_single`` combine of the rows back to their tokens'
ranks and a weighted ``index_add_`` into y. Its routing metadata (split sizes, permutations, grouped layout) is
computed on the host outside the timing, which favours it (a real one exchanges counts and syncs every call).

Columns: each time is the slowest rank's median; speedup = baseline / ours. Bytes moved: each routed slot whose
expert lives on another rank moves its token row there (H bytes FP8 + H/128 x 4 bytes of scales, or 2H BF16) and
its output row back (2H); the entries whose expert is local move nothing. Bandwidths are per GPU (the ranks' mean
bytes / the time): the baseline's dispatch and combine all-to-alls timed alone, ours as both directions' bytes / the
whole call (a lower bound on its link rate: the call also computes), each next to the NCCL all-reduce bus
bandwidth measured in the same run (nccl-tests' definition: 2 (R-1)/R x bytes / time, 256 MiB of BF16).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import torch

from deep_gemm.bench.common import error_text, parse_int_shape, report_header, time_call
from deep_gemm.bench.registry import BenchOptions, Suite, SuiteReport, register_suite
from deep_gemm.bench.report import Column, Table, fmt, geomean

__all__ = [
    "ALLREDUCE_BYTES",
    "MEGA_MOE_DIST_RANKS",
    "MEGA_MOE_DIST_TOKENS",
    "allreduce_bus_bandwidth",
    "default_dist_shapes",
    "format_dist_row",
    "merge_rank_rows",
    "parse_dist_shape",
    "run_mega_moe_dist",
    "transfer_bytes",
]

MAX_DIFF = 1e-3
MEGA_MOE_DIST_RANKS = (2, 4, 8)
MEGA_MOE_DIST_TOKENS = (64, 256, 1024, 4096)
DEFAULT_LAYER = (256, 8, 7168, 2048)  # E, K, H, I
ALLREDUCE_BYTES = 256 << 20
RANKS_TIMEOUT_S = 1800.0

_TABLE = Table(
    [
        Column("dtype", 5),
        Column("R", 2),
        Column("T", 5),
        Column("E", 4),
        Column("K", 2),
        Column("H", 5),
        Column("I", 5),
        Column("ours us", 9),
        Column("a2a us", 9),
        Column("speedup", 7),
        Column("disp us", 8),
        Column("disp GB/s", 9),
        Column("comb us", 8),
        Column("comb GB/s", 9),
        Column("ours GB/s", 9),
        Column("AR busbw", 8),
        Column("diff", 8),
    ]
)


# ----------------------------------------------------------------------------- host-side parts (tested on the CPU)
def parse_dist_shape(text: str) -> tuple[int, ...]:
    """Parse ``"RxTxExKxHxI"`` (e.g. ``"8x256x256x8x7168x2048"``).

    Raises:
        ValueError: not six positive integers separated by ``x``, R below 2, or E not a multiple of R.
    """
    shape = parse_int_shape(text, 6, "RxTxExKxHxI of positive integers", "8x256x256x8x7168x2048")
    num_ranks, _, num_experts, topk, hidden, inter = shape
    if num_ranks < 2:
        raise ValueError(f"expected R >= 2 ranks in {text!r} (the one-GPU layer is the mega_moe suite)")
    if num_experts % num_ranks != 0:
        raise ValueError(f"expected E ({num_experts}) to be a multiple of R ({num_ranks}) in {text!r}")
    if topk > num_experts:
        raise ValueError(f"expected K ({topk}) <= E ({num_experts}) in {text!r}")
    if hidden % 128 != 0 or inter % 128 != 0:
        raise ValueError(f"expected H and I to be multiples of 128 in {text!r}")
    return shape


def default_dist_shapes(num_gpus: int) -> list[tuple[int, ...]]:
    """The issue's shapes for every R in {2, 4, 8} that ``num_gpus`` GPUs can run."""
    return [(r, t, *DEFAULT_LAYER) for r in MEGA_MOE_DIST_RANKS if r <= num_gpus for t in MEGA_MOE_DIST_TOKENS]


def transfer_bytes(
    topk_per_rank: Sequence[torch.Tensor], num_experts: int, hidden: int, use_fp8: bool
) -> list[dict[str, int]]:
    """Bytes each rank's routed slots move across GPUs: ``dispatch`` (its token rows to the experts' ranks, with
    FP8 scales) and ``combine`` (the BF16 output rows back). Slots with id -1 or a local expert move nothing."""
    num_ranks = len(topk_per_rank)
    e_local = num_experts // num_ranks
    row_in = hidden * (1 if use_fp8 else 2) + (hidden // 128 * 4 if use_fp8 else 0)
    row_out = hidden * 2
    out = []
    for rank, ids in enumerate(topk_per_rank):
        ids = ids.flatten()
        ids = ids[ids >= 0]
        remote = int((ids // e_local != rank).sum())
        out.append({"dispatch": remote * row_in, "combine": remote * row_out})
    return out


def allreduce_bus_bandwidth(num_bytes: int, seconds: float, num_ranks: int) -> float:
    """An all-reduce's bus bandwidth in bytes/s (nccl-tests: algorithm bandwidth x 2 (R - 1) / R)."""
    return num_bytes / seconds * 2 * (num_ranks - 1) / num_ranks


def merge_rank_rows(per_rank: Sequence[dict[str, Any]], allreduce_s: Sequence[float]) -> dict[str, Any]:
    """One table row from every rank's row of the same shape and dtype: the slowest rank's times, the ranks' mean
    bytes, the worst diff, the bandwidths (per GPU, bytes/s) and the speedup. ``allreduce_s``: each rank's
    all-reduce time of :data:`ALLREDUCE_BYTES`."""
    first = per_rank[0]
    num_ranks = len(per_rank)
    row: dict[str, Any] = {k: first[k] for k in ("dtype", "r", "t", "e", "k", "h", "i")}
    for key in ("ours_us", "baseline_us", "dispatch_us", "combine_us"):
        values = [r[key] for r in per_rank]
        row[key] = None if any(v is None for v in values) else max(values)
    for key in ("dispatch_bytes", "combine_bytes"):
        row[key] = sum(r[key] for r in per_rank) / num_ranks
    diffs = [r["diff"] for r in per_rank]
    row["diff"] = None if any(d is None for d in diffs) else max(diffs)
    row["accurate"] = row["diff"] is not None and row["diff"] < MAX_DIFF
    row["speedup"] = row["baseline_us"] / row["ours_us"] if row["ours_us"] and row["baseline_us"] else None

    def rate(num_bytes: float, us: float | None) -> float | None:
        return num_bytes / (us * 1e-6) if us else None

    row["dispatch_bw"] = rate(row["dispatch_bytes"], row["dispatch_us"])
    row["combine_bw"] = rate(row["combine_bytes"], row["combine_us"])
    row["ours_comm_bw"] = rate(row["dispatch_bytes"] + row["combine_bytes"], row["ours_us"])
    row["allreduce_busbw"] = allreduce_bus_bandwidth(ALLREDUCE_BYTES, max(allreduce_s), num_ranks)
    return row


def format_dist_row(row: dict[str, Any]) -> str:
    """One row of the printed table (bandwidths in GB/s; ``!`` marks a diff above the bound)."""

    def gbps(value: float | None) -> str:
        return fmt(value * 1e-9 if value is not None else None, ".0f")

    diff = "-" if row["diff"] is None else fmt(row["diff"], ".1e") + ("" if row["accurate"] else "!")
    return _TABLE.row([
        row["dtype"], str(row["r"]), str(row["t"]), str(row["e"]), str(row["k"]), str(row["h"]), str(row["i"]),
        fmt(row["ours_us"], ".1f"), fmt(row["baseline_us"], ".1f"), fmt(row["speedup"], ".2f"),
        fmt(row["dispatch_us"], ".1f"), gbps(row["dispatch_bw"]), fmt(row["combine_us"], ".1f"),
        gbps(row["combine_bw"]), gbps(row["ours_comm_bw"]), gbps(row["allreduce_busbw"]), diff,
    ])  # fmt: skip


# ----------------------------------------------------------------------------- one rank (GPU)
def _all_gather_rows(t: torch.Tensor) -> list[torch.Tensor]:
    import torch.distributed as dist

    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return parts


def _allreduce_seconds(num_tests: int = 10) -> float:
    import torch.distributed as dist

    t = torch.ones(ALLREDUCE_BYTES // 2, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        dist.all_reduce(t)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(num_tests):
        dist.all_reduce(t)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e-3 / num_tests


def _expert_weights(use_fp8: bool, e_local: int, h: int, inter: int, seed: int):
    """This rank's experts (original layout; FP8 with 128x128 block scales), made in chunks to bound FP32 memory."""
    from deep_gemm.utils import per_block_cast_to_fp8

    gen = torch.Generator(device="cuda").manual_seed(seed)
    parts: list[list[torch.Tensor]] = [[], [], [], []]
    for first in range(0, e_local, 8):
        n = min(8, e_local - first)
        w1 = torch.randn(n, 2 * inter, h, device="cuda", generator=gen) / math.sqrt(h)
        w2 = torch.randn(n, h, inter, device="cuda", generator=gen) / math.sqrt(inter)
        if use_fp8:
            for i, pair in enumerate((per_block_cast_to_fp8(w1), per_block_cast_to_fp8(w2))):
                parts[2 * i].append(pair[0])
                parts[2 * i + 1].append(pair[1])
        else:
            parts[0].append(w1.to(torch.bfloat16))
            parts[2].append(w2.to(torch.bfloat16))
        del w1, w2
    w1, s1, w2, s2 = (torch.cat(p) if p else None for p in parts)
    return w1, s1, w2, s2


def _baseline_plan(all_idx: list[torch.Tensor], rank: int, e_local: int, alignment: int) -> dict[str, Any]:
    """The all-to-all pipeline's host-side metadata for ``rank`` (outside the timing): what it sends where, and
    how the received rows are grouped by local expert (padded segments, -1 groups on padding)."""
    num_ranks, (t, k) = len(all_idx), all_idx[rank].shape
    flat = all_idx[rank].flatten()
    owner = flat // e_local
    order = torch.argsort(owner * (t * k) + torch.arange(t * k), stable=True)
    in_splits = torch.bincount(owner, minlength=num_ranks).tolist()
    recv_experts, out_splits = [], []
    for s in range(num_ranks):
        ids = all_idx[s].flatten()
        mine = ids[ids // e_local == rank] - rank * e_local
        recv_experts.append(mine)
        out_splits.append(int(mine.numel()))
    recv_expert = torch.cat(recv_experts)
    perm, groups, row_of_recv = [], [], torch.empty(recv_expert.numel(), dtype=torch.int64)
    for g in range(e_local):
        entries = (recv_expert == g).nonzero().flatten()
        row_of_recv[entries] = torch.arange(len(perm), len(perm) + entries.numel())
        padded = -(-entries.numel() // alignment) * alignment
        perm += entries.tolist() + [0] * (padded - entries.numel())
        groups += [g] * entries.numel() + [-1] * (padded - entries.numel())
    pad = max(len(groups), alignment) - len(groups)
    perm, groups = perm + [0] * pad, groups + [-1] * pad
    return {
        "send_entries": order,
        "send_tokens": order // k,
        "in_splits": in_splits,
        "out_splits": out_splits,
        "perm": torch.tensor(perm, dtype=torch.int64),
        "groups": torch.tensor(groups, dtype=torch.int32),
        "row_of_recv": row_of_recv,
    }


def _bench_shape(use_fp8: bool, shape, weights, l1l2, options: BenchOptions, rank: int) -> dict[str, Any]:
    import torch.distributed as dist

    import deep_gemm
    from deep_gemm import mega
    from deep_gemm.testing import calc_diff
    from deep_gemm.utils import per_token_cast_to_fp8

    num_ranks, t, e, k, h, inter = shape
    e_local = e // num_ranks
    gen = torch.Generator().manual_seed(t * 131 + rank)
    idx = torch.rand(t, e, generator=gen).topk(k, dim=1).indices
    topk_weights = torch.rand(t, k, generator=gen)
    topk_weights /= topk_weights.sum(dim=1, keepdim=True)
    all_idx = [p.cpu() for p in _all_gather_rows(idx.cuda())]
    idx, topk_weights = idx.cuda(), topk_weights.cuda()
    x = torch.randn(t, h, device="cuda").to(torch.bfloat16)
    w1, s1, w2, s2 = weights
    l1, l2 = l1l2
    group = dist.group.WORLD

    if use_fp8:
        buffer = mega.get_symm_buffer_for_sm90_mega_moe(group, e, t, k, h, inter)
        mega.mega_moe_pre_dispatch_sm90(x, idx, topk_weights, buffer.x, buffer.x_sf, buffer.topk_idx,
                                        buffer.topk_weights, t)  # fmt: skip
    else:
        buffer = mega.get_symm_buffer_for_mega_moe(group, e, t, k, h, inter, mma_type="bf16xbf16")
        buffer.x[:t].copy_(x)
        buffer.topk_idx[:t].copy_(idx)
        buffer.topk_weights[:t].copy_(topk_weights)
    y = torch.full((t, h), float("nan"), dtype=torch.bfloat16, device="cuda")

    def ours() -> torch.Tensor:
        if use_fp8:
            mega.fp8_mega_moe(y, l1, l2, buffer, num_tokens_bound=t)
        else:
            mega.bf16_mega_moe(y, l1, l2, buffer)
        return y

    plan = _baseline_plan(all_idx, rank, e_local, deep_gemm.get_mk_alignment_for_contiguous_layout())
    send_tokens, perm, row_of_recv = (plan[n].cuda() for n in ("send_tokens", "perm", "row_of_recv"))
    groups = plan["groups"].cuda()
    in_splits, out_splits = plan["in_splits"], plan["out_splits"]
    send_weights = topk_weights.flatten()[plan["send_entries"].cuda()]
    n_recv, rows = sum(out_splits), perm.numel()
    x_rows = buffer.x[:t].view(torch.uint8) if use_fp8 else buffer.x[:t].view(torch.int16)
    recv_x = torch.empty(n_recv, h, dtype=x_rows.dtype, device="cuda")
    recv_sf = torch.empty(n_recv, h // 128, dtype=torch.float32, device="cuda")
    l1_out = torch.empty(rows, 2 * inter, dtype=torch.bfloat16, device="cuda")
    l2_out = torch.empty(rows, h, dtype=torch.bfloat16, device="cuda")
    returned = torch.empty(send_tokens.numel(), h, dtype=torch.bfloat16, device="cuda")
    y_base = torch.empty(t, h, dtype=torch.bfloat16, device="cuda")

    def dispatch() -> None:
        dist.all_to_all_single(recv_x, x_rows.index_select(0, send_tokens), out_splits, in_splits)
        if use_fp8:
            dist.all_to_all_single(recv_sf, buffer.x_sf[:t].index_select(0, send_tokens), out_splits, in_splits)

    def experts() -> None:
        if use_fp8:
            a = recv_x.index_select(0, perm).view(torch.float8_e4m3fn)
            a_sf = deep_gemm.get_mn_major_tma_aligned_tensor(recv_sf.index_select(0, perm))
            deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, a_sf), (w1, s1), l1_out, groups)
            act, act_sf = per_token_cast_to_fp8(
                torch.nn.functional.silu(l1_out[:, :inter].float()) * l1_out[:, inter:].float(), use_ue8m0=False
            )
            act_sf = deep_gemm.get_mn_major_tma_aligned_tensor(act_sf)
            deep_gemm.m_grouped_fp8_gemm_nt_contiguous((act, act_sf), (w2, s2), l2_out, groups)
        else:
            a = recv_x.index_select(0, perm).view(torch.bfloat16)
            deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, w1, l1_out, groups)
            act = torch.nn.functional.silu(l1_out[:, :inter].float()) * l1_out[:, inter:].float()
            deep_gemm.m_grouped_bf16_gemm_nt_contiguous(act.to(torch.bfloat16), w2, l2_out, groups)

    def combine() -> torch.Tensor:
        dist.all_to_all_single(returned, l2_out.index_select(0, row_of_recv), in_splits, out_splits)
        weighted = (returned.float() * send_weights[:, None]).to(torch.bfloat16)
        return y_base.zero_().index_add_(0, send_tokens, weighted)

    def baseline() -> torch.Tensor:
        dispatch()
        experts()
        return combine()

    counts = transfer_bytes(all_idx, e, h, use_fp8)[rank]
    row: dict[str, Any] = {"dtype": "fp8" if use_fp8 else "bf16", "r": num_ranks, "t": t, "e": e, "k": k, "h": h,
                           "i": inter, "dispatch_bytes": counts["dispatch"], "combine_bytes": counts["combine"]}  # fmt: skip
    out, ref = ours().clone(), baseline().clone()
    torch.cuda.synchronize()
    row["diff"] = float(calc_diff(out.float(), ref.float())) if not out.isnan().any() else float("inf")
    for key, fn in (("ours_us", ours), ("baseline_us", baseline), ("dispatch_us", dispatch), ("combine_us", combine)):
        dist.barrier()
        row[key] = time_call(fn, options)["median_us"]
    dist.barrier()
    buffer.destroy()
    return row


def _bench_rank(rank: int, num_ranks: int, shapes: list[tuple[int, ...]], options: BenchOptions) -> dict[str, Any]:
    """Every shape of this R on one rank (the ranks run them in lockstep): rows and the all-reduce time."""
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    from deep_gemm import mega

    if hasattr(symm_mem, "enable_symm_mem_for_group"):
        symm_mem.enable_symm_mem_for_group(dist.group.WORLD.group_name)
    allreduce_s = _allreduce_seconds()
    rows = []
    for use_fp8 in (True, False):
        cache: dict[tuple[int, ...], Any] = {}
        for shape in shapes:
            _, _, e, _, h, inter = shape
            key = (e // num_ranks, h, inter)
            if key not in cache:
                cache.clear()
                torch.cuda.empty_cache()
                weights = _expert_weights(use_fp8, *key, seed=1000 + rank)
                if use_fp8:
                    l1l2 = mega.transform_weights_for_mega_moe_sm90(weights[:2], weights[2:])
                else:
                    l1l2 = mega.transform_weights_for_mega_moe(weights[0], weights[2])
                cache[key] = (weights, l1l2)
            rows.append(_bench_shape(use_fp8, shape, *cache[key], options, rank))
            torch.cuda.empty_cache()
    return {"rows": rows, "allreduce_s": allreduce_s, "device": torch.cuda.get_device_name()}


# ----------------------------------------------------------------------------- the suite
def run_mega_moe_dist(options: BenchOptions) -> SuiteReport:
    """Run the ``mega_moe_dist`` suite (each R in its own group of processes), print its table, return the
    JSON-ready report."""
    from deep_gemm.testing.launch import RankError, run_ranks

    name = "mega_moe_dist"
    num_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if num_gpus < 2:
        message = f"needs two or more CUDA GPUs (torch.cuda.device_count() is {num_gpus})"
        print(f"{name}: {message}")
        return SuiteReport(data={"suite": name, "error": message}, ok=False)
    shapes = [parse_dist_shape(s) for s in options.shapes] if options.shapes else default_dist_shapes(num_gpus)
    print(f"device: {torch.cuda.get_device_name()} x {num_gpus}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(_TABLE.header(), flush=True)
    rows, errors = [], []
    for num_ranks in sorted({s[0] for s in shapes}):
        shapes_r = [s for s in shapes if s[0] == num_ranks]
        if num_ranks > num_gpus:
            errors.append(f"R = {num_ranks}: skipped, {num_gpus} GPUs visible")
            continue
        try:
            per_rank = run_ranks(_bench_rank, num_ranks, args=(shapes_r, options), backend="nccl",
                                 timeout_s=RANKS_TIMEOUT_S)  # fmt: skip
        except (RankError, TimeoutError) as exc:
            errors.append(f"R = {num_ranks}: {error_text(exc)}")
            print(f"R = {num_ranks} failed:\n{exc}", flush=True)
            continue
        allreduce_s = [r["allreduce_s"] for r in per_rank]
        for i in range(len(per_rank[0]["rows"])):
            row = merge_rank_rows([r["rows"][i] for r in per_rank], allreduce_s)
            print(format_dist_row(row), flush=True)
            rows.append(row)
    for note in errors:
        print(f"note: {note}")
    speedups = {dtype: geomean(r["speedup"] for r in rows if r["dtype"] == dtype) for dtype in ("fp8", "bf16")}
    for dtype, value in speedups.items():
        print(f"geomean speedup over the all-to-all pipeline ({dtype}): {fmt(value, '.3f')}")
    header = report_header(name, options, MAX_DIFF, 0.0) | {"copy_bandwidth_gbps": None}  # (not measured here)
    data = {**header, "num_gpus": num_gpus, "geomean_speedup": speedups,
            "errors": errors, "rows": rows}  # fmt: skip
    json.dumps(data)
    return SuiteReport(data=data, ok=bool(rows) and not errors and all(r["accurate"] for r in rows))


MEGA_MOE_DIST_SUITE = register_suite(
    Suite(
        name="mega_moe_dist",
        description="Mega MoE over R GPUs (fp8_mega_moe, bf16_mega_moe; NCCL + symmetric memory) vs all-to-all + "
        "our grouped GEMMs",
        shape_help="RxTxExKxHxI (ranks x tokens per rank x experts x top-k x hidden x intermediate), e.g. "
        "8x256x256x8x7168x2048",
        parse_shape=parse_dist_shape,
        run=run_mega_moe_dist,
    )
)
