"""CPU tier: deep_gemm.utils (math, casts, layouts) and deep_gemm.testing helpers.

The GPU-marked tests at the end check that the casts give the same bits on CUDA and that
the timing helpers work there.
"""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from deep_gemm.testing import (
    BenchResult,
    bench_kernel,
    calc_diff,
    count_bytes,
    d2d_copy_bandwidth,
    gpu_idle,
    kineto_kernel_times,
    sm_clock_mhz,
)
from deep_gemm.utils import (
    align,
    ceil_div,
    ceil_to_ue8m0,
    get_tma_aligned_size,
    mn_major_tma_aligned_reference,
    pack_ue8m0_to_int,
    packed_ue8m0_reference,
    per_block_cast_to_fp8,
    per_channel_cast_to_fp8,
    per_token_cast_to_fp8,
    unpack_ue8m0_from_int,
)

FP8_MAX = 448.0
# float8_e4m3fn keeps 3 mantissa bits: round-to-nearest is within 2**-4 relative for normals,
# and within half of the smallest subnormal step (2**-9) times the scale below them.
FP8_REL_ERR = 2.0**-4
FP8_ABS_ERR = 2.0**-10


def _randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Raw bytes of a tensor, for bitwise comparison (NaN-safe)."""
    return t.contiguous().view(torch.uint8)


def _is_pow2(t: torch.Tensor) -> bool:
    mantissa, _ = torch.frexp(t)
    return bool((mantissa == 0.5).all())


# ---------------------------------------------------------------------------------------------
# math
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "y", "expected"),
    [(0, 4, 0), (1, 4, 1), (4, 4, 1), (5, 4, 2), (4097, 128, 33), (7296, 128, 57)],
    ids=lambda v: str(v),
)
def test_ceil_div(x: int, y: int, expected: int) -> None:
    assert ceil_div(x, y) == expected


@pytest.mark.parametrize(
    ("x", "y", "expected"),
    [(0, 128, 0), (1, 128, 128), (128, 128, 128), (4097, 4, 4100), (7297, 128, 7424)],
    ids=lambda v: str(v),
)
def test_align(x: int, y: int, expected: int) -> None:
    assert align(x, y) == expected


@pytest.mark.parametrize(
    ("x", "element_size", "expected"),
    [(4096, 4, 4096), (4097, 4, 4100), (4097, 2, 4104), (4097, 1, 4112), (5, 8, 6), (3, 16, 3), (0, 4, 0)],
    ids=lambda v: str(v),
)
def test_get_tma_aligned_size(x: int, element_size: int, expected: int) -> None:
    result = get_tma_aligned_size(x, element_size)
    assert result == expected
    assert (result * element_size) % 16 == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda: get_tma_aligned_size(16, 3),
        lambda: get_tma_aligned_size(16, 0),
        lambda: get_tma_aligned_size(16, 32),
        lambda: get_tma_aligned_size(-1, 4),
    ],
    ids=["tma-elem3", "tma-elem0", "tma-elem32", "tma-negative"],
)
def test_math_bad_inputs(call) -> None:
    with pytest.raises(ValueError):
        call()


def test_ceil_div_and_align_are_plain_arithmetic() -> None:
    # The reference's formulas, any sign: (x + y - 1) // y and its multiple of y
    for x in range(-20, 21):
        for y in (1, 3, 4, 128):
            assert ceil_div(x, y) == -(-x // y) == (x + y - 1) // y
            assert align(x, y) == ceil_div(x, y) * y
    with pytest.raises(ZeroDivisionError):
        ceil_div(1, 0)


# ---------------------------------------------------------------------------------------------
# casts
# ---------------------------------------------------------------------------------------------


def _dequant_token(x_fp8: torch.Tensor, sf: torch.Tensor, gran_k: int) -> torch.Tensor:
    k = x_fp8.shape[-1]
    return x_fp8.float() * sf.repeat_interleave(gran_k, dim=-1)[..., :k]


def _dequant_channel(x_fp8: torch.Tensor, sf: torch.Tensor, gran_k: int) -> torch.Tensor:
    k = x_fp8.shape[-2]
    return x_fp8.float() * sf.repeat_interleave(gran_k, dim=-2)[..., :k, :]


def _dequant_block(x_fp8: torch.Tensor, sf: torch.Tensor, gran_k: int) -> torch.Tensor:
    n, k = x_fp8.shape[-2:]
    full = sf.repeat_interleave(128, dim=-2).repeat_interleave(gran_k, dim=-1)
    return x_fp8.float() * full[..., :n, :k]


def _check_round_trip(x: torch.Tensor, x_fp8: torch.Tensor, sf_full: torch.Tensor, use_ue8m0: bool) -> None:
    """Element-wise FP8 rounding bound, scales that are powers of two under UE8M0, no overflow."""
    x = x.float()
    deq = x_fp8.float() * sf_full
    err = (deq - x).abs()
    bound = x.abs() * FP8_REL_ERR + sf_full * FP8_ABS_ERR
    worst = int((err - bound).argmax())
    assert bool((err <= bound).all()), f"worst element {worst}: x={x.flatten()[worst]} deq={deq.flatten()[worst]}"
    assert bool(torch.isfinite(x_fp8.float()).all())
    assert float(x_fp8.float().abs().max()) <= FP8_MAX
    assert calc_diff(deq, x) < (2e-3 if use_ue8m0 else 5e-4)
    if use_ue8m0:
        assert _is_pow2(sf_full)


CAST_SHAPES = [(128, 512), (4097, 7296), (33, 1000), (5, 7), (1, 129)]


@pytest.mark.parametrize("use_ue8m0", [False, True], ids=["fp32sf", "ue8m0"])
@pytest.mark.parametrize("gran_k", [32, 64, 128], ids=lambda g: f"gk{g}")
@pytest.mark.parametrize(("m", "k"), CAST_SHAPES, ids=[f"m{m}-k{k}" for m, k in CAST_SHAPES])
def test_per_token_cast(m: int, k: int, gran_k: int, use_ue8m0: bool) -> None:
    x = _randn(m, k, dtype=torch.bfloat16, seed=m + k)
    x_fp8, sf = per_token_cast_to_fp8(x, use_ue8m0=use_ue8m0, gran_k=gran_k)
    assert x_fp8.shape == (m, k) and x_fp8.dtype == torch.float8_e4m3fn and x_fp8.is_contiguous()
    assert sf.shape == (m, ceil_div(k, gran_k)) and sf.dtype == torch.float32
    _check_round_trip(x, x_fp8, sf.repeat_interleave(gran_k, dim=-1)[:, :k], use_ue8m0)
    # Independent reference for the scales: a loop over the K groups.
    for j in range(0, sf.shape[1], max(1, sf.shape[1] // 7)):
        amax = x[:, j * gran_k : (j + 1) * gran_k].float().abs().amax(dim=1).clamp(min=1e-4)
        expected = ceil_to_ue8m0(amax / FP8_MAX) if use_ue8m0 else amax / FP8_MAX
        torch.testing.assert_close(sf[:, j], expected, rtol=0, atol=0)


@pytest.mark.parametrize("use_ue8m0", [False, True], ids=["fp32sf", "ue8m0"])
@pytest.mark.parametrize("gran_k", [32, 128], ids=lambda g: f"gk{g}")
@pytest.mark.parametrize(("k", "n"), [(512, 256), (4097, 384), (100, 7)], ids=["k512-n256", "k4097-n384", "k100-n7"])
def test_per_channel_cast(k: int, n: int, gran_k: int, use_ue8m0: bool) -> None:
    x = _randn(k, n, seed=k * n)
    x_fp8, sf = per_channel_cast_to_fp8(x, use_ue8m0=use_ue8m0, gran_k=gran_k)
    assert x_fp8.shape == (k, n) and x_fp8.dtype == torch.float8_e4m3fn and x_fp8.is_contiguous()
    assert sf.shape == (ceil_div(k, gran_k), n) and sf.dtype == torch.float32
    _check_round_trip(x, x_fp8, sf.repeat_interleave(gran_k, dim=0)[:k], use_ue8m0)
    # A per-channel cast of x is a per-token cast of x.T, bit for bit.
    t_fp8, t_sf = per_token_cast_to_fp8(x.t(), use_ue8m0=use_ue8m0, gran_k=gran_k)
    assert torch.equal(_bits(x_fp8), _bits(t_fp8.t()))
    assert torch.equal(sf, t_sf.t())


@pytest.mark.parametrize("use_ue8m0", [False, True], ids=["fp32sf", "ue8m0"])
@pytest.mark.parametrize("gran_k", [32, 64, 128], ids=lambda g: f"gk{g}")
@pytest.mark.parametrize(
    ("n", "k"), [(256, 512), (4097, 7296), (576, 1000)], ids=["n256-k512", "n4097-k7296", "n576-k1000"]
)
def test_per_block_cast(n: int, k: int, gran_k: int, use_ue8m0: bool) -> None:
    x = _randn(n, k, dtype=torch.bfloat16, seed=n - k)
    x_fp8, sf = per_block_cast_to_fp8(x, use_ue8m0=use_ue8m0, gran_k=gran_k)
    assert x_fp8.shape == (n, k) and x_fp8.dtype == torch.float8_e4m3fn and x_fp8.is_contiguous()
    assert sf.shape == (ceil_div(n, gran_k), ceil_div(k, gran_k)) and sf.dtype == torch.float32
    full = sf.repeat_interleave(gran_k, dim=0).repeat_interleave(gran_k, dim=1)[:n, :k]
    _check_round_trip(x, x_fp8, full, use_ue8m0)
    # Independent reference for a few blocks, the partial last ones included.
    for i, j in [(0, 0), (sf.shape[0] - 1, sf.shape[1] - 1), (sf.shape[0] // 2, sf.shape[1] // 3)]:
        block = x[i * gran_k : (i + 1) * gran_k, j * gran_k : (j + 1) * gran_k].float()
        expected = block.abs().amax().clamp(min=1e-4) / FP8_MAX
        expected = ceil_to_ue8m0(expected) if use_ue8m0 else expected
        assert sf[i, j] == expected, f"block ({i}, {j})"


@pytest.mark.parametrize(
    "cast", [per_token_cast_to_fp8, per_channel_cast_to_fp8, per_block_cast_to_fp8], ids=["token", "channel", "block"]
)
def test_cast_pads_with_zeros(cast) -> None:
    # Quantizing an unaligned tensor equals quantizing its explicit zero-padding, then slicing.
    x = _randn(200, 300, seed=7)
    padded = F.pad(x, (0, 384 - 300, 0, 256 - 200))
    x_fp8, sf = cast(x)
    p_fp8, p_sf = cast(padded)
    assert torch.equal(_bits(x_fp8), _bits(p_fp8[:200, :300]))
    assert torch.equal(sf, p_sf[: sf.shape[0], : sf.shape[1]])


@pytest.mark.parametrize(
    "cast", [per_token_cast_to_fp8, per_channel_cast_to_fp8, per_block_cast_to_fp8], ids=["token", "channel", "block"]
)
@pytest.mark.parametrize("num_groups", [1, 2, 4], ids=lambda g: f"g{g}")
def test_cast_groups_match_per_group_casts(cast, num_groups: int) -> None:
    x = _randn(num_groups, 257, 320, dtype=torch.bfloat16, seed=num_groups)
    x_fp8, sf = cast(x, use_ue8m0=True, gran_k=64)
    for g in range(num_groups):
        g_fp8, g_sf = cast(x[g], use_ue8m0=True, gran_k=64)
        assert torch.equal(_bits(x_fp8[g]), _bits(g_fp8))
        assert torch.equal(sf[g], g_sf)


def test_cast_zero_block_gets_clamped_scale() -> None:
    x = torch.zeros(4, 256)
    x[:, 128:] = 1.0
    x_fp8, sf = per_token_cast_to_fp8(x)
    assert torch.equal(sf[:, 0], torch.full((4,), 1e-4 / FP8_MAX))
    assert torch.equal(sf[:, 1], torch.full((4,), 1.0 / FP8_MAX))
    assert bool((x_fp8[:, :128].float() == 0).all())
    assert bool((x_fp8[:, 128:].float() == FP8_MAX).all())


def test_cast_accepts_non_contiguous_input() -> None:
    x = _randn(256, 384)
    a_fp8, a_sf = per_block_cast_to_fp8(x.t().contiguous().t())
    b_fp8, b_sf = per_block_cast_to_fp8(x)
    assert torch.equal(_bits(a_fp8), _bits(b_fp8)) and torch.equal(a_sf, b_sf)


def test_cast_empty_rows() -> None:
    x_fp8, sf = per_token_cast_to_fp8(torch.zeros(0, 256, dtype=torch.bfloat16))
    assert x_fp8.shape == (0, 256) and sf.shape == (0, 2)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: per_token_cast_to_fp8(torch.zeros(4, 128, dtype=torch.float8_e4m3fn)), TypeError),
        (lambda: per_token_cast_to_fp8(torch.zeros(4, 128, dtype=torch.int32)), TypeError),
        (lambda: per_token_cast_to_fp8([[1.0]]), TypeError),
        (lambda: per_token_cast_to_fp8(torch.zeros(128)), ValueError),
        (lambda: per_block_cast_to_fp8(torch.zeros(1, 2, 128, 128)), ValueError),
        (lambda: per_channel_cast_to_fp8(torch.zeros(128, 4), gran_k=0), ValueError),
        (lambda: per_channel_cast_to_fp8(torch.zeros(128, 4), gran_k=-128), ValueError),
        (lambda: per_block_cast_to_fp8(torch.zeros(128, 128), gran_k=128.0), TypeError),
        (lambda: per_block_cast_to_fp8(torch.zeros(128, 128), use_ue8m0=1), TypeError),
    ],
    ids=[
        "fp8-input",
        "int-input",
        "list-input",
        "1d-input",
        "4d-input",
        "gran-k-zero",
        "gran-k-negative",
        "gran-k-float",
        "ue8m0-not-bool",
    ],
)
def test_cast_bad_inputs(call, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"(x|gran_k|use_ue8m0) must"):
        call()


# ---------------------------------------------------------------------------------------------
# UE8M0
# ---------------------------------------------------------------------------------------------


def test_ceil_to_ue8m0_special_values() -> None:
    x = torch.tensor(
        [1.0, 1.5, 3.0, 4.0, 0.75, 2.0**-126, 2.0**-130, 0.0, -3.0, float("inf"), 2.0**127 * 1.5, 2.0**127]
    )
    expected = torch.tensor(
        [1.0, 2.0, 4.0, 4.0, 1.0, 2.0**-126, 2.0**-126, 0.0, 4.0, float("inf"), float("inf"), 2.0**127]
    )
    assert torch.equal(ceil_to_ue8m0(x), expected)
    assert bool(torch.isnan(ceil_to_ue8m0(torch.tensor([float("nan")]))).all())


def test_ceil_to_ue8m0_matches_float64_formula() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.exp(torch.empty(100_000, dtype=torch.float64).uniform_(-80, 80, generator=gen)).float()
    x = torch.cat([x, torch.exp2(torch.arange(-126, 128, dtype=torch.float32))])  # exact powers stay
    expected = torch.exp2(torch.ceil(torch.log2(x.double()))).float()
    result = ceil_to_ue8m0(x)
    assert torch.equal(result, expected)
    assert _is_pow2(result)
    assert bool((result >= x).all()) and bool((result < 2 * x).all())


def test_ceil_to_ue8m0_dtypes() -> None:
    # Any float dtype of 16 bits or more is converted to float32 first; integers are rejected
    assert torch.equal(ceil_to_ue8m0(torch.tensor([3.0, 0.3], dtype=torch.bfloat16)), ceil_to_ue8m0(
        torch.tensor([3.0, 0.3], dtype=torch.bfloat16).float()))
    with pytest.raises(TypeError, match="float"):
        ceil_to_ue8m0(torch.ones(4, dtype=torch.int32))


def test_pack_ue8m0_byte_order() -> None:
    x = torch.tensor([[1.0, 2.0, 0.5, 8.0, 0.0, 2.0**-127 * 2, 2.0**127, 1.0]])
    exponents = [127, 128, 126, 130, 0, 1, 254, 127]
    words = []
    for j in range(2):
        word = sum(e << (8 * i) for i, e in enumerate(exponents[4 * j : 4 * j + 4]))
        words.append(word - (1 << 32) if word >= 1 << 31 else word)
    packed = pack_ue8m0_to_int(x)
    assert packed.dtype == torch.int32 and packed.shape == (1, 2)
    assert packed.tolist() == [words]


@pytest.mark.parametrize("shape", [(4,), (3, 8), (2, 4097, 12), (4, 5, 60)], ids=lambda s: "x".join(map(str, s)))
def test_pack_unpack_ue8m0_round_trip(shape: tuple[int, ...]) -> None:
    gen = torch.Generator().manual_seed(len(shape))
    x = ceil_to_ue8m0(torch.exp(torch.empty(shape).uniform_(-60, 60, generator=gen)))
    packed = pack_ue8m0_to_int(x)
    assert packed.shape == (*shape[:-1], shape[-1] // 4) and packed.dtype == torch.int32
    unpacked = unpack_ue8m0_from_int(packed)
    assert unpacked.dtype == torch.float32 and torch.equal(unpacked, x)
    # Non-contiguous inputs give the same words.
    assert torch.equal(pack_ue8m0_to_int(x.transpose(0, -1).contiguous().transpose(0, -1)), packed)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: pack_ue8m0_to_int(torch.ones(3, 6)), ValueError),
        (lambda: pack_ue8m0_to_int(torch.tensor(1.0)), ValueError),
        (lambda: pack_ue8m0_to_int(torch.ones(4, dtype=torch.float64)), TypeError),
        (lambda: pack_ue8m0_to_int(torch.tensor([1.0, -2.0, 4.0, 0.5])), ValueError),
        (lambda: pack_ue8m0_to_int(torch.tensor([1.0, 1.5, 4.0, 0.5])), ValueError),
        (lambda: unpack_ue8m0_from_int(torch.ones(4)), TypeError),
        (lambda: unpack_ue8m0_from_int(torch.tensor(1, dtype=torch.int32)), ValueError),
    ],
    ids=["pack-last-dim-6", "pack-0d", "pack-fp64", "pack-negative", "pack-mantissa", "unpack-fp32", "unpack-0d"],
)
def test_ue8m0_bad_inputs(call, error: type[Exception]) -> None:
    with pytest.raises(error, match="(x|packed_sf) must"):
        call()


# ---------------------------------------------------------------------------------------------
# layouts
# ---------------------------------------------------------------------------------------------

LAYOUT_CASES = [(g, mn, sf_k) for g in (None, 1, 2, 4) for mn, sf_k in [(1, 1), (128, 3), (4097, 57), (4100, 4)]]


def _layout_id(case: tuple[int | None, int, int]) -> str:
    g, mn, sf_k = case
    return f"{'2d' if g is None else f'g{g}'}-mn{mn}-sfk{sf_k}"


def _make_sf(g: int | None, mn: int, sf_k: int, pow2: bool) -> torch.Tensor:
    shape = (mn, sf_k) if g is None else (g, mn, sf_k)
    gen = torch.Generator().manual_seed(mn * 7 + sf_k)
    sf = torch.exp(torch.empty(shape).uniform_(-20, 5, generator=gen))
    return ceil_to_ue8m0(sf) if pow2 else sf


def _expected_strides(g: int | None, inner: int, aligned_mn: int) -> tuple[int, ...]:
    return (1, aligned_mn) if g is None else (inner * aligned_mn, 1, aligned_mn)


def _padding_is_zero(out: torch.Tensor, mn: int, aligned_mn: int) -> bool:
    out3 = out if out.dim() == 3 else out.unsqueeze(0)
    g, _, inner = out3.shape
    storage = out3.as_strided((g, inner, aligned_mn), (inner * aligned_mn, aligned_mn, 1))
    return bool((storage[..., mn:] == 0).all())


@pytest.mark.parametrize("case", LAYOUT_CASES, ids=[_layout_id(c) for c in LAYOUT_CASES])
def test_mn_major_tma_aligned_reference(case: tuple[int | None, int, int]) -> None:
    g, mn, sf_k = case
    sf = _make_sf(g, mn, sf_k, pow2=False)
    out = mn_major_tma_aligned_reference(sf)
    aligned_mn = get_tma_aligned_size(mn, 4)
    assert out.shape == sf.shape and out.dtype == torch.float32
    assert out.stride() == _expected_strides(g, sf_k, aligned_mn)
    assert torch.equal(out, sf)
    assert _padding_is_zero(out, mn, aligned_mn)
    # Same result from a non-contiguous (already MN-major) input.
    assert torch.equal(mn_major_tma_aligned_reference(sf.transpose(-1, -2).contiguous().transpose(-1, -2)), sf)


@pytest.mark.parametrize("case", LAYOUT_CASES, ids=[_layout_id(c) for c in LAYOUT_CASES])
def test_packed_ue8m0_reference(case: tuple[int | None, int, int]) -> None:
    g, mn, sf_k = case
    sf = _make_sf(g, mn, sf_k, pow2=True)
    out = packed_ue8m0_reference(sf)
    packed_k = ceil_div(sf_k, 4)
    aligned_mn = get_tma_aligned_size(mn, 4)
    assert out.shape == (*sf.shape[:-1], packed_k) and out.dtype == torch.int32
    assert out.stride() == _expected_strides(g, packed_k, aligned_mn)
    unpacked = unpack_ue8m0_from_int(out)
    assert torch.equal(unpacked[..., :sf_k], sf)
    assert bool((unpacked[..., sf_k:] == 0).all()), "SF_K padding must pack to byte 0"
    assert torch.equal(out.contiguous(), pack_ue8m0_to_int(F.pad(sf, (0, 4 * packed_k - sf_k))))
    assert _padding_is_zero(out, mn, aligned_mn)


@pytest.mark.parametrize("fn", [mn_major_tma_aligned_reference, packed_ue8m0_reference], ids=["mn-major", "packed"])
@pytest.mark.parametrize(
    ("sf", "error"),
    [
        (torch.ones(8, 4, dtype=torch.bfloat16), TypeError),
        (torch.ones(8, 4, dtype=torch.int32), TypeError),
        (torch.ones(8), ValueError),
        (torch.ones(2, 2, 8, 4), ValueError),
        ("sf", TypeError),
    ],
    ids=["bf16", "int32", "1d", "4d", "not-a-tensor"],
)
def test_layout_bad_inputs(fn, sf, error: type[Exception]) -> None:
    with pytest.raises(error, match="sf must"):
        fn(sf)


# ---------------------------------------------------------------------------------------------
# testing helpers
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=["fp32", "bf16", "fp64"])
def test_calc_diff_identical_is_zero(dtype: torch.dtype) -> None:
    x = _randn(300, 200, dtype=dtype)
    assert abs(calc_diff(x, x.clone())) < 1e-12


def test_calc_diff_values() -> None:
    x = _randn(1000)
    assert calc_diff(x, -x).item() == pytest.approx(2.0, abs=1e-12)
    assert calc_diff(x, torch.zeros_like(x)).item() == pytest.approx(1.0, abs=1e-12)
    assert calc_diff(torch.zeros(5), torch.zeros(5)).item() == 0.0
    # For y = x * (1 + e): diff = e**2 / (2 + 2e + e**2).
    e = 1e-2
    assert calc_diff(x, x * (1 + e)).item() == pytest.approx(e**2 / (2 + 2 * e + e**2), rel=1e-4)
    # Mixed dtypes are compared in float64.
    assert calc_diff(x, x.bfloat16()) < 1e-4


def test_calc_diff_non_finite_is_nan() -> None:
    x = _randn(16)
    y = x.clone()
    y[3] = float("nan")
    assert calc_diff(x, y) != calc_diff(x, y)  # NaN
    y[3] = float("inf")
    assert calc_diff(x, y) != calc_diff(x, y)


def test_calc_diff_bad_inputs() -> None:
    with pytest.raises(ValueError, match="same shape"):
        calc_diff(torch.zeros(4), torch.zeros(5))
    with pytest.raises(TypeError, match="tensors"):
        calc_diff([1.0], torch.zeros(1))


def test_count_bytes() -> None:
    a = torch.empty(64, 128, dtype=torch.float8_e4m3fn)
    sfa = torch.empty(64, 1)
    b = torch.empty(32, 128, dtype=torch.bfloat16)
    d = torch.empty(64, 32, dtype=torch.bfloat16)
    assert count_bytes() == 0
    assert count_bytes(a) == 64 * 128
    assert count_bytes((a, sfa), (b, None), [d], None) == 64 * 128 + 64 * 4 + 32 * 128 * 2 + 64 * 32 * 2
    assert count_bytes(a.t()) == 64 * 128
    with pytest.raises(TypeError, match="count_bytes"):
        count_bytes(a, 3)


def test_bench_result_is_frozen() -> None:
    result = BenchResult(median_s=2e-6, min_s=1e-6, samples_s=(1e-6, 2e-6, 3e-6))
    assert result.median_us == pytest.approx(2.0) and result.min_us == pytest.approx(1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.median_s = 0.0  # type: ignore[misc]


def test_timing_helpers_without_gpu() -> None:
    gpu_idle(0.0)
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only behaviour")
    assert sm_clock_mhz() is None
    with pytest.raises(RuntimeError, match="CUDA"):
        bench_kernel(lambda: None)
    for device_time in (False, True):
        with pytest.raises(RuntimeError, match="d2d_copy_bandwidth: needs a CUDA GPU"):
            d2d_copy_bandwidth(1 << 20, device_time=device_time)


def test_copy_bandwidth_bad_arguments() -> None:
    with pytest.raises(ValueError, match="num_bytes must be positive"):
        d2d_copy_bandwidth(0, device_time=True)
    with pytest.raises(ValueError, match="num_tests"):
        d2d_copy_bandwidth(1 << 20, num_tests=0)


@pytest.mark.parametrize("kwargs", [{"num_tests": 0}, {"num_warmups": -1}], ids=["no-tests", "negative-warmups"])
def test_bench_kernel_bad_counts(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="num_"):
        bench_kernel(lambda: None, **kwargs)


def test_bench_bad_flush_mode() -> None:
    with pytest.raises(ValueError, match="l2_flush_mode"):
        bench_kernel(lambda: None, l2_flush_mode="dirty")
    with pytest.raises(ValueError, match="l2_flush_mode"):
        kineto_kernel_times(lambda: None, "gemm", l2_flush_mode="none")


# ---------------------------------------------------------------------------------------------
# GPU tier
# ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("use_ue8m0", [False, True], ids=["fp32sf", "ue8m0"])
@pytest.mark.parametrize(
    "cast", [per_token_cast_to_fp8, per_channel_cast_to_fp8, per_block_cast_to_fp8], ids=["token", "channel", "block"]
)
def test_casts_match_on_cuda(cast, use_ue8m0: bool) -> None:
    x = _randn(2, 4097, 1000, dtype=torch.bfloat16)
    cpu_fp8, cpu_sf = cast(x, use_ue8m0=use_ue8m0, gran_k=64)
    gpu_fp8, gpu_sf = cast(x.cuda(), use_ue8m0=use_ue8m0, gran_k=64)
    assert gpu_fp8.is_cuda and gpu_sf.is_cuda
    assert torch.equal(_bits(gpu_fp8.cpu()), _bits(cpu_fp8))
    assert torch.equal(gpu_sf.cpu(), cpu_sf)


@pytest.mark.gpu
def test_ue8m0_and_layouts_match_on_cuda() -> None:
    sf = _make_sf(2, 4097, 57, pow2=True)
    assert torch.equal(ceil_to_ue8m0(sf.cuda() * 1.3).cpu(), ceil_to_ue8m0(sf * 1.3))
    for fn in (mn_major_tma_aligned_reference, packed_ue8m0_reference):
        out = fn(sf.cuda())
        ref = fn(sf)
        assert out.stride() == ref.stride() and torch.equal(out.cpu(), ref)
    assert torch.equal(unpack_ue8m0_from_int(pack_ue8m0_to_int(sf[..., :56].cuda())).cpu(), sf[..., :56])


@pytest.mark.gpu
def test_timing_helpers_on_cuda() -> None:
    x = torch.randn(4096, 4096, device="cuda")
    for mode in ("read", "write"):
        result = bench_kernel(lambda: x @ x, num_warmups=2, num_tests=5, l2_flush_mode=mode)
        assert len(result.samples_s) == 5 and 0 < result.min_s <= result.median_s < 1.0
    gpu_idle(0.01)
    clock = sm_clock_mhz()
    assert clock is None or 100 <= clock <= 5000
    # The copy ceiling by events and on the device alone (the profiler's memcpy event): the same order of magnitude
    by_events = d2d_copy_bandwidth(256 << 20, num_tests=3)
    on_device = d2d_copy_bandwidth(256 << 20, num_tests=3, device_time=True)
    assert 1e10 < by_events < 1e14 and 0.5 < on_device / by_events < 2.0, (by_events, on_device)
