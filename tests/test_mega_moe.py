"""deep_gemm.mega (Mega MoE, stage 1).

CPU tier: the reference's and the SGLang fork's signatures; the buffer's size and layout (one pure function); the
weight transform and its inverse; the routing the kernels must produce, as a Python model; every bad argument
raising with its name; the kernels compile with NVCC and NVRTC without spills.

GPU tier (group of one process, one GPU): fp8_mega_moe (on both FP8 buffer formats), fp8_fp4_mega_moe (FP4 weights,
on both) and bf16_mega_moe against a float64 reference of the same quantized operands (per routed entry: dequantize
(1x32 scales folded to 1x128 as the kernels fold them: scale_fold_reference.py), L1, BF16 or FP32 rounding as the GEMM
stores it, SwiGLU x weight, quantize as the kernel does, L2, BF16 rounding, sum over the slots), y poisoned with NaN
before each call; the dispatch's fold of packed scales byte for byte; the
routing tables against the Python model exactly; masked slots, tokens routed nowhere, uneven loads with empty
experts, T = 0, T = max, CUDA-graph replay with new routing, and one run on PyTorch symmetric memory.
"""

from __future__ import annotations

import inspect
import math
import socket
from pathlib import Path

import pytest
import torch
from jit_helpers import signature_params
from mega_moe_reference import (
    dequant_blocks,
    dequant_rows,
    expected_routing,
    moe_reference,
    moe_reference_fp4,
    swiglu64,
)
from scale_fold_reference import fold_1x32, fold_1x32_fp8

import deep_gemm
from deep_gemm import mega
from deep_gemm.mega import buffer as mega_buffer
from deep_gemm.mega.buffer import SymmBuffer
from deep_gemm.mega.layout import REGION_ALIGNMENT, mega_moe_buffer_layout, received_rows_bound
from deep_gemm.mega.moe import pre_dispatch_reference
from deep_gemm.mega.weights import deinterleave_gate_up, interleave_gate_up, interleaved_row_scales
from deep_gemm.utils import (
    cast_back_from_fp4,
    per_block_cast_to_fp8,
    per_token_cast_to_fp4,
    per_token_cast_to_fp8,
    unpack_ue8m0_from_int,
)
from deep_gemm.utils.casts import pack_scales_along_k

gpu = pytest.mark.gpu


# ----------------------------------------------------------------------------- signatures (CPU tier)
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("SymmBuffer", [("group", None), ("num_experts", None), ("num_max_tokens_per_rank", None), ("num_topk", None),
                        ("hidden", None), ("intermediate_hidden", None), ("num_ring_tokens", None),
                        ("mma_type", "'fp8xfp4'"), ("activation", "'swiglu'")]),
        ("get_symm_buffer_for_mega_moe",
         [("group", None), ("num_experts", None), ("num_max_tokens_per_rank", None), ("num_topk", None),
          ("hidden", None), ("intermediate_hidden", None), ("use_fp8_dispatch", "None"), ("mma_type", "'fp8xfp4'"),
          ("activation", "'swiglu'")]),
        ("transform_weights_for_mega_moe", [("l1_weights", None), ("l2_weights", None), ("activation", "'swiglu'")]),
        ("fp8_fp4_mega_moe",
         [("y", None), ("l1_weights", None), ("l2_weights", None), ("sym_buffer", None),
          ("cumulative_local_expert_recv_stats", "None"), ("recipe", "(1, 1, 32)"), ("activation", "'swiglu'"),
          ("activation_clamp", "None"), ("fast_math", "True")]),
        ("bf16_mega_moe",
         [("y", None), ("l1_weights", None), ("l2_weights", None), ("sym_buffer", None),
          ("cumulative_local_expert_recv_stats", "None"), ("activation", "'swiglu'"), ("activation_clamp", "None"),
          ("fast_math", "True")]),
        ("get_symm_buffer_for_sm90_mega_moe",
         [("group", None), ("num_experts", None), ("num_max_tokens_per_rank", None), ("num_topk", None),
          ("hidden", None), ("intermediate_hidden", None), ("use_fp8_dispatch", "True"), ("activation", "'swiglu'")]),
        ("transform_weights_for_mega_moe_sm90", [("l1_weights", None), ("l2_weights", None)]),
        ("fp8_mega_moe",
         [("y", None), ("l1_weights", None), ("l2_weights", None), ("sym_buffer", None),
          ("cumulative_local_expert_recv_stats", "None"), ("recipe", "(128, 128, 128)"), ("activation", "'swiglu'"),
          ("activation_clamp", "None"), ("fast_math", "True"), ("num_tokens_bound", "None")]),
        ("mega_moe_pre_dispatch_sm90",
         [("x", None), ("topk_idx", None), ("topk_weights", None), ("buf_x", None), ("buf_x_sf", None),
          ("buf_topk_idx", None), ("buf_topk_weights", None), ("num_tokens", None), ("group_size", "128"),
          ("routed_scaling_factor", "1.0")]),
    ],
)  # fmt: skip
def test_signatures_match_the_reference(name: str, expected: list) -> None:
    assert getattr(deep_gemm, name) is getattr(mega, name)
    assert name in deep_gemm.__all__ and name in mega.__all__
    fn = getattr(mega, name)
    # (our additions are keyword-only, after the reference's parameters)
    extras = {"SymmBuffer": [("packed_x_sf", "False")], "get_symm_buffer_for_mega_moe": [("packed_x_sf", "False")]}
    assert signature_params(fn) == expected + extras.get(name, [])
    keyword_only = [p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert keyword_only == [p for p, _ in extras.get(name, [])]
    assert (fn.__doc__ or "").strip(), name


def test_dist_helpers_exist() -> None:
    from deep_gemm.utils import dist

    for name in ("init_dist", "uneven_all_gather", "dist_print"):
        assert callable(getattr(dist, name)), name


# ----------------------------------------------------------------------------- buffer layout (CPU tier)
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((1, 4096, 8, 32, 128), 36864),  # 32768 entries + 32 experts x 127 rows of padding, rounded up to 128
        ((1, 1, 8, 32, 128), 1024),  # 8 entries: at most 8 non-empty experts, 8 + 8 x 127 -> 1024
        ((1, 0, 8, 32, 128), 0),
        ((4, 100, 6, 2, 64), 2560),  # 2400 entries + 2 x 63 = 2526 -> 2560
    ],
    ids=["bench-t4096", "one-token", "no-tokens", "four-ranks"],
)
def test_received_rows_bound(args: tuple, expected: int) -> None:
    assert received_rows_bound(*args) == expected


@pytest.mark.parametrize("use_fp8", [True, False], ids=["fp8", "bf16"])
@pytest.mark.parametrize("num_ranks", [1, 4])
def test_buffer_layout_regions(use_fp8: bool, num_ranks: int) -> None:
    layout = mega_moe_buffer_layout(num_ranks, 32, 300, 6, 512, 384, use_fp8, 128)
    assert layout.num_local_experts == 32 // num_ranks
    assert layout.max_rows == received_rows_bound(num_ranks, 300, 6, 32 // num_ranks, 128)
    regions = sorted(layout.regions.values(), key=lambda r: r.offset)
    for region, following in zip(regions, regions[1:], strict=False):
        assert region.offset % REGION_ALIGNMENT == 0
        assert region.offset + region.nbytes <= following.offset  # no overlap
    assert regions[-1].offset + regions[-1].nbytes <= layout.num_bytes
    r = layout.regions
    assert r["x"].shape == (300, 512) and r["x"].dtype == ("float8_e4m3fn" if use_fp8 else "bfloat16")
    assert r["x_sf"].shape == (300, 4 if use_fp8 else 0)
    assert r["topk_idx"].shape == (300, 6) and r["topk_idx"].dtype == "int64"
    assert r["l1_acts"].shape == (layout.max_rows, 512)
    # (FP8: linear 1 runs once with per-row scales and writes FP32)
    assert r["l1_out"].shape == (layout.max_rows, 768) and "l1_out_up" not in r
    assert r["l1_out"].dtype == ("float32" if use_fp8 else "bfloat16")
    assert r["l2_acts"].shape == (layout.max_rows, 384) and r["l2_out"].shape == (layout.max_rows, 512)
    assert r["l1_acts_sf"].mn_major and r["l1_acts_sf"].row_stride == (layout.max_rows + 3) // 4 * 4
    assert r["l1_acts_sf"].nbytes == (4 * r["l1_acts_sf"].row_stride * 4 if use_fp8 else 0)
    assert r["psum_ends"].shape == (32 // num_ranks,)
    kernel = layout.kernel_layout(num_ranks - 1)
    assert kernel[:7] == [
        r[n].offset for n in ("num_tokens", "x", "x_sf", "topk_idx", "topk_weights", "combine_row", "l2_out")
    ]
    assert kernel[7:] == [300, 6, 512, 32, 32 // num_ranks, num_ranks - 1, num_ranks, int(use_fp8)]


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        (dict(num_ranks=3), ValueError, r"num_experts \(32\) must be a multiple of the group size \(3\)"),
        (dict(hidden=200), ValueError, r"hidden must be a multiple of 128"),
        (dict(intermediate_hidden=64), ValueError, r"intermediate_hidden must be a multiple of 128"),
        (dict(num_topk=0), ValueError, r"num_topk must be positive"),
        (dict(num_max_tokens_per_rank=1.5), TypeError, r"num_max_tokens_per_rank must be an int"),
        (dict(use_fp8=1), TypeError, r"use_fp8 must be a bool"),
        (dict(num_experts=2048, num_ranks=1), ValueError, r"at most 1024 experts per rank"),
    ],
)
def test_buffer_layout_bad_arguments(kwargs: dict, error: type, pattern: str) -> None:
    args = (
        dict(
            num_ranks=1,
            num_experts=32,
            num_max_tokens_per_rank=64,
            num_topk=8,
            hidden=256,
            intermediate_hidden=256,
            use_fp8=True,
            alignment=128,
        )
        | kwargs
    )
    with pytest.raises(error, match=pattern):
        mega_moe_buffer_layout(**args)


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        (dict(mma_type="fp4xfp4"), ValueError, r"mma_type must be one of"),
        (dict(activation="gelu"), ValueError, r"activation must be one of"),
        (dict(hidden=100), ValueError, r"hidden must be a multiple of 128"),
        (dict(group="world"), TypeError, r"group must be a torch.distributed.ProcessGroup or None"),
        (dict(use_fp8_dispatch=True, mma_type="bf16xbf16"), ValueError, r"use_fp8_dispatch=True needs an fp8"),
        (dict(use_fp8_dispatch=False, mma_type="fp8xfp8"), ValueError, r"needs FP8 dispatch"),
        (dict(use_fp8_dispatch=1), TypeError, r"use_fp8_dispatch must be a bool or None"),
    ],
)
def test_get_symm_buffer_bad_arguments(kwargs: dict, error: type, pattern: str) -> None:
    args = (
        dict(group=None, num_experts=32, num_max_tokens_per_rank=64, num_topk=8, hidden=256, intermediate_hidden=256)
        | kwargs
    )
    with pytest.raises(error, match=pattern):
        mega.get_symm_buffer_for_mega_moe(**args)


def test_symm_buffer_num_ring_tokens_checked() -> None:
    with pytest.raises(ValueError, match=r"num_ring_tokens must be an int >= 0"):
        SymmBuffer(None, 8, 16, 2, 128, 128, -1)


# ----------------------------------------------------------------------------- weights (CPU tier)
def test_interleave_round_trip_and_order() -> None:
    e, inter, hidden = 3, 32, 16
    w = torch.randn(e, 2 * inter, hidden)
    wi = interleave_gate_up(w)
    assert torch.equal(deinterleave_gate_up(wi), w)
    for i in range(inter):
        assert torch.equal(wi[:, (i // 8) * 16 + i % 8], w[:, i])  # gate row i
        assert torch.equal(wi[:, (i // 8) * 16 + 8 + i % 8], w[:, inter + i])  # up row i


def test_interleaved_row_scales() -> None:
    # Row r of the interleaved weight times its row scale = the interleaved rows of the block-dequantized weight
    e, inter, hidden = 3, 256, 384
    w = torch.randn(e, 2 * inter, hidden)
    w_fp8, blocks = ue_free_block_cast(w)
    rows = interleaved_row_scales(blocks)
    assert rows.shape == (e, 2 * inter, hidden // 128) and rows.stride() == (2 * inter * hidden // 128, 1, 2 * inter)
    assert torch.equal(dequant_rows(interleave_gate_up(w_fp8), rows), interleave_gate_up(dequant_blocks(w_fp8, blocks)))
    with pytest.raises(ValueError, match=r"block_scales must be a 3-D FP32 tensor"):
        interleaved_row_scales(blocks.double())


def test_l1_row_scales_cached_per_scale_tensor() -> None:
    from deep_gemm.mega import moe

    blocks = torch.rand(2, 4, 3)
    first = moe._l1_row_scales(blocks)
    assert moe._l1_row_scales(blocks) is first  # computed once
    blocks.mul_(2)  # an in-place change recomputes them
    again = moe._l1_row_scales(blocks)
    assert again is not first and torch.equal(again, 2 * first)
    assert moe._l1_row_scales(blocks.clone()) is not again  # (another tensor: its own)
    with torch.inference_mode():  # (no version counter: computed once)
        frozen = torch.rand(2, 4, 3)
    assert moe._l1_row_scales(frozen) is moe._l1_row_scales(frozen)
    assert torch.equal(moe._l1_row_scales(frozen), interleaved_row_scales(frozen))


def test_transform_weights_forms() -> None:
    e, inter, hidden = 2, 128, 256
    w1 = torch.randn(e, 2 * inter, hidden).to(torch.bfloat16)
    w2 = torch.randn(e, hidden, inter).to(torch.bfloat16)
    l1, l2 = mega.transform_weights_for_mega_moe(w1, w2)
    assert torch.equal(l1, interleave_gate_up(w1)) and l2 is w2
    # per-row scales move with their rows; 128 x 128 block scales stay
    per_row = torch.randn(e, 2 * inter, hidden // 32)
    (d, s), _ = mega.transform_weights_for_mega_moe((w1, per_row), w2)
    assert torch.equal(s, interleave_gate_up(per_row)) and torch.equal(d, interleave_gate_up(w1))
    blocks = torch.randn(e, 2 * inter // 128, hidden // 128)
    (d, s), _ = mega.transform_weights_for_mega_moe_sm90((w1, blocks), (w2, None))
    assert s is blocks and torch.equal(d, interleave_gate_up(w1))


@pytest.mark.parametrize("packed", [False, True], ids=["fp32-sf", "packed-sf"])
def test_transform_fp4_weights_lays_scales_out_for_the_gemm(packed: bool) -> None:
    # FP4 weights: both pairs' scales come back as UE8M0 words, MN-major with the row stride aligned to 4 (the
    # FP8 x FP4 GEMM's layout: no layout kernel per call), same values as the interleaved rows' packed scales
    e, inter, hidden = 2, 72, 256  # (2I = 144 and hidden = 256 rows: one stride needs padding)
    (w1, s1), (w2, s2) = fp4_weight(torch.randn(e, 2 * inter, hidden)), fp4_weight(torch.randn(e, hidden, 128))
    given = (pack_scales_along_k(s1), pack_scales_along_k(s2)) if packed else (s1, s2)
    (d1, t1), (d2, t2) = mega.transform_weights_for_mega_moe((w1, given[0]), (w2, given[1]))
    assert torch.equal(d1, interleave_gate_up(w1)) and d2 is w2
    for got, rows, want in ((t1, 2 * inter, interleave_gate_up(pack_scales_along_k(s1))), (t2, hidden,
                                                                                       pack_scales_along_k(s2))):
        assert got.dtype == torch.int32 and torch.equal(got, want)
        aligned = -(-rows // 4) * 4
        assert got.stride() == (got.shape[2] * aligned, 1, aligned)


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: mega.transform_weights_for_mega_moe(torch.zeros(2, 24, 8), None), ValueError, r"l1_weights must have 2 \* I rows"),
        (lambda: mega.transform_weights_for_mega_moe(torch.zeros(32, 8), None), ValueError, r"l1_weights must be 3-D"),
        (lambda: mega.transform_weights_for_mega_moe([1, 2, 3], None), TypeError, r"l1_weights must be a tensor or a"),
        (lambda: mega.transform_weights_for_mega_moe(torch.zeros(1, 32, 8), None, "relu"), ValueError, r"activation"),
        (lambda: mega.transform_weights_for_mega_moe((torch.zeros(1, 256, 8), torch.zeros(1, 3, 1)), None), ValueError,
         r"l1_weights\[1\] must have one row per weight row"),
        (lambda: mega.transform_weights_for_mega_moe_sm90(torch.zeros(1, 256, 8), None), TypeError,
         r"l1_weights must be a \(weights, scales\) pair"),
        (lambda: mega.transform_weights_for_mega_moe_sm90((torch.zeros(1, 256, 128), torch.zeros(1, 256, 1)), None),
         ValueError, r"l1_weights\[1\] must be 128 x 128 block scales"),
        (lambda: mega.transform_weights_for_mega_moe(torch.zeros(1, 32, 8), (torch.zeros(1, 32, 64, dtype=torch.int8),
                                                                             torch.ones(32, 4))),
         ValueError, r"transform_weights_for_mega_moe: l2_weights\[1\] must be a 3-D FP32 or int32 scale tensor"),
        (lambda: mega.transform_weights_for_mega_moe((torch.zeros(1, 32, 64, dtype=torch.int8), torch.full((1, 32, 4), 1.5)),
                                                     None),
         ValueError, r"transform_weights_for_mega_moe: l1_weights\[1\]: pack_ue8m0_to_int: x must hold non-negative powers of two"),
    ],
)  # fmt: skip
def test_transform_bad_arguments(call, error: type, pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        call()


# ----------------------------------------------------------------------------- routing model (CPU tier)
def test_routing_model_invariants() -> None:
    gen = torch.Generator().manual_seed(0)
    ranks, e_local, topk, alignment = 3, 4, 3, 8
    topk_per_rank = [torch.randint(-1, ranks * e_local, (n, topk), generator=gen) for n in (5, 0, 9)]
    for rank in range(ranks):
        ends, src, combine = expected_routing(topk_per_rank, rank, e_local, alignment)
        assert len(ends) == e_local and sorted(src) == sorted(combine.values())
        starts = [0] + [-(-end // alignment) * alignment for end in ends[:-1]]
        for g, (start, end) in enumerate(zip(starts, ends, strict=True)):
            assert start % alignment == 0 and start <= end
            for row in range(start, end):
                s, t, j = src[row]
                assert int(topk_per_rank[s][t, j]) == rank * e_local + g
        total = sum(int(((ids >= rank * e_local) & (ids < (rank + 1) * e_local)).sum()) for ids in topk_per_rank)
        assert len(src) == total
        bound = received_rows_bound(ranks, 9, topk, e_local, alignment)
        assert (-(-ends[-1] // alignment) * alignment if ends else 0) <= bound


# ----------------------------------------------------------------------------- call arguments (CPU tier)
def cpu_buffer(
    use_fp8: bool = True,
    e: int = 4,
    max_tokens: int = 16,
    topk: int = 2,
    hidden: int = 256,
    inter: int = 128,
    packed_x_sf: bool = False,
) -> SymmBuffer:
    """A SymmBuffer laid out as on a GPU but held in CPU memory: enough for the argument checks, which run
    before anything touches the device."""
    mma_type = "fp8xfp4" if use_fp8 else "bf16xbf16"
    buffer = SymmBuffer.__new__(SymmBuffer)
    buffer.layout = mega_moe_buffer_layout(1, e, max_tokens, topk, hidden, inter, use_fp8, 128, packed_x_sf=packed_x_sf)
    buffer.storage = torch.zeros(buffer.layout.num_bytes, dtype=torch.uint8)
    buffer.use_fp8_dispatch = use_fp8
    buffer.mma_type = mma_type
    buffer.rank, buffer.num_ranks, buffer._handle = 0, 1, None
    for name in ("x", "x_sf", "topk_idx", "topk_weights", "l1_acts", "l1_acts_sf", "l2_acts", "l2_acts_sf"):
        setattr(buffer, name, buffer.view(name))
    buffer.num_tokens = buffer.view("num_tokens")
    buffer.peers = torch.tensor([buffer.storage.data_ptr()], dtype=torch.int64)
    buffer.op_handle = next(mega_buffer._NEXT_HANDLE)  # (the compiled path names buffers by handle)
    mega_buffer._BUFFERS[buffer.op_handle] = buffer
    return buffer


def fp8_weights(e: int = 4, hidden: int = 256, inter: int = 128):
    l1 = (torch.zeros(e, 2 * inter, hidden, dtype=torch.float8_e4m3fn), torch.ones(e, 2 * inter // 128, hidden // 128))
    l2 = (torch.zeros(e, hidden, inter, dtype=torch.float8_e4m3fn), torch.ones(e, hidden // 128, inter // 128))
    return l1, l2


@pytest.mark.parametrize(
    ("case", "error", "pattern"),
    [
        ("y_dtype", ValueError, r"fp8_mega_moe: y must be BF16 \[T, hidden=256\]"),
        ("y_hidden", ValueError, r"y must be BF16 \[T, hidden=256\]"),
        ("y_too_many_tokens", ValueError, r"y has T = 17 rows, more than the buffer's num_max_tokens_per_rank = 16"),
        ("y_not_tensor", TypeError, r"y must be a torch.Tensor"),
        ("buffer_type", TypeError, r"sym_buffer must be a deep_gemm.mega.SymmBuffer"),
        ("buffer_bf16", ValueError, r"sym_buffer must be allocated with use_fp8_dispatch=True"),
        ("l1_dtype", ValueError, r"l1_weights\[0\] must have dtype torch.float8_e4m3fn"),
        ("l1_shape", ValueError, r"l1_weights\[0\] must have shape \[4, 256, 256\]"),
        ("l1_sf_shape", ValueError, r"l1_weights\[1\] must have shape \[4, 2, 2\]"),
        ("l2_shape", ValueError, r"l2_weights\[0\] must have shape \[4, 256, 128\]"),
        ("l2_not_pair", TypeError, r"l2_weights must be a \(weights, scales\) pair"),
        ("stats_dtype", ValueError, r"cumulative_local_expert_recv_stats must have dtype torch.int32"),
        ("stats_shape", ValueError, r"cumulative_local_expert_recv_stats must have shape \[4\]"),
        ("recipe", ValueError, r"recipe must be \(128, 128, 128\)"),
        ("activation", ValueError, r"activation must be one of"),
        ("clamp", ValueError, r"activation_clamp must be None or a positive number"),
        ("fast_math", TypeError, r"fast_math must be a bool"),
        ("tokens_bound", ValueError, r"num_tokens_bound must be in \[T = 8, num_max_tokens_per_rank = 16\]"),
        ("on_cpu", ValueError, r"sym_buffer must be on a CUDA device"),
    ],
)
def test_fp8_mega_moe_bad_arguments(case: str, error: type, pattern: str) -> None:
    buffer = cpu_buffer()
    (w1, s1), (w2, s2) = fp8_weights()
    y = torch.zeros(8, 256, dtype=torch.bfloat16)
    kwargs: dict = {}
    if case == "y_dtype":
        y = y.float()
    elif case == "y_hidden":
        y = torch.zeros(8, 128, dtype=torch.bfloat16)
    elif case == "y_too_many_tokens":
        y = torch.zeros(17, 256, dtype=torch.bfloat16)
    elif case == "y_not_tensor":
        y = [[0.0]]
    elif case == "buffer_type":
        buffer = object()
    elif case == "buffer_bf16":
        buffer = cpu_buffer(use_fp8=False)
    elif case == "l1_dtype":
        w1 = w1.to(torch.bfloat16)
    elif case == "l1_shape":
        w1 = w1[:, :128]
    elif case == "l1_sf_shape":
        s1 = s1[:, :1]
    elif case == "l2_shape":
        w2 = w2.transpose(1, 2)
    elif case == "stats_dtype":
        kwargs["cumulative_local_expert_recv_stats"] = torch.zeros(4, dtype=torch.int64)
    elif case == "stats_shape":
        kwargs["cumulative_local_expert_recv_stats"] = torch.zeros(5, dtype=torch.int32)
    elif case == "recipe":
        kwargs["recipe"] = (1, 128, 128)
    elif case == "activation":
        kwargs["activation"] = "geglu"
    elif case == "clamp":
        kwargs["activation_clamp"] = -1.0
    elif case == "fast_math":
        kwargs["fast_math"] = 1
    elif case == "tokens_bound":
        kwargs["num_tokens_bound"] = 4
    l2 = w2 if case == "l2_not_pair" else (w2, s2)
    with pytest.raises(error, match=pattern):
        mega.fp8_mega_moe(y, (w1, s1), l2, buffer, **kwargs)


@pytest.mark.parametrize(
    ("case", "error", "pattern"),
    [
        ("l1_dtype", ValueError, r"bf16_mega_moe: l1_weights must have dtype torch.bfloat16"),
        ("l2_shape", ValueError, r"l2_weights must have shape \[4, 256, 128\]"),
        ("buffer_fp8", ValueError, r"sym_buffer must be allocated with use_fp8_dispatch=False"),
        ("on_cpu", ValueError, r"sym_buffer must be on a CUDA device"),
    ],
)
def test_bf16_mega_moe_bad_arguments(case: str, error: type, pattern: str) -> None:
    buffer = cpu_buffer(use_fp8=False)
    w1 = torch.zeros(4, 256, 256, dtype=torch.bfloat16)
    w2 = torch.zeros(4, 256, 128, dtype=torch.bfloat16)
    if case == "l1_dtype":
        w1 = w1.float()
    elif case == "l2_shape":
        w2 = w2[:, :, :64]
    elif case == "buffer_fp8":
        buffer = cpu_buffer(use_fp8=True)
    with pytest.raises(error, match=pattern):
        mega.bf16_mega_moe(torch.zeros(8, 256, dtype=torch.bfloat16), w1, w2, buffer)


def fp4_weights(e: int = 4, hidden: int = 256, inter: int = 128):
    l1 = (torch.zeros(e, 2 * inter, hidden // 2, dtype=torch.int8), torch.ones(e, 2 * inter, hidden // 32))
    l2 = (torch.zeros(e, hidden, inter // 2, dtype=torch.uint8), torch.zeros(e, hidden, inter // 128, dtype=torch.int32))
    return l1, l2


@pytest.mark.parametrize(
    ("case", "error", "pattern"),
    [
        ("y_too_many_tokens", ValueError, r"fp8_fp4_mega_moe: y has T = 17 rows"),
        ("buffer_bf16", ValueError, r"sym_buffer must be allocated with use_fp8_dispatch=True"),
        ("recipe", ValueError, r"recipe must be \(1, 1, 32\)"),
        ("l1_fp8", ValueError, r"l1_weights\[0\] must be packed FP4 \(int8 or uint8"),
        ("l1_shape", ValueError, r"l1_weights\[0\] must have shape \[4, 256, 128\]"),
        ("l1_sf_dtype", ValueError, r"l1_weights\[1\] must be FP32 1x32 scales or packed UE8M0 int32"),
        ("l1_sf_shape", ValueError, r"l1_weights\[1\] must have shape \[4, 256, 8\]"),
        ("l2_sf_packed_shape", ValueError, r"l2_weights\[1\] must have shape \[4, 256, 1\]"),
        ("l2_not_pair", TypeError, r"l2_weights must be a \(weights, scales\) pair"),
        ("on_cpu", ValueError, r"sym_buffer must be on a CUDA device"),
        ("on_cpu_fp32_buffer", ValueError, r"sym_buffer must be on a CUDA device"),
    ],
)
def test_fp8_fp4_mega_moe_bad_arguments(case: str, error: type, pattern: str) -> None:
    buffer = cpu_buffer(packed_x_sf=True)
    (w1, s1), (w2, s2) = fp4_weights()
    y = torch.zeros(8, 256, dtype=torch.bfloat16)
    kwargs: dict = {}
    if case == "y_too_many_tokens":
        y = torch.zeros(17, 256, dtype=torch.bfloat16)
    elif case == "buffer_bf16":
        buffer = cpu_buffer(use_fp8=False)
    elif case == "on_cpu_fp32_buffer":  # (the default FP32 1x128 buffer serves it too)
        buffer = cpu_buffer()
    elif case == "recipe":
        kwargs["recipe"] = (1, 1, 128)
    elif case == "l1_fp8":
        w1 = torch.zeros(4, 256, 256, dtype=torch.float8_e4m3fn)
    elif case == "l1_shape":
        w1 = w1[:, :, :64]
    elif case == "l1_sf_dtype":
        s1 = s1.double()
    elif case == "l1_sf_shape":
        s1 = s1[:, :, :4]
    elif case == "l2_sf_packed_shape":
        s2 = torch.zeros(4, 256, 4, dtype=torch.int32)
    l2 = w2 if case == "l2_not_pair" else (w2, s2)
    with pytest.raises(error, match=pattern):
        mega.fp8_fp4_mega_moe(y, (w1, s1), l2, buffer, **kwargs)


def test_expert_ids_out_of_range_raise_on_cpu_buffers() -> None:
    # (CPU buffers are always checked; CUDA ones with DG_DEBUG_CHECKS=1: see test_mega_moe_bad_expert_ids)
    from deep_gemm.mega.moe import _check_expert_ids

    buffer = cpu_buffer()
    buffer.topk_idx[:3] = torch.tensor([[0, 3], [-1, 2], [1, -1]])
    _check_expert_ids("fp8_mega_moe", buffer, 3)  # ids in [-1, E): fine
    buffer.topk_idx[1, 0] = 4
    with pytest.raises(ValueError, match=r"sym_buffer.topk_idx .* must hold expert ids in \[0, num_experts = 4\)"):
        _check_expert_ids("fp8_mega_moe", buffer, 3)
    buffer.topk_idx[1, 0] = -2
    with pytest.raises(ValueError, match=r"got values in \[-2, 3\]"):
        _check_expert_ids("fp8_mega_moe", buffer, 3)


def test_packed_words_in_an_fp32_x_sf_raise_on_cpu_buffers() -> None:
    # The reference's packed UE8M0 words copied into the default (FP32 1x128) buffer become numbers of 2^24 or more:
    # caught where the buffer is checked (CPU buffers always; CUDA ones with DG_DEBUG_CHECKS=1, see the GPU test in
    # test_default_buffer_takes_fp32_scales_copied_in)
    from deep_gemm.mega.moe import _check_x_scales

    buffer = cpu_buffer()
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    buffer.x_sf[:3].copy_(per_token_cast_to_fp8(x, use_ue8m0=False)[1])
    _check_x_scales("fp8_mega_moe", buffer, 3)  # real scales: fine
    buffer.x_sf[:3].copy_(per_token_cast_to_fp8(x, use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)[1])
    with pytest.raises(ValueError, match=r"sym_buffer.x_sf .* packed UE8M0 words copied in\? Use .*packed_x_sf=True"):
        _check_x_scales("fp8_mega_moe", buffer, 3)
    _check_x_scales("fp8_mega_moe", cpu_buffer(packed_x_sf=True), 3)  # (a packed buffer: its words are words)


@pytest.mark.parametrize(
    ("case", "error", "pattern"),
    [
        ("num_tokens_type", TypeError, r"num_tokens must be an int"),
        ("num_tokens_range", ValueError, r"num_tokens must be in \[0, 16\]"),
        ("group_size", ValueError, r"group_size must be 128 on SM90"),
        ("x_dtype", ValueError, r"x must be BF16 \[>= 4, 256\]"),
        ("topk_idx_float", ValueError, r"topk_idx must be int64 or int32"),
        ("topk_idx_int16", ValueError, r"topk_idx must be int64 or int32"),
        ("topk_weights_shape", ValueError, r"topk_weights must be FP32, BF16 or FP16 \[>= 4, 2\]"),
        ("topk_weights_float64", ValueError, r"topk_weights must be FP32, BF16 or FP16"),
        ("scaling_type", TypeError, r"routed_scaling_factor must be a number"),
        ("devices", ValueError, r"every tensor must be on one device"),
        ("x_1d", TypeError, r"x must be a 2-D torch.Tensor"),
    ],
)
def test_pre_dispatch_bad_arguments(case: str, error: type, pattern: str) -> None:
    buffer = cpu_buffer()
    x = torch.zeros(4, 256, dtype=torch.bfloat16)
    idx, w = torch.zeros(4, 2, dtype=torch.int64), torch.zeros(4, 2)
    num_tokens, kwargs = 4, {}
    if case == "num_tokens_type":
        num_tokens = 4.0
    elif case == "num_tokens_range":
        num_tokens = 17
    elif case == "group_size":
        kwargs["group_size"] = 32
    elif case == "x_dtype":
        x = x.float()
    elif case == "topk_idx_float":
        idx = idx.float()
    elif case == "topk_idx_int16":
        idx = idx.to(torch.int16)
    elif case == "topk_weights_shape":
        w = w[:, :1]
    elif case == "topk_weights_float64":
        w = w.double()
    elif case == "scaling_type":
        kwargs["routed_scaling_factor"] = "2"
    elif case == "devices":
        x = x.to("meta")
    elif case == "x_1d":
        x = x[0]
    with pytest.raises(error, match=pattern):
        mega.mega_moe_pre_dispatch_sm90(
            x,
            idx,
            w,
            buffer.view("x"),
            buffer.view("x_sf"),
            buffer.view("topk_idx"),
            buffer.view("topk_weights"),
            num_tokens,
            **kwargs,
        )


def test_pre_dispatch_on_cpu_matches_the_cast() -> None:
    buffer = cpu_buffer()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(5, 256, generator=gen).to(torch.bfloat16)
    idx, w = torch.tensor([[0, 1], [2, -1], [3, 3], [-1, -1], [1, 0]]), torch.rand(5, 2, generator=gen)
    mega.mega_moe_pre_dispatch_sm90(
        x,
        idx,
        w,
        buffer.view("x"),
        buffer.view("x_sf"),
        buffer.view("topk_idx"),
        buffer.view("topk_weights"),
        5,
        routed_scaling_factor=2.5,
    )
    x_fp8, x_sf = per_token_cast_to_fp8(x, use_ue8m0=False)
    assert torch.equal(buffer.view("x")[:5].view(torch.uint8), x_fp8.view(torch.uint8))
    assert torch.equal(buffer.view("x_sf")[:5], x_sf)
    assert torch.equal(buffer.view("topk_idx")[:5], idx)
    assert torch.equal(buffer.view("topk_weights")[:5], w * 2.5)


def test_pre_dispatch_on_cpu_writes_the_packed_format() -> None:
    # A packed_x_sf buffer: x quantized per 1x32 with UE8M0 scales packed four to an int32, whatever group_size says
    buffer = cpu_buffer(packed_x_sf=True)
    assert buffer.x_sf.dtype == torch.int32 and buffer.x_sf.shape == (16, 2)
    x = torch.randn(5, 256, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    idx, w = torch.zeros(5, 2, dtype=torch.int64), torch.ones(5, 2)
    views = [buffer.view(n) for n in ("x", "x_sf", "topk_idx", "topk_weights")]
    x_fp8, x_sf = per_token_cast_to_fp8(x, use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)
    for group_size in (128, 32):
        buffer.storage.zero_()
        mega.mega_moe_pre_dispatch_sm90(x, idx, w, *views, 5, group_size=group_size)
        assert torch.equal(views[0][:5].view(torch.uint8), x_fp8.view(torch.uint8))
        assert torch.equal(views[1][:5], x_sf)
    with pytest.raises(ValueError, match=r"group_size must be 128 on SM90 \(or 32 with an int32 buf_x_sf"):
        mega.mega_moe_pre_dispatch_sm90(x, idx, w, *views, 5, group_size=64)
    fp32_views = [cpu_buffer().view(n) for n in ("x", "x_sf", "topk_idx", "topk_weights")]
    with pytest.raises(ValueError, match=r"group_size must be 128 on SM90"):
        mega.mega_moe_pre_dispatch_sm90(x, idx, w, *fp32_views, 5, group_size=32)


def test_mega_layer_calls_only_names_the_extension_has() -> None:
    # Every _C name the Mega MoE layer calls exists in the built extension (the CPU tier emulates the kernels, so a
    # wrong name would otherwise surface only on a GPU)
    import re

    from deep_gemm.mega import moe

    names = set(re.findall(r"_C\.(\w+)", Path(moe.__file__).read_text()))
    assert names and all(hasattr(deep_gemm._C, n) for n in names), sorted(n for n in names if not hasattr(deep_gemm._C, n))


def test_buffer_exposes_its_dims_under_the_reference_names() -> None:
    buffer = cpu_buffer(e=8, max_tokens=16, topk=2, hidden=256, inter=128)
    assert (buffer.num_experts, buffer.num_max_tokens_per_rank, buffer.num_topk, buffer.hidden,
            buffer.intermediate_hidden) == (8, 16, 2, 256, 128)  # fmt: skip
    assert buffer.buffer is buffer.storage


def test_buffer_x_sf_format_follows_mma_type() -> None:
    packed = mega_moe_buffer_layout(1, 8, 16, 2, 256, 128, True, 128, packed_x_sf=True)
    plain = mega_moe_buffer_layout(1, 8, 16, 2, 256, 128, True, 128)
    assert packed.regions["x_sf"].dtype == "int32" and plain.regions["x_sf"].dtype == "float32"
    assert packed.regions["x_sf"].nbytes == plain.regions["x_sf"].nbytes and packed.num_bytes == plain.num_bytes
    assert packed.kernel_layout(0)[-1] == 2 and plain.kernel_layout(0)[-1] == 1
    bf16 = mega_moe_buffer_layout(1, 8, 16, 2, 256, 128, False, 128)
    assert bf16.kernel_layout(0)[-1] == 0
    with pytest.raises(ValueError, match=r"packed_x_sf needs FP8 activations"):
        mega_moe_buffer_layout(1, 8, 16, 2, 256, 128, False, 128, packed_x_sf=True)


@gpu
def test_gather_folds_packed_scales_bit_exactly() -> None:
    # The dispatch of a packed_x_sf buffer: every received row's e4m3 bytes and FP32 1x128 scales are the fold of its
    # token's 1x32 ones, byte for byte (x with blocks spanning many binades, so that the fold rounds)
    problem = make_problem("fp8fp4", 8, 64, 4, 512, 256)
    problem.route(64, "random")
    b = problem.buffer
    spread = torch.exp2(torch.randint(-14, 3, (64, 16), device="cuda").float()).repeat_interleave(32, dim=1)
    x = (torch.randn(64, 512, device="cuda") * spread).to(torch.bfloat16)
    mega.mega_moe_pre_dispatch_sm90(x, problem.topk_idx, problem.topk_weights, b.x, b.x_sf, b.topk_idx,
                                    b.topk_weights, 64)  # fmt: skip
    y = torch.empty(64, 512, dtype=torch.bfloat16, device="cuda")
    problem.call(y)
    torch.cuda.synchronize()
    src = b.view("src_of_row")
    rows = (src >= 0).nonzero().flatten()
    assert rows.numel() > 0
    tokens = (src[rows] // problem.topk).long()
    folded, sf = fold_1x32_fp8(b.x[tokens], unpack_ue8m0_from_int(b.x_sf[tokens]))
    assert torch.equal(b.l1_acts[rows].view(torch.uint8), folded.view(torch.uint8))
    assert torch.equal(b.l1_acts_sf[rows], sf)


# ----------------------------------------------------------------------------- kernels compile (CPU tier)
@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(path))
    return path


MEGA_KERNELS = [
    ("smxx_mega_moe_route", {}),
    ("smxx_mega_moe_gather", {}),
    ("smxx_mega_moe_swiglu", {"out": 1, "fast_math": 1}),
    ("smxx_mega_moe_swiglu", {"out": 0, "fast_math": 0}),
    ("smxx_mega_moe_swiglu", {"out": 2, "fast_math": 1}),
    ("smxx_mega_moe_combine", {}),
    ("smxx_mega_moe_pre_dispatch", {}),
]


@pytest.mark.parametrize("use_nvrtc", [False, True], ids=["nvcc", "nvrtc"])
@pytest.mark.parametrize(("family", "params"), MEGA_KERNELS, ids=lambda x: x if isinstance(x, str) else "")
def test_mega_kernels_compile_without_spills(cache_dir: Path, family: str, params: dict, use_nvrtc: bool) -> None:
    result = deep_gemm.compile_kernel(family, params, use_nvrtc=use_nvrtc)
    assert result["registers"] > 0 and result["stack_frame_bytes"] == 0, result["ptxas_report"]
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]


# ----------------------------------------------------------------------------- bench suite (CPU tier)
def test_mega_moe_bench_suite_is_registered() -> None:
    from deep_gemm.bench import get_suite
    from deep_gemm.bench.mega_moe import MEGA_MOE_SHAPES

    suite = get_suite("mega_moe")
    assert suite.parse_shape("256x32x8x7168x2048") == (256, 32, 8, 7168, 2048)
    assert [s[0] for s in MEGA_MOE_SHAPES] == [64, 256, 1024, 4096]
    assert all(s[1:] == (32, 8, 7168, 2048) for s in MEGA_MOE_SHAPES)
    with pytest.raises(ValueError):
        suite.parse_shape("256x32x8x7168")


# ----------------------------------------------------------------------------- GPU tier
def ue_free_block_cast(w: torch.Tensor):
    """FP8 weights [E, N, K] with 128 x 128 block scales (the library's cast)."""
    return per_block_cast_to_fp8(w, use_ue8m0=False)


class Problem:
    """One layer on one rank: random weights and routing, the buffer filled, the float64 reference."""

    def __init__(
        self,
        use_fp8: bool,
        num_experts: int,
        max_tokens: int,
        topk: int,
        hidden: int,
        inter: int,
        seed: int = 0,
        clamp: float | None = None,
        group=None,
        device: str = "cuda",
    ):
        torch.manual_seed(seed)
        self.use_fp8, self.e, self.max_tokens, self.topk, self.hidden, self.inter = (
            use_fp8,
            num_experts,
            max_tokens,
            topk,
            hidden,
            inter,
        )
        self.clamp, self.device = clamp, device
        w1 = torch.randn(num_experts, 2 * inter, hidden, device=device) / math.sqrt(hidden)
        w2 = torch.randn(num_experts, hidden, inter, device=device) / math.sqrt(inter)
        if use_fp8:
            self.w1, self.s1 = ue_free_block_cast(w1)
            self.w2, self.s2 = ue_free_block_cast(w2)
            self.l1, self.l2 = mega.transform_weights_for_mega_moe_sm90((self.w1, self.s1), (self.w2, self.s2))
        else:
            self.w1, self.w2 = w1.to(torch.bfloat16), w2.to(torch.bfloat16)
            self.l1, self.l2 = mega.transform_weights_for_mega_moe(self.w1, self.w2)
        if device == "cpu":  # (the CPU emulation of the kernels: test_pipeline_plumbing_on_emulated_kernels)
            self.buffer = cpu_buffer(use_fp8, num_experts, max_tokens, topk, hidden, inter)
        elif use_fp8:
            self.buffer = mega.get_symm_buffer_for_sm90_mega_moe(group, num_experts, max_tokens, topk, hidden, inter)
        else:
            self.buffer = mega.get_symm_buffer_for_mega_moe(
                group, num_experts, max_tokens, topk, hidden, inter, mma_type="bf16xbf16"
            )

    def route(self, num_tokens: int, pattern: str = "random", seed: int = 1) -> None:
        """Fill the buffer's first num_tokens rows: tokens, ids and weights."""
        gen = torch.Generator(device="cpu").manual_seed(seed)
        t, k, e = num_tokens, self.topk, self.e
        scores = torch.rand(t, e, generator=gen)
        if pattern == "skewed":  # most tokens on the first experts; the last experts empty
            scores[:, : e // 4] += 2.0
            scores[:, e - 2 :] = -1.0
        idx = scores.topk(k, dim=1).indices
        if pattern in ("random", "skewed"):
            idx[torch.rand(t, k, generator=gen) < 0.2] = -1  # masked slots
            idx[: min(t, 3)] = -1  # tokens routed to no expert
        self.topk_idx = idx.to(self.device)
        self.topk_weights = torch.rand(t, k, generator=gen).to(self.device)
        self.x = (torch.randn(t, self.hidden, generator=gen) * 2).to(torch.bfloat16).to(self.device)
        if self.use_fp8:
            mega.mega_moe_pre_dispatch_sm90(
                self.x,
                self.topk_idx,
                self.topk_weights,
                self.buffer.x,
                self.buffer.x_sf,
                self.buffer.topk_idx,
                self.buffer.topk_weights,
                t,
            )
        else:
            self.buffer.x[:t].copy_(self.x)
            self.buffer.topk_idx[:t].copy_(self.topk_idx)
            self.buffer.topk_weights[:t].copy_(self.topk_weights)

    def call(self, y: torch.Tensor, stats: torch.Tensor | None = None) -> None:
        if self.use_fp8:
            mega.fp8_mega_moe(y, self.l1, self.l2, self.buffer, stats, activation_clamp=self.clamp)
        else:
            mega.bf16_mega_moe(y, self.l1, self.l2, self.buffer, stats, activation_clamp=self.clamp)

    def reference(self, num_tokens: int) -> torch.Tensor:
        """float64 of the kernels' quantized math, rounded where the kernels store BF16 or FP8."""
        t = num_tokens
        return moe_reference(
            self.buffer.x[:t],
            self.buffer.x_sf[:t] if self.use_fp8 else None,
            self.buffer.topk_idx[:t],
            self.buffer.topk_weights[:t],
            self.w1,
            self.s1 if self.use_fp8 else None,
            self.w2,
            self.s2 if self.use_fp8 else None,
            self.inter,
            self.clamp,
        )


def fp4_weight(w: torch.Tensor):
    """FP4 weights [E, N, K / 2] (int8) with FP32 power-of-two 1x32 scales [E, N, K / 32] (the library's cast)."""
    e, n, k = w.shape
    packed, sf = per_token_cast_to_fp4(w.reshape(e * n, k), use_ue8m0=True, gran_k=32)
    return packed.view(e, n, k // 2), sf.view(e, n, k // 32)


class Fp4Problem(Problem):
    """fp8_fp4_mega_moe's layer: FP4 expert weights with 1x32 scales, a packed_x_sf buffer (packed UE8M0 1x32 x_sf)
    filled by mega_moe_pre_dispatch_sm90, or with ``packed_x_sf=False`` the default buffer (FP32 1x128 x_sf)."""

    def __init__(self, num_experts, max_tokens, topk, hidden, inter, seed=0, clamp=None, device="cuda",
                 packed_x_sf: bool = True, packed_weight_sf: bool = False):  # fmt: skip
        torch.manual_seed(seed)
        self.use_fp8, self.e, self.max_tokens, self.topk, self.hidden, self.inter = (
            True,
            num_experts,
            max_tokens,
            topk,
            hidden,
            inter,
        )
        self.clamp, self.device = clamp, device
        w1 = torch.randn(num_experts, 2 * inter, hidden, device=device) / math.sqrt(hidden)
        w2 = torch.randn(num_experts, hidden, inter, device=device) / math.sqrt(inter)
        (self.w1, self.s1), (self.w2, self.s2) = fp4_weight(w1), fp4_weight(w2)
        pack = pack_scales_along_k if packed_weight_sf else (lambda sf: sf)
        self.l1, self.l2 = mega.transform_weights_for_mega_moe((self.w1, pack(self.s1)), (self.w2, pack(self.s2)))
        if device == "cpu":
            self.buffer = cpu_buffer(True, num_experts, max_tokens, topk, hidden, inter, packed_x_sf=packed_x_sf)
        else:
            self.buffer = mega.get_symm_buffer_for_mega_moe(
                None, num_experts, max_tokens, topk, hidden, inter, packed_x_sf=packed_x_sf
            )

    def call(self, y: torch.Tensor, stats: torch.Tensor | None = None) -> None:
        mega.fp8_fp4_mega_moe(y, self.l1, self.l2, self.buffer, stats, activation_clamp=self.clamp)

    def reference(self, num_tokens: int) -> torch.Tensor:
        t = num_tokens
        b = self.buffer
        return moe_reference_fp4(b.x[:t], b.x_sf[:t], b.topk_idx[:t], b.topk_weights[:t], self.w1, self.s1, self.w2,
                                 self.s2, self.inter, self.clamp)  # fmt: skip


def make_problem(kind: str, *args, **kwargs) -> Problem:
    """kind: 'fp8' (fp8_mega_moe, FP32 1x128 buffer), 'fp8-packed' (fp8_mega_moe on a packed_x_sf buffer), 'bf16',
    'fp8fp4' (fp8_fp4_mega_moe, packed_x_sf buffer), 'fp8fp4-fp32sf' (fp8_fp4_mega_moe on the default FP32 1x128
    buffer, packed weight scales)."""
    if kind.startswith("fp8fp4"):
        fp32_sf = kind.endswith("fp32sf")
        return Fp4Problem(*args, packed_x_sf=not fp32_sf, packed_weight_sf=fp32_sf, **kwargs)
    problem = Problem(kind != "bf16", *args, **kwargs)
    if kind == "fp8-packed":
        e, t, k, h, i = problem.e, problem.max_tokens, problem.topk, problem.hidden, problem.inter
        if problem.device == "cpu":
            problem.buffer = cpu_buffer(True, e, t, k, h, i, packed_x_sf=True)
        else:
            problem.buffer = mega.get_symm_buffer_for_mega_moe(None, e, t, k, h, i, packed_x_sf=True)
    return problem


# ----------------------------------------------------------------------------- emulated pipeline (CPU tier)
class EmulatedExtension:
    """The extension's Mega MoE steps and grouped GEMMs as plain PyTorch on CPU tensors, each doing what its kernel
    is specified to do (impls/smxx_mega_moe.cuh, the psum layout): runs the Python pipeline's plumbing (row bounds,
    views, MN-major scale strides, segment ends) on a machine without a GPU."""

    NotImplementedError = NotImplementedError

    def __init__(self, buffer: SymmBuffer) -> None:
        # (only names the real extension has: a call of a missing one must fail here as it would on a GPU)
        for name in dir(type(self)):
            if not name.startswith("__") and name not in ("NotImplementedError",) and not name.startswith("_check") \
                    and not name.startswith("_grouped") and not name.startswith("_fp8_fp4"):  # fmt: skip
                assert hasattr(deep_gemm._C, name), f"the emulated extension has {name}, the real one has not"
        self.buffer = buffer

    @staticmethod
    def get_mk_alignment_for_contiguous_layout() -> int:
        return 128

    def _check_layout(self, layout: list[int]) -> None:
        assert layout == self.buffer.layout.kernel_layout(0)

    def _mega_moe_dispatch(self, peers, layout, alignment, num_rows, src_of_row, psum_ends, stats, l1_acts, l1_sf):
        self._check_layout(layout)
        assert peers.tolist() == [self.buffer.storage.data_ptr()] and num_rows % alignment == 0
        b = self.buffer
        t = int(b.num_tokens[0])
        ends, src, combine = expected_routing([b.topk_idx[:t]], 0, b.layout.num_local_experts, alignment)
        psum_ends.copy_(torch.tensor(ends, dtype=torch.int32))
        src_of_row[:num_rows] = -1
        for row, (s, tok, j) in src.items():
            assert row < num_rows, "the host's row bound is too small"
            src_of_row[row] = (s * b.layout.num_max_tokens_per_rank + tok) * b.layout.num_topk + j
            if b.x_sf.dtype == torch.int32:  # (packed UE8M0 1x32: folded to 1x128 on the way)
                folded, sf = fold_1x32_fp8(b.x[tok : tok + 1], unpack_ue8m0_from_int(b.x_sf[tok : tok + 1]))
                l1_acts[row], l1_sf[row] = folded[0], sf[0]
                continue
            l1_acts[row] = b.x[tok]
            if l1_sf is not None:
                l1_sf[row] = b.x_sf[tok]
        for (_s, tok, j), row in combine.items():
            b.view("combine_row")[tok, j] = row
        if stats is not None:
            stats += torch.tensor([ends[0]] + [e - -(-p // alignment) * alignment for p, e in zip(ends, ends[1:], strict=False)],
                                  dtype=torch.int32)  # fmt: skip

    def _mega_moe_swiglu(self, peers, layout, num_rows, inter, src_of_row, l1_out, l2_acts, l2_sf, clamp, fast_math,
                         ue8m0_x32=False):  # fmt: skip
        self._check_layout(layout)
        assert l1_out.dtype == (torch.float32 if l2_sf is not None and not ue8m0_x32 else torch.bfloat16)
        b = self.buffer
        for row in range(num_rows):
            code = int(src_of_row[row])
            if code < 0:
                continue
            w = float(b.topk_weights.flatten()[code])
            cols = torch.arange(inter)
            gate_cols = (cols // 8) * 16 + cols % 8
            g, u = l1_out[row, gate_cols].double(), l1_out[row, gate_cols + 8].double()
            a = swiglu64(torch.cat([g, u]), inter, clamp) * w
            if ue8m0_x32:
                q, sf = fold_1x32_fp8(*per_token_cast_to_fp8(a.float()[None], use_ue8m0=True, gran_k=32))
                l2_acts[row], l2_sf[row] = q[0], sf[0]
            elif l2_sf is not None:
                q, sf = per_token_cast_to_fp8(a.float()[None], use_ue8m0=False)
                l2_acts[row], l2_sf[row] = q[0], sf[0]
            else:
                l2_acts[row] = a.to(torch.bfloat16)

    def _mega_moe_combine(self, peers, layout, y):
        self._check_layout(layout)
        b = self.buffer
        out = b.view("l2_out")
        for t in range(y.shape[0]):
            acc = torch.zeros(y.shape[1], dtype=torch.float32)
            for j in range(b.layout.num_topk):
                if int(b.topk_idx[t, j]) >= 0:
                    acc += out[int(b.view("combine_row")[t, j])].float()
            y[t] = acc.to(torch.bfloat16)

    @staticmethod
    def _grouped(a, b, d, ends) -> None:
        start = 0
        for g, end in enumerate(ends.tolist()):
            if end > start:
                d[start:end] = (a[start:end] @ b[g].T).to(d.dtype)
            start = -(-end // 128) * 128

    def m_grouped_fp8_gemm_nt_contiguous(self, a_pair, b_pair, d, ends, use_psum_layout, ensure_zero_padding,
                                         recipe=None):  # fmt: skip
        assert use_psum_layout and not ensure_zero_padding
        (a, sfa), (b, sfb) = a_pair, b_pair
        assert sfa.stride() == (1, (a.shape[0] + 3) // 4 * 4), "the scales must already be MN-major TMA-aligned"
        if b.dtype in (torch.int8, torch.uint8):  # (a packed FP4 B: the FP8 x FP4 mode the extension dispatches to)
            assert recipe is None
            return self._fp8_fp4_contiguous(a, sfa, b, sfb, d, ends)
        if recipe == (1, 1, 128):  # (linear 1: per-row scales, MN-major, FP32 D)
            assert d.dtype == torch.float32 and sfb.shape == (*b.shape[:2], b.shape[2] // 128)
            assert sfb.stride() == (sfb.shape[1] * sfb.shape[2], 1, sfb.shape[1]), "per-row sfb must be MN-major"
            self._grouped(dequant_rows(a, sfa), dequant_rows(b, sfb), d, ends)
        else:
            assert recipe is None and d.dtype == torch.bfloat16
            self._grouped(dequant_rows(a, sfa), dequant_blocks(b, sfb), d, ends)

    def _fp8_fp4_contiguous(self, a, sfa, b, sfb, d, ends) -> None:
        assert d.dtype == torch.bfloat16
        assert sfa.dtype == torch.float32 and sfa.stride() == (1, (a.shape[0] + 3) // 4 * 4)
        sf32 = unpack_ue8m0_from_int(sfb) if sfb.dtype == torch.int32 else sfb
        k = a.shape[1]
        b64 = torch.stack([fold_1x32(cast_back_from_fp4(w, torch.ones_like(sf), gran_k=32), sf, k)
                           for w, sf in zip(b, sf32[..., : k // 32], strict=True)])  # fmt: skip
        self._grouped(dequant_rows(a, sfa), b64, d, ends)

    def m_grouped_bf16_gemm_nt_contiguous(self, a, b, d, ends, use_psum_layout, ensure_zero_padding):
        assert use_psum_layout and not ensure_zero_padding
        self._grouped(a.double(), b.double(), d, ends)


KINDS = ["fp8", "bf16", "fp8-packed", "fp8fp4", "fp8fp4-fp32sf"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("num_tokens", "pattern"), [(13, "random"), (16, "skewed"), (1, "dense")])
def test_pipeline_plumbing_on_emulated_kernels(kind, num_tokens, pattern, monkeypatch) -> None:
    from deep_gemm.mega import moe

    problem = make_problem(kind, 8, 16, 3, 256, 128, clamp=2.0, device="cpu")
    problem.route(num_tokens, pattern)
    monkeypatch.setattr(moe, "_C", EmulatedExtension(problem.buffer))
    monkeypatch.setattr(moe, "_check_devices", lambda *args: None)
    stats = torch.full((8,), 2, dtype=torch.int32)
    y = torch.full((num_tokens, 256), float("nan"), dtype=torch.bfloat16)
    problem.call(y, stats)
    check_against_reference(problem, y, num_tokens)
    ids = problem.buffer.topk_idx[:num_tokens]
    assert torch.equal(stats.long(), 2 + torch.bincount(ids[ids >= 0], minlength=8))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("kind", ["fp8", "fp8fp4", "bf16"])
def test_compiled_layer_matches_eager_on_emulated_kernels(kind: str, backend: str, monkeypatch) -> None:
    # A model step compiled with the AOT backends: the FP8 calls after mega_moe_pre_dispatch_sm90 into the buffer's
    # views (the fork's way; the reference's copy_ into several views of one storage with different dtypes is an
    # input mutation AOT autograd cannot compile), the BF16 call on a buffer filled before. Functionalization hands
    # the op a copy of the buffer holding the graph's writes, which the op writes into the buffer before the
    # pipeline and reads back after (mega/ops.py, _buffer). Same y and stats as eager, bit for bit.
    from deep_gemm.mega import moe

    problem = make_problem(kind, 8, 16, 3, 256, 128, clamp=2.0, device="cpu")
    monkeypatch.setattr(moe, "_C", EmulatedExtension(problem.buffer))
    monkeypatch.setattr(moe, "_check_devices", lambda *args: None)
    problem.route(13, "random")
    b = problem.buffer
    stats = torch.zeros(8, dtype=torch.int32)
    call = {"fp8": mega.fp8_mega_moe, "fp8fp4": mega.fp8_fp4_mega_moe, "bf16": mega.bf16_mega_moe}[kind]

    def step(x, idx, weights, stats):
        if kind != "bf16":
            mega.mega_moe_pre_dispatch_sm90(x, idx, weights, b.x, b.x_sf, b.topk_idx, b.topk_weights, 13)
        y = torch.empty(13, 256, dtype=torch.bfloat16)
        call(y, problem.l1, problem.l2, b, stats, activation_clamp=2.0)
        return y

    inputs = (problem.x, problem.topk_idx, problem.topk_weights)
    expected = step(*inputs, stats)
    expected_stats, expected_buffer = stats.clone(), b.storage.clone()
    if kind != "bf16":
        b.storage.zero_()  # (the compiled step must write the tokens into the real buffer itself)
    stats.zero_()
    got = torch.compile(step, fullgraph=True, backend=backend)(*inputs, stats)
    assert torch.equal(got.view(torch.int16), expected.view(torch.int16))
    assert torch.equal(stats, expected_stats)
    assert torch.equal(b.storage, expected_buffer)
    assert calc_diff_ok(got, problem.reference(13))


def calc_diff_ok(y: torch.Tensor, ref: torch.Tensor) -> bool:
    return not ref.any() or deep_gemm.testing.calc_diff(y.double(), ref) < 1e-4


def check_against_reference(problem: Problem, y: torch.Tensor, num_tokens: int) -> None:
    ref = problem.reference(num_tokens)
    assert y.shape == ref.shape and not y.isnan().any(), "y has unwritten (NaN) entries"
    routed = (problem.buffer.topk_idx[:num_tokens] >= 0).any(dim=1)
    assert (y[~routed] == 0).all(), "tokens routed to no expert must get zeros"
    if routed.any():
        diff = deep_gemm.testing.calc_diff(y[routed].double(), ref[routed])
        worst = (y.double() - ref).abs().max().item()
        assert diff < 1e-4, f"calc_diff {diff}, worst abs error {worst}"
        # Every routed token's row too (the whole-tensor calc_diff lets one token's row be ~20 % off): the reference
        # quantizes as the kernels do, so a row differs by BF16 rounding (2^-9) and the rare intermediate value whose
        # FP8 rounding flips under a different FP32 summation order (one such value moves a row by ~0.3 %)
        y_r, ref_r = y[routed].double(), ref[routed]
        row_err = (y_r - ref_r).norm(dim=1)
        bound = 0.03 * ref_r.norm(dim=1) + 1e-3 * ref_r.pow(2).mean().sqrt() * ref_r.shape[1] ** 0.5
        bad = (row_err > bound).nonzero().flatten().tolist()
        assert not bad, f"token rows {bad[:8]} off by {(row_err / ref_r.norm(dim=1).clamp_min(1e-30))[bad[:8]].tolist()}"


def check_routing_tables(problem: Problem, num_tokens: int) -> None:
    """The route kernel's psum_ends and src_of_row against the Python model, exactly."""
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    ends, src, combine = expected_routing([problem.buffer.topk_idx[:num_tokens].cpu()], 0, problem.e, alignment)
    assert problem.buffer.view("psum_ends").tolist() == ends
    rows = problem.buffer.view("src_of_row")[: max(ends + [0])].tolist()
    for row, (s, t, j) in src.items():
        assert rows[row] == (s * problem.max_tokens + t) * problem.topk + j, row
    combine_rows = problem.buffer.view("combine_row")
    for (_s, t, j), row in combine.items():
        assert int(combine_rows[t, j]) == row


@gpu
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("num_experts", "max_tokens", "num_tokens", "topk", "hidden", "inter", "pattern", "clamp"),
    [
        (8, 96, 96, 4, 256, 256, "random", None),  # T = max
        (8, 96, 37, 4, 384, 128, "skewed", None),  # uneven, two empty experts, unaligned T
        (16, 200, 129, 6, 512, 384, "random", 3.0),  # clamp
        (4, 64, 1, 2, 128, 128, "dense", None),  # one token
        (32, 256, 256, 8, 1024, 512, "skewed", None),
        (1, 160, 150, 1, 512, 384, "random", 2.0),  # one local expert, top-1
    ],
    ids=["t-max", "skewed", "clamp", "one-token", "e32-top8", "one-expert"],
)
def test_mega_moe_against_float64(
    kind, num_experts, max_tokens, num_tokens, topk, hidden, inter, pattern, clamp
) -> None:
    problem = make_problem(kind, num_experts, max_tokens, topk, hidden, inter, clamp=clamp)
    problem.route(num_tokens, pattern)
    stats = torch.full((num_experts,), 5, dtype=torch.int32, device="cuda")
    y = torch.full((num_tokens, hidden), float("nan"), dtype=torch.bfloat16, device="cuda")
    problem.call(y, stats)
    torch.cuda.synchronize()
    check_routing_tables(problem, num_tokens)
    check_against_reference(problem, y, num_tokens)
    ids = problem.buffer.topk_idx[:num_tokens]
    expected_stats = 5 + torch.bincount(ids[ids >= 0], minlength=num_experts)
    assert torch.equal(stats.long(), expected_stats)
    # bitwise repeatable
    y2 = torch.full_like(y, float("nan"))
    problem.call(y2)
    assert torch.equal(y.view(torch.int16), y2.view(torch.int16))


@gpu
@pytest.mark.parametrize("mma_type", ["fp8xfp4", "fp8xfp8"])
def test_default_buffer_takes_fp32_scales_copied_in(mma_type: str) -> None:
    # The SGLang fork's SM90 flow: get_symm_buffer_for_mega_moe with an fp8 mma type (its default included) gives FP32
    # 1x128 x_sf, which callers fill with copy_ from per_token_cast_to_fp8(x) before fp8_mega_moe
    problem = make_problem("fp8", 8, 64, 4, 512, 256)
    problem.buffer = mega.get_symm_buffer_for_mega_moe(None, 8, 64, 4, 512, 256, mma_type=mma_type)
    assert problem.buffer.x_sf.dtype == torch.float32 and problem.buffer.x_sf.shape == (64, 4)
    num_tokens = 37
    gen = torch.Generator(device="cpu").manual_seed(3)
    x = (torch.randn(num_tokens, 512, generator=gen) * 2).to(torch.bfloat16).cuda()
    idx = torch.randint(-1, 8, (num_tokens, 4), generator=gen).cuda()
    x_fp8, x_sf = per_token_cast_to_fp8(x, use_ue8m0=False, gran_k=128)
    problem.buffer.x[:num_tokens].copy_(x_fp8)
    problem.buffer.x_sf[:num_tokens].copy_(x_sf)
    problem.buffer.topk_idx[:num_tokens].copy_(idx)
    problem.buffer.topk_weights[:num_tokens].copy_(torch.rand(num_tokens, 4, generator=gen).cuda())
    y = torch.full((num_tokens, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    problem.call(y)
    torch.cuda.synchronize()
    check_against_reference(problem, y, num_tokens)
    # The reference's packed words copied into this buffer: wrong scales, caught with DG_DEBUG_CHECKS=1
    problem.buffer.x_sf[:num_tokens].copy_(
        per_token_cast_to_fp8(x, use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)[1][:, : 512 // 128]
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DG_DEBUG_CHECKS", "1")
        with pytest.raises(ValueError, match=r"packed UE8M0 words copied in"):
            problem.call(y)
    packed = mega.get_symm_buffer_for_mega_moe(None, 8, 64, 4, 512, 256, mma_type=mma_type, packed_x_sf=True)
    assert packed.x_sf.dtype == torch.int32 and packed.x_sf.shape == (64, 1)
    with pytest.raises(ValueError, match=r"packed_x_sf=True needs FP8 dispatch"):
        mega.get_symm_buffer_for_mega_moe(None, 8, 64, 4, 512, 256, mma_type="bf16xbf16", packed_x_sf=True)


@gpu
@pytest.mark.parametrize("kind", KINDS)
def test_mega_moe_no_tokens(kind: str) -> None:
    problem = make_problem(kind, 8, 32, 2, 256, 128)
    stats = torch.zeros(8, dtype=torch.int32, device="cuda")
    y = torch.empty(0, 256, dtype=torch.bfloat16, device="cuda")
    problem.call(y, stats)
    torch.cuda.synchronize()
    assert stats.tolist() == [0] * 8


@gpu
@pytest.mark.parametrize("kind", KINDS)
def test_mega_moe_bad_expert_ids(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    problem = make_problem(kind, 8, 32, 2, 256, 128)
    problem.route(16, "dense")
    problem.buffer.topk_idx[5, 1] = 8
    problem.buffer.topk_idx[7, 0] = -5
    y = torch.full((16, 256), float("nan"), dtype=torch.bfloat16, device="cuda")
    monkeypatch.setenv("DG_DEBUG_CHECKS", "1")
    with pytest.raises(ValueError, match=r"sym_buffer.topk_idx .* must hold expert ids in \[0, num_experts = 8\)"):
        problem.call(y)
    # Default (no host sync): those slots route nowhere, the rest is computed as usual
    monkeypatch.delenv("DG_DEBUG_CHECKS")
    problem.call(y)
    torch.cuda.synchronize()
    check_against_reference(problem, y, 16)


@gpu
@pytest.mark.parametrize("kind", KINDS)
def test_mega_moe_cuda_graph_replay_with_new_routing(kind: str) -> None:
    problem = make_problem(kind, 16, 128, 4, 512, 256)
    num_tokens = 100
    problem.route(num_tokens, "random", seed=1)
    y = torch.full((num_tokens, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    problem.call(y)  # (compiles every kernel outside the capture)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        problem.call(y)
    for seed, pattern in ((2, "skewed"), (3, "random"), (4, "dense")):
        problem.route(num_tokens, pattern, seed=seed)  # new tokens and routing, same buffer
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check_routing_tables(problem, num_tokens)
        check_against_reference(problem, y, num_tokens)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@gpu
def test_fp8_mega_moe_on_symmetric_memory_single_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """The symmetric-memory path (empty + rendezvous + barriers) in one process, a group of size 1."""
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    from deep_gemm.mega import buffer as buffer_module

    monkeypatch.setattr(buffer_module, "_SYMMETRIC_FOR_SINGLE_RANK", True)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{_free_port()}",
        world_size=1,
        rank=0,
        device_id=torch.device("cuda", torch.cuda.current_device()),
    )
    try:
        group = dist.group.WORLD
        if hasattr(symm_mem, "enable_symm_mem_for_group"):
            symm_mem.enable_symm_mem_for_group(group.group_name)
        problem = Problem(True, 8, 64, 4, 256, 256, group=group)
        assert problem.buffer._handle is not None, "the buffer must come from symmetric memory"
        assert problem.buffer.peers.tolist() == [problem.buffer.storage.data_ptr()]
        problem.route(50, "skewed")
        y = torch.full((50, 256), float("nan"), dtype=torch.bfloat16, device="cuda")
        problem.call(y)
        torch.cuda.synchronize()
        check_against_reference(problem, y, 50)
        problem.buffer.destroy()
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- pre-dispatch kernel (GPU)
@gpu
@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("w_dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("num_tokens", "scaling"), [(37, 2.5), (64, 1.0), (1, 0.37), (0, 1.0)])
@pytest.mark.parametrize("packed_x_sf", [False, True], ids=["fp32", "packed"])
def test_pre_dispatch_kernel_is_bit_exact(idx_dtype, w_dtype, num_tokens: int, scaling: float,
                                          packed_x_sf: bool) -> None:  # fmt: skip
    # The kernel against the PyTorch ops it replaces, byte for byte, inputs with padded rows; rows past num_tokens
    # untouched. packed_x_sf: x_sf int32, UE8M0 1x32 scales packed (per_token_cast_to_fp8's packed form).
    gen = torch.Generator(device="cuda").manual_seed(num_tokens)
    buffer = mega.get_symm_buffer_for_mega_moe(None, 8, 64, 6, 1024, 256, packed_x_sf=packed_x_sf)
    assert buffer.x_sf.dtype == (torch.int32 if packed_x_sf else torch.float32)
    ref_storage = buffer.storage.clone()
    x = (torch.randn(70, 1040, device="cuda", generator=gen) * 3).to(torch.bfloat16)[:, :1024]
    x[0, :128] = 0  # an all-zero block: the amax floor
    x[1 % max(num_tokens, 1), 128:256] *= 1e4
    idx = torch.randint(-1, 8, (70, 6), device="cuda", generator=gen).to(idx_dtype)
    w = torch.rand(70, 9, device="cuda", generator=gen).to(w_dtype)[:, 2:8]  # strided
    views = [buffer.view(n) for n in ("x", "x_sf", "topk_idx", "topk_weights")]
    for v in views:
        v.view(torch.uint8).fill_(0xFF) if v.dtype == torch.float8_e4m3fn else v.fill_(-7)
    ref_views = [buffer.layout.regions[n] for n in ("x", "x_sf", "topk_idx", "topk_weights")]
    mega.mega_moe_pre_dispatch_sm90(x, idx, w, *views, num_tokens, routed_scaling_factor=scaling)
    expected = [ref_storage[r.offset : r.offset + r.nbytes].clone() for r in ref_views]
    exp_views = [e.view(v.dtype).view(v.shape) for e, v in zip(expected, views, strict=True)]
    for v in exp_views:
        v.view(torch.uint8).fill_(0xFF) if v.dtype == torch.float8_e4m3fn else v.fill_(-7)
    pre_dispatch_reference(x, idx, w, *exp_views, num_tokens, 128, scaling)
    torch.cuda.synchronize()
    for got, want in zip(views, exp_views, strict=True):
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
