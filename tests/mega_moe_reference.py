"""The float64 reference of the Mega MoE layer, shared by the single-GPU tests (test_mega_moe.py), the multi-rank
tests (test_mega_moe_dist.py) and their CPU-tier checks.

- :func:`moe_reference`: y of a set of tokens from the quantized operands, in float64, rounded where the kernels store
  BF16 or FP8 (per routed entry: dequantize, L1, BF16 rounding as the GEMM stores it, SwiGLU x routing weight,
  quantize as the SwiGLU kernel does, L2, BF16 rounding, sum over the slots).
- :func:`expected_routing`: the route kernel's tables (segment ends, source of each row, combine rows) as a model.
- Several ranks: rank r owns experts ``[r E/R, (r+1) E/R)`` (:func:`local_experts`); :func:`gather_problem` all-gathers
  every rank's tokens, routing and expert weights into the whole layer, and :func:`rank_expected_y` gives one rank's
  rows of the whole layer's reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from scale_fold_reference import fold_1x32

from deep_gemm.utils import cast_back_from_fp4, per_token_cast_to_fp8, unpack_ue8m0_from_int


def dequant_blocks(w_fp8: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    """FP8 weights ``[..., N, K]`` times their 128 x 128 block scales, in float64."""
    scale = sf.double().repeat_interleave(128, dim=-2).repeat_interleave(128, dim=-1)
    return w_fp8.double() * scale[..., : w_fp8.shape[-2], : w_fp8.shape[-1]]


def dequant_rows(x_fp8: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    """FP8 rows ``[M, K]`` times their 1 x 128 scales ``[M, K / 128]``, in float64."""
    return x_fp8.double() * sf.double().repeat_interleave(128, dim=-1)


def swiglu64(h: torch.Tensor, inter: int, clamp: float | None) -> torch.Tensor:
    """``silu(g) * u`` of ``h = [g | u]`` (gate clamped to at most ``clamp``, up to ``[-clamp, clamp]``)."""
    g, u = h[..., :inter], h[..., inter:]
    if clamp is not None:
        g, u = g.clamp(max=clamp), u.clamp(-clamp, clamp)
    return g * torch.sigmoid(g) * u


def moe_reference(
    x: torch.Tensor,
    x_sf: torch.Tensor | None,
    topk_idx: torch.Tensor,
    topk_weights: torch.Tensor,
    w1: torch.Tensor,
    s1: torch.Tensor | None,
    w2: torch.Tensor,
    s2: torch.Tensor | None,
    inter: int,
    clamp: float | None,
) -> torch.Tensor:
    """float64 y ``[T, hidden]`` of T tokens through all E experts (global ids in ``topk_idx``, -1: no expert).

    FP8 (``x_sf`` given): x is FP8 with FP32 1x128 scales or packed UE8M0 1x32 ones (:func:`fold_x`), ``w1`` /
    ``w2`` FP8 ``[E, 2I, H]`` / ``[E, H, I]`` with 128 x 128 block scales ``s1`` / ``s2`` (gate rows first, not
    interleaved). BF16: x, w1, w2 BF16, scales None.
    """
    use_fp8 = x_sf is not None
    if use_fp8:
        xd = fold_x(x, x_sf)
        w1d, w2d = dequant_blocks(w1, s1), dequant_blocks(w2, s2)
    else:
        xd, w1d, w2d = x.double(), w1.double(), w2.double()

    def quantize(a: torch.Tensor) -> torch.Tensor:
        if not use_fp8:
            return a.to(torch.bfloat16).double()
        return dequant_rows(*per_token_cast_to_fp8(a.float(), use_ue8m0=False))

    # (L1's output FP32 on the FP8 path, BF16 on the BF16 one)
    l1_dtype = torch.float32 if use_fp8 else torch.bfloat16
    experts = (w1.shape[0], w2.shape[1], lambda e: w1d[e], lambda e: w2d[e])
    return _layer(xd, topk_idx, topk_weights, experts, l1_dtype, quantize, inter, clamp)


def _layer(xd, topk_idx, topk_weights, experts: tuple, l1_dtype, quantize, inter: int, clamp) -> torch.Tensor:
    """The float64 layer both references share. ``experts`` = (E, hidden, w1_of, w2_of): w1_of(e) / w2_of(e) give
    expert e's dequantized weights. Per expert: L1 of its routed tokens rounded to l1_dtype, SwiGLU times the
    routing weight, ``quantize`` (the activation as the kernels store it), L2 rounded to BF16, summed over the
    slots (ids outside [0, E) route nowhere)."""
    num_experts, hidden, w1_of, w2_of = experts
    weights = topk_weights.double()
    y = torch.zeros(xd.shape[0], hidden, dtype=torch.float64, device=xd.device)
    for expert in range(num_experts):
        tok, slot = (topk_idx == expert).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        h = (xd[tok] @ w1_of(expert).T).to(l1_dtype).double()
        a = quantize(swiglu64(h, inter, clamp) * weights[tok, slot, None])
        y.index_add_(0, tok, (a @ w2_of(expert).T).to(torch.bfloat16).double())
    return y


def fold_x(x: torch.Tensor, x_sf: torch.Tensor) -> torch.Tensor:
    """float64 tokens as the dispatch hands them to linear 1: FP32 1x128 scales multiply as they are; packed UE8M0 1x32
    words (int32, a packed_x_sf buffer) are folded to 1x128 as the gather kernel folds them."""
    if x_sf.dtype != torch.int32:
        return dequant_rows(x, x_sf)
    hidden = x.shape[1]
    return fold_1x32(x, unpack_ue8m0_from_int(x_sf)[:, : hidden // 32], hidden)


def moe_reference_fp4(
    x: torch.Tensor,
    x_sf: torch.Tensor,
    topk_idx: torch.Tensor,
    topk_weights: torch.Tensor,
    w1: torch.Tensor,
    s1: torch.Tensor,
    w2: torch.Tensor,
    s2: torch.Tensor,
    inter: int,
    clamp: float | None,
) -> torch.Tensor:
    """float64 y of ``fp8_fp4_mega_moe``: x FP8 with FP32 1x128 or packed UE8M0 1x32 scales (:func:`fold_x`), ``w1`` /
    ``w2`` packed FP4 ``[E, 2I, H / 2]`` / ``[E, H, I / 2]`` with FP32 power-of-two 1x32 scales (gate rows first), each
    weight row folded per 128 of K as the GEMM folds it; L1 rounded to BF16; the SwiGLU output times the routing
    weight quantized per 1x32 with UE8M0 scales and folded to 1x128; L2 rounded to BF16; the slots summed."""
    xd = fold_x(x, x_sf)

    def weight(w: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
        return fold_1x32(cast_back_from_fp4(w, torch.ones_like(sf), gran_k=32), sf, 2 * w.shape[1])

    def quantize(a: torch.Tensor) -> torch.Tensor:
        return fold_1x32(*per_token_cast_to_fp8(a.float(), use_ue8m0=True, gran_k=32), inter)

    # (L1's output BF16)
    experts = (w1.shape[0], w2.shape[1], lambda e: weight(w1[e], s1[e]), lambda e: weight(w2[e], s2[e]))
    return _layer(xd, topk_idx, topk_weights, experts, torch.bfloat16, quantize, inter, clamp)


def expected_routing(topk_per_rank: list[torch.Tensor], rank: int, num_local_experts: int, alignment: int):
    """What the route kernel must produce on ``rank``: psum_ends ``[E_local]``, src_of_row ``{row: (s, t, j)}`` and
    the rows written into each source rank's combine_row ``{(s, t, j): row}``. Entries in (rank, token, slot)
    order; each local expert's segment starts at a multiple of ``alignment``."""
    first = rank * num_local_experts
    per_expert: list[list[tuple[int, int, int]]] = [[] for _ in range(num_local_experts)]
    for s, ids in enumerate(topk_per_rank):
        for t in range(ids.shape[0]):
            for j in range(ids.shape[1]):
                e = int(ids[t, j])
                if first <= e < first + num_local_experts:
                    per_expert[e - first].append((s, t, j))
    ends, src_of_row, combine = [], {}, {}
    start = 0
    for entries in per_expert:
        for i, (s, t, j) in enumerate(entries):
            src_of_row[start + i] = (s, t, j)
            combine[(s, t, j)] = start + i
        ends.append(start + len(entries))
        start += -(-len(entries) // alignment) * alignment
    return ends, src_of_row, combine


# ----------------------------------------------------------------------------- several ranks
def local_experts(rank: int, num_experts: int, num_ranks: int) -> range:
    """The global ids of the experts ``rank`` owns: ``[rank E/R, (rank+1) E/R)``."""
    if num_experts % num_ranks != 0:
        raise ValueError(f"local_experts: num_experts ({num_experts}) must be a multiple of num_ranks ({num_ranks})")
    per_rank = num_experts // num_ranks
    return range(rank * per_rank, (rank + 1) * per_rank)


def expert_owner(expert: int, num_experts: int, num_ranks: int) -> int:
    """The rank that owns global expert ``expert``."""
    return expert // (num_experts // num_ranks)


@dataclass
class GatheredProblem:
    """The whole layer, assembled from every rank's part: tokens in rank order (``token_counts[r]`` rows each),
    weights in global expert order. Scales are None for BF16."""

    token_counts: list[int]
    x: torch.Tensor
    x_sf: torch.Tensor | None
    topk_idx: torch.Tensor
    topk_weights: torch.Tensor
    w1: torch.Tensor
    s1: torch.Tensor | None
    w2: torch.Tensor
    s2: torch.Tensor | None

    def topk_per_rank(self) -> list[torch.Tensor]:
        """Each rank's ``topk_idx`` (the routing model's input)."""
        return list(self.topk_idx.split(self.token_counts))


def _all_gather_bytes(t: torch.Tensor, group, uneven: bool) -> torch.Tensor:
    """All-gather along dim 0, as bytes (gloo and NCCL move any dtype that way, FP8 included)."""
    import torch.distributed as dist

    from deep_gemm.utils.dist import uneven_all_gather

    raw = t.contiguous().view(torch.uint8)
    if uneven:
        out = uneven_all_gather(raw, 0, group)
    else:
        parts = [torch.empty_like(raw) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, raw, group=group)
        out = torch.cat(parts)
    return out.view(t.dtype)


def gather_problem(
    x: torch.Tensor,
    x_sf: torch.Tensor | None,
    topk_idx: torch.Tensor,
    topk_weights: torch.Tensor,
    w1: torch.Tensor,
    s1: torch.Tensor | None,
    w2: torch.Tensor,
    s2: torch.Tensor | None,
    group=None,
) -> GatheredProblem:
    """All-gather this rank's tokens ``x`` (+ ``x_sf``), ``topk_idx``, ``topk_weights`` (``T_r`` rows, may differ
    by rank, may be 0) and its local experts' weights ``w1`` ``[E/R, 2I, H]``, ``w2`` ``[E/R, H, I]`` (+ scales,
    the original gate-then-up row order) into the whole layer. A collective over ``group`` (None: the default)."""
    import torch.distributed as dist

    counts = [torch.zeros(1, dtype=torch.int64, device=x.device) for _ in range(dist.get_world_size(group))]
    dist.all_gather(counts, torch.tensor([x.shape[0]], dtype=torch.int64, device=x.device), group=group)

    def maybe(t, uneven):
        return None if t is None else _all_gather_bytes(t, group, uneven)

    return GatheredProblem(
        token_counts=[int(c.item()) for c in counts],
        x=_all_gather_bytes(x, group, True),
        x_sf=maybe(x_sf, True),
        topk_idx=_all_gather_bytes(topk_idx, group, True),
        topk_weights=_all_gather_bytes(topk_weights, group, True),
        w1=_all_gather_bytes(w1, group, False),
        s1=maybe(s1, False),
        w2=_all_gather_bytes(w2, group, False),
        s2=maybe(s2, False),
    )


def rank_expected_y(problem: GatheredProblem, rank: int, inter: int, clamp: float | None) -> torch.Tensor:
    """float64 y of ``rank``'s tokens: the whole layer's reference (every expert, wherever it lives), those rows."""
    first = sum(problem.token_counts[:rank])
    rows = slice(first, first + problem.token_counts[rank])
    return moe_reference(
        problem.x[rows],
        None if problem.x_sf is None else problem.x_sf[rows],
        problem.topk_idx[rows],
        problem.topk_weights[rows],
        problem.w1,
        problem.s1,
        problem.w2,
        problem.s2,
        inter,
        clamp,
    )
