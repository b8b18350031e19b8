"""fp8_gemm_nt: input validation everywhere; on a GPU, results against float64 and BF16 references.

Bounds (per case): calc_diff against the float64 product of the dequantized FP8 inputs < 5e-6
(what BF16 rounding of the output leaves: about 2^-9 relative per element, ~1e-6 in calc_diff), and
< 1e-3 against the unquantized BF16 product; every element within 2^-7 * |ref| + 2^-7 * rms(ref)
of the float64 reference; padding untouched; two runs bitwise equal."""

import os
import random
import subprocess
import sys

import pytest
import torch

import deep_gemm
from deep_gemm.bench.fp8_gemm import DENSE_SHAPES
from deep_gemm.testing import H200_CLUSTER_CTAS, calc_diff
from deep_gemm.utils import ceil_div, per_block_cast_to_fp8, per_token_cast_to_fp8

gpu = pytest.mark.gpu

NK_PAIRS = [
    (2112, 7168),
    (576, 7168),
    (24576, 1536),
    (32768, 512),
    (7168, 16384),
    (4096, 7168),
    (7168, 2048),
    (129280, 7168),
]
MS = [1, 7, 64, 128, 129, 1000, 4096]


# ----------------------------------------------------------------------------- validation (CPU tier)
def cpu_operands(m: int = 64, n: int = 128, k: int = 256):
    a = torch.zeros(m, k, dtype=torch.float8_e4m3fn)
    b = torch.zeros(n, k, dtype=torch.float8_e4m3fn)
    sfa = torch.ones(m, ceil_div(k, 128))
    sfb = torch.ones(ceil_div(n, 128), ceil_div(k, 128))
    d = torch.empty(m, n, dtype=torch.bfloat16)
    return a, sfa, b, sfb, d


@pytest.mark.parametrize(
    ("case", "pattern"),
    [
        ("a_dtype", r"a\[0\] \(A\) must have dtype torch.float8_e4m3fn"),
        ("b_dtype", r"b\[0\] \(B\) must have dtype torch.float8_e4m3fn"),
        ("a_rank", r"a\[0\] \(A\) must be 2-D"),
        ("k_mismatch", r"b\[0\] \(B\) must be \[N, K\] with K = 256"),
        ("d_shape", r"d must be \[M, N\] = \[64, 128\]"),
        ("d_dtype", r"d \(recipe \(1, 128, 128\) writes BF16\) must have dtype torch.bfloat16"),
        ("a_not_k_major", r"a\[0\] \(A\) must be contiguous in its last dimension"),
        ("a_unaligned_k", r"a\[0\] \(A\): stride 100 of dim 0 must be a multiple of 16 bytes"),
        ("sfa_shape", r"a\[1\] \(sfa\) must be \[M, ceil\(K/128\)\] = \[64, 2\]"),
        ("sfb_shape", r"b\[1\] \(sfb\) must be \[ceil\(N/128\), ceil\(K/128\)\] = \[1, 2\]"),
        ("sfa_dtype", r"a\[1\] \(sfa\) must have dtype torch.float32"),
        ("compiled_dims", r"compiled_dims must use only the letters m, n, k"),
        ("recipe", r"recipe must be \(1, 128, 128\) or \(1, 1, 128\)"),
        ("with_c", r"c must be None with BF16 output"),
        ("on_cpu", r"a\[0\] \(A\) must be on a CUDA device"),
    ],
)
def test_bad_inputs_raise_value_error(case: str, pattern: str) -> None:
    a, sfa, b, sfb, d = cpu_operands()
    kwargs = {}
    if case == "a_dtype":
        a = a.to(torch.bfloat16)
    elif case == "b_dtype":
        # (not int8 / uint8: those are a packed FP4 B, tests/test_fp4_gemm.py)
        b = torch.zeros(128, 256, dtype=torch.bfloat16)
    elif case == "a_rank":
        a = a[None]
    elif case == "k_mismatch":
        b = torch.zeros(128, 384, dtype=torch.float8_e4m3fn)
    elif case == "d_shape":
        d = d[:, :64]
    elif case == "d_dtype":
        d = d.float()
        kwargs["recipe"] = (1, 128, 128)
    elif case == "a_not_k_major":
        a = torch.zeros(256, 64, dtype=torch.float8_e4m3fn).t()
    elif case == "a_unaligned_k":
        a = torch.zeros(64, 100, dtype=torch.float8_e4m3fn)
        b = torch.zeros(128, 100, dtype=torch.float8_e4m3fn)
        sfa, sfb = torch.ones(64, 1), torch.ones(1, 1)
    elif case == "sfa_shape":
        sfa = torch.ones(64, 3)
    elif case == "sfb_shape":
        sfb = torch.ones(2, 2)
    elif case == "sfa_dtype":
        sfa = sfa.double()
    elif case == "compiled_dims":
        kwargs["compiled_dims"] = "nx"
    elif case == "recipe":
        kwargs["recipe"] = (1, 64, 128)
    elif case == "with_c":
        kwargs["c"] = d.clone()
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d, **kwargs)


@pytest.mark.parametrize(
    ("case", "pattern"),
    [
        ("d_bf16", r"d \(recipe \(1, 1, 128\) writes FP32\) must have dtype torch.float32"),
        ("sfb_blocks", r"b\[1\] \(sfb\) must be \[N, ceil\(K/128\)\] = \[128, 2\] for recipe \(1, 1, 128\)"),
        ("c_dtype", r"c \(d's dtype\) must have dtype torch.float32"),
        ("c_shape", r"c must be \[M, N\] = \[64, 128\]"),
        ("c_overlap", r"c must be d itself or not overlap d"),
        ("c_overlap_strided", r"c must be d itself or not overlap d"),
        ("on_cpu", r"a\[0\] \(A\) must be on a CUDA device"),
        # (not overlapping: a padded d and a separate c, or two disjoint views of one buffer, pass the check)
        ("c_separate_strided_d", r"a\[0\] \(A\) must be on a CUDA device"),
        ("c_disjoint_views", r"a\[0\] \(A\) must be on a CUDA device"),
    ],
)
def test_per_row_recipe_bad_inputs(case: str, pattern: str) -> None:
    # Recipe (1, 1, 128): per-row sfb [N, ceil(K/128)], FP32 d, optional FP32 c (checked before the device)
    a, sfa, b, _, d = cpu_operands()
    sfb, d, kwargs = torch.ones(128, 2), d.float(), {"recipe": (1, 1, 128)}
    if case == "d_bf16":
        d = d.bfloat16()
    elif case == "sfb_blocks":
        sfb = torch.ones(1, 2)
    elif case == "c_dtype":
        kwargs["c"] = d.bfloat16()
    elif case == "c_shape":
        kwargs["c"] = torch.zeros(64, 64)
    elif case == "c_overlap":
        buf = torch.zeros(65, 128)
        d, kwargs["c"] = buf[:64], buf[1:]
    elif case == "c_overlap_strided":
        buf = torch.zeros(66, 131)
        d, kwargs["c"] = buf[:64, :128], buf[2:, 3:]
    elif case == "c_separate_strided_d":
        d, kwargs["c"] = torch.zeros(65, 131)[:64, :128], torch.zeros(64, 128)
    elif case == "c_disjoint_views":
        buf = torch.zeros(128, 131)
        d, kwargs["c"] = buf[:64, :128], buf[64:, :128]
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d, **kwargs)


def test_per_row_recipe_is_the_default_for_fp32_d() -> None:
    # recipe=None with an FP32 d means (1, 1, 128): a block-scaled sfb is then the wrong shape
    a, sfa, b, sfb, d = cpu_operands()
    with pytest.raises(ValueError, match=r"for recipe \(1, 1, 128\)"):
        deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d.float())


@pytest.mark.parametrize("name", ["fp8_gemm_nn", "fp8_gemm_tn", "fp8_gemm_tt"])
def test_other_layouts_raise_not_implemented(name: str) -> None:
    with pytest.raises(NotImplementedError, match="fp8_gemm_nt"):
        getattr(deep_gemm, name)(None, None, None)


def test_aliases() -> None:
    assert deep_gemm.fp8_fp4_gemm_nt is deep_gemm.fp8_gemm_nt


def test_heuristic_configs_fit() -> None:
    for m in (1, 64, 128, 129, 1000, 4096, 8192):
        for n, k in NK_PAIRS:
            cfg = deep_gemm._C.get_gemm_config(m, n, k)
            assert cfg["smem_bytes"] <= 232448
            assert cfg["block_n"] % 16 == 0 and cfg["block_m"] in (64, 128, 192, 256)
            assert cfg["block_m"] != 192 or (m >= 2048 and cfg["block_n"] <= 128 and cfg["num_math_warpgroups"] == 3)
            assert cfg["num_stages"] >= 2
            if m <= 64:
                assert cfg["block_m"] == 64
    # Non-power-of-two BLOCK_N fills the last wave: 4096 x 576 x 7168 takes 144-wide tiles (four column blocks)
    assert deep_gemm._C.get_gemm_config(4096, 576, 7168)["block_n"] == 144
    # Multicast only when asked, and only with two or more row blocks to pair
    assert deep_gemm._C.get_gemm_config(4096, 7168, 7168)["num_multicast"] == 1
    assert deep_gemm._C.get_gemm_config(1024, 7168, 7168, allow_multicast=True)["num_multicast"] == 2
    # (three math warpgroups, the large-M choice, pair too)
    cfg = deep_gemm._C.get_gemm_config(4096, 7168, 7168, allow_multicast=True)
    assert cfg["block_m"] == 192 and cfg["num_multicast"] == 2, cfg
    assert deep_gemm._C.get_gemm_config(128, 7168, 7168, allow_multicast=True)["num_multicast"] == 1


def test_heuristic_split_k() -> None:
    config = deep_gemm._C.get_gemm_config
    # Decode shapes with few tiles split K; their clusters store D directly, not through a TMA store
    for m, n, k in ((1, 2112, 7168), (64, 2112, 7168), (1, 576, 7168)):
        cfg = config(m, n, k)
        assert cfg["num_splits"] > 1 and not cfg["use_tma_store"], (m, n, k, cfg)
        assert cfg["num_splits"] <= ceil_div(k, 128) // 2
    # Enough tiles to fill the SMs: never
    for m, n, k in ((4096, 7168, 7168), (128, 129280, 7168), (1, 32768, 512)):
        assert config(m, n, k)["num_splits"] == 1
    # The calibration of the cost model on the H200 (split-K in clusters, timed there), with
    # the CTAs whole clusters of 1 .. 8 CTAs fill there (measured by cuOccupancyMaxActiveClusters)
    h200 = dict(cluster_ctas=H200_CLUSTER_CTAS)

    def choice(m: int, n: int, k: int, **kwargs) -> tuple[int, int, int]:
        cfg = config(m, n, k, **kwargs)
        return cfg["block_m"], cfg["block_n"], cfg["num_splits"]

    # (measured within 1 % of the best of six configs: 12.6 / 13.2 / 17.2 / 19.2 us)
    assert choice(1, 2112, 7168, **h200) == (64, 80, 4)
    assert choice(64, 2112, 7168, **h200) == (64, 80, 4)
    assert choice(64, 4096, 7168, **h200) == (64, 64, 2)
    assert choice(128, 4096, 7168, **h200) == (128, 64, 2)
    # 33 tiles x 4 splits fill 132 SMs but not the 120 CTAs that clusters of 4 fill there: a second wave
    assert choice(64, 2112, 7168) == (64, 64, 4)
    assert config(128, 7168, 16384, **h200)["num_splits"] == 1
    # (without stream-K) wide tiles left SMs idle there (52 us vs 42 us)
    assert config(64, 7168, 16384, stream_k=0, **h200)["block_n"] == 64
    # A cluster size the device cannot form is never chosen
    none_of_8 = H200_CLUSTER_CTAS[:7] + [0]
    assert (
        config(1, 576, 7168, **h200)["num_splits"] == 8
        and config(1, 576, 7168, cluster_ctas=none_of_8)["num_splits"] < 8
    )
    with pytest.raises(ValueError, match="cluster_ctas"):
        config(1, 576, 7168, cluster_ctas=[132, 132])
    # Split-K and multicast exclude each other
    assert config(256, 576, 7168, allow_multicast=True, num_splits=2)["num_multicast"] == 1


def test_heuristic_last_wave() -> None:
    # Memory-bound units run in waves: a last wave of few units takes a whole unit's time (few SMs cannot pull
    # the DRAM bandwidth), so tiles whose count leaves a nearly full last wave win (H200 config sweep:
    # 1 x 129280 x 7168 227.8 us with 144 columns, 239.8 with 160; 128 x 32768 x 512 12.6 vs 13.9)
    config = deep_gemm._C.get_gemm_config
    h200 = dict(cluster_ctas=H200_CLUSTER_CTAS)
    assert config(1, 129280, 7168, **h200)["block_n"] == 144
    assert config(128, 32768, 512, **h200)["block_n"] == 128
    assert config(128, 24576, 1536, **h200)["block_n"] == 96


def test_heuristic_forced_choices() -> None:
    config = deep_gemm._C.get_gemm_config
    cfg = config(64, 2112, 7168, block_n=64, num_splits=4)
    assert (cfg["block_m"], cfg["block_n"], cfg["num_splits"]) == (64, 64, 4)
    assert config(4096, 7168, 7168, block_m=256, block_n=64)["block_m"] == 256
    # Three math warpgroups (at most 128 columns: 152 registers per thread) for large M, where an H200 config sweep
    # measured them 9-20 % faster than two (8192^3: 789 vs 951 us), at 128 columns (112: 865 vs 745 us);
    # below M = 2048 only when forced
    for m, n, k in ((4096, 7168, 16384), (8192, 8192, 8192), (4096, 2112, 7168)):
        cfg = config(m, n, k)
        assert (cfg["block_m"], cfg["block_n"], cfg["num_math_warpgroups"]) == (192, 128, 3), (m, n, k, cfg)
    # ... except where 192-row tiles leave a short last wave and 128 x 128 ones with overlapped promotion (a row at
    # 0.94x the three-warpgroup rate on the H200) do not: 4096 x 4096 x 7168 in 7.8 waves instead of 5.3 (185.7 vs 197.0 us)
    # (without stream-K, which by default shares the 192-row tiles' last wave: test_heuristic_stream_k)
    cfg = config(4096, 4096, 7168, stream_k=0)
    assert (cfg["block_m"], cfg["block_n"], cfg["num_math_warpgroups"], cfg["overlap_promotion"]) == (128, 128, 2, True)
    # (without the overlapped promotion the two-warpgroup rate is not the measured one)
    assert config(4096, 4096, 7168, overlap=0, stream_k=0)["block_m"] == 192
    assert config(1024, 4096, 7168)["block_m"] == 128
    cfg = config(1024, 7168, 7168, block_m=192)
    assert (cfg["block_m"], cfg["num_math_warpgroups"]) == (192, 3) and cfg["block_n"] <= 128
    # 128 x 192 on two math warpgroups (192 accumulator registers, compiled without spills, never timed): only
    # when forced, never the heuristic's pick
    cfg = config(4096, 7168, 7168, block_m=128, block_n=192)
    assert (cfg["block_m"], cfg["block_n"], cfg["num_math_warpgroups"], cfg["overlap_promotion"]) == (
        128,
        192,
        2,
        False,
    )
    for m, n, k in DENSE_SHAPES:
        for per_row_sfb in (False, True):
            assert config(m, n, k, per_row_sfb=per_row_sfb)["block_n"] != 192, (m, n, k, per_row_sfb)
    # Tile pairs along N sharing A (DG_TUNE fp8_gemm:multicast_on_a=1): only when forced, then every plan without split-K
    cfg = config(128, 7168, 16384, multicast_on_a=True)
    assert (cfg["num_multicast"], cfg["is_multicast_on_a"], cfg["num_splits"]) == (2, True, 1)
    assert config(128, 2112, 7168, multicast_on_a=True)["num_splits"] == 1
    for m, n, k in DENSE_SHAPES:
        assert not config(m, n, k, allow_multicast=True)["is_multicast_on_a"], (m, n, k)
    with pytest.raises(ValueError, match="multicast_on_a=1"):
        config(64 * 20, 4096, 7168, gemm_type=3, grouped_alignment=4096, num_groups=20, multicast_on_a=True)
    with pytest.raises(ValueError, match="multicast_on_a=1"):
        config(128, 4096, 7168, bf16=True, mn_major_a=True, multicast_on_a=True)
    # A forced value no config can take is an error naming the forced keys
    with pytest.raises(ValueError, match="no FP8 GEMM config fits .* block_n=200"):
        config(64, 2112, 7168, block_n=200)
    with pytest.raises(ValueError, match="no FP8 GEMM config fits .* split_k=57"):
        config(64, 2112, 7168, num_splits=57)  # more splits than K blocks
    with pytest.raises(ValueError, match="no BF16 GEMM config fits .* block_m=192"):
        config(4096, 4096, 7168, bf16=True, block_m=192)  # (three math warpgroups: FP8 only)


def test_heuristic_stream_k() -> None:
    config = deep_gemm._C.get_gemm_config
    # Forced: taken by every candidate it fits (normal GEMMs, no split-K, no multicast, two K blocks per CTA)
    for mode in (1, 2):
        cfg = config(4096, 4096, 7168, stream_k=mode)
        assert (cfg["stream_k"], cfg["num_splits"], cfg["num_multicast"]) == (mode, 1, 1), cfg
    # By default where it measured faster on the H200 (FP8 block scales, M >= 2048, at least four whole waves of tiles,
    # at least 16 K blocks) ...
    h200 = dict(cluster_ctas=H200_CLUSTER_CTAS)
    for m, n, k in ((4096, 4096, 7168), (4096, 7168, 16384), (4096, 7168, 2048), (8192, 8192, 8192)):
        cfg = config(m, n, k, **h200)
        assert (cfg["block_m"], cfg["block_n"], cfg["stream_k"]) == (192, 128, 1), (m, n, k, cfg)
    # ... and not where it was slower (2.8 waves, one row block, BF16) or not measured (4 K blocks, per-row scales)
    for m, n, k, kind in (
        (4096, 2112, 7168, {}),
        (64, 7168, 16384, {}),
        (128, 7168, 16384, {}),
        (128, 129280, 7168, {}),
        (4096, 32768, 512, {}),
        (4096, 7168, 16384, dict(bf16=True)),
        (4096, 7168, 7168, dict(per_row_sfb=True)),
    ):
        assert config(m, n, k, **kind, **h200)["stream_k"] == 0, (m, n, k, kind)
    # Mode 2 needs more stream-K tiles than CTAs: 1 x 576 x 7168 has a few tiles, which split-K serves
    assert config(1, 576, 7168, stream_k=2)["stream_k"] == 0
    # Off, and never for grouped GEMMs
    for m, n, k in ((4096, 4096, 7168), (4096, 7168, 16384), (64, 7168, 16384)):
        assert config(m, n, k, stream_k=0)["stream_k"] == 0
        assert config(m, n, k, stream_k=1, gemm_type=1)["stream_k"] == 0
    # A split-K or multicast plan has none
    assert config(4096, 4096, 7168, stream_k=1, num_splits=2)["stream_k"] == 0
    with pytest.raises(ValueError, match="stream_k must be -1"):
        config(4096, 4096, 7168, stream_k=3)


def test_heuristic_overlap() -> None:
    config = deep_gemm._C.get_gemm_config

    def fits(cfg: dict) -> bool:
        slices = cfg["block_m"] // cfg["num_math_warpgroups"] // 64
        return cfg["num_math_warpgroups"] < 3 and slices * cfg["block_n"] * 3 // 2 <= 192

    # On wherever the second partial buffer fits the registers (accum + 2 partials: 3 x BLOCK_N / 2 per 64-row slice)
    for m in (1, 64, 128, 1000, 4096):
        for n, k in NK_PAIRS:
            cfg = config(m, n, k)
            assert cfg["overlap_promotion"] == fits(cfg), (m, n, k, cfg)
    assert config(64, 4096, 7168)["overlap_promotion"]
    # Not with three math warpgroups (128 registers; the other two warpgroups cover the promotion) nor BF16
    assert not config(4096, 7168, 7168)["overlap_promotion"]
    assert not config(128, 4096, 7168, bf16=True)["overlap_promotion"]
    # Forced off, forced on; forced on where it cannot be: an error naming the variable
    assert not config(64, 4096, 7168, overlap=0)["overlap_promotion"]
    assert config(64, 4096, 7168, overlap=1)["overlap_promotion"]
    for kwargs in ({"m": 4096, "n": 7168, "k": 7168}, {"m": 128, "n": 4096, "k": 7168, "bf16": True}):
        with pytest.raises(ValueError, match="forced overlap=1"):
            config(**kwargs, overlap=1)
    with pytest.raises(ValueError, match="overlap must be"):
        config(64, 4096, 7168, overlap=2)


# ----------------------------------------------------------------------------- GPU tier
def make_inputs(m: int, n: int, k: int):
    a_bf16 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b_bf16 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a, sfa = per_token_cast_to_fp8(a_bf16)
    b, sfb = per_block_cast_to_fp8(b_bf16)
    return a_bf16, b_bf16, a, sfa, b, sfb


def dequantized_reference(a, sfa, b, sfb) -> torch.Tensor:
    """float64 product of exactly the FP8 values and scales the kernel sees."""
    m, k = a.shape
    n = b.shape[0]
    sfa_full = sfa.double().repeat_interleave(128, dim=1)[:, :k]
    sfb_full = sfb.double().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[:n, :k]
    return (a.double() * sfa_full) @ (b.double() * sfb_full).t()


def check_result(d: torch.Tensor, ref64: torch.Tensor, ref_bf16: torch.Tensor, case: str) -> dict:
    assert d.shape == ref64.shape and d.dtype == torch.bfloat16
    assert torch.isfinite(d).all(), f"{case}: non-finite (unwritten?) outputs"
    diff64 = calc_diff(d, ref64)
    diff_bf16 = calc_diff(d, ref_bf16)
    err = (d.double() - ref64).abs()
    tol = 2.0**-7 * ref64.abs() + 2.0**-7 * ref64.pow(2).mean().sqrt()
    worst = (err - tol).argmax()
    assert (err <= tol).all(), (
        f"{case}: element {divmod(worst.item(), d.shape[1])} = {d.flatten()[worst].item()}, "
        f"reference {ref64.flatten()[worst].item()}"
    )
    assert diff64 < 5e-6, f"{case}: calc_diff vs float64 = {diff64}"
    assert diff_bf16 < 1e-3, f"{case}: calc_diff vs BF16 = {diff_bf16}"
    return {"diff64": diff64, "diff_bf16": diff_bf16}


def run_case(m: int, n: int, k: int, row_pad: int = 0, col_pad: int = 0, **kwargs) -> torch.Tensor:
    a_bf16, b_bf16, a, sfa, b, sfb = make_inputs(m, n, k)
    # D inside a larger poisoned buffer: the kernel must write exactly the [M, N] window
    buf = torch.full((m + row_pad, n + col_pad), float("nan"), device="cuda", dtype=torch.bfloat16)
    d = buf[:m, :n]
    deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d, **kwargs)
    ref64 = dequantized_reference(a, sfa, b, sfb)
    ref_bf16 = a_bf16.float() @ b_bf16.float().t()
    check_result(d, ref64, ref_bf16, f"m{m}-n{n}-k{k}")
    if row_pad or col_pad:
        untouched = torch.ones_like(buf, dtype=torch.bool)
        untouched[:m, :n] = False
        assert buf[untouched].isnan().all(), "padding of d was written"
    # Bitwise repeatable
    d2 = torch.empty_like(d)
    deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d2, **kwargs)
    assert torch.equal(d.view(torch.int16), d2.view(torch.int16)), "two runs differ"
    return d


@gpu
@pytest.mark.parametrize("nk", NK_PAIRS, ids=lambda p: f"n{p[0]}-k{p[1]}")
@pytest.mark.parametrize("m", MS, ids=lambda m: f"m{m}")
def test_fp8_gemm_deepseek_shapes(m: int, nk: tuple[int, int]) -> None:
    torch.manual_seed(m * 7919 + nk[0] + nk[1])
    run_case(m, *nk)


@gpu
@pytest.mark.parametrize("seed", range(12))
def test_fp8_gemm_random_odd_shapes(seed: int) -> None:
    rng = random.Random(seed)
    m = rng.choice([1, 3, 17, 65, 200, 333, 1025, 2049])
    n = rng.choice([8, 24, 100, 129, 255, 1000, 3001, 4104])
    k = rng.choice([16, 48, 112, 144, 1040, 4112, 7168 + 16])
    torch.manual_seed(seed)
    # Odd N gives D rows that are not 16-byte aligned: the direct-store epilogue
    run_case(m, n, k, row_pad=3, col_pad=rng.choice([0, 5, 8]))


# Shapes for forced configs: odd and even counts of 128-row blocks (a pair's phantom tile), N across
# scale-block boundaries, odd N (direct stores; the 1-wide reduction), K not a multiple of 128.
FORCED_SHAPES = [
    (4096, 7168, 2048),
    (300, 2112, 7168),
    (1000, 4104, 1040),
    (640, 3001, 528),
    (2049, 255, 4112),
    (1, 2112, 7168),
    (7, 1000, 7168 + 16),
    (64, 255, 4112),
]
# name: (DG_TUNE, what DG_PRINT_CONFIGS shows for a plan with M > 128, and for one with M <= 128)
FORCED_TUNES = {
    "multicast_off": ("fp8_gemm:multicast=0", "multicast=1 ", "multicast=1 "),
    # (multicast needs 2 row blocks and no split-K: a split plan shows multicast=1, checked below)
    "multicast_on": ("fp8_gemm:multicast=1", "multicast=2(B) ", "multicast=1 "),
    # (three math warpgroups in pairs; 300 and 1000 rows are an even and an odd count of 192-row blocks)
    "multicast_on_bm192": ("fp8_gemm:multicast=1,block_m=192", "multicast=2(B) ", "multicast=1 "),
    # (never the heuristic's pick: pairs along N, A's rows loaded in halves, one by each CTA; odd column-block
    # counts leave a phantom second tile)
    "multicast_on_a": ("fp8_gemm:multicast_on_a=1", "multicast=2(A) ", "multicast=2(A) "),
    "split_k3": ("fp8_gemm:split_k=3", "split_k=3 ", "split_k=3 "),
    "bm192": ("fp8_gemm:block_m=192", "BLOCK_M=192 ", "BLOCK_M=192 "),
    # (forced only: 96 + 96 accumulators per thread; tiles at column 64 of a scale block, the boundary at 64)
    "bm128_bn192": ("fp8_gemm:block_m=128,block_n=192", "BLOCK_M=128 BLOCK_N=192 ", "BLOCK_M=128 BLOCK_N=192 "),
    # (the default where it fits; here the promotion after each block's wgmmas everywhere)
    "overlap_off": ("fp8_gemm:overlap=0", "overlap=false ", "overlap=false "),
    "split_k2_bm128_bn48": (
        "fp8_gemm:split_k=2,block_m=128,block_n=48",
        "BLOCK_M=128 BLOCK_N=48 split_k=2 ",
        "BLOCK_M=128 BLOCK_N=48 split_k=2 ",
    ),
    # Stream-K wherever it fits (no split-K, no multicast; every CTA a share of at least two K blocks: 640 x 3001 x
    # 528's 28 tiles of the last wave hold 140 K blocks for 132 CTAs, 64 x 255 x 4112 has a few tiles); mode 2
    # needs more stream-K tiles than CTAs (both checked below: some plan shows the mode)
    "stream_k1": ("fp8_gemm:stream_k=1,split_k=1,multicast=0", "split_k=1 ", "split_k=1 "),
    "stream_k2_bm192": ("fp8_gemm:stream_k=2,block_m=192,multicast=0", "BLOCK_M=192 ", "BLOCK_M=192 "),
}


def run_in_subprocess(script: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=os.path.dirname(__file__),
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=600,
    )


@gpu
@pytest.mark.parametrize("name", FORCED_TUNES)
def test_fp8_gemm_forced_configs(name: str) -> None:
    # DG_TUNE is read when a shape's plan is made (once per shape and process): a new process each
    tune, expected_large_m, expected_small_m = FORCED_TUNES[name]
    shapes = ", ".join(f"({m}, {n}, {k})" for m, n, k in FORCED_SHAPES)
    script = (
        "import torch, test_fp8_gemm as t\n"
        f"for i, (m, n, k) in enumerate([{shapes}]):\n"
        "    torch.manual_seed(i)\n"
        "    t.run_case(m, n, k, row_pad=2, col_pad=8)\n"
        "    t.run_case(m, n, k, row_pad=1, col_pad=3)\n"
    )
    out = run_in_subprocess(script, {"DG_TUNE": tune, "DG_PRINT_CONFIGS": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    # The printed configs show which variant ran: one line per plan (shape and output layout)
    plans = [line for line in out.stderr.splitlines() if line.startswith("[deep_gemm] sm90_gemm m=")]
    assert len(plans) >= 2 * len(FORCED_SHAPES), out.stderr
    for line in plans:
        m = int(line.split("m=")[1].split()[0])
        if name.startswith("multicast_on") and "split_k=1 " not in line:
            # (split-K excludes multicast)
            assert "multicast=1 " in line, line
        else:
            assert (expected_large_m if m > 128 else expected_small_m) in line, line
    assert any(expected_large_m in line for line in plans), out.stderr
    if name.startswith("stream_k"):
        mode = name[len("stream_k")]
        # (stream_k1: 6 of the 8 shapes; stream_k2_bm192: 4096 x 7168 x 2048 and 1000 x 4104 x 1040, each twice)
        assert sum(f"stream_k={mode} " in line for line in plans) >= (12 if mode == "1" else 4), out.stderr


def capture_gemm_graph(a, sfa, b, sfb, d) -> torch.cuda.CUDAGraph:
    """fp8_gemm_nt((a, sfa), (b, sfb), d) once (warm-up: the kernel's compile), then captured in a CUDA graph."""
    deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
    return graph


def stream_k_graph_and_per_row_checks() -> None:
    """(Run in a process with stream-K forced.) A CUDA graph of a stream-K GEMM replayed twice on new inputs (the
    flags are cleared by a memset node in the graph), and the per-row recipe's FP32 D with a C, in place and not."""
    torch.manual_seed(5)
    m, n, k = 1000, 2112, 7168
    _, _, a, sfa, b, sfb = make_inputs(m, n, k)
    sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    graph = capture_gemm_graph(a, sfa, b, sfb, d)
    for _ in range(2):
        a2_bf16, b2_bf16, a2, sfa2, b2, sfb2 = make_inputs(m, n, k)
        a.copy_(a2), sfa.copy_(deep_gemm.get_mn_major_tma_aligned_tensor(sfa2)), b.copy_(b2), sfb.copy_(sfb2)
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref_bf16 = a2_bf16.float() @ b2_bf16.float().t()
        check_result(d, dequantized_reference(a2, sfa2, b2, sfb2), ref_bf16, "stream-k graph replay")
    for m, n, k in ((1000, 2112, 7168), (4096, 1000, 2048)):
        a_bf16 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b_bf16 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        (a, sfa), (b, sfb) = per_token_cast_to_fp8(a_bf16), per_token_cast_to_fp8(b_bf16)
        c = torch.randn(m, n, device="cuda")
        ref = per_row_reference(a, sfa, b, sfb, c)
        d = torch.full((m, n), float("nan"), device="cuda")
        deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c=c)
        assert calc_diff(d, ref) < 1e-7, (m, n, k)
        d2 = c.clone()
        deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d2, c=d2)
        assert torch.equal(d, d2), "in-place C differs from a separate C"


@gpu
@pytest.mark.parametrize("mode", ["1", "2"])
def test_fp8_gemm_stream_k_graph_and_per_row(mode: str) -> None:
    tune = f"fp8_gemm:stream_k={mode},split_k=1,multicast=0"
    if mode == "2":
        tune += ",block_m=64"  # (enough tiles for two stream-K waves)
    env = {"DG_TUNE": tune, "DG_PRINT_CONFIGS": "1"}
    out = run_in_subprocess("import test_fp8_gemm as t\nt.stream_k_graph_and_per_row_checks()\n", env)
    assert out.returncode == 0, out.stdout + out.stderr
    plans = [line for line in out.stderr.splitlines() if line.startswith("[deep_gemm] sm90_gemm m=")]
    assert plans and all(f"stream_k={mode} " in line for line in plans), out.stderr


@gpu
def test_fp8_gemm_bad_forced_config_raises() -> None:
    script = (
        "import torch, test_fp8_gemm as t\n"
        "try:\n"
        "    t.run_case(64, 256, 512)\n"
        "except ValueError as e:\n"
        "    print('ValueError:', e)\n"
    )
    out = run_in_subprocess(script, {"DG_TUNE": "fp8_gemm:split_k=two"})
    assert "ValueError: DG_TUNE: fp8_gemm:split_k=two must be an integer in [1, 8]" in out.stdout, (
        out.stdout + out.stderr
    )
    # (512 of K: 4 K blocks, fewer than the forced splits)
    out = run_in_subprocess(script, {"DG_TUNE": "fp8_gemm:split_k=8"})
    assert "ValueError: no FP8 GEMM config fits" in out.stdout, out.stdout + out.stderr
    # Another family's section does not apply to the FP8 GEMMs: the same plans as with nothing forced
    script = script.replace("print('ValueError:', e)", "raise")

    def plans(tune: str) -> list[str]:
        out = run_in_subprocess(script, {"DG_TUNE": tune, "DG_PRINT_CONFIGS": "1"})
        assert out.returncode == 0, out.stdout + out.stderr
        return [line for line in out.stderr.splitlines() if line.startswith("[deep_gemm] sm90_gemm m=")]

    default = plans("")
    assert default and plans("bf16_gemm:split_k=8,block_n=48,multicast_on_a=1;mqa_logits:kv_split=64") == default


def per_row_reference(a, sfa, b, sfb, c=None) -> torch.Tensor:
    """float64 C + (A * sfa) @ (B * sfb).T with per-row, per-128-of-K scales on both operands."""
    k = a.shape[1]
    ref = (a.double() * sfa.double().repeat_interleave(128, dim=1)[:, :k]) @ (
        b.double() * sfb.double().repeat_interleave(128, dim=1)[:, :k]
    ).t()
    return ref if c is None else ref + c.double()


PER_ROW_SHAPES = [(4096, 7168, 2048), (129, 4096, 7168), (1000, 1000, 1040), (1, 2112, 7168), (300, 257, 528)]


@gpu
@pytest.mark.parametrize("accumulate", ["none", "separate_c", "in_place"])
def test_fp8_gemm_per_row_recipe(accumulate: str) -> None:
    for i, (m, n, k) in enumerate(PER_ROW_SHAPES):
        torch.manual_seed(i)
        a_bf16 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b_bf16 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        (a, sfa), (b, sfb) = per_token_cast_to_fp8(a_bf16), per_token_cast_to_fp8(b_bf16)
        buf = torch.full((m + 1, n + 3), float("nan"), device="cuda")
        d = buf[:m, :n]
        c = None if accumulate == "none" else torch.randn(m, n, device="cuda")
        ref = per_row_reference(a, sfa, b, sfb, c)
        if accumulate == "in_place":
            d.copy_(c)
            c = d
        deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c=c)
        assert torch.isfinite(d).all(), (m, n, k)
        # FP32 output: what is left is the tensor cores' reduced-precision accumulation inside each 128-deep K
        # block (about 14 mantissa bits), so calc_diff ~1e-9; any indexing or scaling error gives > 1e-3
        diff = calc_diff(d, ref)
        assert diff < 1e-7, (m, n, k, diff)
        err = (d.double() - ref).abs().max().item()
        assert err <= 1e-3 * ref.abs().max().item(), (m, n, k, err)
        untouched = torch.ones_like(buf, dtype=torch.bool)
        untouched[:m, :n] = False
        assert buf[untouched].isnan().all(), "padding of d was written"
        if accumulate == "none":
            d2 = torch.empty_like(d)
            deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d2)
            assert torch.equal(d, d2), "two runs differ"


@gpu
@pytest.mark.parametrize("compiled_dims", ["nk", "mnk", "k", ""], ids=lambda c: c or "none")
def test_fp8_gemm_compiled_dims(compiled_dims: str) -> None:
    torch.manual_seed(1)
    run_case(257, 1536, 1024, compiled_dims=compiled_dims)


@gpu
def test_fp8_gemm_padded_d_tma_and_direct() -> None:
    torch.manual_seed(2)
    run_case(300, 2112, 7168, row_pad=5, col_pad=8)  # row stride 4240 B: TMA store
    run_case(300, 2112, 7168, row_pad=5, col_pad=3)  # row stride 4230 B: direct stores


@gpu
def test_fp8_gemm_sfa_layouts_agree() -> None:
    torch.manual_seed(3)
    m, n, k = 1000, 4096, 7168
    _, _, a, sfa, b, sfb = make_inputs(m, n, k)
    d1 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    d2 = torch.empty_like(d1)
    deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d1)
    deep_gemm.fp8_gemm_nt((a, deep_gemm.get_mn_major_tma_aligned_tensor(sfa)), (b, sfb), d2)
    assert torch.equal(d1, d2)


@gpu
def test_fp8_gemm_empty_dims() -> None:
    _, _, a, sfa, b, sfb = make_inputs(0, 256, 512)
    d = torch.empty(0, 256, device="cuda", dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
    _, _, a, sfa, b, sfb = make_inputs(64, 0, 512)
    deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), torch.empty(64, 0, device="cuda", dtype=torch.bfloat16))
    a = torch.empty(64, 0, device="cuda", dtype=torch.float8_e4m3fn)
    b = torch.empty(32, 0, device="cuda", dtype=torch.float8_e4m3fn)
    d = torch.full((64, 32), float("nan"), device="cuda", dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt((a, torch.empty(64, 0, device="cuda")), (b, torch.empty(1, 0, device="cuda")), d)
    assert (d == 0).all()


@gpu
def test_fp8_gemm_cuda_graph_replay() -> None:
    torch.manual_seed(4)
    m, n, k = 128, 7168, 2048
    _, _, a, sfa, b, sfb = make_inputs(m, n, k)
    sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    graph = capture_gemm_graph(a, sfa, b, sfb, d)
    _, _, a2, sfa2, b2, sfb2 = make_inputs(m, n, k)
    a.copy_(a2), sfa.copy_(sfa2), b.copy_(b2), sfb.copy_(sfb2)
    d.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    expected = torch.empty_like(d)
    deep_gemm.fp8_gemm_nt((a2, sfa2), (b2, sfb2), expected)
    assert torch.equal(d, expected)


@gpu
def test_first_compile_inside_graph_capture_raises() -> None:
    m, n, k = 64, 1360, 2064  # a shape no other test compiles
    _, _, a, sfa, b, sfb = make_inputs(m, n, k)
    sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="capturing a CUDA graph.*warm-up"):
        with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
            deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
    torch.cuda.synchronize()
    deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)  # outside capture it compiles and runs


@gpu
def test_fp8_gemm_bad_device_inputs() -> None:
    _, _, a, sfa, b, sfb = make_inputs(64, 256, 512)
    d = torch.empty(64, 256, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"b\[1\] \(sfb\) must be on a CUDA device"):
        deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb.cpu()), d)
    with pytest.raises(ValueError, match=r"a\[0\] \(A\): data pointer must be 16-byte aligned"):
        deep_gemm.fp8_gemm_nt((a.view(-1)[8 : 8 + 64 * 512 - 512].view(63, 512), sfa[:63]), (b, sfb), d[:63])
