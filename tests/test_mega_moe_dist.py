"""deep_gemm.mega across ranks (issue 46): one process per GPU, the layer's experts spread over the group.

CPU tier (gloo, a few seconds): the launch helper (deep_gemm.testing.launch: spawn, rendezvous, results gathered, a
rank's exception re-raised in the parent with its traceback); the multi-rank float64 reference (which rank owns which
experts, the all-gather of every rank's tokens and weights, each rank's expected y) against a single-rank computation
of the same whole layer; the routing model and the buffer's row bound for R > 1 with uneven loads.

multigpu tier (``-m multigpu``; skipped below 2 GPUs, each R skipped above the GPU count): ``fp8_mega_moe`` and
``bf16_mega_moe`` on R in {2, 4, 8} ranks over NCCL (NCCL_NVLS_ENABLE=0) and PyTorch symmetric memory. Every rank
checks its y (poisoned with NaN before each call) against the float64 reference of the whole layer built from an
all-gather of the inputs and weights, its routing tables against the model, and its receive counts; cases: uneven
routing with masked (-1) slots and tokens routed nowhere, ranks with no tokens, experts (a whole rank's) with no
tokens, and a CUDA graph captured once and replayed with new routing.
"""

from __future__ import annotations

import json
import math
import os
import random

import pytest
import torch
from mega_moe_reference import (
    GatheredProblem,
    expected_routing,
    expert_owner,
    gather_problem,
    local_experts,
    moe_reference,
    rank_expected_y,
)

from deep_gemm.mega.layout import mega_moe_buffer_layout, received_rows_bound
from deep_gemm.testing import launch
from deep_gemm.testing.launch import RankError, run_ranks
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8

multigpu = pytest.mark.multigpu


# ----------------------------------------------------------------------------- launch helper (CPU tier, gloo)
def _sum_of_ranks_worker(rank: int, num_ranks: int, offset: int) -> dict:
    import torch.distributed as dist

    t = torch.tensor([rank + offset], dtype=torch.int64)
    dist.all_reduce(t)
    return {
        "rank": rank,
        "world": dist.get_world_size(),
        "sum": int(t),
        "nvls": os.environ.get("NCCL_NVLS_ENABLE"),
        "extra": os.environ.get("DG_TEST_LAUNCH_ENV"),
        "tensor": torch.full((2,), float(rank)),
    }


def _failing_worker(rank: int, num_ranks: int) -> None:
    import torch.distributed as dist

    if rank == 1:
        raise ValueError("the worker of rank 1 failed on purpose")
    dist.barrier()  # (rank 0 waits for rank 1 forever: the launcher must end it)


def test_run_ranks_gathers_every_rank_result() -> None:
    results = run_ranks(_sum_of_ranks_worker, 2, args=(10,), env={"DG_TEST_LAUNCH_ENV": "yes"})
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["world"] == 2 and r["sum"] == 21 for r in results)  # (0 + 10) + (1 + 10)
    assert all(r["nvls"] == "0" and r["extra"] == "yes" for r in results)
    assert torch.equal(results[1]["tensor"], torch.ones(2))


def test_run_ranks_spawned_ranks() -> None:
    # The start method of NCCL ranks. One rank: each spawned rank imports torch and deep_gemm again (~3 s of CPU).
    results = run_ranks(_sum_of_ranks_worker, 1, args=(5,), start_method="spawn")
    assert results[0]["sum"] == 5 and results[0]["nvls"] == "0" and torch.equal(results[0]["tensor"], torch.zeros(2))


def test_run_ranks_reraises_a_rank_failure_with_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "FAILURE_GRACE_S", 1.0)
    with pytest.raises(RankError) as info:
        run_ranks(_failing_worker, 2, timeout_s=60)
    assert 1 in info.value.failures
    text = info.value.failures[1]
    assert "ValueError: the worker of rank 1 failed on purpose" in text and "_failing_worker" in text
    assert "--- rank 1 ---" in str(info.value)
    assert 0 in info.value.failures  # blocked in the barrier, then ended (or failed by gloo: either is reported)


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        (dict(fn=1, num_ranks=2), TypeError, r"fn must be callable"),
        (dict(num_ranks=0), ValueError, r"num_ranks must be a positive int"),
        (dict(num_ranks=True), ValueError, r"num_ranks must be a positive int"),
        (dict(backend="mpi"), ValueError, r"backend must be one of \('gloo', 'nccl'\)"),
        (dict(timeout_s=0), ValueError, r"timeout_s must be a positive number"),
        (dict(env={"A": 1}), TypeError, r"env must be a dict of str to str"),
        (dict(start_method="thread"), ValueError, r"start_method must be 'spawn', 'fork', 'forkserver' or None"),
        (dict(backend="nccl", start_method="fork"), ValueError, r"'fork' cannot start NCCL ranks"),
    ],
)
def test_run_ranks_bad_arguments(kwargs: dict, error: type, pattern: str) -> None:
    args = dict(fn=_failing_worker, num_ranks=2) | kwargs
    with pytest.raises(error, match=pattern):
        run_ranks(**args)


@pytest.mark.skipif(torch.cuda.device_count() >= 64, reason="needs fewer than 64 visible GPUs")
def test_run_ranks_nccl_needs_a_gpu_per_rank() -> None:
    with pytest.raises(ValueError, match=r"backend 'nccl' needs one GPU per rank: num_ranks = 64"):
        run_ranks(_failing_worker, 64, backend="nccl")


# ----------------------------------------------------------------------------- multi-rank reference (CPU tier)
def whole_layer(use_fp8: bool, counts: list[int], num_experts: int, topk: int, hidden: int, inter: int, seed: int):
    """One layer over len(counts) ranks, made in one place (CPU): tokens in rank order, weights in global expert
    order, routing with masked slots, tokens routed nowhere and experts nobody picks (expert 1 and the last one)."""
    gen = torch.Generator().manual_seed(seed)
    total = sum(counts)
    x = (torch.randn(total, hidden, generator=gen) * 2).to(torch.bfloat16)
    idx = torch.rand(total, num_experts, generator=gen).topk(topk, dim=1).indices
    idx[(idx == 1) | (idx == num_experts - 1)] = -1
    idx[torch.rand(total, topk, generator=gen) < 0.2] = -1
    idx[:1] = -1
    weights = torch.rand(total, topk, generator=gen)
    w1 = torch.randn(num_experts, 2 * inter, hidden, generator=gen) / math.sqrt(hidden)
    w2 = torch.randn(num_experts, hidden, inter, generator=gen) / math.sqrt(inter)
    if use_fp8:
        x, x_sf = per_token_cast_to_fp8(x, use_ue8m0=False)
        (w1, s1), (w2, s2) = per_block_cast_to_fp8(w1), per_block_cast_to_fp8(w2)
    else:
        x_sf = s1 = s2 = None
        w1, w2 = w1.to(torch.bfloat16), w2.to(torch.bfloat16)
    return GatheredProblem(counts, x, x_sf, idx, weights, w1, s1, w2, s2)


# (counts, experts, top-k, hidden, I): uneven token counts, a rank with none; 3 ranks of 2 experts
DIST_CASE = ([5, 0, 9], 6, 3, 256, 128)


def _reference_worker(rank: int, num_ranks: int) -> list[dict]:
    """Each rank takes its part of the whole layer, all-gathers, and computes its expected y."""
    counts, e, k, h, inter = DIST_CASE
    out = []
    for use_fp8 in (True, False):
        whole = whole_layer(use_fp8, counts, e, k, h, inter, seed=7)
        first = sum(counts[:rank])
        rows = slice(first, first + counts[rank])
        mine = local_experts(rank, e, num_ranks)
        experts = slice(mine.start, mine.stop)
        part = gather_problem(
            whole.x[rows],
            None if whole.x_sf is None else whole.x_sf[rows],
            whole.topk_idx[rows],
            whole.topk_weights[rows],
            whole.w1[experts],
            None if whole.s1 is None else whole.s1[experts],
            whole.w2[experts],
            None if whole.s2 is None else whole.s2[experts],
        )
        out.append({"gathered": part, "y": rank_expected_y(part, rank, inter, clamp=2.0)})
    return out


def test_multi_rank_reference_matches_one_rank_of_the_whole_layer() -> None:
    counts, e, k, h, inter = DIST_CASE
    results = run_ranks(_reference_worker, len(counts))
    for case, use_fp8 in enumerate((True, False)):
        whole = whole_layer(use_fp8, counts, e, k, h, inter, seed=7)
        expected = moe_reference(
            whole.x, whole.x_sf, whole.topk_idx, whole.topk_weights, whole.w1, whole.s1, whole.w2, whole.s2, inter, 2.0
        )
        assert expected[1:].abs().sum(dim=1).gt(0).sum() > 0, "the case must route some tokens"
        for rank, per_rank in enumerate(results):
            got = per_rank[case]["gathered"]
            assert got.token_counts == counts
            for name in ("x", "x_sf", "topk_idx", "topk_weights", "w1", "s1", "w2", "s2"):
                a, b = getattr(got, name), getattr(whole, name)
                assert (a is None) == (b is None), name
                if a is not None:  # (bytes: FP8 has no torch.equal on CPU)
                    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), (rank, name)
            first = sum(counts[:rank])
            y = per_rank[case]["y"]
            assert y.shape == (counts[rank], h) and y.dtype == torch.float64
            torch.testing.assert_close(y, expected[first : first + counts[rank]], rtol=1e-12, atol=1e-12)


def test_expert_ownership() -> None:
    assert [list(local_experts(r, 8, 4)) for r in range(4)] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [expert_owner(e, 256, 8) for e in (0, 31, 32, 255)] == [0, 0, 1, 7]
    with pytest.raises(ValueError, match=r"num_experts \(6\) must be a multiple of num_ranks \(4\)"):
        local_experts(0, 6, 4)


# ----------------------------------------------------------------------------- routing and sizing, R > 1 (CPU tier)
def uneven_routing(num_ranks: int, counts: list[int], num_experts: int, topk: int, seed: int) -> list[torch.Tensor]:
    """Each rank's top-k ids: most entries on rank 0's experts, the last rank's experts unused, masked slots."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    e_local = num_experts // num_ranks
    for count in counts:
        scores = torch.rand(count, num_experts, generator=gen)
        scores[:, :e_local] += 2.0
        scores[:, num_experts - e_local :] = -1.0
        idx = scores.topk(topk, dim=1).indices
        idx[idx >= num_experts - e_local] = -1  # (top-k may exceed the experts left)
        idx[torch.rand(count, topk, generator=gen) < 0.15] = -1
        out.append(idx)
    return out


@pytest.mark.parametrize("num_ranks", [2, 4, 8])
def test_routing_model_and_row_bound_with_uneven_loads(num_ranks: int) -> None:
    e_local, topk, alignment, max_tokens = 3, 4, 8, 24
    num_experts = e_local * num_ranks
    rng = random.Random(num_ranks)
    counts = [rng.choice([0, 1, 7, max_tokens]) for _ in range(num_ranks)]
    counts[0] = max_tokens
    routing = uneven_routing(num_ranks, counts, num_experts, topk, seed=num_ranks)
    layout = mega_moe_buffer_layout(num_ranks, num_experts, max_tokens, topk, 128, 128, True, alignment)
    bound = received_rows_bound(num_ranks, max_tokens, topk, e_local, alignment)
    assert layout.max_rows == bound
    seen: dict[tuple[int, int, int], int] = {}
    for rank in range(num_ranks):
        ends, src, combine = expected_routing(routing, rank, e_local, alignment)
        padded_end = -(-ends[-1] // alignment) * alignment
        assert padded_end <= bound, (rank, padded_end, bound)
        for entry, row in combine.items():
            assert entry not in seen, "an entry routed to two ranks"
            seen[entry] = rank
            assert src[row] == entry
        assert layout.kernel_layout(rank)[-3:-1] == [rank, num_ranks]
    # every unmasked slot of every rank lands on its expert's owner exactly once; masked ones nowhere
    for s, ids in enumerate(routing):
        for t in range(ids.shape[0]):
            for j in range(topk):
                e = int(ids[t, j])
                assert seen.get((s, t, j)) == (None if e < 0 else expert_owner(e, num_experts, num_ranks))
    # the unused last rank receives nothing; rank 0 the most
    assert expected_routing(routing, num_ranks - 1, e_local, alignment)[0] == [0] * e_local


def test_row_bound_is_reached_by_one_routing() -> None:
    # 2 ranks x 5 tokens x top-2 = 20 entries, all on rank 0's 4 experts as 9, 9, 1, 1 rows: every segment is one
    # past a multiple of 8, so the padding is the most it can be: 16 + 16 + 8 + 8 = 48 = the bound
    experts = torch.tensor([0] * 9 + [1] * 9 + [2, 3]).view(2, 5, 2)
    ends, _, _ = expected_routing(list(experts), 0, 4, 8)
    assert ends == [9, 25, 33, 41]
    assert -(-ends[-1] // 8) * 8 == 48 == received_rows_bound(2, 5, 2, 4, 8)


def test_rows_for_call_uses_the_group_bound_not_this_rank_tokens() -> None:
    from types import SimpleNamespace

    from deep_gemm import get_mk_alignment_for_contiguous_layout
    from deep_gemm.mega.moe import _rows_for_call

    alignment = get_mk_alignment_for_contiguous_layout()
    layout = mega_moe_buffer_layout(4, 16, 100, 6, 256, 128, True, alignment)
    buffer = SimpleNamespace(layout=layout, num_ranks=4)
    # a rank with 3 tokens must still take every peer's up to 100 (or the caller's bound)
    assert _rows_for_call("f", buffer, 3, None) == received_rows_bound(4, 100, 6, 4, alignment) == layout.max_rows
    assert _rows_for_call("f", buffer, 3, 10) == received_rows_bound(4, 10, 6, 4, alignment)
    assert _rows_for_call("f", buffer, 0, None) == layout.max_rows
    one = SimpleNamespace(layout=mega_moe_buffer_layout(1, 16, 100, 6, 256, 128, True, alignment), num_ranks=1)
    assert _rows_for_call("f", one, 3, None) == received_rows_bound(1, 3, 6, 16, alignment)


# ----------------------------------------------------------------------------- multigpu tier
HIDDEN, INTER, TOPK, EXPERTS_PER_RANK, MAX_TOKENS = 512, 256, 4, 4, 128


def _rank_layer(rank: int, num_ranks: int, use_fp8: bool, seed: int):
    """This rank's experts (original and transformed weights) on its GPU."""
    from deep_gemm import mega

    gen = torch.Generator(device="cuda").manual_seed(seed * 1000 + rank)
    w1 = torch.randn(EXPERTS_PER_RANK, 2 * INTER, HIDDEN, device="cuda", generator=gen) / math.sqrt(HIDDEN)
    w2 = torch.randn(EXPERTS_PER_RANK, HIDDEN, INTER, device="cuda", generator=gen) / math.sqrt(INTER)
    if use_fp8:
        (w1, s1), (w2, s2) = per_block_cast_to_fp8(w1), per_block_cast_to_fp8(w2)
        l1, l2 = mega.transform_weights_for_mega_moe_sm90((w1, s1), (w2, s2))
        return (w1, s1, w2, s2), (l1, l2)
    w1, w2 = w1.to(torch.bfloat16), w2.to(torch.bfloat16)
    return (w1, None, w2, None), mega.transform_weights_for_mega_moe(w1, w2)


def _fill_routing(buffer, rank: int, num_ranks: int, num_tokens: int, pattern: str, seed: int) -> None:
    """Tokens, ids (global; -1 masked) and weights into this rank's buffer. Patterns: ``uneven`` (rank 0's experts
    busiest, the last rank's experts and expert 1 unused, masked slots, the first tokens routed nowhere) and
    ``random`` (uniform, masked slots)."""
    from deep_gemm import mega

    num_experts = EXPERTS_PER_RANK * num_ranks
    gen = torch.Generator().manual_seed(seed * 7919 + rank)
    scores = torch.rand(num_tokens, num_experts, generator=gen)
    if pattern == "uneven":
        scores[:, :EXPERTS_PER_RANK] += 2.0
    idx = scores.topk(TOPK, dim=1).indices
    if pattern == "uneven":
        idx[(idx >= num_experts - EXPERTS_PER_RANK) | (idx == 1)] = -1
        idx[: min(num_tokens, 3)] = -1
    idx[torch.rand(num_tokens, TOPK, generator=gen) < 0.2] = -1
    weights = torch.rand(num_tokens, TOPK, generator=gen).cuda()
    x = (torch.randn(num_tokens, HIDDEN, generator=gen) * 2).to(torch.bfloat16).cuda()
    idx = idx.cuda()
    if buffer.use_fp8_dispatch:
        mega.mega_moe_pre_dispatch_sm90(
            x, idx, weights, buffer.x, buffer.x_sf, buffer.topk_idx, buffer.topk_weights, num_tokens
        )
    else:
        buffer.x[:num_tokens].copy_(x)
        buffer.topk_idx[:num_tokens].copy_(idx)
        buffer.topk_weights[:num_tokens].copy_(weights)


def _check_rank(label: str, buffer, weights, y: torch.Tensor, stats, stats_before: int, rank: int, num_ranks: int):
    """y against the whole layer's float64 reference (all-gathered), the routing tables, the receive counts."""
    import deep_gemm

    num_tokens = y.shape[0]
    w1, s1, w2, s2 = weights
    whole = gather_problem(
        buffer.x[:num_tokens],
        buffer.x_sf[:num_tokens] if buffer.use_fp8_dispatch else None,
        buffer.topk_idx[:num_tokens],
        buffer.topk_weights[:num_tokens],
        w1,
        s1,
        w2,
        s2,
    )
    ref = rank_expected_y(whole, rank, INTER, None)
    assert not y.isnan().any(), f"{label}: y has unwritten (NaN) entries"
    routed = (buffer.topk_idx[:num_tokens] >= 0).any(dim=1)
    assert (y[~routed] == 0).all(), f"{label}: tokens routed to no expert must get zeros"
    diff = float(deep_gemm.testing.calc_diff(y[routed].double(), ref[routed])) if routed.any() else 0.0
    assert diff < 1e-4, f"{label}: calc_diff {diff}, worst abs error {(y.double() - ref).abs().max().item()}"

    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    per_rank = [ids.cpu() for ids in whole.topk_per_rank()]
    models = [expected_routing(per_rank, r, EXPERTS_PER_RANK, alignment) for r in range(num_ranks)]
    ends, src, _ = models[rank]
    assert buffer.view("psum_ends").tolist() == ends, f"{label}: psum_ends"
    src_rows = buffer.view("src_of_row").tolist()
    for row, (s, t, j) in src.items():
        assert src_rows[row] == (s * MAX_TOKENS + t) * TOPK + j, f"{label}: src_of_row[{row}]"
    combine_rows = buffer.view("combine_row").cpu()
    mine = per_rank[rank]
    for t in range(num_tokens):
        for j in range(TOPK):
            e = int(mine[t, j])
            if e >= 0:
                owner = expert_owner(e, EXPERTS_PER_RANK * num_ranks, num_ranks)
                assert int(combine_rows[t, j]) == models[owner][2][(rank, t, j)], f"{label}: combine_row[{t}, {j}]"
    if stats is not None:
        all_ids = whole.topk_idx.cpu()
        first = rank * EXPERTS_PER_RANK
        local = all_ids[(all_ids >= first) & (all_ids < first + EXPERTS_PER_RANK)] - first
        expected = stats_before + torch.bincount(local, minlength=EXPERTS_PER_RANK)
        assert torch.equal(stats.cpu().long(), expected), f"{label}: cumulative_local_expert_recv_stats"
    return diff


def _dist_layer_worker(rank: int, num_ranks: int, use_fp8: bool) -> dict:
    """Every multigpu case on this rank, in order; each assertion names its case."""
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    from deep_gemm import mega

    group = dist.group.WORLD
    if hasattr(symm_mem, "enable_symm_mem_for_group"):
        symm_mem.enable_symm_mem_for_group(group.group_name)
    num_experts = EXPERTS_PER_RANK * num_ranks
    if use_fp8:
        buffer = mega.get_symm_buffer_for_sm90_mega_moe(group, num_experts, MAX_TOKENS, TOPK, HIDDEN, INTER)
    else:
        buffer = mega.get_symm_buffer_for_mega_moe(
            group, num_experts, MAX_TOKENS, TOPK, HIDDEN, INTER, mma_type="bf16xbf16"
        )
    assert buffer._handle is not None and buffer.peers.numel() == num_ranks
    weights, (l1, l2) = _rank_layer(rank, num_ranks, use_fp8, seed=1)

    def call(y, stats=None):
        if use_fp8:
            mega.fp8_mega_moe(y, l1, l2, buffer, stats)
        else:
            mega.bf16_mega_moe(y, l1, l2, buffer, stats)

    diffs = {}
    # uneven token counts (T = max on rank 0, unaligned elsewhere), uneven routing; a rank with no tokens
    for case, counts in (
        ("uneven", [MAX_TOKENS, 37, 64, 1, 100, 5, 128, 77]),
        ("no_tokens", [0, 50, 0, 128, 0, 3, 0, 90]),
    ):
        num_tokens = counts[rank]
        _fill_routing(buffer, rank, num_ranks, num_tokens, "uneven", seed=len(case))
        stats = torch.full((EXPERTS_PER_RANK,), 3, dtype=torch.int32, device="cuda")
        y = torch.full((num_tokens, HIDDEN), float("nan"), dtype=torch.bfloat16, device="cuda")
        call(y, stats)
        torch.cuda.synchronize()
        diffs[case] = _check_rank(case, buffer, weights, y, stats, 3, rank, num_ranks)
        y2 = torch.full_like(y, float("nan"))
        call(y2)
        torch.cuda.synchronize()
        assert torch.equal(y.view(torch.int16), y2.view(torch.int16)), f"{case}: not bitwise repeatable"

    # CUDA graph: captured once, replayed with new tokens and routing in the same buffer
    num_tokens = [96, 13, 128, 40, 0, 77, 5, 64][rank]
    _fill_routing(buffer, rank, num_ranks, num_tokens, "random", seed=11)
    y = torch.full((num_tokens, HIDDEN), float("nan"), dtype=torch.bfloat16, device="cuda")
    call(y)  # (compiles outside the capture)
    torch.cuda.synchronize()
    dist.barrier()
    graph = torch.cuda.CUDAGraph()
    # (thread-local: NCCL's watchdog thread queries events while this thread captures)
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        call(y)
    torch.cuda.synchronize()
    for seed, pattern in ((12, "uneven"), (13, "random"), (14, "uneven")):
        _fill_routing(buffer, rank, num_ranks, num_tokens, pattern, seed=seed)
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        diffs[f"graph-{seed}"] = _check_rank(f"graph replay {seed}", buffer, weights, y, None, 0, rank, num_ranks)
    del graph
    dist.barrier()
    buffer.destroy()
    return diffs


@multigpu
@pytest.mark.parametrize("use_fp8", [True, False], ids=["fp8", "bf16"])
@pytest.mark.parametrize("num_ranks", [2, 4, 8])
def test_mega_moe_across_ranks(num_ranks: int, use_fp8: bool) -> None:
    if torch.cuda.device_count() < num_ranks:
        pytest.skip(f"needs {num_ranks} GPUs, {torch.cuda.device_count()} visible")
    results = run_ranks(_dist_layer_worker, num_ranks, args=(use_fp8,), backend="nccl", timeout_s=540)
    assert len(results) == num_ranks
    for rank, diffs in enumerate(results):
        assert set(diffs) == {"uneven", "no_tokens", "graph-12", "graph-13", "graph-14"}, rank


# ----------------------------------------------------------------------------- mega_moe_dist bench (CPU tier)
def test_dist_bench_suite_shapes_and_parsing() -> None:
    from deep_gemm.bench import get_suite
    from deep_gemm.bench.mega_moe_dist import default_dist_shapes, parse_dist_shape

    suite = get_suite("mega_moe_dist")
    assert suite.parse_shape("8x256x256x8x7168x2048") == (8, 256, 256, 8, 7168, 2048)
    assert default_dist_shapes(1) == []
    assert [(s[0], s[1]) for s in default_dist_shapes(4)] == [(r, t) for r in (2, 4) for t in (64, 256, 1024, 4096)]
    assert len(default_dist_shapes(8)) == 12 and all(s[2:] == (256, 8, 7168, 2048) for s in default_dist_shapes(8))
    for text, pattern in (
        ("1x64x256x8x7168x2048", r"R >= 2"),
        ("3x64x256x8x7168x2048", r"E \(256\) to be a multiple of R \(3\)"),
        ("2x64x8x16x7168x2048", r"K \(16\) <= E \(8\)"),
        ("2x64x256x8x7000x2048", r"multiples of 128"),
        ("2x64x256x8x7168", r"RxTxExKxHxI"),
    ):
        with pytest.raises(ValueError, match=pattern):
            parse_dist_shape(text)


def test_dist_bench_transfer_bytes() -> None:
    from deep_gemm.bench.mega_moe_dist import transfer_bytes

    # 2 ranks, 4 experts (rank 0: 0-1, rank 1: 2-3); H = 256
    per_rank = [torch.tensor([[0, 2], [3, -1]]), torch.tensor([[1, 1], [2, 0], [-1, -1]])]
    fp8 = transfer_bytes(per_rank, 4, 256, True)
    # rank 0: slots on 2 and 3 are remote (2); rank 1: slots on 1, 1, 0 are remote (3)
    assert fp8 == [{"dispatch": 2 * (256 + 8), "combine": 2 * 512}, {"dispatch": 3 * (256 + 8), "combine": 3 * 512}]
    assert transfer_bytes(per_rank, 4, 256, False)[1] == {"dispatch": 3 * 512, "combine": 3 * 512}


def test_dist_bench_row_merge_and_format() -> None:
    from deep_gemm.bench.mega_moe_dist import ALLREDUCE_BYTES, allreduce_bus_bandwidth, format_dist_row, merge_rank_rows

    assert allreduce_bus_bandwidth(1000, 1e-6, 4) == pytest.approx(1000 / 1e-6 * 1.5)
    base = {"dtype": "fp8", "r": 2, "t": 64, "e": 256, "k": 8, "h": 7168, "i": 2048}
    ranks = [
        base | {"ours_us": 100.0, "baseline_us": 300.0, "dispatch_us": 40.0, "combine_us": 50.0, "diff": 2e-4,
                "dispatch_bytes": 4_000_000, "combine_bytes": 6_000_000},
        base | {"ours_us": 120.0, "baseline_us": 240.0, "dispatch_us": 20.0, "combine_us": 60.0, "diff": 5e-4,
                "dispatch_bytes": 2_000_000, "combine_bytes": 4_000_000},
    ]  # fmt: skip
    row = merge_rank_rows(ranks, [0.002, 0.001])
    assert row["ours_us"] == 120.0 and row["baseline_us"] == 300.0 and row["speedup"] == pytest.approx(2.5)
    assert row["diff"] == 5e-4 and row["accurate"]
    assert row["dispatch_bytes"] == 3_000_000 and row["dispatch_bw"] == pytest.approx(3e6 / 40e-6)
    assert row["combine_bw"] == pytest.approx(5e6 / 60e-6)
    assert row["ours_comm_bw"] == pytest.approx(8e6 / 120e-6)
    assert row["allreduce_busbw"] == pytest.approx(ALLREDUCE_BYTES / 0.002)  # (R = 2: 2 (R-1)/R = 1)
    text = format_dist_row(row)
    assert "2.50" in text and "5.0e-04" in text and "!" not in text
    json_row = json.loads(json.dumps(row))
    assert json_row["speedup"] == pytest.approx(2.5)
    failed = merge_rank_rows([ranks[0] | {"ours_us": None, "diff": None}, ranks[1]], [0.001, 0.001])
    assert failed["speedup"] is None and not failed["accurate"] and format_dist_row(failed).rstrip().endswith("-")


def test_dist_bench_baseline_plan_routes_every_slot() -> None:
    """The all-to-all baseline's host plan, with the exchange simulated: every received row reaches its expert's
    segment, and every returned row comes back to the slot that sent it."""
    from deep_gemm.bench.mega_moe_dist import _baseline_plan

    num_ranks, e_local, alignment, topk = 3, 2, 4, 3
    gen = torch.Generator().manual_seed(3)
    all_idx = [torch.rand(t, num_ranks * e_local, generator=gen).topk(topk, dim=1).indices for t in (5, 1, 7)]
    plans = [_baseline_plan(all_idx, r, e_local, alignment) for r in range(num_ranks)]
    for rank, plan in enumerate(plans):
        # what each source sends this rank, in source order: (source, token, global expert)
        received = []
        for s, src_plan in enumerate(plans):
            first = sum(src_plan["in_splits"][:rank])
            entries = src_plan["send_entries"][first : first + src_plan["in_splits"][rank]]
            assert plan["out_splits"][s] == entries.numel()
            received += [(s, int(i) // topk, int(all_idx[s].flatten()[i])) for i in entries]
        groups, perm = plan["groups"].tolist(), plan["perm"].tolist()
        assert len(groups) % alignment == 0
        for row, g in enumerate(groups):
            if g >= 0:
                assert received[perm[row]][2] == rank * e_local + g
        assert sorted(perm[r] for r, g in enumerate(groups) if g >= 0) == list(range(len(received)))
        for i, row in enumerate(plan["row_of_recv"].tolist()):
            assert perm[row] == i and groups[row] >= 0
    # the combine sends row_of_recv's rows back with the splits swapped: each slot gets its own expert's row
    for rank, plan in enumerate(plans):
        assert sum(plan["in_splits"]) == all_idx[rank].numel()
        tokens = plan["send_tokens"].tolist()
        assert tokens == [int(i) // topk for i in plan["send_entries"]]


def test_dist_bench_without_gpus_reports_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    from deep_gemm.bench import BenchOptions, get_suite

    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has GPUs enough to run the suite")
    report = get_suite("mega_moe_dist").run(BenchOptions())
    assert not report.ok and "needs two or more CUDA GPUs" in report.data["error"]
    assert "needs two or more CUDA GPUs" in capsys.readouterr().out
