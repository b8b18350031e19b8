"""Drop-in compatibility of the Python API: ``deep_gemm.utils`` and ``deep_gemm.testing`` called the reference's
way (DeepGEMM 2.6.1: names, module paths, positional and keyword forms, defaults, return types), with float64
or exact references for the casts. The CPU tier runs everywhere; the ``gpu`` tests at the end need CUDA.
"""

import inspect
import os
import socket
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch

import deep_gemm
import deep_gemm.testing
import deep_gemm.utils

FP8_MAX = 448.0
E2M1_GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]

# The reference's signatures: (name, default) per parameter, in order (inspect.Parameter.empty: required)
REQ = inspect.Parameter.empty
# Child interpreters run outside the repository: from its root, Python would import the source folder (whose
# extension only ./develop.sh builds) instead of the installed package the tests run against
OUTSIDE = tempfile.gettempdir()
REFERENCE_UTILS = {
    "ceil_div": [("x", REQ), ("y", REQ)],
    "align": [("x", REQ), ("y", REQ)],
    "ceil_to_ue8m0": [("x", REQ)],
    "pack_ue8m0_to_int": [("x", REQ)],
    "unpack_ue8m0_from_int": [("packed_sf", REQ)],
    "per_token_cast_to_fp8": [("x", REQ), ("use_ue8m0", REQ), ("gran_k", 128), ("use_packed_ue8m0", False)],
    "per_channel_cast_to_fp8": [("x", REQ), ("use_ue8m0", REQ), ("gran_k", 128)],
    "per_block_cast_to_fp8": [("x", REQ), ("use_ue8m0", REQ), ("gran_k", 128)],
    "per_custom_dims_cast_to_fp8": [("x", REQ), ("dims", REQ), ("use_ue8m0", REQ)],
    "per_token_cast_to_fp4": [("x", REQ), ("use_ue8m0", REQ), ("gran_k", 128), ("use_packed_ue8m0", False)],
    "transpose_packed_fp4": [("a", REQ)],
    "cast_back_from_fp4": [("packed", REQ), ("sf", REQ), ("gran_k", 128), ("use_packed_ue8m0", False)],
    "get_theoretical_mk_alignment_for_contiguous_layout": [("expected_m", None)],
    "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor": [
        ("sf", REQ), ("grouped_layout", REQ), ("ks_cpu", REQ), ("gran_k", REQ), ("k_alignment", REQ),
        ("use_psum_layout", False),
    ],
    "init_dist": [("local_rank", REQ), ("num_local_ranks", REQ)],
    "uneven_all_gather": [("tensor", REQ), ("dim", 0), ("group", None)],
}  # fmt: skip
REFERENCE_TESTING = {
    "bench": [("fn", REQ), ("num_warmups", 5), ("num_tests", 10), ("high_precision", False)],
    "bench_kineto": [
        ("fn", REQ), ("kernel_names", REQ), ("num_tests", 30), ("suppress_kineto_output", False),
        ("trace_path", None), ("flush_l2", True), ("with_multiple_kernels", False), ("barrier", None),
    ],
    "calc_diff": [("x", REQ), ("y", REQ)],
    "assert_bitwise_equal": [("x", REQ), ("y", REQ), ("label", "")],
    "get_arch_major": [],
    "test_filter": [("condition", REQ)],
    "ignore_env": [("name", REQ), ("condition", REQ)],
}  # fmt: skip
# Names of the reference's deep_gemm.utils (all re-exported at the top level) and deep_gemm.testing
REFERENCE_UTILS_NAMES = [
    *REFERENCE_UTILS, "get_tma_aligned_size", "get_mn_major_tma_aligned_tensor",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor", "set_mk_alignment_for_contiguous_layout",
    "get_mk_alignment_for_contiguous_layout", "get_m_alignment_for_contiguous_layout",
    "get_k_alignment_for_contiguous_layout",
]  # fmt: skip
REFERENCE_TESTING_NAMES = [*REFERENCE_TESTING, "count_bytes", "empty_suppress", "suppress_stdout_stderr"]


def _randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def _pow2_ceil64(t: torch.Tensor) -> torch.Tensor:
    """2 ** ceil(log2(t)) in float64 (t > 0)."""
    return torch.exp2(torch.ceil(torch.log2(t.double())))


def _ue8m0_words64(sf: torch.Tensor) -> torch.Tensor:
    """Reference packing of power-of-two scales [..., 4n] -> int32 words, from exponents by integer arithmetic."""
    exponent = (torch.log2(sf.double()).round().long() + 127).clamp(0, 255)
    shifts = torch.tensor([0, 8, 16, 24])
    words = (exponent.view(*sf.shape[:-1], -1, 4) << shifts).sum(-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


# ---------------------------------------------------------------------------------------------
# module layout and signatures
# ---------------------------------------------------------------------------------------------


def test_engine_import_of_layout_functions() -> None:
    # An engine does this at import time
    from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor

    assert get_mn_major_tma_aligned_tensor is deep_gemm.get_mn_major_tma_aligned_tensor
    assert get_mn_major_tma_aligned_tensor.__wrapped__ is deep_gemm._C.get_mn_major_tma_aligned_tensor
    from deep_gemm.utils.dist import dist_print, init_dist, uneven_all_gather  # noqa: F401
    from deep_gemm.utils.layout import (  # noqa: F401
        get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor,
        get_mn_major_tma_aligned_packed_ue8m0_tensor,
        get_theoretical_mk_alignment_for_contiguous_layout,
    )
    from deep_gemm.utils.math import (  # noqa: F401
        align,
        cast_back_from_fp4,
        ceil_div,
        per_custom_dims_cast_to_fp8,
        per_token_cast_to_fp4,
        per_token_cast_to_fp8,
    )


@pytest.mark.parametrize("name", REFERENCE_UTILS_NAMES)
def test_utils_names_in_utils_and_at_top_level(name: str) -> None:
    obj = getattr(deep_gemm.utils, name)
    assert name in deep_gemm.utils.__all__ and callable(obj)
    assert name in deep_gemm.__all__
    assert getattr(deep_gemm, name) is obj, name


def test_star_import_gives_every_utils_name() -> None:
    namespace: dict = {}
    exec("from deep_gemm import *", namespace)
    assert set(deep_gemm.utils.__all__) <= set(namespace)


@pytest.mark.parametrize("name", REFERENCE_TESTING_NAMES)
def test_testing_names(name: str) -> None:
    assert name in deep_gemm.testing.__all__ and callable(getattr(deep_gemm.testing, name))


def _assert_signature_superset(fn, expected: list[tuple[str, object]]) -> None:
    params = list(inspect.signature(fn).parameters.values())
    names = [p.name for p in params]
    assert names[: len(expected)] == [n for n, _ in expected], (fn.__name__, names)
    for p, (name, default) in zip(params, expected, strict=False):
        assert p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY), name
        if default is not REQ:
            assert p.default == default and type(p.default) is type(default), (fn.__name__, name, p.default)
    # Our extra parameters come last, each with a default (so every reference call binds the same way)
    assert all(p.default is not REQ for p in params[len(expected) :]), (fn.__name__, names)


@pytest.mark.parametrize(("name", "expected"), list(REFERENCE_UTILS.items()), ids=list(REFERENCE_UTILS))
def test_utils_signatures(name: str, expected: list) -> None:
    _assert_signature_superset(getattr(deep_gemm.utils, name), expected)


@pytest.mark.parametrize(("name", "expected"), list(REFERENCE_TESTING.items()), ids=list(REFERENCE_TESTING))
def test_testing_signatures(name: str, expected: list) -> None:
    _assert_signature_superset(getattr(deep_gemm.testing, name), expected)


def test_dist_print_signature() -> None:
    _assert_signature_superset(deep_gemm.utils.dist.dist_print, [("s", ""), ("once_in_node", False)])


# ---------------------------------------------------------------------------------------------
# math: plain arithmetic
# ---------------------------------------------------------------------------------------------


def test_ceil_div_and_align_take_tensors_and_negative_integers() -> None:
    # Engine call: deep_gemm.ceil_div(tensor, 4)
    t = torch.tensor([0, 1, 4, 5, 4097, -3, -4, -5])
    expected = torch.tensor([(v + 3) // 4 for v in t.tolist()])
    assert torch.equal(deep_gemm.ceil_div(t, 4), expected)
    assert torch.equal(deep_gemm.align(t, 4), expected * 4)
    assert deep_gemm.ceil_div(x=-7, y=2) == -3 and deep_gemm.align(-7, 2) == -6
    assert deep_gemm.ceil_div(10**30 + 1, 10**15) == 10**15 + 1
    assert torch.equal(deep_gemm.utils.math.ceil_div(torch.tensor(129), torch.tensor(128)), torch.tensor(2))


def test_get_theoretical_mk_alignment() -> None:
    assert deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout() == 128
    assert deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout(256) == 128
    assert deep_gemm.utils.get_theoretical_mk_alignment_for_contiguous_layout(expected_m=None) == 128
    with pytest.raises(ValueError, match="expected_m"):
        deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout(-1)
    with pytest.raises(TypeError, match="expected_m"):
        deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout(1.5)


# ---------------------------------------------------------------------------------------------
# FP8 casts, the reference's way, against float64
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gran_k", [32, 128])
@pytest.mark.parametrize(("m", "k"), [(64, 512), (33, 1000), (3, 96)])
def test_per_token_cast_ue8m0_exact(m: int, k: int, gran_k: int) -> None:
    x = _randn(m, k, dtype=torch.bfloat16, seed=m + k, scale=3.0)
    x_fp8, sf = deep_gemm.per_token_cast_to_fp8(x, True, gran_k)  # positional, as the reference's tests
    sf_k = -(-k // gran_k)
    # float64 reference: scale = 2**ceil(log2(amax / 448)) per 1 x gran_k, values x / scale rounded to E4M3
    padded = torch.nn.functional.pad(x.double(), (0, sf_k * gran_k - k))
    amax = padded.view(m, sf_k, gran_k).abs().amax(-1).clamp(min=1e-4)
    sf64 = _pow2_ceil64(amax / FP8_MAX)
    assert sf.dtype == torch.float32 and sf.shape == (m, sf_k) and torch.equal(sf.double(), sf64)
    ref = (x.double() / sf64.repeat_interleave(gran_k, 1)[:, :k]).to(torch.float8_e4m3fn)
    assert x_fp8.shape == (m, k) and torch.equal(_bits(x_fp8), _bits(ref))
    # use_packed_ue8m0 (keyword): the same values, the scales as UE8M0 words, SF_K padded to 4 with byte 0
    p_fp8, packed = deep_gemm.per_token_cast_to_fp8(x, use_ue8m0=True, gran_k=gran_k, use_packed_ue8m0=True)
    assert torch.equal(_bits(p_fp8), _bits(x_fp8))
    padded_sf = torch.nn.functional.pad(sf64, (0, -(-sf_k // 4) * 4 - sf_k), value=2.0**-127)
    assert packed.dtype == torch.int32 and torch.equal(packed, _ue8m0_words64(padded_sf))
    assert torch.equal(deep_gemm.unpack_ue8m0_from_int(packed_sf=packed)[:, :sf_k], sf)


def test_per_token_cast_fp32_scales_close_to_float64() -> None:
    x = _randn(40, 384, seed=3, scale=5.0)
    x_fp8, sf = deep_gemm.per_token_cast_to_fp8(x, False)
    amax = x.double().view(40, 3, 128).abs().amax(-1)
    assert torch.allclose(sf.double(), amax / FP8_MAX, rtol=2**-23, atol=0)
    sf_full = sf.double().repeat_interleave(128, 1)
    deq = x_fp8.double() * sf_full
    # E4M3 rounding: half a step, 2**-4 relative for normals, 2**-10 of the scale for subnormals
    assert bool(((deq - x.double()).abs() <= x.double().abs() * 2**-4 + sf_full * 2**-10).all())
    with pytest.raises(ValueError, match="use_packed_ue8m0"):
        deep_gemm.per_token_cast_to_fp8(x, False, 128, True)


def test_per_channel_and_block_cast_shapes_as_reference() -> None:
    x = _randn(256, 320, dtype=torch.bfloat16, seed=5)
    c_fp8, c_sf = deep_gemm.per_channel_cast_to_fp8(x, True, 64)
    assert c_fp8.shape == (256, 320) and c_sf.shape == (4, 320)
    # The reference's per-block cast uses square gran_k x gran_k blocks
    b_fp8, b_sf = deep_gemm.per_block_cast_to_fp8(x, use_ue8m0=True, gran_k=64)
    assert b_sf.shape == (4, 5)
    blocks = x.double().view(4, 64, 5, 64).abs().amax(dim=(1, 3)).clamp(min=1e-4)
    assert torch.equal(b_sf.double(), _pow2_ceil64(blocks / FP8_MAX))
    ref = (x.double() / b_sf.double().repeat_interleave(64, 0).repeat_interleave(64, 1)).to(torch.float8_e4m3fn)
    assert torch.equal(_bits(b_fp8), _bits(ref))
    default_fp8, default_sf = deep_gemm.per_block_cast_to_fp8(x, False)
    assert default_sf.shape == (2, 3)


@pytest.mark.parametrize(
    ("dims", "sf_shape"), [((0,), (6,)), ((0, 1), (6, 4)), ((1, 0), (6, 4)), ((-1,), (32,)), ((), ())]
)
def test_per_custom_dims_cast(dims: tuple, sf_shape: tuple) -> None:
    x = _randn(6, 4, 32, dtype=torch.bfloat16, seed=len(dims), scale=2.0)
    x_fp8, sf = deep_gemm.per_custom_dims_cast_to_fp8(x, dims, True)
    assert x_fp8.shape == x.shape and x_fp8.dtype == torch.float8_e4m3fn and sf.shape == sf_shape
    kept = {d % 3 for d in dims}
    reduced = tuple(d for d in range(3) if d not in kept)
    amax = x.double().abs().amax(dim=reduced, keepdim=True) if reduced else x.double().abs()
    sf64 = _pow2_ceil64(amax.clamp(min=1e-4) / FP8_MAX)
    assert torch.equal(sf.double(), sf64.squeeze())
    assert torch.equal(_bits(x_fp8), _bits((x.double() / sf64).to(torch.float8_e4m3fn)))
    # keyword form, FP32 scales
    _, sf32 = deep_gemm.per_custom_dims_cast_to_fp8(x=x, dims=dims, use_ue8m0=False)
    assert torch.allclose(sf32.double(), (amax.clamp(min=1e-4) / FP8_MAX).squeeze(), rtol=2**-23, atol=0)


@pytest.mark.parametrize(
    ("dims", "error"), [((3,), ValueError), ((0, 0), ValueError), ((0.5,), TypeError), (0, TypeError)]
)
def test_per_custom_dims_cast_bad_dims(dims, error: type) -> None:
    with pytest.raises(error, match="dims must"):
        deep_gemm.per_custom_dims_cast_to_fp8(torch.ones(2, 3, 4), dims, False)


def test_ue8m0_helpers_reference_forms() -> None:
    sf = torch.exp2(torch.tensor([[0.0, -3.0, 5.0, -126.0, 127.0, 1.0, 2.0, -1.0]]))
    packed = deep_gemm.pack_ue8m0_to_int(sf)
    assert torch.equal(packed, _ue8m0_words64(sf))
    assert torch.equal(deep_gemm.unpack_ue8m0_from_int(packed), sf)
    assert torch.equal(deep_gemm.ceil_to_ue8m0(torch.tensor([3.0, 0.3])), torch.tensor([4.0, 0.5]))
    with pytest.raises(ValueError, match="powers of two"):
        deep_gemm.pack_ue8m0_to_int(torch.tensor([1.0, 3.0, 1.0, 1.0]))


# ---------------------------------------------------------------------------------------------
# FP4 casts
# ---------------------------------------------------------------------------------------------


def _nearest_even_codes64(v: torch.Tensor) -> torch.Tensor:
    """Reference E2M1 codes (0..15) of float64 values: nearest grid magnitude, ties to the even index, saturating."""
    grid = torch.tensor(E2M1_GRID, dtype=torch.float64)
    distance = (v.abs().clamp(max=6.0).unsqueeze(-1) - grid).abs()
    best = distance.min(-1, keepdim=True).values
    ties = distance == best
    # among the (one or two) nearest, the even index
    index = torch.where(ties[..., ::2].any(-1), (ties[..., ::2].int().argmax(-1) * 2), ties.int().argmax(-1))
    return index + 8 * ((v < 0) & (index != 0)).long()


def _unpack_codes(packed: torch.Tensor) -> torch.Tensor:
    b = packed.view(torch.uint8).long()
    return torch.stack([b & 0xF, b >> 4], -1).view(packed.shape[0], -1)


def test_fp4_packing_layout() -> None:
    # One block of 128 with amax 6: scale 1, so values map to codes directly
    x = torch.zeros(1, 128)
    x[0, :8] = torch.tensor([0.5, -1.0, 6.0, 0.0, -6.0, 1.5, -0.0, 3.0])
    packed, sf = deep_gemm.per_token_cast_to_fp4(x, True)
    assert packed.dtype == torch.int8 and packed.shape == (1, 64) and sf.tolist() == [[1.0]]
    # codes: 0.5 -> 1, -1 -> 8|2, 6 -> 7, 0 -> 0, -6 -> 8|7, 1.5 -> 3, -0 -> 0, 3 -> 5; low nibble first
    expected = [1 | (10 << 4), 7 | (0 << 4), 15 | (3 << 4), 0 | (5 << 4)]
    assert packed.view(torch.uint8)[0, :4].tolist() == expected
    assert packed[0, 4:].tolist() == [0] * 60


def test_fp4_round_to_nearest_even_on_grid() -> None:
    midpoints = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    row = torch.zeros(1, 32)
    row[0, :7] = torch.tensor(midpoints)
    row[0, 7:14] = -torch.tensor(midpoints)
    row[0, 14] = 6.0  # amax 6: scale 1
    packed, _ = deep_gemm.per_token_cast_to_fp4(row, True, 32)
    back = deep_gemm.cast_back_from_fp4(packed, torch.ones(1, 1), 32)
    nearest_even = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]
    assert back[0, :7].tolist() == nearest_even
    assert back[0, 7:14].tolist() == [-v for v in nearest_even]


@pytest.mark.parametrize("use_packed_ue8m0", [False, True])
@pytest.mark.parametrize(("m", "k", "gran_k"), [(16, 256, 128), (7, 96, 32), (5, 200, 64)])
def test_fp4_round_trip_exact_on_grid(m: int, k: int, gran_k: int, use_packed_ue8m0: bool) -> None:
    # Values on the E2M1 grid times a per-block power of two, each block holding +-6 * 2**s: exact round trip
    gen = torch.Generator().manual_seed(m * k)
    sf_k = -(-k // gran_k)
    codes = torch.randint(0, 16, (m, sf_k * gran_k), generator=gen)
    codes[:, ::gran_k] = 7  # a 6 in every block
    grid = torch.tensor(E2M1_GRID)
    values = torch.where(codes >= 8, -grid[codes & 7], grid[codes & 7])
    exponents = torch.randint(-12, 20, (m, sf_k), generator=gen).float()  # (amax 6 * 2**-12 is above the 1e-4 clamp)
    x = (values * torch.exp2(exponents).repeat_interleave(gran_k, 1))[:, :k]
    packed, sf = deep_gemm.per_token_cast_to_fp4(x, True, gran_k, use_packed_ue8m0)
    assert packed.shape == (m, k // 2)
    if use_packed_ue8m0:
        assert sf.dtype == torch.int32 and sf.shape == (m, -(-sf_k // 4))
        scales = deep_gemm.unpack_ue8m0_from_int(sf)[:, :sf_k]
    else:
        assert sf.dtype == torch.float32 and sf.shape == (m, sf_k)
        scales = sf
    assert torch.equal(scales, torch.exp2(exponents))  # powers of two, amax / 6 exactly
    back = deep_gemm.cast_back_from_fp4(packed, sf, gran_k, use_packed_ue8m0)
    assert back.dtype == torch.float32 and torch.equal(back, x)
    # The FP32-scale path gives the same here: amax / 6 is already a power of two
    packed32, sf32 = deep_gemm.per_token_cast_to_fp4(x, use_ue8m0=False, gran_k=gran_k)
    assert torch.equal(packed32, packed) and torch.equal(sf32, torch.exp2(exponents))


@pytest.mark.parametrize("use_ue8m0", [False, True])
def test_fp4_random_against_float64(use_ue8m0: bool) -> None:
    x = _randn(24, 320, seed=11, scale=4.0)
    packed, sf = deep_gemm.per_token_cast_to_fp4(x, use_ue8m0, 64)
    amax = x.double().view(24, 5, 64).abs().amax(-1).clamp(min=1e-4)
    sf64 = amax / 6.0
    if use_ue8m0:
        sf64 = _pow2_ceil64(sf64)
        assert torch.equal(sf.double(), sf64)
    else:
        assert torch.allclose(sf.double(), sf64, rtol=2**-23, atol=0)
    # (the scaled values in float32 as the cast computes them; the rounding checked in float64)
    scaled = (x / sf.repeat_interleave(64, 1)).double()
    assert torch.equal(_unpack_codes(packed), _nearest_even_codes64(scaled))
    back = deep_gemm.cast_back_from_fp4(packed, sf, 64)
    # E2M1 half-step bound: 0.25 below 2 and 1.0 at the top, relative to the scale
    assert bool(((back.double() - x.double()).abs() <= sf.double().repeat_interleave(64, 1) * 1.0 + 1e-12).all())


def test_transpose_packed_fp4() -> None:
    gen = torch.Generator().manual_seed(2)
    packed = torch.randint(-128, 128, (6, 10), generator=gen, dtype=torch.int8)
    t = deep_gemm.transpose_packed_fp4(packed)
    assert t.dtype == torch.int8 and t.shape == (20, 3)
    assert torch.equal(_unpack_codes(t), _unpack_codes(packed).t())
    assert torch.equal(deep_gemm.transpose_packed_fp4(a=t), packed)
    with pytest.raises(ValueError, match="must be even"):
        deep_gemm.transpose_packed_fp4(packed[:5])


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: deep_gemm.per_token_cast_to_fp4(torch.ones(4, 7), True), ValueError, "must be even"),
        (lambda: deep_gemm.per_token_cast_to_fp4(torch.ones(4, 8), False, 128, True), ValueError, "use_packed_ue8m0"),
        (lambda: deep_gemm.per_token_cast_to_fp4(torch.ones(2, 4, 8), True), ValueError, "2D"),
        (lambda: deep_gemm.per_token_cast_to_fp4(torch.ones(4, 8, dtype=torch.int32), True), TypeError, "float"),
        (lambda: deep_gemm.cast_back_from_fp4(torch.zeros(4, 4, dtype=torch.int8), torch.ones(4, 2)), ValueError,
         "sf must have shape"),
        (lambda: deep_gemm.cast_back_from_fp4(torch.zeros(4, 4, dtype=torch.int8), torch.ones(4, 1), 128, True),
         TypeError, "sf must be torch.int32"),
        (lambda: deep_gemm.cast_back_from_fp4(torch.zeros(4, 4), torch.ones(4, 1)), TypeError, "packed must be"),
    ],
)  # fmt: skip
def test_fp4_bad_inputs(call, error: type, pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        call()


# ---------------------------------------------------------------------------------------------
# K-grouped packed UE8M0 layout
# ---------------------------------------------------------------------------------------------


def _k_grouped_reference(sf: torch.Tensor, ranges: list[tuple[int, int]], gran_k: int) -> torch.Tensor:
    rows = []
    for start, end in ranges:
        group = sf[start // gran_k : -(-end // gran_k)]
        padded = torch.nn.functional.pad(group.t(), (0, -(-group.shape[0] // 4) * 4 - group.shape[0]), value=2.0**-127)
        rows.append(_ue8m0_words64(padded).t())
    return torch.cat(rows)


@pytest.mark.parametrize("mn", [96, 101])
def test_k_grouped_packed_ue8m0(mn: int) -> None:
    ks = [256, 0, 640, 128]
    x = _randn(sum(ks), mn, seed=mn)
    _, sf = deep_gemm.per_channel_cast_to_fp8(x, True, 128)
    layout = torch.tensor(ks, dtype=torch.int32)
    out = deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, layout, ks, 128, 128)
    ranges, end = [], 0
    for k in ks:
        ranges.append((end, end + k))
        end += k
    ref = _k_grouped_reference(sf, ranges, 128)
    assert out.dtype == torch.int32 and out.shape == (1 + 0 + 2 + 1, mn) and torch.equal(out, ref)
    assert out.stride() == (-(-mn // 4) * 4, 1)
    with pytest.raises(ValueError, match="multiple of k_alignment"):
        deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, layout, [250, 6, 640, 128], 128, 128)
    with pytest.raises(ValueError, match="does not match ks_cpu"):
        deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, layout.flip(0), ks, 128, 128)
    with pytest.raises(ValueError, match="at least"):
        deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf[:4], layout, ks, 128, 128)
    with pytest.raises(ValueError, match="ks_cpu must be given"):
        deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, layout, None, 128, 128)


def test_k_grouped_packed_ue8m0_psum_layout() -> None:
    # Groups of 200, 0 and 300 K rows, each starting at a multiple of k_alignment=128: [0, 200), [256, 256), [256, 556)
    ks, ends, ranges = [200, 0, 300], [200, 256, 556], [(0, 200), (256, 256), (256, 556)]
    x = _randn(556, 64, seed=1)
    _, sf = deep_gemm.per_channel_cast_to_fp8(x, True, 128)
    layout = torch.tensor(ends, dtype=torch.int32)
    ref = _k_grouped_reference(sf, ranges, 128)
    for ks_cpu in (None, [], ks):
        out = deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(
            sf, layout, ks_cpu, 128, 128, use_psum_layout=True
        )
        assert torch.equal(out, ref), ks_cpu


# ---------------------------------------------------------------------------------------------
# dist (a gloo group on the CPU)
# ---------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_DIST_WORKER = textwrap.dedent(
    """
    import sys, torch
    from deep_gemm.utils import init_dist, uneven_all_gather
    from deep_gemm.utils.dist import dist_print
    local_rank, num_local_ranks = int(sys.argv[1]), int(sys.argv[2])
    rank, world_size, group = init_dist(local_rank, num_local_ranks, backend="gloo")
    assert (rank, world_size) == (local_rank, num_local_ranks), (rank, world_size)
    # rank r holds r + 1 rows of value r
    part = torch.full((rank + 1, 3), float(rank))
    gathered = uneven_all_gather(part, group=group)
    expected = torch.cat([torch.full((r + 1, 3), float(r)) for r in range(world_size)])
    assert torch.equal(gathered, expected), gathered
    cols = uneven_all_gather(part.t().contiguous(), dim=-1)
    assert torch.equal(cols, expected.t()), cols
    dist_print(f"rank {rank} ok")
    dist_print("once", once_in_node=True)
    torch.distributed.destroy_process_group()
    """
)


@pytest.mark.parametrize("num_ranks", [1, 2])
def test_init_dist_and_uneven_all_gather_gloo(num_ranks: int) -> None:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE="1", RANK="0")
    procs = [
        subprocess.Popen([sys.executable, "-c", _DIST_WORKER, str(r), str(num_ranks)], env=env, cwd=OUTSIDE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in range(num_ranks)
    ]  # fmt: skip
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    printed = "".join(out for out, _ in outputs)
    assert sorted(line for line in printed.splitlines() if line.startswith("rank")) == [
        f"rank {r} ok" for r in range(num_ranks)
    ]
    assert printed.count("once") == 1


def test_dist_bad_inputs() -> None:
    from deep_gemm.utils import dist as dg_dist

    with pytest.raises(ValueError, match="local_rank"):
        deep_gemm.init_dist(2, 2)
    with pytest.raises(TypeError, match="num_local_ranks"):
        deep_gemm.init_dist(0, "1")
    if not torch.distributed.is_initialized():
        with pytest.raises(RuntimeError, match="not initialized"):
            deep_gemm.uneven_all_gather(torch.ones(2))
    if dg_dist._local_rank is None:
        with pytest.raises(RuntimeError, match="init_dist first"):
            dg_dist.dist_print("x")


# ---------------------------------------------------------------------------------------------
# testing helpers
# ---------------------------------------------------------------------------------------------


def test_calc_diff_returns_a_0dim_tensor_like_the_reference() -> None:
    x = _randn(100, 50, seed=4)
    y = x + _randn(100, 50, seed=5) * 1e-3
    diff = deep_gemm.testing.calc_diff(x, y)
    assert isinstance(diff, torch.Tensor) and diff.dim() == 0 and diff.dtype == torch.float64
    x64, y64 = x.double(), y.double()
    assert diff.item() == pytest.approx(1 - 2 * (x64 * y64).sum().item() / (x64 * x64 + y64 * y64).sum().item())
    assert float(diff) < 1e-5 and diff < 1e-5 and f"{diff:.2e}"
    assert deep_gemm.testing.calc_diff(x, x).item() == pytest.approx(0.0, abs=1e-15)


def test_count_bytes_reference_forms() -> None:
    a, b = torch.empty(4, 8), torch.empty(3, dtype=torch.int8)
    assert deep_gemm.testing.count_bytes(a, b) == 4 * 8 * 4 + 3
    assert deep_gemm.testing.count_bytes((a, None), [b, (a,)]) == 2 * 128 + 3


def test_assert_bitwise_equal() -> None:
    x = _randn(8, 8, seed=6)
    deep_gemm.testing.assert_bitwise_equal(x, x.t().contiguous().t())
    deep_gemm.testing.assert_bitwise_equal(x, x.clone(), "clone")
    nan = torch.tensor([float("nan"), 1.0])
    deep_gemm.testing.assert_bitwise_equal(nan, nan.clone())
    with pytest.raises(AssertionError, match=r"zeros: 1 of 2 elements differ bitwise; first at \(1,\)"):
        deep_gemm.testing.assert_bitwise_equal(torch.tensor([0.0, 0.0]), torch.tensor([0.0, -0.0]), label="zeros")
    with pytest.raises(AssertionError, match="dtypes differ"):
        deep_gemm.testing.assert_bitwise_equal(x, x.double())
    with pytest.raises(AssertionError, match="shapes differ"):
        deep_gemm.testing.assert_bitwise_equal(x, x[:4])
    y = x.clone()
    y[3, 5] = y[3, 5].item() * (1 + 2**-20)
    with pytest.raises(AssertionError, match=r"first at \(3, 5\)"):
        deep_gemm.testing.assert_bitwise_equal(x, y)


def test_test_filter_and_ignore_env(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    @deep_gemm.testing.test_filter(lambda: False)
    def filtered() -> int:
        return 1

    @deep_gemm.testing.test_filter(condition=lambda: True)
    def kept(v: int) -> int:
        return v

    assert filtered() is None and kept(5) == 5
    assert "filtered:\n > Filtered by" in capsys.readouterr().out

    monkeypatch.setenv("DG_COMPAT_TEST_ENV", "1")
    seen = []

    def read_env() -> None:
        seen.append(os.environ.get("DG_COMPAT_TEST_ENV"))

    deep_gemm.testing.ignore_env("DG_COMPAT_TEST_ENV", lambda: True)(read_env)()
    deep_gemm.testing.ignore_env(name="DG_COMPAT_TEST_ENV", condition=lambda: False)(read_env)()
    assert seen == [None, "1"] and os.environ["DG_COMPAT_TEST_ENV"] == "1"

    @deep_gemm.testing.ignore_env("DG_COMPAT_TEST_ENV", lambda: True)
    def raises() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        raises()
    assert os.environ["DG_COMPAT_TEST_ENV"] == "1"


def test_output_suppression(capfd: pytest.CaptureFixture) -> None:
    with deep_gemm.testing.empty_suppress():
        print("kept")
    with deep_gemm.testing.suppress_stdout_stderr():
        print("hidden-python")
        print("hidden-stderr", file=sys.stderr)
        os.write(1, b"hidden-fd1\n")
        os.write(2, b"hidden-fd2\n")
    print("after")
    out, err = capfd.readouterr()
    assert "kept" in out and "after" in out and "hidden" not in out + err


def test_bench_kineto_honours_dg_use_nvidia_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setenv("DG_USE_NVIDIA_TOOLS", "1")
    assert deep_gemm.testing.bench_kineto(lambda: calls.append(1), "gemm") == 1
    assert deep_gemm.testing.bench_kineto(lambda: calls.append(1), ("a", "b"), 30, True) == (1, 1)
    assert calls == []  # nothing ran
    with pytest.raises(TypeError, match="kernel_names"):
        deep_gemm.testing.bench_kineto(lambda: None, ["gemm"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the errors on a machine without a GPU")
def test_timing_without_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DG_USE_NVIDIA_TOOLS", raising=False)
    with pytest.raises(RuntimeError, match="bench: needs a CUDA GPU"):
        deep_gemm.testing.bench(lambda: None)
    with pytest.raises(RuntimeError, match="bench_kineto: needs a CUDA GPU"):
        deep_gemm.testing.bench_kineto(lambda: None, "gemm")
    with pytest.raises(RuntimeError, match="get_arch_major"):
        deep_gemm.testing.get_arch_major()
    with pytest.raises(ValueError, match="num_tests"):
        deep_gemm.testing.bench(lambda: None, 5, 0)


def test_debug_checks_flag_reads_like_the_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    from deep_gemm.utils.casts import debug_checks_enabled

    for value, expected in [("", False), ("0", False), ("off", False), ("False", False), ("1", True), ("yes", True)]:
        monkeypatch.setenv("DG_DEBUG_CHECKS", value)
        assert debug_checks_enabled() is expected, value
    monkeypatch.delenv("DG_DEBUG_CHECKS")
    assert not debug_checks_enabled()


# ---------------------------------------------------------------------------------------------
# GPU tier
# ---------------------------------------------------------------------------------------------

gpu = pytest.mark.gpu
# torch.cuda._sleep's kernel (ATen's Sleep.cu)
SPIN_KERNEL = "spin_kernel"


@gpu
def test_get_arch_major_on_gpu() -> None:
    assert deep_gemm.testing.get_arch_major() == torch.cuda.get_device_capability()[0] == 9


@gpu
def test_bench_and_bench_kineto_on_gpu(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DG_USE_NVIDIA_TOOLS", raising=False)
    cycles = 2_000_000  # about 1 ms at 2 GHz
    t = deep_gemm.testing.bench(lambda: torch.cuda._sleep(cycles))
    assert isinstance(t, float) and 1e-4 < t < 1e-1
    t_hp = deep_gemm.testing.bench(lambda: torch.cuda._sleep(cycles), 2, 5, True)
    assert 0.5 < t_hp / t < 2.0
    k = deep_gemm.testing.bench_kineto(lambda: torch.cuda._sleep(cycles), SPIN_KERNEL, num_tests=5)
    assert isinstance(k, float) and 0.5 < k / t < 2.0
    trace = tmp_path / "trace.json"
    (k2,) = deep_gemm.testing.bench_kineto(
        lambda: torch.cuda._sleep(cycles), (SPIN_KERNEL,), 5, True, str(trace), False
    )
    assert 0.5 < k2 / k < 2.0 and trace.stat().st_size > 0
    # Two launches per call: per launch by default, per call of fn with with_multiple_kernels
    def twice() -> None:
        torch.cuda._sleep(cycles)
        torch.cuda._sleep(cycles)

    per_launch = deep_gemm.testing.bench_kineto(twice, SPIN_KERNEL, num_tests=5)
    per_call = deep_gemm.testing.bench_kineto(twice, SPIN_KERNEL, num_tests=5, with_multiple_kernels=True)
    assert 1.5 < per_call / per_launch < 2.5
    # A name that matches nothing gives 0 s and a warning, as the reference returns 0; the L2 flush's own kernel
    # (PyTorch's reduce_kernel) is not counted ('reduce' is cuBLAS's split-K kernel in the reference's scripts)
    for name in ("no_such_kernel", "reduce"):
        with pytest.warns(UserWarning, match="no kernel name contains"):
            assert deep_gemm.testing.bench_kineto(lambda: torch.cuda._sleep(cycles), name, num_tests=2) == 0.0


@gpu
def test_casts_bitwise_same_on_gpu() -> None:
    x = _randn(64, 384, dtype=torch.bfloat16, seed=9, scale=3.0)
    for cast in (
        lambda t: deep_gemm.per_token_cast_to_fp8(t, True, 128, True),
        lambda t: deep_gemm.per_custom_dims_cast_to_fp8(t.view(64, 3, 128), (0, 1), True),
        lambda t: deep_gemm.per_token_cast_to_fp4(t, True, 32, True),
        lambda t: deep_gemm.per_token_cast_to_fp4(t, False, 64),
    ):
        cpu_out, gpu_out = cast(x), cast(x.cuda())
        for c, g in zip(cpu_out, gpu_out, strict=True):
            deep_gemm.testing.assert_bitwise_equal(g.cpu(), c)
    packed, sf = deep_gemm.per_token_cast_to_fp4(x.cuda(), True)
    deep_gemm.testing.assert_bitwise_equal(
        deep_gemm.cast_back_from_fp4(packed, sf).cpu(), deep_gemm.cast_back_from_fp4(packed.cpu(), sf.cpu())
    )
    deep_gemm.testing.assert_bitwise_equal(deep_gemm.transpose_packed_fp4(packed).cpu(),
                                           deep_gemm.transpose_packed_fp4(packed.cpu()))  # fmt: skip


@gpu
def test_layout_functions_from_utils_layout_on_gpu() -> None:
    from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor, mn_major_tma_aligned_reference

    sf = _randn(300, 7, seed=10).abs().cuda()
    out = get_mn_major_tma_aligned_tensor(sf)
    ref = mn_major_tma_aligned_reference(sf)
    assert out.stride() == ref.stride() and torch.equal(out, ref)
    ks = [256, 128]
    _, sf_k = deep_gemm.per_channel_cast_to_fp8(_randn(384, 100, seed=12).cuda(), True)
    layout = torch.tensor(ks, dtype=torch.int32, device="cuda")
    out = deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf_k, layout, ks, 128, 128)
    cpu = deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf_k.cpu(), layout.cpu(), ks, 128, 128)
    assert out.is_cuda and torch.equal(out.cpu(), cpu)


@gpu
@pytest.mark.parametrize(
    ("ks", "mn", "gran_k", "k_alignment", "psum"),
    [([256, 128], 100, 128, 128, False), ([0, 640, 128, 1280], 4097, 128, 128, False),
     ([300, 0, 77, 512], 257, 32, 128, True), ([96, 32], 7, 32, 32, True)],
)  # fmt: skip
def test_k_grouped_packed_ue8m0_kernel_matches_pytorch(ks, mn: int, gran_k: int, k_alignment: int, psum: bool) -> None:
    # The CUDA path (the layout kernel, one launch per group, into the output rows) gives the CPU path's words,
    # strides and padding bit for bit, for row-major and column-major (transposed) scales; the rows past the groups
    # in sf are not read
    ends, end = [], 0
    for k in ks:
        end = (-(-end // k_alignment) * k_alignment if psum else end) + k
        ends.append(end)
    rows = -(-end // gran_k) + 3
    exps = torch.randint(-30, 30, (rows, mn), generator=torch.Generator().manual_seed(mn))
    sf = torch.pow(2.0, exps.float())
    layout = torch.tensor(ends if psum else ks, dtype=torch.int32)
    cpu = deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, layout, ks, gran_k, k_alignment, psum)
    for sf_cuda in (sf.cuda(), sf.t().contiguous().cuda().t()):
        out = deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf_cuda, layout.cuda(), ks, gran_k,
                                                                              k_alignment, psum)  # fmt: skip
        assert out.is_cuda and out.shape == cpu.shape and out.stride() == cpu.stride()
        assert torch.equal(out.cpu(), cpu)
        storage = torch.as_strided(out, (out.shape[0], out.stride(0)), (out.stride(0), 1))
        assert (storage[:, mn:] == 0).all(), "the row padding must be zero"


def test_k_grouped_pack_entry_checks_its_arguments() -> None:
    pack = deep_gemm._C._pack_ue8m0_k_grouped
    with pytest.raises(ValueError, match="sf must be 2-D"):
        pack(torch.ones(4), [0], [1])
    with pytest.raises(ValueError, match="sf must have dtype torch.float32"):
        pack(torch.ones(4, 4, dtype=torch.bfloat16), [0], [1])
    with pytest.raises(ValueError, match="sf must be on a CUDA device"):
        pack(torch.ones(4, 4), [0], [1])


@gpu
def test_init_dist_nccl_single_rank() -> None:
    # In a subprocess: init_dist sets the default torch device, as the reference does
    code = textwrap.dedent(
        """
        import torch
        from deep_gemm.utils import init_dist, uneven_all_gather
        rank, world_size, group = init_dist(0, 1)
        assert (rank, world_size) == (0, 1)
        assert torch.empty(1).is_cuda
        x = torch.arange(6.0).view(2, 3)
        assert torch.equal(uneven_all_gather(x, 1, group), x)
        torch.distributed.destroy_process_group()
        """
    )
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE="1", RANK="0")
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=OUTSIDE, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr



def test_bench_kineto_drops_only_the_flush_launches() -> None:
    # Each call's share of the profiled launches starts with the flush's sequence: those are dropped, fn's own
    # launches of the same kernel stay; a share that does not start so falls back to dropping the flush's names
    from deep_gemm.testing.drop_in_bench import _without_flush

    flush = ("reduce_kernel<int>", "memset")
    calls = [("reduce_kernel<int>", 90.0), ("memset", 1.0), ("gemm", 10.0), ("reduce_kernel<int>", 2.0)] * 3
    assert _without_flush(calls, flush, 3) == [("gemm", 10.0), ("reduce_kernel<int>", 2.0)] * 3
    assert _without_flush(calls, (), 3) == calls
    odd = calls[1:]  # (not three equal shares)
    assert _without_flush(odd, flush, 3) == [("gemm", 10.0)] * 3


def test_bench_kineto_reads_the_reference_kernel_names() -> None:
    # The reference's test scripts time our kernels by its own kernel names: GEMM names stand for our one GEMM kernel
    # (per call: einsum may launch it once per batch entry), 'mega_moe' for the stage kernels and grouped GEMMs,
    # 'mqa_logits' for the MQA kernel and its pre-pass (per call), 'clean_logits' (done inside our MQA kernels) for no
    # kernel (0 s); other names match as substrings (per launch); unknown ones match nothing (0 s, a warning)
    from deep_gemm.testing.drop_in_bench import KernelMatch, match_kernel_name

    gemm = "void deep_gemm::sm90_gemm_kernel<deep_gemm::GemmKernelConfig{128u, 64u}>(unsigned int)"
    mqa = "void deep_gemm::sm90_fp8_mqa_logits_kernel<deep_gemm::MqaLogitsConfig{64u}>(unsigned int)"
    pieces = "void deep_gemm::mqa_logits_pieces_kernel<128u>(float const*)"
    pad = "void deep_gemm::zero_padding_rows_kernel<128u>(int const*)"
    moe = [f"void deep_gemm::mega_moe_{stage}_kernel<1u>(int)" for stage in ("combine", "gather", "route", "swiglu")]
    seen = sorted([gemm, mqa, pieces, pad, *moe])
    for name in ("fp8_gemm", "bf16_gemm", "bmn_bnk_mn_gemm_impl", "m_grouped_bf16_gemm_contiguous_tl_impl"):
        assert match_kernel_name(name, seen) == KernelMatch((gemm,), per_call=True), name
    assert match_kernel_name("gemm_", seen) == KernelMatch((gemm,))  # (a substring of ours: per launch)
    for name in ("mega_moe", "sm90_fp8_mega_moe_impl"):
        assert match_kernel_name(name, seen) == KernelMatch(tuple(sorted([gemm, *moe])), per_call=True), name
    assert match_kernel_name("mqa_logits", seen) == KernelMatch(tuple(sorted([mqa, pieces])), per_call=True)
    assert match_kernel_name("fp8_mqa_logits", seen) == KernelMatch(tuple(sorted([mqa, pieces])), per_call=True)
    assert match_kernel_name("clean_logits", seen) == KernelMatch((), fused=True)
    assert match_kernel_name("zero_padding", seen) == KernelMatch((pad,))
    schedule = "void deep_gemm::paged_mqa_schedule_kernel<1u>(int const*)"
    assert match_kernel_name("paged_mqa_logits_metadata", [schedule]) == KernelMatch((schedule,), per_call=True)
    pack = "void deep_gemm::pack_ue8m0_kernel<256u>(float const*)"
    assert match_kernel_name("pack_fp32_into_ue8m0", [gemm, pack]) == KernelMatch((pack,), per_call=True)
    assert match_kernel_name("mega_moe_route", seen) == KernelMatch((moe[2],))
    assert match_kernel_name("fp8_paged_mqa_logits", seen) == KernelMatch(())
    assert match_kernel_name("fp8_gemm", [mqa]) == KernelMatch(())  # (no GEMM kernel ran: nothing to stand for)
