"""m_grouped_fp8_gemm_nt_contiguous and m_grouped_fp8_gemm_nt_masked: input validation everywhere; on a GPU,
every group's rows against a float64 reference of the dequantized inputs, rows that must not be written
untouched (padding rows; rows past masked_m), CUDA-graph replay with new masked_m."""

import random

import pytest
import torch
from jit_helpers import compile_params
from kernel_trace import count, launched_kernels
from padding_rows import check_padding_rows, zeroed_padding_rows

import deep_gemm
from deep_gemm.testing import H200_CLUSTER_CTAS, calc_diff
from deep_gemm.utils import align, ceil_div, per_block_cast_to_fp8, per_token_cast_to_fp8

gpu = pytest.mark.gpu


# ----------------------------------------------------------------------------- validation (CPU tier)
def cpu_operands(num_groups: int = 2, m: int = 256, n: int = 128, k: int = 256):
    a = torch.zeros(m, k, dtype=torch.float8_e4m3fn)
    sfa = torch.ones(m, ceil_div(k, 128))
    b = torch.zeros(num_groups, n, k, dtype=torch.float8_e4m3fn)
    sfb = torch.ones(num_groups, ceil_div(n, 128), ceil_div(k, 128))
    d = torch.empty(m, n, dtype=torch.bfloat16)
    layout = torch.zeros(m, dtype=torch.int32)
    return a, sfa, b, sfb, d, layout


@pytest.mark.parametrize(
    ("case", "pattern"),
    [
        ("b_2d", r"b\[0\] \(B\) must be 3-D"),
        ("b_k", r"b\[0\] \(B\) must be \[G, N, K\] with K = 256"),
        ("b_not_dense", r"the groups must be stacked densely"),
        ("d_dtype", r"d \(recipe \(1, 128, 128\) writes BF16\) must have dtype torch.bfloat16"),
        ("per_row_d_dtype", r"d \(recipe \(1, 1, 128\) writes FP32\) must have dtype torch.float32"),
        ("per_row_sfb_shape", r"b\[1\] \(sfb\) must be \[G, N, ceil\(K/128\)\] = \[2, 128, 2\]"),
        ("d_shape", r"d must be \[M, N\] = \[256, 128\]"),
        ("sfb_shape", r"b\[1\] \(sfb\) must be \[G, ceil\(N/128\), ceil\(K/128\)\] = \[2, 1, 2\]"),
        ("layout_dtype", r"grouped_layout must have dtype torch.int32"),
        ("layout_shape", r"grouped_layout must be int32 \[M\] = \[256\]"),
        ("psum_shape", r"grouped_layout \(use_psum_layout=True\) must be int32 \[G\] = \[2\]"),
        ("m_unaligned", r"M = 200 must be a multiple of get_mk_alignment_for_contiguous_layout\(\) = 128"),
        ("recipe", r"recipe must be \(1, 128, 128\) or \(1, 1, 128\) for m-grouped GEMMs"),
        ("k_zero", r"K must be positive"),
        ("on_cpu", r"a\[0\] \(A\) must be on a CUDA device"),
    ],
)
def test_bad_inputs_raise_value_error(case: str, pattern: str) -> None:
    a, sfa, b, sfb, d, layout = cpu_operands()
    kwargs = {}
    if case == "b_2d":
        b = b[0]
    elif case == "b_k":
        b = torch.zeros(2, 128, 128, dtype=torch.float8_e4m3fn)
    elif case == "b_not_dense":
        b = torch.zeros(2, 256, 256, dtype=torch.float8_e4m3fn)[:, :128]
    elif case == "d_dtype":
        d = d.half()
    elif case == "per_row_d_dtype":
        kwargs["recipe"] = (1, 1, 128)
    elif case == "per_row_sfb_shape":
        d = d.float()  # (FP32 D: recipe (1, 1, 128) by default, B scaled per row)
    elif case == "d_shape":
        d = d[:, :64]
    elif case == "sfb_shape":
        sfb = sfb[:, :, :1]
    elif case == "layout_dtype":
        layout = layout.long()
    elif case == "layout_shape":
        layout = layout[:100]
    elif case == "psum_shape":
        kwargs["use_psum_layout"] = True
    elif case == "m_unaligned":
        a, sfa, d, layout = a[:200], sfa[:200], d[:200], layout[:200]
    elif case == "recipe":
        kwargs["recipe"] = (1, 64, 128)
    elif case == "k_zero":
        a, sfa = torch.zeros(256, 0, dtype=torch.float8_e4m3fn), torch.ones(256, 0)
        b, sfb = torch.zeros(2, 128, 0, dtype=torch.float8_e4m3fn), torch.ones(2, 1, 0)
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout, **kwargs)


def masked_cpu_operands(num_groups: int = 2, max_m: int = 128, n: int = 128, k: int = 256):
    a = torch.zeros(num_groups, max_m, k, dtype=torch.float8_e4m3fn)
    sfa = torch.ones(num_groups, max_m, ceil_div(k, 128))
    b = torch.zeros(num_groups, n, k, dtype=torch.float8_e4m3fn)
    sfb = torch.ones(num_groups, ceil_div(n, 128), ceil_div(k, 128))
    d = torch.empty(num_groups, max_m, n, dtype=torch.bfloat16)
    return a, sfa, b, sfb, d, torch.zeros(num_groups, dtype=torch.int32)


@pytest.mark.parametrize(
    ("case", "pattern"),
    [
        ("a_2d", r"a\[0\] \(A\) must be 3-D"),
        ("b_groups", r"b\[0\] \(B\) must be \[G, N, K\] with G = 2 and K = 256"),
        ("max_m", r"max_m = 100\) must be a multiple of 64"),
        ("d_shape", r"d must be \[G, max_m, N\] = \[2, 128, 128\]"),
        ("sfa_shape", r"a\[1\] \(sfa\) must be \[G, max_m, ceil\(K/128\)\] = \[2, 128, 2\]"),
        ("per_row_d_dtype", r"d \(recipe \(1, 1, 128\) writes FP32\) must have dtype torch.float32"),
        ("per_row_sfb_shape", r"b\[1\] \(sfb\) must be \[G, N, ceil\(K/128\)\] = \[2, 128, 2\]"),
        ("masked_dtype", r"masked_m must have dtype torch.int32"),
        ("masked_shape", r"masked_m must be a contiguous int32 \[G\] = \[2\]"),
        ("expected_m", r"expected_m must be positive"),
        ("on_cpu", r"a\[0\] \(A\) must be on a CUDA device"),
    ],
)
def test_masked_bad_inputs_raise_value_error(case: str, pattern: str) -> None:
    a, sfa, b, sfb, d, masked_m = masked_cpu_operands()
    expected_m = 64
    kwargs = {}
    if case == "per_row_d_dtype":
        kwargs["recipe"] = (1, 1, 128)
    elif case == "per_row_sfb_shape":
        d = d.float()
    elif case == "a_2d":
        a = a[0]
    elif case == "b_groups":
        b = torch.zeros(3, 128, 256, dtype=torch.float8_e4m3fn)
    elif case == "max_m":
        a, sfa, d = a[:, :100], sfa[:, :100], d[:, :100]
    elif case == "d_shape":
        d = d[:, :, :64]
    elif case == "sfa_shape":
        sfa = sfa[:, :, :1]
    elif case == "masked_dtype":
        masked_m = masked_m.long()
    elif case == "masked_shape":
        masked_m = torch.zeros(3, dtype=torch.int32)
    elif case == "expected_m":
        expected_m = 0
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m, **kwargs)


def test_alias_and_heuristic() -> None:
    assert deep_gemm.fp8_m_grouped_gemm_nt_masked is deep_gemm.m_grouped_fp8_gemm_nt_masked
    assert deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked is deep_gemm.m_grouped_fp8_gemm_nt_masked
    assert deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous is deep_gemm.m_grouped_fp8_gemm_nt_contiguous
    config = deep_gemm._C.get_gemm_config
    for gemm_type in (1, 2, 3):
        for alignment in (64, 128, 256):
            for m, n, k in ((8192, 4096, 7168), (16384, 7168, 2048), (512, 576, 7168)):
                cfg = config(m, n, k, gemm_type=gemm_type, grouped_alignment=alignment, allow_multicast=True)
                # A row block never spans two groups; no split-K, no multicast (a pair could span groups)
                assert alignment % cfg["block_m"] == 0 and cfg["block_m"] in (64, 128), cfg
                assert cfg["num_splits"] == 1 and cfg["num_multicast"] == 1, cfg
                assert cfg["gemm_type"] == gemm_type


def test_contiguous_heuristic_takes_overlapped_128x128_tiles() -> None:
    # FP8 m-grouped contiguous GEMMs of 8192+ rows: 128 x 128 tiles with the overlapped promotion ran faster than the
    # 128 x 160 tiles without it on all 16 rows of the grouped suite (H200, 0.4-14 %); masked
    # prefill-like groups keep 128 x 160 at N x K = 7168 x 2048 (33.5 vs 37.3 us), BF16 has no promotion to overlap
    config = deep_gemm._C.get_gemm_config
    for gemm_type in (1, 2):
        for g, m in ((4, 8192), (8, 4096), (32, 256), (256, 64)):
            for n, k in ((4096, 7168), (7168, 2048), (6144, 7168), (7168, 3072)):
                cfg = config(g * m, n, k, gemm_type=gemm_type)
                assert (cfg["block_m"], cfg["block_n"], cfg["overlap_promotion"]) == (128, 128, True), (g, m, n, k, cfg)
    masked = config(1024, 7168, 2048, gemm_type=3, num_groups=1)
    assert (masked["block_n"], masked["overlap_promotion"]) == (160, False), masked
    assert not config(32768, 4096, 7168, gemm_type=1, bf16=True)["overlap_promotion"]


def test_per_row_sfb_heuristic() -> None:
    # Recipe (1, 1, 128) in every m-grouped layout (Mega MoE's one-pass linear 1): FP32 D through TMA (32-column
    # chunks), no split-K or multicast, a row block inside one group
    config = deep_gemm._C.get_gemm_config
    for gemm_type, extra in ((1, {}), (2, {}), (3, {"num_groups": 4, "grouped_alignment": 4096})):
        for m, n, k in ((8192, 3072, 7168), (512, 4096, 2048), (1024, 576, 7168)):
            cfg = config(m, n, k, per_row_sfb=True, gemm_type=gemm_type, allow_multicast=True, **extra)
            assert cfg["per_row_sfb"] and cfg["gemm_type"] == gemm_type, cfg
            assert cfg["use_tma_store"] and cfg["block_n"] % 32 == 0 and cfg["fp32_buffers"] >= 1, cfg
            assert cfg["num_splits"] == 1 and cfg["num_multicast"] == 1 and cfg["block_m"] in (64, 128), cfg


# The one-pass linear 1 of Mega MoE (psum layout, recipe (1, 1, 128), FP32 D: deep_gemm/mega/moe.py) and the masked
# layout's epilogue compile with NVCC without spills (SASS of the other modes is unchanged by this mode)
@pytest.mark.parametrize(
    ("m", "n", "k", "extra"),
    [
        (8192, 3072, 7168, {"gemm_type": 2}),
        (1024, 4096, 7168, {"gemm_type": 3, "num_groups": 4, "grouped_alignment": 4096}),
    ],
    ids=["psum", "masked"],
)
def test_per_row_sfb_m_grouped_compiles_without_spills(tmp_path, monkeypatch, m, n, k, extra) -> None:
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "cache"))
    cfg = deep_gemm._C.get_gemm_config(m, n, k, per_row_sfb=True, **extra)
    result = deep_gemm.compile_kernel("sm90_gemm", compile_params(cfg, n, k))
    assert result["registers"] > 0 and result["stack_frame_bytes"] == 0, result["ptxas_report"]
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]


def test_masked_heuristic_plans_per_group() -> None:
    # Masked plans model each group's rows and B (num_groups): 64-row blocks exactly when a group's rows fit one
    # (H200: groups of 20 rows 5-13 % faster than in 128-row blocks, groups of 192 rows 1.4x slower)
    config = deep_gemm._C.get_gemm_config
    h200 = dict(cluster_ctas=H200_CLUSTER_CTAS, gemm_type=3, grouped_alignment=128)
    for bf16 in (False, True):
        for g, m in ((32, 20), (6, 20), (16, 1), (32, 64)):
            assert config(g * m, 4096, 7168, num_groups=g, bf16=bf16, **h200)["block_m"] == 64, (g, m, bf16)
        for g, m in ((32, 192), (6, 1024), (1, 1024)):
            assert config(g * m, 4096, 7168, num_groups=g, bf16=bf16, **h200)["block_m"] == 128, (g, m, bf16)
    # Where the DRAM bound ties the tiles, the one keeping every SM busy wins (H200, BF16 6 x 20 x 4096 x 7168:
    # 64 x 256 tiles on 96 SMs 110 us, 64 x 96 on all 98 us)
    cfg = config(6 * 20, 4096, 7168, num_groups=6, bf16=True, **h200)
    assert 6 * ceil_div(4096, cfg["block_n"]) >= 132, cfg
    # A 64-row alignment (max_m % 128 != 0) still takes 64-row blocks for any group size
    assert config(32 * 192, 4096, 7168, num_groups=32, **{**h200, "grouped_alignment": 64})["block_m"] == 64
    # num_groups describes the masked layout only
    with pytest.raises(ValueError, match="num_groups"):
        config(8192, 4096, 7168, num_groups=4, gemm_type=1)
    with pytest.raises(ValueError, match="num_groups"):
        config(8192, 4096, 7168, num_groups=0, gemm_type=3)


# ----------------------------------------------------------------------------- GPU tier
def make_grouped_inputs(num_groups: int, expected_m: int, n: int, k: int, seed: int):
    """Random per-group row counts (U(0.7, 1.3) x expected, about one group in five empty), segments
    aligned to the contiguous-layout alignment; returns the FP8 operands, both layouts and the segments."""
    rng = random.Random(seed)
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    sizes = [0 if rng.random() < 0.2 else int(expected_m * rng.uniform(0.7, 1.3)) for _ in range(num_groups)]
    starts, ends, row = [], [], 0
    for size in sizes:
        starts.append(row)
        ends.append(row + size)
        row = align(row + size, alignment)
    m = max(row, alignment)
    a_bf16 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b_bf16 = torch.randn(num_groups, n, k, device="cuda", dtype=torch.bfloat16)
    a, sfa = per_token_cast_to_fp8(a_bf16)
    b = torch.empty(num_groups, n, k, device="cuda", dtype=torch.float8_e4m3fn)
    sfb = torch.empty(num_groups, ceil_div(n, 128), ceil_div(k, 128), device="cuda")
    for g in range(num_groups):
        b[g], sfb[g] = per_block_cast_to_fp8(b_bf16[g])
    per_row = torch.full((m,), -1, device="cuda", dtype=torch.int32)
    for g, (s, e) in enumerate(zip(starts, ends, strict=False)):
        per_row[s:e] = g
    psum = torch.tensor(ends, device="cuda", dtype=torch.int32)
    return a, sfa, b, sfb, per_row, psum, list(zip(starts, ends, strict=False))


def check_grouped(d, a, sfa, b, sfb, segments, case: str, zeroed: torch.Tensor | None = None) -> None:
    """Each group's rows against float64; padding rows untouched (NaN), or zero where ``zeroed``
    (padding_rows.zeroed_padding_rows)."""
    k = a.shape[1]
    written = torch.zeros(d.shape[0], dtype=torch.bool, device="cuda")
    for g, (s, e) in enumerate(segments):
        if s == e:
            continue
        a_g = a[s:e].double() * sfa[s:e].double().repeat_interleave(128, dim=1)[:, :k]
        sfb_g = sfb[g].double().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[: b.shape[1], :k]
        ref = a_g @ (b[g].double() * sfb_g).t()
        diff = calc_diff(d[s:e], ref)
        assert torch.isfinite(d[s:e]).all(), f"{case}: group {g} has unwritten rows"
        assert diff < 5e-6, f"{case}: group {g} calc_diff vs float64 = {diff}"
        # Every element too (calc_diff alone lets a few zeroed or garbage elements of a large group pass): BF16
        # rounding is 2^-9 of the value, the FP32 sums' error far below 2^-7 of the rms
        err = (d[s:e].double() - ref).abs()
        tol = 2.0**-7 * ref.abs() + 2.0**-7 * ref.pow(2).mean().sqrt()
        assert (err <= tol).all(), f"{case}: group {g}: {(err > tol).sum().item()} elements off by more than {tol.max()}"
        written[s:e] = True
    check_padding_rows(d, written, torch.zeros_like(written) if zeroed is None else zeroed, case)


@gpu
@pytest.mark.parametrize("psum", [False, True], ids=["per_row", "psum"])
@pytest.mark.parametrize(
    ("num_groups", "expected_m", "n", "k"),
    [(4, 1024, 4096, 7168), (8, 512, 7168, 2048), (32, 256, 2112, 7168), (64, 64, 576, 1040)],
)
def test_m_grouped_contiguous(psum: bool, num_groups: int, expected_m: int, n: int, k: int) -> None:
    a, sfa, b, sfb, per_row, ends, segments = make_grouped_inputs(num_groups, expected_m, n, k, seed=num_groups + k)
    d = torch.full((a.shape[0], n), float("nan"), device="cuda", dtype=torch.bfloat16)
    layout = ends if psum else per_row
    # (psum padding rows left untouched, per-row ones of group segments zeroed: test_compat_gemm.py checks
    # ensure_zero_padding)
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout, use_psum_layout=psum,
                                               ensure_zero_padding=False)  # fmt: skip
    zeroed = zeroed_padding_rows(per_row, num_groups, deep_gemm.get_mk_alignment_for_contiguous_layout(), False, psum)
    check_grouped(d, a, sfa, b, sfb, segments, f"G{num_groups}-m{expected_m}-n{n}-k{k}", zeroed)
    d2 = torch.full_like(d, float("nan"))
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d2, layout, use_psum_layout=psum,
                                               ensure_zero_padding=False)  # fmt: skip
    assert torch.equal(d.nan_to_num(), d2.nan_to_num()), "two runs differ"


@gpu
def test_m_grouped_contiguous_bad_ids_are_padding() -> None:
    # Device-side ids out of range must not read or write out of bounds: their rows are treated as padding (a segment
    # that starts with one is left untouched without ensure_zero_padding)
    a, sfa, b, sfb, per_row, _, segments = make_grouped_inputs(4, 256, 1024, 512, seed=7)
    bad = per_row.clone()
    s, e = next(seg for seg in segments if seg[1] > seg[0])
    bad[s:e] = 1000
    d = torch.full((a.shape[0], 1024), float("nan"), device="cuda", dtype=torch.bfloat16)
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, bad, ensure_zero_padding=False)
    torch.cuda.synchronize()
    assert d[s:e].isnan().all()


# The padding rows zeroed inside the GEMM (by its producer warps) instead of by a second kernel: opt-in until it has
# run on a GPU (then the default, and the key goes)
ZERO_PADDING_IN_GEMM = "fp8_gemm:zero_padding_in_gemm=1;bf16_gemm:zero_padding_in_gemm=1"


@gpu
@pytest.mark.parametrize("in_gemm", [False, True], ids=["zero_kernel", "in_gemm"])
@pytest.mark.parametrize("dtype", ["fp8", "bf16"])
def test_m_grouped_contiguous_padding_ids_outside_groups_are_padding(dtype: str, in_gemm: bool, monkeypatch) -> None:
    # Every group's padding rows (up to the next aligned start) hold ids outside [0, G): G, -1, G + 5 and
    # INT32_MIN mixed, and one whole block of id G after the last group. Without ensure_zero_padding those inside
    # a group's segment come back zero and the trailing block stays poisoned; with it every one is zero. Every
    # group's rows match float64 (the FP8 rows as in check_grouped, the BF16 rows as a BF16 product).
    if in_gemm:
        monkeypatch.setenv("DG_TUNE", ZERO_PADDING_IN_GEMM)
    num_groups, n, k = 4, 1024, 512
    a, sfa, b, sfb, per_row, _, segments = make_grouped_inputs(num_groups, 200, n, k, seed=11)
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    per_row = torch.cat([per_row, torch.full((alignment,), num_groups, device="cuda", dtype=torch.int32)])
    fill = torch.tensor([num_groups, -1, num_groups + 5, -(2**31)], device="cuda", dtype=torch.int32)
    padding = per_row < 0
    per_row[padding] = fill.repeat(ceil_div(int(padding.sum()), 4))[: int(padding.sum())]
    assert (per_row == num_groups).sum() > alignment, "the case must have padding rows of id G inside blocks"
    m = per_row.shape[0]
    a = torch.cat([a.view(torch.uint8), a[:alignment].view(torch.uint8)]).view(torch.float8_e4m3fn)  # (cat of bytes)
    sfa = torch.cat([sfa, sfa[:alignment]])
    written = torch.zeros(m, dtype=torch.bool, device="cuda")
    for s, e in segments:
        written[s:e] = True
    a_bf16 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b_bf16 = torch.randn(num_groups, n, k, device="cuda", dtype=torch.bfloat16)

    def run(ensure_zero_padding: bool) -> torch.Tensor:
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        if dtype == "fp8":
            deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, per_row,
                                                       ensure_zero_padding=ensure_zero_padding)  # fmt: skip
        else:
            deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a_bf16, b_bf16, d, per_row,
                                                        ensure_zero_padding=ensure_zero_padding)  # fmt: skip
        return d

    d = run(ensure_zero_padding=False)
    zeroed = zeroed_padding_rows(per_row, num_groups, alignment, False, False)
    assert zeroed.any() and (~written & ~zeroed).any(), "the case must have padding rows of both kinds"
    if dtype == "fp8":
        check_grouped(d, a, sfa, b, sfb, segments, "padding ids outside [0, G)", zeroed)
    else:
        for g, (s, e) in enumerate(segments):
            if s < e:
                ref = a_bf16[s:e].double() @ b_bf16[g].double().t()
                assert calc_diff(d[s:e], ref) < 1e-5, f"group {g}"
    check_padding_rows(d, written, zeroed, "padding ids outside [0, G)")
    # ensure_zero_padding=True (the default): the same group rows, bit for bit, and every padding row exactly 0
    d_zeroed = run(ensure_zero_padding=True)
    assert torch.equal(d_zeroed[written].view(torch.int16), d[written].view(torch.int16)), "group rows differ"
    assert (d_zeroed[~written] == 0).all(), "ensure_zero_padding: padding rows not zero"


@gpu
@pytest.mark.parametrize("in_gemm", [False, True], ids=["zero_kernel", "in_gemm"])
def test_padding_rows_are_zeroed_by_one_mechanism(in_gemm: bool, monkeypatch) -> None:
    # ensure_zero_padding (the default): the GEMM, then one zeroing kernel; with zero_padding_in_gemm the GEMM alone
    if in_gemm:
        monkeypatch.setenv("DG_TUNE", ZERO_PADDING_IN_GEMM)
    a, sfa, b, sfb, per_row, _, segments = make_grouped_inputs(4, 200, 512, 512, seed=21)
    d = torch.full((a.shape[0], 512), float("nan"), device="cuda", dtype=torch.bfloat16)

    def call() -> None:
        d.fill_(float("nan"))
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, per_row)

    names = launched_kernels(call)
    assert count(names, "sm90_gemm_kernel") == 1, names
    assert count(names, "zero_padding_rows_kernel") == (0 if in_gemm else 1), names
    written = torch.zeros(d.shape[0], dtype=torch.bool, device="cuda")
    for s, e in segments:
        written[s:e] = True
    check_padding_rows(d, written, ~written, "ensure_zero_padding")


def make_masked_inputs(num_groups: int, max_m: int, n: int, k: int):
    a_bf16 = torch.randn(num_groups, max_m, k, device="cuda", dtype=torch.bfloat16)
    b_bf16 = torch.randn(num_groups, n, k, device="cuda", dtype=torch.bfloat16)
    a, sfa = per_token_cast_to_fp8(a_bf16.view(-1, k))
    a, sfa = a.view(num_groups, max_m, k), sfa.view(num_groups, max_m, -1)
    b = torch.empty(num_groups, n, k, device="cuda", dtype=torch.float8_e4m3fn)
    sfb = torch.empty(num_groups, ceil_div(n, 128), ceil_div(k, 128), device="cuda")
    for g in range(num_groups):
        b[g], sfb[g] = per_block_cast_to_fp8(b_bf16[g])
    return a, sfa, b, sfb


def check_masked(d, a, sfa, b, sfb, masked_m: list[int], case: str) -> None:
    k = a.shape[2]
    for g, rows in enumerate(masked_m):
        rows = max(0, min(rows, a.shape[1]))
        if rows:
            a_g = a[g, :rows].double() * sfa[g, :rows].double().repeat_interleave(128, dim=1)[:, :k]
            sfb_g = sfb[g].double().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[: b.shape[1], :k]
            ref = a_g @ (b[g].double() * sfb_g).t()
            assert torch.isfinite(d[g, :rows]).all(), f"{case}: group {g} has unwritten rows"
            diff = calc_diff(d[g, :rows], ref)
            assert diff < 5e-6, f"{case}: group {g} calc_diff vs float64 = {diff}"
        assert d[g, rows:].isnan().all(), f"{case}: group {g} rows past masked_m were written"


@gpu
@pytest.mark.parametrize(("num_groups", "expected_m"), [(32, 192), (6, 1024), (32, 20), (6, 20), (16, 1)])
def test_m_grouped_masked(num_groups: int, expected_m: int) -> None:
    rng = random.Random(num_groups * 1000 + expected_m)
    max_m, n, k = 4096, 4096, 7168
    a, sfa, b, sfb = make_masked_inputs(num_groups, max_m, n, k)
    counts = [
        0 if rng.random() < 0.15 else min(max_m, int(expected_m * rng.uniform(0.7, 1.3)) + 1) for _ in range(num_groups)
    ]
    masked_m = torch.tensor(counts, device="cuda", dtype=torch.int32)
    d = torch.full((num_groups, max_m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    deep_gemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m)
    check_masked(d, a, sfa, b, sfb, counts, f"G{num_groups}-m{expected_m}")


@gpu
@pytest.mark.parametrize("num_groups", [33, 129, 300])
def test_m_grouped_masked_many_groups(num_groups: int) -> None:
    # More groups than a warp has lanes: every role counts all groups' tiles before its tile loop (a lane per group,
    # four groups a lane in flight, a shuffle sum), so the count's later rounds and remainders must match the tiles
    # the walk hands out (a mismatch deadlocks the pipeline or drops tiles). Empty groups anywhere, counts past
    # max_m and negative ones
    rng = random.Random(num_groups)
    max_m, n, k = 128, 256, 256
    a, sfa, b, sfb = make_masked_inputs(num_groups, max_m, n, k)
    counts = [rng.choice([0, 0, 0, 1, 5, 64, 65, 128, 200, -3]) for _ in range(num_groups)]
    counts[-1] = 0  # (the last group empty too)
    masked_m = torch.tensor(counts, device="cuda", dtype=torch.int32)
    d = torch.full((num_groups, max_m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    deep_gemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, 32)
    check_masked(d, a, sfa, b, sfb, counts, f"G{num_groups}")


@gpu
def test_m_grouped_masked_graph_replay_and_clamping() -> None:
    # Captured once, replayed with new counts (read on the device); counts past max_m are clamped
    num_groups, max_m, n, k = 4, 256, 1024, 1024
    a, sfa, b, sfb = make_masked_inputs(num_groups, max_m, n, k)
    sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa.view(-1, sfa.shape[2])).view(num_groups, max_m, -1)
    masked_m = torch.tensor([100, 0, 256, 37], device="cuda", dtype=torch.int32)
    d = torch.full((num_groups, max_m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    deep_gemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, 100)  # warm-up (compiles)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        deep_gemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, 100)
    for counts in ([1, 255, 0, 128], [300, 64, 7, -5]):
        masked_m.copy_(torch.tensor(counts, dtype=torch.int32))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check_masked(d, a, sfa, b, sfb, counts, f"replay {counts}")


# ----------------------------------------------------------------------------- recipe (1, 1, 128), FP32 D (GPU tier)
def per_row_b(b_bf16: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """B [G, N, K] cast per row and 128 of K: FP8 [G, N, K] and FP32 sfb [G, N, ceil(K/128)]."""
    g, n, k = b_bf16.shape
    b, sfb = per_token_cast_to_fp8(b_bf16.reshape(g * n, k))
    return b.view(g, n, k), sfb.view(g, n, -1)


def per_row_reference(a, sfa, b_g, sfb_g) -> torch.Tensor:
    """float64 A_g @ B_g^T of the dequantized inputs. FP32 D keeps what the tensor cores' accumulation of a 128-deep
    block leaves (about 14 mantissa bits): calc_diff ~1e-9, bounded at 1e-7 as the dense per-row tests; a wrong
    group's scales or rows give > 1e-3."""
    k = a.shape[-1]
    a_d = a.double() * sfa.double().repeat_interleave(128, dim=-1)[..., :k]
    return a_d @ (b_g.double() * sfb_g.double().repeat_interleave(128, dim=-1)[:, :k]).t()


@gpu
@pytest.mark.parametrize("psum", [False, True], ids=["per_row", "psum"])
@pytest.mark.parametrize(("num_groups", "expected_m", "n", "k"), [(8, 300, 3072, 7168), (5, 200, 576, 1040)])
@pytest.mark.parametrize("in_gemm", [False, True], ids=["zero_kernel", "in_gemm"])
def test_m_grouped_contiguous_per_row_sfb(psum: bool, num_groups: int, expected_m: int, n: int, k: int, in_gemm: bool,
                                          monkeypatch) -> None:  # fmt: skip
    if in_gemm:  # (FP32 D: the padding pass zeroes each row as twice as many BF16 elements)
        monkeypatch.setenv("DG_TUNE", ZERO_PADDING_IN_GEMM)
    # Every group's own per-row B scales (a wrong group's scales, or expert 0's for all, fail the float64 check:
    # the groups' B and scales differ); padding rows as padding_rows.zeroed_padding_rows says (FP32 rows)
    a, sfa, _, _, per_row, ends, segments = make_grouped_inputs(num_groups, expected_m, 128, k, seed=3 * num_groups)
    b_bf16 = torch.randn(num_groups, n, k, device="cuda", dtype=torch.bfloat16)
    b_bf16 *= torch.rand(num_groups, 1, 1, device="cuda") * 4 + 0.25  # (each group its own scale range)
    b, sfb = per_row_b(b_bf16)
    layout = ends if psum else per_row
    d = torch.full((a.shape[0], n), float("nan"), device="cuda", dtype=torch.float32)
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout, recipe=(1, 1, 128),
                                               use_psum_layout=psum, ensure_zero_padding=False)  # fmt: skip
    written = torch.zeros(d.shape[0], dtype=torch.bool, device="cuda")
    for g, (s, e) in enumerate(segments):
        if s == e:
            continue
        assert torch.isfinite(d[s:e]).all(), f"group {g} has unwritten rows"
        diff = calc_diff(d[s:e], per_row_reference(a[s:e], sfa[s:e], b[g], sfb[g]))
        assert diff < 1e-7, f"group {g} calc_diff vs float64 = {diff}"
        written[s:e] = True
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    check_padding_rows(d, written, zeroed_padding_rows(per_row, num_groups, alignment, False, psum), "per-row sfb")
    # FP32 D is the default recipe's output type; the padding rows are zeroed by default
    d2 = torch.full_like(d, float("nan"))
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d2, layout, use_psum_layout=psum)
    assert torch.equal(d2[written], d[written]), "two runs differ"
    assert (d2[~written] == 0).all(), "ensure_zero_padding: FP32 padding rows not zero"


@gpu
def test_m_grouped_masked_per_row_sfb() -> None:
    num_groups, max_m, n, k = 6, 256, 1536, 2048
    a, sfa, _, _ = make_masked_inputs(num_groups, max_m, 128, k)
    b_bf16 = torch.randn(num_groups, n, k, device="cuda", dtype=torch.bfloat16)
    b_bf16 *= torch.rand(num_groups, 1, 1, device="cuda") * 4 + 0.25
    b, sfb = per_row_b(b_bf16)
    counts = [100, 0, 256, 37, 1, 129]
    masked_m = torch.tensor(counts, device="cuda", dtype=torch.int32)
    d = torch.full((num_groups, max_m, n), float("nan"), device="cuda", dtype=torch.float32)
    deep_gemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, 100, recipe=(1, 1, 128))
    for g, rows in enumerate(counts):
        if rows:
            assert torch.isfinite(d[g, :rows]).all(), f"group {g} has unwritten rows"
            diff = calc_diff(d[g, :rows], per_row_reference(a[g, :rows], sfa[g, :rows], b[g], sfb[g]))
            assert diff < 1e-7, f"group {g} calc_diff vs float64 = {diff}"
        assert d[g, rows:].isnan().all(), f"group {g} rows past masked_m were written"
