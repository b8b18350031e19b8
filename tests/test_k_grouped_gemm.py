"""k_grouped_fp8_gemm_nt_contiguous / _tn_contiguous (MoE weight gradients): input validation everywhere; on a
GPU, every group against a float64 reference of the dequantized inputs (with C, without, in place), empty
groups and K tails, the psum layout, nt and tn giving the same bits, two runs bitwise equal."""

import random

import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.utils import align, ceil_div, per_channel_cast_to_fp8

gpu = pytest.mark.gpu


# ----------------------------------------------------------------------------- validation (CPU tier)
def cpu_operands(ks=(256, 128), m: int = 128, n: int = 64):
    total = sum(ks)
    sf_rows = sum(ceil_div(k, 128) for k in ks)
    a = torch.zeros(m * total, dtype=torch.float8_e4m3fn)
    b = torch.zeros(n * total, dtype=torch.float8_e4m3fn)
    sfa, sfb = torch.ones(sf_rows, m), torch.ones(sf_rows, n)
    d = torch.empty(len(ks), m, n)
    layout = torch.tensor(ks, dtype=torch.int32)
    return a, sfa, b, sfb, d, list(ks), layout


@pytest.mark.parametrize(
    ("case", "pattern"),
    [
        ("k_not_16", r"ks_cpu\[1\] = 100: each group's K must be a non-negative multiple of 16"),
        ("k_negative", r"ks_cpu\[0\] = -16"),
        ("no_groups", r"ks_cpu must list 1..120 group sizes"),
        ("too_many_groups", r"ks_cpu must list 1..120 group sizes"),
        ("d_dtype", r"d \(k-grouped GEMMs write FP32\) must have dtype torch.float32"),
        ("d_groups", r"d must be \[G, M, N\] with G = 2"),
        ("d_strided", r"d must be contiguous"),
        ("c_shape", r"c must be \[G, M, N\] = \[2, 128, 64\]"),
        ("c_overlap", r"c must be d itself or not overlap d"),
        ("recipe", r"recipe must be \(1, 1, 128\) for k-grouped GEMMs"),
        ("a_2d", r"a\[0\] \(A\) must be a contiguous 1-D buffer of at least M \* sum\(K\) = 49152"),
        ("a_short", r"a\[0\] \(A\) must be a contiguous 1-D buffer"),
        ("b_dtype", r"b\[0\] \(B\) must have dtype torch.float8_e4m3fn"),
        ("sfa_shape", r"a\[1\] \(sfa\) must be \[sum of ceil\(K_g / 128\), MN\] = \[3, 128\]"),
        ("sfb_dtype", r"b\[1\] \(sfb\) must have dtype torch.float32"),
        ("layout_shape", r"grouped_layout must be int32 \[G\] = \[2\]"),
        ("layout_dtype", r"grouped_layout must have dtype torch.int32"),
        ("on_cpu", r"a\[0\] \(A\) must be on a CUDA device"),
    ],
)
def test_bad_inputs_raise_value_error(case: str, pattern: str) -> None:
    a, sfa, b, sfb, d, ks, layout = cpu_operands()
    kwargs = {}
    if case == "k_not_16":
        ks = [256, 100]
    elif case == "k_negative":
        ks = [-16, 128]
    elif case == "no_groups":
        ks = []
    elif case == "too_many_groups":
        ks = [16] * 121
    elif case == "d_dtype":
        d = d.bfloat16()
    elif case == "d_groups":
        d = torch.empty(3, 128, 64)
    elif case == "d_strided":
        d = torch.empty(2, 128, 128)[:, :, :64]
    elif case == "c_shape":
        kwargs["c"] = torch.empty(2, 128, 32)
    elif case == "c_overlap":
        big = torch.empty(2 * 128 * 64 + 64)
        d = big[: d.numel()].view(2, 128, 64)
        kwargs["c"] = big[64:].view(2, 128, 64)
    elif case == "recipe":
        kwargs["recipe"] = (1, 128, 128)
    elif case == "a_2d":
        a = a.view(128, -1)
    elif case == "a_short":
        a = a[:-16]
    elif case == "b_dtype":
        b = b.view(torch.int8)
    elif case == "sfa_shape":
        sfa = sfa[:2]
    elif case == "sfb_dtype":
        sfb = sfb.double()
    elif case == "layout_shape":
        layout = layout[:1]
    elif case == "layout_dtype":
        layout = layout.long()
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ks, layout, **kwargs)


def test_tn_bad_layout_raises_value_error() -> None:
    a, sfa, b, sfb, d, ks, layout = cpu_operands()
    a_mn = torch.zeros(sum(ks), 128, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"b\[0\] \(B\) must be MN-major \[sum\(K\), N\] = \[384, 64\]"):
        deep_gemm.k_grouped_fp8_gemm_tn_contiguous((a_mn, sfa), (b, sfb), d, ks, layout)
    with pytest.raises(ValueError, match=r"a\[0\] \(A\) must be MN-major"):
        deep_gemm.k_grouped_fp8_gemm_tn_contiguous((a_mn.t(), sfa), (b, sfb), d, ks, layout)


def test_heuristic_k_grouped() -> None:
    config = deep_gemm._C.get_gemm_config
    for groups, m, n in ((4, 4096, 7168), (8, 7168, 2048), (16, 4096, 7168), (2, 128, 256)):
        cfg = config(groups * m, n, 4096, gemm_type=4, per_row_sfb=True, allow_multicast=True)
        # (FP32 D through TMA in 32-column chunks; in place by TMA reduce-add)
        assert cfg["num_splits"] == 1 and cfg["num_multicast"] == 1 and cfg["use_tma_store"], cfg
        assert cfg["gemm_type"] == 4 and cfg["per_row_sfb"] and cfg["block_n"] % 32 == 0, cfg
        direct = config(groups * m, n, 4096, gemm_type=4, per_row_sfb=True, use_tma_store=False)
        assert not direct["use_tma_store"], direct


def test_heuristic_row_scaled_overlap() -> None:
    # The dense recipe (1, 1, 128) takes 128 x 128 overlapped tiles where they measured faster than 192 x 128 (H200)
    # (K >= 4096, the tile's L2 term binding), and keeps 192 x 128 where those were faster; k-grouped GEMMs keep it
    config = deep_gemm._C.get_gemm_config
    for has_c in (False, True):
        for m, n, k in ((4096, 7168, 7168), (7168, 2048, 16384), (2048, 4096, 7168), (4096, 4096, 16384)):
            cfg = config(m, n, k, per_row_sfb=True, has_c=has_c)
            assert (cfg["block_m"], cfg["block_n"], cfg["overlap_promotion"]) == (128, 128, True), (m, n, k, cfg)
        for m, n, k in ((4096, 2112, 7168), (8192, 8192, 8192), (4096, 24576, 1536), (8192, 7168, 2048)):
            cfg = config(m, n, k, per_row_sfb=True, has_c=has_c)
            assert (cfg["block_m"], cfg["overlap_promotion"]) == (192, False), (m, n, k, cfg)
    for groups, m, n, k in ((4, 4096, 7168, 8192), (16, 4096, 7168, 2048)):
        assert config(groups * m, n, k, gemm_type=4, per_row_sfb=True)["block_m"] == 192


# ----------------------------------------------------------------------------- GPU tier
def make_k_grouped_inputs(num_groups: int, m: int, n: int, expected_k: int, seed: int, psum: bool = False):
    """Random K per group (U(0.7, 1.3) x expected, a multiple of 16 with a tail past 128, group 1 empty);
    returns the MN-major FP8 operands [sum K, M] / [sum K, N] with their per-channel scales, the flat
    K-major (nt) buffers, the K list and starts, and the float64 dequantized groups."""
    rng = random.Random(seed)
    ks = [align(int(expected_k * rng.uniform(0.7, 1.3)), 16) + 16 for _ in range(num_groups)]
    if num_groups > 1:
        ks[1] = 0
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    starts, end = [], 0
    for k in ks:
        starts.append(align(end, alignment) if psum else end)
        end = starts[-1] + k
    total = end
    a_mn = torch.zeros(total, m, device="cuda", dtype=torch.float8_e4m3fn)
    b_mn = torch.zeros(total, n, device="cuda", dtype=torch.float8_e4m3fn)
    a_flat = torch.zeros(m * total, device="cuda", dtype=torch.float8_e4m3fn)
    b_flat = torch.zeros(n * total, device="cuda", dtype=torch.float8_e4m3fn)
    sfa, sfb, deq = [], [], []
    for k, start in zip(ks, starts, strict=True):
        if k == 0:
            deq.append(None)
            continue
        a_q, a_sf = per_channel_cast_to_fp8(torch.randn(k, m, device="cuda", dtype=torch.bfloat16))
        b_q, b_sf = per_channel_cast_to_fp8(torch.randn(k, n, device="cuda", dtype=torch.bfloat16))
        a_mn[start : start + k], b_mn[start : start + k] = a_q, b_q
        a_flat[start * m : (start + k) * m] = a_q.t().contiguous().view(-1)
        b_flat[start * n : (start + k) * n] = b_q.t().contiguous().view(-1)
        sfa.append(a_sf)
        sfb.append(b_sf)
        a64 = a_q.double() * a_sf.double().repeat_interleave(128, dim=0)[:k]
        b64 = b_q.double() * b_sf.double().repeat_interleave(128, dim=0)[:k]
        deq.append((a64, b64))
    layout_values = [s + k for s, k in zip(starts, ks, strict=True)] if psum else ks
    layout = torch.tensor(layout_values, device="cuda", dtype=torch.int32)
    return dict(
        a_mn=a_mn,
        b_mn=b_mn,
        a_flat=a_flat,
        b_flat=b_flat,
        sfa=torch.cat(sfa),
        sfb=torch.cat(sfb),
        ks=ks,
        layout=layout,
        deq=deq,
    )


def check_k_grouped(d: torch.Tensor, c: torch.Tensor | None, deq, case: str) -> None:
    for g, pair in enumerate(deq):
        ref = c[g].double().clone() if c is not None else torch.zeros(d.shape[1:], device="cuda", dtype=torch.float64)
        if pair is not None:
            ref += pair[0].t() @ pair[1]
        assert torch.isfinite(d[g]).all(), f"{case}: group {g} has unwritten elements"
        if pair is None:
            assert torch.equal(d[g].double(), ref), f"{case}: empty group {g} is not C (or zero)"
            continue
        diff = calc_diff(d[g], ref)
        assert diff < 5e-6, f"{case}: group {g} calc_diff vs float64 = {diff}"


@gpu
@pytest.mark.parametrize(
    ("num_groups", "m", "n", "expected_k"),
    [(4, 4096, 7168, 8192), (8, 7168, 2048, 4096), (16, 4096, 7168, 2048), (3, 200, 136, 300)],
    ids=["G4-m4096-n7168-k8192", "G8-m7168-n2048-k4096", "G16-m4096-n7168-k2048", "G3-m200-n136-k300"],
)
def test_k_grouped_nt(num_groups: int, m: int, n: int, expected_k: int) -> None:
    x = make_k_grouped_inputs(num_groups, m, n, expected_k, seed=num_groups * 7 + m)
    case = f"G{num_groups}-m{m}-n{n}-k{expected_k}"
    a, b = (x["a_flat"], x["sfa"]), (x["b_flat"], x["sfb"])
    c = torch.randn(num_groups, m, n, device="cuda") * 32
    # With C into a poisoned D, then again: bitwise equal
    d = torch.full_like(c, float("nan"))
    deep_gemm.k_grouped_fp8_gemm_nt_contiguous(a, b, d, x["ks"], x["layout"], c=c)
    check_k_grouped(d, c, x["deq"], case + "-c")
    d2 = torch.full_like(c, float("nan"))
    deep_gemm.k_grouped_fp8_gemm_nt_contiguous(a, b, d2, x["ks"], x["layout"], c=c)
    assert torch.equal(d, d2), f"{case}: two runs differ"
    # In place (c is d): the same bits
    d3 = c.clone()
    deep_gemm.k_grouped_fp8_gemm_nt_contiguous(a, b, d3, x["ks"], x["layout"], c=d3)
    assert torch.equal(d, d3), f"{case}: in-place accumulation differs"
    # Without C
    d4 = torch.full_like(c, float("nan"))
    deep_gemm.k_grouped_fp8_gemm_nt_contiguous(a, b, d4, x["ks"], x["layout"])
    check_k_grouped(d4, None, x["deq"], case + "-no-c")


@gpu
@pytest.mark.parametrize(
    ("num_groups", "m", "n", "expected_k", "psum", "row_pad"),
    [
        (5, 384, 512, 1000, True, 0),
        (3, 200, 136, 300, False, 0),
        (4, 4096, 7168, 2048, False, 16),
        (6, 64, 48, 96, True, 3),
    ],
    ids=["G5-m384-n512-psum", "G3-m200-n136", "G4-m4096-n7168-padded", "G6-m64-n48-psum-odd-stride"],
)
def test_k_grouped_tn(num_groups: int, m: int, n: int, expected_k: int, psum: bool, row_pad: int) -> None:
    """tn (MN-major [sum K, M] / [sum K, N] operands, transposed into the nt layout by the pre-pass kernel) gives the
    nt call's bits: aligned and unaligned (M, N not multiples of 16, or a row stride padded by `row_pad` bytes)
    operands, groups whose K is not a multiple of the 64-row transpose tile, scales given as [MN, K blocks] views."""
    x = make_k_grouped_inputs(num_groups, m, n, expected_k, seed=11 + m, psum=psum)
    c = torch.randn(num_groups, m, n, device="cuda")
    d_nt = torch.full_like(c, float("nan"))
    deep_gemm.k_grouped_fp8_gemm_nt_contiguous(
        (x["a_flat"], x["sfa"]), (x["b_flat"], x["sfb"]), d_nt, x["ks"], x["layout"], c=c, use_psum_layout=psum
    )
    check_k_grouped(d_nt, c, x["deq"], "nt")

    def padded(t: torch.Tensor) -> torch.Tensor:
        if row_pad == 0:
            return t
        wide = torch.zeros(t.shape[0], t.shape[1] + row_pad, device="cuda", dtype=torch.uint8)
        wide[:, : t.shape[1]] = t.view(torch.uint8)
        return wide[:, : t.shape[1]].view(t.dtype)

    d_tn = torch.full_like(c, float("nan"))
    deep_gemm.k_grouped_fp8_gemm_tn_contiguous(
        (padded(x["a_mn"]), x["sfa"].t().contiguous().t()),
        (padded(x["b_mn"]), x["sfb"].t()),
        d_tn,
        x["ks"],
        x["layout"],
        c=c,
        use_psum_layout=psum,
    )
    assert torch.equal(d_nt, d_tn), "tn and nt differ"


@gpu
def test_k_grouped_all_empty() -> None:
    m, n, ks = 256, 128, [0, 0]
    a = torch.empty(0, device="cuda", dtype=torch.float8_e4m3fn)
    sfa, sfb = torch.empty(0, m, device="cuda"), torch.empty(0, n, device="cuda")
    layout = torch.zeros(2, device="cuda", dtype=torch.int32)
    c = torch.randn(2, m, n, device="cuda")
    d = torch.full_like(c, float("nan"))
    deep_gemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (a, sfb), d, ks, layout, c=c)
    assert torch.equal(d, c), "all groups empty: D must equal C"
    deep_gemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (a, sfb), d, ks, layout)
    assert torch.equal(d, torch.zeros_like(d)), "all groups empty, no C: D must be zero"
