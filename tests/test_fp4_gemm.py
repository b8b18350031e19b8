"""fp8_fp4_gemm_nt with a packed FP4 B on SM90: the kernel mode compiles cleanly, bad inputs raise naming the argument;
on a GPU, results against float64.

Oracle: the float64 product of exactly the quantized operands: A e4m3 times its 1x128 FP32 scales, B's e2m1 values
times their 1x32 UE8M0 scales, with B's scales folded per 128-wide K block as the kernel folds them (each value
rounded to e4m3(v * 2^(e - e_max)), then times 2^e_max: the identity wherever a block's exponents span at most 8
binades, which every random-normal case here satisfies; the exponent test crosses the limit on purpose). A given with
1x32 scales (e4m3, or packed e2m1: FP4 x FP4) is folded the same way before the GEMM (scale_fold_reference.py), which
for e4m3 rounds values below 2^-6 of their block's scale; the outlier test makes such blocks on purpose.
Bounds as tests/test_fp8_gemm.py: calc_diff < 5e-6, every element within 2^-7 |ref| + 2^-7 rms(ref); D poisoned
around and inside, the padding untouched; two runs bitwise equal."""

import os
import random
import subprocess
import sys

import pytest
import torch
from jit_helpers import compile_params, dump_sass
from padding_rows import check_padding_rows, zeroed_padding_rows
from scale_fold_reference import fold_1x32

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.utils import cast_back_from_fp4, ceil_div, per_token_cast_to_fp4, per_token_cast_to_fp8
from deep_gemm.utils.casts import pack_scales_along_k

gpu = pytest.mark.gpu


# ----------------------------------------------------------------------------- compile (CPU tier)
# One large-M tile with overlapped promotion, one decode tile with split-K, one masked (m-grouped) tile
COMPILE_CONFIGS = [
    dict(fp4_b=1, shape_n=7168, shape_k=7168, block_m=128, block_n=128, num_stages=4, overlap_promotion=1),
    dict(fp4_b=1, shape_n=2112, shape_k=7168, block_m=64, block_n=64, num_stages=8, num_splits=2),
    dict(fp4_b=1, shape_n=2112, shape_k=2048, block_m=64, block_n=128, num_stages=6, gemm_type=3),
]


@pytest.mark.nvcc
@pytest.mark.parametrize("cfg", COMPILE_CONFIGS, ids=["b128x128-overlap", "b64x64-split2", "masked-b64x128"])
def test_fp4_mode_compiles_without_spills(cfg: dict, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "cache"))
    result = deep_gemm.compile_kernel("sm90_gemm", cfg)
    assert result["registers"] > 0, result["ptxas_report"]
    assert result["stack_frame_bytes"] == 0, result["ptxas_report"]
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]
    sass = dump_sass(result["cubin_path"])
    # FP8 wgmma on the converted tile; the converter's byte permutes
    assert "QGMMA" in sass, "no FP8 wgmma in the SASS"
    assert "PRMT" in sass, "no byte permute (the e2m1 -> e4m3 table lookup) in the SASS"


@pytest.mark.parametrize(
    "mnk",
    [(1, 7168, 2048), (64, 2112, 7168), (4096, 7168, 7168), (4096, 24576, 1536)],
    ids=lambda x: "m{}-n{}-k{}".format(*x),
)
def test_heuristic_picks_fit(mnk: tuple[int, int, int]) -> None:
    # B is never multicast (its packed tile has its own barrier); the shared memory counts the packed tiles
    m, n, k = mnk
    cfg = deep_gemm._C.get_gemm_config(m, n, k, fp4_b=True)
    assert cfg["num_multicast"] == 1 or cfg["is_multicast_on_a"], cfg
    assert cfg["smem_bytes"] <= 232448, cfg
    per_stage = (cfg["block_m"] + cfg["block_n"]) * 128 + cfg["block_n"] * 64
    assert cfg["smem_bytes"] >= cfg["num_stages"] * per_stage, cfg
    with pytest.raises(ValueError, match="fp4_b .* excludes"):
        deep_gemm._C.get_gemm_config(m, n, k, fp4_b=True, per_row_sfb=True)


@pytest.mark.nvrtc
def test_fp4_mode_compiles_with_nvrtc(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "cache"))
    result = deep_gemm.compile_kernel("sm90_gemm", COMPILE_CONFIGS[1], use_nvrtc=True)
    assert result["compiler"] == "nvrtc"
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]


@pytest.mark.nvcc
def test_decode_pick_compiles_without_spills(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "cache"))
    cfg = deep_gemm._C.get_gemm_config(1, 7168, 2048, fp4_b=True)
    result = deep_gemm.compile_kernel("sm90_gemm", compile_params(cfg, 7168, 2048, fp4_b=1))
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]


# ----------------------------------------------------------------------------- the conversion's arithmetic (CPU)
def e4m3_magnitude_pool(shift: int) -> list[int]:
    """The kernel's table (e2m1_magnitude_pool): e4m3 bytes of e2m1 magnitudes 0..7 times 2^-shift."""
    if shift <= 5:
        lo = 0x3C383000 - shift * 0x08080800
        hi = 0x4C484440 - shift * 0x08080808
        return [(lo >> (8 * i)) & 0xFF for i in range(4)] + [(hi >> (8 * i)) & 0xFF for i in range(4)]
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]) * 2.0**-shift
    return grid.to(torch.float8_e4m3fn).view(torch.uint8).tolist()


def test_magnitude_pool_is_the_rounded_e4m3_of_each_code() -> None:
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
    for shift in range(0, 20):
        pool = torch.tensor(e4m3_magnitude_pool(shift), dtype=torch.uint8).view(torch.float8_e4m3fn).double()
        expected = (grid * 2.0**-shift).float().to(torch.float8_e4m3fn).double()
        assert torch.equal(pool, expected), shift
        if shift <= 8:  # the fold is exact up to 8 binades
            assert torch.equal(pool, grid * 2.0**-shift), shift


def prmt(a: int, b: int, selectors: int) -> int:
    """PTX prmt.b32 (default mode): byte i of the result is byte selectors[i] & 7 of {b, a}, or with selector bit 3
    that byte's top bit replicated."""
    pool = a | (b << 32)
    out = 0
    for i in range(4):
        selector = (selectors >> (4 * i)) & 0xF
        byte = (pool >> (8 * (selector & 0x7))) & 0xFF
        out |= ((0xFF if byte & 0x80 else 0) if selector & 0x8 else byte) << (8 * i)
    return out


def convert_word(x: int, pool: list[int]) -> tuple[int, int]:
    """e2m1x8_to_e4m3x8 (common/fp4_conversion.cuh) step by step: eight e2m1 nibbles -> eight e4m3 bytes (values 0..3, 4..7)."""
    lo_pool = sum(byte << (8 * i) for i, byte in enumerate(pool[:4]))
    hi_pool = sum(byte << (8 * i) for i, byte in enumerate(pool[4:]))
    magnitudes, shifted = x & 0x77777777, (x << 4) & 0xFFFFFFFF
    lo = prmt(lo_pool, hi_pool, magnitudes & 0xFFFF) | (prmt(shifted, x, 0xD9C8) & 0x80808080)
    hi = prmt(lo_pool, hi_pool, magnitudes >> 16) | (prmt(shifted, x, 0xFBEA) & 0x80808080)
    return lo, hi


def test_convert_word_decodes_every_byte_at_every_shift() -> None:
    # The conversion's bit arithmetic against cast_back_from_fp4's decoding: every byte value in every position
    values = torch.arange(256, dtype=torch.int64)
    words = (values | ((values + 37) % 256) << 8 | ((values + 101) % 256) << 16 | ((values + 199) % 256) << 24).tolist()
    packed = torch.tensor(words, dtype=torch.int64).view(-1, 1)
    packed = torch.cat([(packed >> (8 * i)) & 0xFF for i in range(4)], dim=1).to(torch.uint8).view(torch.int8)
    for shift in (0, 3, 5, 7, 8, 11):
        expected = cast_back_from_fp4(packed, torch.full((256, 1), 2.0**-shift), gran_k=8).double()
        expected = expected.float().to(torch.float8_e4m3fn).double()
        got = []
        for x in words:
            lo, hi = convert_word(x, e4m3_magnitude_pool(shift))
            got.append(list((lo | (hi << 32)).to_bytes(8, "little")))
        got = torch.tensor(got, dtype=torch.uint8).view(torch.float8_e4m3fn).double()
        assert torch.equal(got, expected), shift


# ----------------------------------------------------------------------------- validation (CPU tier)
def cpu_operands(m: int = 64, n: int = 128, k: int = 256):
    a = torch.zeros(m, k, dtype=torch.float8_e4m3fn)
    sfa = torch.ones(m, ceil_div(k, 128))
    b = torch.zeros(n, k // 2, dtype=torch.int8)
    sfb = torch.ones(n, ceil_div(k, 32))
    d = torch.empty(m, n, dtype=torch.bfloat16)
    return a, sfa, b, sfb, d


@pytest.mark.parametrize(
    ("case", "pattern"),
    [
        ("a_dtype", r"a\[0\] \(A\) must be float8_e4m3fn or packed FP4"),
        ("b_dtype", r"b\[0\] \(B\) must have dtype torch.float8_e4m3fn"),
        ("b_rank", r"b\[0\] \(B, packed FP4\) must be 2-D"),
        ("b_k", r"b\[0\] \(B, packed FP4\) must be \[N, K / 2\] with K / 2 = 128"),
        ("k_not_32", r"K \(a\[0\]'s columns\) must be a multiple of 32"),
        ("b_not_k_major", r"b\[0\] \(B, packed FP4\) must be contiguous in its last dimension"),
        ("d_dtype", r"d \(FP8 x FP4 writes BF16\) must have dtype torch.bfloat16"),
        ("d_shape", r"d must be \[M, N\] = \[64, 128\]"),
        ("with_c", r"c must be None with a packed FP4 B"),
        ("recipe", r"recipe must be None or \(1, 1, 32\) with a packed FP4 B"),
        ("recipe_and_recipe_a", r"recipe and recipe_a / recipe_b must not be given together"),
        ("recipe_a", r"recipe_a must be \(1, 128\) or \(1, 32\) with a packed FP4 B"),
        ("fp4_a_1x128", r"a packed FP4 A takes 1x32 scales"),
        ("fp4_a_odd_stride", r"a\[0\] \(A, packed FP4\) must be row-major with an even row stride"),
        ("recipe_b", r"recipe_b must be \(1, 32\) for a packed FP4 B"),
        ("sfa_shape", r"a\[1\] \(sfa\) as FP32 must be \[M, ceil\(K/32\)\] = \[64, 8\] for 1x32 scales \(1x128: "),
        ("sfa_recipe_shape", r"a\[1\] \(sfa\) as FP32 must be \[M, ceil\(K/32\)\] = \[64, 8\] for 1x32 scales, got"),
        ("sfa_packed_shape", r"a\[1\] \(sfa\) as packed UE8M0 int32 must be \[M, ceil\(K/128\)\] = \[64, 2\]"),
        ("sfa_dtype", r"a\[1\] \(sfa\) must be FP32 or packed UE8M0 int32"),
        ("sfb_fp32_shape", r"b\[1\] \(sfb\) as FP32 must be \[N, ceil\(K/32\)\] = \[128, 8\]"),
        ("sfb_packed_shape", r"b\[1\] \(sfb\) as packed UE8M0 int32 must be \[N, ceil\(K/128\)\] = \[128, 2\]"),
        ("sfb_dtype", r"b\[1\] \(sfb\) must be FP32 \[N, ceil\(K/32\)\] or packed UE8M0 int32"),
        ("on_cpu", r"a\[0\] \(A\) must be on a CUDA device"),
    ],
)
@pytest.mark.parametrize("fn", ["fp8_fp4_gemm_nt", "fp8_gemm_nt"])
def test_bad_inputs_raise(fn: str, case: str, pattern: str) -> None:
    a, sfa, b, sfb, d = cpu_operands()
    kwargs = {}
    if case == "a_dtype":
        a = a.to(torch.bfloat16)
    elif case == "b_dtype":
        b = b.to(torch.int16)
    elif case == "b_rank":
        b = b[None]
    elif case == "b_k":
        b = torch.zeros(128, 64, dtype=torch.uint8)
    elif case == "k_not_32":
        a, sfa = torch.zeros(64, 272, dtype=torch.float8_e4m3fn), torch.ones(64, 3)
        b, sfb = torch.zeros(128, 136, dtype=torch.int8), torch.ones(128, 9)
    elif case == "b_not_k_major":
        b = torch.zeros(128, 128, dtype=torch.int8).t()
    elif case == "d_dtype":
        d = d.float()
    elif case == "d_shape":
        d = d[:, :64]
    elif case == "with_c":
        kwargs["c"] = d.clone()
    elif case == "recipe":
        kwargs["recipe"] = (1, 1, 128)
    elif case == "recipe_and_recipe_a":
        kwargs.update(recipe=(1, 1, 32), recipe_a=(1, 32), recipe_b=(1, 32))
    elif case == "recipe_a":
        kwargs.update(recipe_a=(1, 64), recipe_b=(1, 32))
    elif case == "fp4_a_1x128":
        a = torch.zeros(64, 128, dtype=torch.int8)
        kwargs.update(recipe_a=(1, 128), recipe_b=(1, 32))
    elif case == "fp4_a_odd_stride":
        a = torch.zeros(64, 131, dtype=torch.uint8)[:, :128]
    elif case == "recipe_b":
        kwargs.update(recipe_a=(1, 128), recipe_b=(1, 128))
    elif case == "sfa_shape":
        sfa = torch.ones(64, 3)
    elif case == "sfa_recipe_shape":
        kwargs["recipe"] = (1, 1, 32)
    elif case == "sfa_packed_shape":
        sfa = torch.ones(64, 3, dtype=torch.int32)
    elif case == "sfa_dtype":
        sfa = sfa.double()
    elif case == "sfb_fp32_shape":
        sfb = torch.ones(128, 2)
    elif case == "sfb_packed_shape":
        sfb = torch.ones(128, 8, dtype=torch.int32)
    elif case == "sfb_dtype":
        sfb = sfb.double()
    with pytest.raises(ValueError, match=pattern):
        getattr(deep_gemm, fn)((a, sfa), (b, sfb), d, **kwargs)


def test_valid_recipes_reach_the_device_check() -> None:
    a, sfa, b, sfb, d = cpu_operands()
    packed = torch.zeros(128, 2, dtype=torch.int32)
    packed_sfa = torch.zeros(64, 1, dtype=torch.int32)
    sfa_1x32, packed_sfa_1x32 = torch.ones(64, 8), torch.zeros(64, 2, dtype=torch.int32)
    a_fp4 = torch.zeros(64, 128, dtype=torch.int8)
    for a_op, a_sf, scales, kwargs in (
        (a, sfa, sfb, {}),
        (a, sfa, sfb, dict(recipe_a=(1, 128), recipe_b=(1, 32))),
        (a, sfa, packed, {}),
        (a, packed_sfa, packed, {}),
        # A with 1x32 scales (folded to 1x128 before the GEMM): FP32, packed, by shape or by recipe
        (a, sfa_1x32, sfb, {}),
        (a, packed_sfa_1x32, packed, {}),
        (a, sfa_1x32, sfb, dict(recipe=(1, 1, 32))),
        (a, packed_sfa_1x32, sfb, dict(recipe_a=(1, 32), recipe_b=(1, 32))),
        # FP4 x FP4
        (a_fp4, sfa_1x32, sfb, {}),
        (a_fp4.view(torch.uint8), packed_sfa_1x32, packed, dict(recipe=(1, 1, 32))),
    ):
        with pytest.raises(ValueError, match=r"must be on a CUDA device"):
            deep_gemm.fp8_fp4_gemm_nt((a_op, a_sf), (b.view(torch.uint8), scales), d, **kwargs)


# ----------------------------------------------------------------------------- GPU tier
def folded_fp4_values(b: torch.Tensor, sfb: torch.Tensor, k: int) -> torch.Tensor:
    """B [N, K] float64 as the kernel multiplies it: per 128-K block, e4m3(v * 2^(e - e_max)) * 2^e_max."""
    return fold_1x32(cast_back_from_fp4(b, torch.ones_like(sfb), gran_k=32), sfb, k)


def make_inputs(m: int, n: int, k: int):
    a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
    b, sfb = per_token_cast_to_fp4(torch.randn(n, k, device="cuda"), use_ue8m0=True, gran_k=32)
    return a, sfa, b, sfb


def reference(a, sfa, b, sfb) -> torch.Tensor:
    m, k = a.shape
    sfa_full = sfa.double().repeat_interleave(128, dim=1)[:, :k]
    return (a.double() * sfa_full) @ folded_fp4_values(b, sfb, k).t()


def check_result(d: torch.Tensor, ref64: torch.Tensor, case: str) -> None:
    assert d.shape == ref64.shape and d.dtype == torch.bfloat16
    assert torch.isfinite(d).all(), f"{case}: non-finite (unwritten?) outputs"
    err = (d.double() - ref64).abs()
    tol = 2.0**-7 * ref64.abs() + 2.0**-7 * ref64.pow(2).mean().sqrt()
    worst = (err - tol).argmax()
    assert (err <= tol).all(), (
        f"{case}: element {divmod(worst.item(), d.shape[1])} = {d.flatten()[worst].item()}, "
        f"reference {ref64.flatten()[worst].item()}"
    )
    diff = calc_diff(d, ref64)
    assert diff < 5e-6, f"{case}: calc_diff vs float64 = {diff}"


def run_case(m: int, n: int, k: int, row_pad: int = 3, col_pad: int = 8, packed_sf: bool = False) -> None:
    case = f"m{m}-n{n}-k{k}{'-packed' if packed_sf else ''}"
    a, sfa, b, sfb = make_inputs(m, n, k)
    # D a window of a larger NaN-poisoned buffer: exactly [M, N] must be written
    buffer = torch.full((m + row_pad, n + col_pad), float("nan"), device="cuda", dtype=torch.bfloat16)
    d = buffer[:m, :n]
    b_sf = pack_scales_along_k(sfb) if packed_sf else sfb
    deep_gemm.fp8_fp4_gemm_nt((a, sfa), (b, b_sf), d)
    check_result(d, reference(a, sfa, b, sfb), case)
    assert torch.isnan(buffer[m:]).all() and torch.isnan(buffer[:, n:]).all(), f"{case}: padding written"
    again = torch.empty_like(d)
    deep_gemm.fp8_fp4_gemm_nt((a, sfa), (b, b_sf), again)
    assert torch.equal(again, d), f"{case}: two runs differ"


@gpu
@pytest.mark.parametrize("m", [1, 7, 64, 129, 1000, 4096])
@pytest.mark.parametrize("nk", [(2112, 7168), (576, 7168), (7168, 2048), (4096, 512)], ids=lambda x: f"n{x[0]}-k{x[1]}")
def test_fp8_fp4_gemm_shapes(m: int, nk: tuple[int, int]) -> None:
    run_case(m, *nk)


@gpu
@pytest.mark.parametrize("seed", range(6))
def test_fp8_fp4_gemm_random_odd_shapes(seed: int) -> None:
    # Unaligned M and N, K tails of 32, packed UE8M0 scales half the time
    rng = random.Random(seed)
    m = rng.choice([1, 3, rng.randint(1, 300), rng.randint(300, 3000)])
    n = rng.choice([rng.randint(1, 200) * 8 + rng.randint(1, 7), rng.randint(16, 3000)])
    k = 32 * rng.randint(1, 100)
    run_case(m, n, k, packed_sf=seed % 2 == 1)


@gpu
def test_fp8_fp4_gemm_every_code_and_exponent_span() -> None:
    # Every e2m1 code in every group, and blocks whose four exponents span 0 .. 15 binades (past the exact fold at 8)
    m, n, k = 64, 256, 1024
    torch.manual_seed(0)
    a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
    codes = torch.arange(256, dtype=torch.int32, device="cuda").repeat(n * k // 2 // 256).view(n, k // 2)
    codes = codes[torch.randperm(n, device="cuda")]
    b = codes.to(torch.uint8).view(torch.int8)
    spans = torch.arange(n * k // 128, device="cuda").view(n, k // 128, 1) % 16
    group = torch.tensor([0, 1, 2, 3], device="cuda").view(1, 1, 4)
    exps = 100 - (spans * group / 3).round().to(torch.int64) + torch.randint(-3, 4, (n, 1, 1), device="cuda")
    sfb = torch.exp2(exps.double() - 127).float().view(n, k // 32)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    deep_gemm.fp8_fp4_gemm_nt((a, sfa), (b, sfb), d)
    check_result(d, reference(a, sfa, b, sfb), "every code and span")


@gpu
def test_packed_ue8m0_sfa_matches_fp32() -> None:
    # A's UE8M0 scales packed four to an int32 give bitwise the result of the same scales as FP32
    m, n, k = 129, 576, 7168 + 256
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    a, sfa = per_token_cast_to_fp8(x, use_ue8m0=True)
    a_packed, sfa_packed = per_token_cast_to_fp8(x, use_ue8m0=True, use_packed_ue8m0=True)
    assert torch.equal(a.view(torch.uint8), a_packed.view(torch.uint8))
    _, _, b, sfb = make_inputs(1, n, k)
    d, d_packed = (torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(2))
    deep_gemm.fp8_fp4_gemm_nt((a, sfa), (b, sfb), d)
    deep_gemm.fp8_fp4_gemm_nt((a_packed, sfa_packed), (b, sfb), d_packed)
    check_result(d, reference(a, sfa, b, sfb), "ue8m0 sfa")
    assert torch.equal(d, d_packed), "packed UE8M0 sfa differs from its FP32 form"


@gpu
def test_fp8_fp4_gemm_graph_capture() -> None:
    m, n, k = 64, 2112, 7168
    a, sfa, b, sfb = make_inputs(m, n, k)
    packed = pack_scales_along_k(sfb)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    deep_gemm.fp8_fp4_gemm_nt((a, sfa), (b, packed), d)  # compile and plan outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        deep_gemm.fp8_fp4_gemm_nt((a, sfa), (b, packed), d)
    d.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check_result(d, reference(a, sfa, b, sfb), "graph")


@gpu
def test_fp32_scales_must_be_powers_of_two_with_debug_checks(monkeypatch) -> None:
    a, sfa, b, sfb = make_inputs(8, 128, 256)
    d = torch.empty(8, 128, device="cuda", dtype=torch.bfloat16)
    sfb[3, 2] *= 1.5
    monkeypatch.setenv("DG_DEBUG_CHECKS", "1")
    with pytest.raises(ValueError, match=r"b\[1\] \(sfb\): FP32 scales of FP4 B must be positive powers of two"):
        deep_gemm.fp8_fp4_gemm_nt((a, sfa), (b, sfb), d)


# ----------------------------------------------------------------------------- A with 1x32 scales; FP4 x FP4 (GPU)
A_KINDS = ["fp8-1x32", "fp8-1x32-packed", "fp4", "fp4-packed"]


def make_a(x: torch.Tensor, kind: str):
    """A of kind ``kind`` from x [rows, K]: (operand, its scales as passed, float64 A as the kernels multiply it:
    1x32 scales folded per 128-K block)."""
    k = x.shape[1]
    packed = kind.endswith("packed")
    if kind.startswith("fp8"):
        a, sf = per_token_cast_to_fp8(x, use_ue8m0=True, gran_k=32)
        values = a
    else:
        a, sf = per_token_cast_to_fp4(x, use_ue8m0=True, gran_k=32)
        values = cast_back_from_fp4(a, torch.ones_like(sf), gran_k=32)
    return a, (pack_scales_along_k(sf) if packed else sf), fold_1x32(values, sf, k)


def check_a_case(a_kind: str, m: int, n: int, k: int, outliers: bool = False) -> None:
    case = f"{a_kind}-m{m}-n{n}-k{k}"
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    if outliers:  # (groups of one block far apart in magnitude: the fold's rounding below 2^-6 of the block scale)
        x = x * torch.exp2(torch.randint(-12, 4, (m, ceil_div(k, 32)), device="cuda").float()).repeat_interleave(
            32, dim=1)[:, :k].to(torch.bfloat16)  # fmt: skip
    a, sfa, a64 = make_a(x, a_kind)
    _, _, b, sfb = make_inputs(1, n, k)
    buffer = torch.full((m + 2, n + 8), float("nan"), device="cuda", dtype=torch.bfloat16)
    d = buffer[:m, :n]
    deep_gemm.fp8_fp4_gemm_nt((a, sfa), (b, sfb), d)
    check_result(d, a64 @ folded_fp4_values(b, sfb, k).t(), case)
    assert torch.isnan(buffer[m:]).all() and torch.isnan(buffer[:, n:]).all(), f"{case}: padding written"


@gpu
@pytest.mark.parametrize("a_kind", A_KINDS)
@pytest.mark.parametrize(("m", "n", "k"), [(1, 2112, 7168), (7, 576, 7168), (129, 4096, 1056), (1000, 7168, 2048),
                                           (4096, 2112, 7168), (33, 200, 160)])  # fmt: skip
def test_a_with_1x32_scales_and_fp4_a(a_kind: str, m: int, n: int, k: int) -> None:
    torch.manual_seed(m + k)
    check_a_case(a_kind, m, n, k)


@gpu
@pytest.mark.parametrize("a_kind", ["fp8-1x32", "fp4"])
def test_a_fold_across_wide_exponent_spans(a_kind: str) -> None:
    torch.manual_seed(1)
    check_a_case(a_kind, 256, 1024, 4096, outliers=True)


@gpu
def test_a_1x32_recipe_disambiguates_small_k() -> None:
    # K = 128: one packed word is a 1x128 exponent (default) or four 1x32 ones (recipe_a=(1, 32))
    m, n, k = 64, 256, 128
    torch.manual_seed(2)
    a, sfa, a64 = make_a(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), "fp8-1x32-packed")
    _, _, b, sfb = make_inputs(1, n, k)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    deep_gemm.fp8_fp4_gemm_nt((a, sfa), (b, sfb), d, recipe_a=(1, 32), recipe_b=(1, 32))
    check_result(d, a64 @ folded_fp4_values(b, sfb, k).t(), "recipe_a (1, 32)")
    deep_gemm.fp8_fp4_gemm_nt((a, sfa), (b, sfb), d, recipe=(1, 1, 32))
    check_result(d, a64 @ folded_fp4_values(b, sfb, k).t(), "recipe (1, 1, 32)")


# ----------------------------------------------------------------------------- m-grouped (contiguous, masked)
def grouped_fp4_b(num_groups: int, n: int, k: int, packed_sf: bool):
    """B [G, N, K / 2] packed FP4 and its scales (FP32 [G, N, K/32] or packed int32 [G, N, K/128]), plus the FP32
    scales the reference uses."""
    b, sfb = per_token_cast_to_fp4(torch.randn(num_groups * n, k, device="cuda"), use_ue8m0=True, gran_k=32)
    b, sfb = b.view(num_groups, n, k // 2), sfb.view(num_groups, n, -1)
    return b, (pack_scales_along_k(sfb) if packed_sf else sfb), sfb


@pytest.mark.parametrize(
    ("case", "pattern"),
    [
        ("b_groups", r"b\[0\] \(B, packed FP4\) must be 3-D"),
        ("sfb_shape", r"b\[1\] \(sfb\) as FP32 must be \[G, N, ceil\(K/32\)\] = \[2, 128, 8\]"),
        ("recipe", r"recipe must be None or \(1, 1, 32\) with a packed FP4 B"),
        ("fp4_a_sfa_shape", r"a\[1\] \(sfa\) as FP32 must be \[.*\] for 1x32 scales"),
        ("on_cpu", r"a\[0\] \(A\) must be on a CUDA device"),
        ("fp4_a_on_cpu", r"a\[0\] \(A\) must be on a CUDA device"),
    ],
)
@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_grouped_bad_inputs_raise(layout: str, case: str, pattern: str) -> None:
    k, n, groups = 256, 128, 2
    b = torch.zeros(groups, n, k // 2, dtype=torch.int8)
    sfb = torch.ones(groups, n, k // 32)
    kwargs = {}
    if case == "b_groups":
        b = b[0]
    elif case == "sfb_shape":
        sfb = torch.ones(groups, n, 2)
    elif case == "recipe":
        kwargs["recipe"] = (1, 128, 128)
    # (FP4 A [.., K / 2] with 1x32 scales [.., K / 32]; fp4_a_sfa_shape gives it 1x128-shaped ones)
    fp4_a = case.startswith("fp4_a")
    sf_cols = 2 if case == "fp4_a_sfa_shape" or not fp4_a else k // 32
    with pytest.raises(ValueError, match=pattern):
        if layout == "contiguous" and fp4_a:
            a, sfa = torch.zeros(256, k // 2, dtype=torch.int8), torch.ones(256, sf_cols)
            d = torch.empty(256, n, dtype=torch.bfloat16)
            layout_ids = torch.zeros(256, dtype=torch.int32)
            deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout_ids, **kwargs)
        elif fp4_a:
            a, sfa = torch.zeros(groups, 64, k // 2, dtype=torch.uint8), torch.ones(groups, 64, sf_cols)
            d = torch.empty(groups, 64, n, dtype=torch.bfloat16)
            masked_m = torch.zeros(groups, dtype=torch.int32)
            deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, 32, **kwargs)
        elif layout == "contiguous":
            a, sfa = torch.zeros(256, k, dtype=torch.float8_e4m3fn), torch.ones(256, 2)
            d = torch.empty(256, n, dtype=torch.bfloat16)
            layout_ids = torch.zeros(256, dtype=torch.int32)
            deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout_ids, **kwargs)
        else:
            a, sfa = torch.zeros(groups, 64, k, dtype=torch.float8_e4m3fn), torch.ones(groups, 64, 2)
            d = torch.empty(groups, 64, n, dtype=torch.bfloat16)
            masked_m = torch.zeros(groups, dtype=torch.int32)
            deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, 32, **kwargs)


@gpu
# (in_gemm: the padding rows zeroed by the GEMM's producer warps after the FP4 converter's work, DG_TUNE opt-in)
@pytest.mark.parametrize(("a_kind", "in_gemm"), [("fp8-1x128", False), ("fp8-1x32-packed", False), ("fp4", False),
                                                 ("fp8-1x128", True)], ids=["fp8-1x128", "fp8-1x32-packed", "fp4",
                                                                            "fp8-1x128-in_gemm"])  # fmt: skip
@pytest.mark.parametrize("psum", [False, True], ids=["per_row", "psum"])
@pytest.mark.parametrize(("num_groups", "expected_m", "n", "k"), [(4, 512, 4096, 7168), (16, 64, 576, 1056)])
def test_m_grouped_fp8_fp4_contiguous(a_kind: str, in_gemm: bool, psum: bool, num_groups: int, expected_m: int, n: int,
                                      k: int, monkeypatch) -> None:  # fmt: skip
    if in_gemm:
        monkeypatch.setenv("DG_TUNE", "fp8_gemm:zero_padding_in_gemm=1")
    rng = random.Random(num_groups + k)
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    sizes = [0 if rng.random() < 0.2 else int(expected_m * rng.uniform(0.7, 1.3)) for _ in range(num_groups)]
    segments, row = [], 0
    for size in sizes:
        segments.append((row, row + size))
        row = ceil_div(row + size, alignment) * alignment
    m = max(row, alignment)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    if a_kind == "fp8-1x128":
        a, sfa = per_token_cast_to_fp8(x)
        a64 = a.double() * sfa.double().repeat_interleave(128, dim=1)[:, :k]
    else:
        a, sfa, a64 = make_a(x, a_kind)
    b, b_sf, sfb = grouped_fp4_b(num_groups, n, k, packed_sf=psum)
    per_row = torch.full((m,), -1, device="cuda", dtype=torch.int32)
    for g, (s, e) in enumerate(segments):
        per_row[s:e] = g
    layout = torch.tensor([e for _, e in segments], device="cuda", dtype=torch.int32) if psum else per_row
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), (b, b_sf), d, layout, use_psum_layout=psum,
                                                   ensure_zero_padding=False)  # fmt: skip
    written = torch.zeros(m, dtype=torch.bool, device="cuda")
    for g, (s, e) in enumerate(segments):
        if s < e:
            check_result(d[s:e], a64[s:e] @ folded_fp4_values(b[g], sfb[g], k).t(), f"group {g}")
            written[s:e] = True
    zeroed = zeroed_padding_rows(per_row, num_groups, alignment, False, psum)
    check_padding_rows(d, written, zeroed, "padding rows of d")
    # ensure_zero_padding=True (the zeroing kernel, or with in_gemm the GEMM's producer warps): every padding row
    # zero, the groups' rows the same bits as before
    first = d.clone()
    d.fill_(float("nan"))
    deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), (b, b_sf), d, layout, use_psum_layout=psum,
                                                   ensure_zero_padding=True)  # fmt: skip
    assert torch.equal(d[written], first[written]), "ensure_zero_padding changed the groups' rows"
    zeroed = zeroed_padding_rows(per_row, num_groups, alignment, True, psum)
    check_padding_rows(d, written, zeroed, "padding rows of d (ensure_zero_padding)")


@gpu
@pytest.mark.parametrize("a_kind", ["fp8-1x128", "fp8-1x32", "fp4-packed"])
@pytest.mark.parametrize(("num_groups", "expected_m"), [(8, 20), (4, 300), (16, 1)])
def test_m_grouped_fp8_fp4_masked(a_kind: str, num_groups: int, expected_m: int) -> None:
    rng = random.Random(num_groups * 1000 + expected_m)
    max_m, n, k = 512, 2112, 2048
    x = torch.randn(num_groups * max_m, k, device="cuda", dtype=torch.bfloat16)
    if a_kind == "fp8-1x128":
        a, sfa = per_token_cast_to_fp8(x)
        a64 = a.double() * sfa.double().repeat_interleave(128, dim=1)[:, :k]
    else:
        a, sfa, a64 = make_a(x, a_kind)
    a, sfa = a.view(num_groups, max_m, -1), sfa.view(num_groups, max_m, -1)
    a64 = a64.view(num_groups, max_m, k)
    b, b_sf, sfb = grouped_fp4_b(num_groups, n, k, packed_sf=num_groups % 2 == 0)
    counts = [0 if rng.random() < 0.15 else min(max_m, int(expected_m * rng.uniform(0.7, 1.3)) + 1)
              for _ in range(num_groups)]  # fmt: skip
    masked_m = torch.tensor(counts, device="cuda", dtype=torch.int32)
    d = torch.full((num_groups, max_m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked((a, sfa), (b, b_sf), d, masked_m, expected_m)
    for g, rows in enumerate(counts):
        if rows:
            check_result(d[g, :rows], a64[g, :rows] @ folded_fp4_values(b[g], sfb[g], k).t(), f"group {g}")
        assert d[g, rows:].isnan().all(), f"group {g}: rows past masked_m were written"


# ----------------------------------------------------------------------------- forced configs (GPU)
FORCED_SHAPES = [(4096, 7168, 2048), (300, 2112, 7168), (1000, 4104, 1056), (1, 2112, 7168), (7, 1000, 7200),
                 (64, 255, 4128)]  # fmt: skip
# name: (DG_TUNE, what DG_PRINT_CONFIGS shows for every plan)
FORCED_TUNES = {
    "bm192": ("fp8_gemm:block_m=192", "BLOCK_M=192 "),
    "multicast_on_a": ("fp8_gemm:multicast_on_a=1", "multicast=2(A) "),
    "split_k3": ("fp8_gemm:split_k=3", "split_k=3 "),
    "overlap_off": ("fp8_gemm:overlap=0", "overlap=false "),
    "stream_k1": ("fp8_gemm:stream_k=1,split_k=1,multicast=0", "split_k=1 stream_k=1 "),
}


@gpu
@pytest.mark.parametrize("name", FORCED_TUNES)
def test_fp8_fp4_gemm_forced_configs(name: str) -> None:
    # DG_TUNE is read when a shape's plan is made (once per shape and process): a new process each
    tune, expected = FORCED_TUNES[name]
    shapes = ", ".join(f"({m}, {n}, {k})" for m, n, k in FORCED_SHAPES)
    script = (
        "import torch, test_fp4_gemm as t\n"
        f"for i, (m, n, k) in enumerate([{shapes}]):\n"
        "    torch.manual_seed(i)\n"
        "    t.run_case(m, n, k, packed_sf=i % 2 == 1)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=os.path.dirname(__file__), capture_output=True, text=True,
                         env=dict(os.environ, DG_TUNE=tune, DG_PRINT_CONFIGS="1"), timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    plans = [line for line in out.stderr.splitlines() if line.startswith("[deep_gemm] sm90_gemm m=")]
    assert len(plans) >= len(FORCED_SHAPES), out.stderr
    assert all("operands=fp8 x fp4 " in line for line in plans), out.stderr
    if name == "multicast_on_a":
        # (pairs along N need two column blocks and no split-K)
        assert any(expected in line for line in plans), out.stderr
    else:
        assert all(expected in line for line in plans), out.stderr
