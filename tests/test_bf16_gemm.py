"""BF16 GEMMs: bf16_gemm_{nt,nn,tn,tt} in every layout, the m-grouped (contiguous nt/nn, masked nt) and k-grouped
(tn) BF16 GEMMs, and the cuBLASLt passthrough cublaslt_gemm_{nt,nn,tn,tt} that serves the same contract.

CPU tier: the input validation of the BF16 GEMMs (dense, m-grouped, k-grouped) and of the passthrough (each bad
input raises ValueError naming the argument; valid inputs on the CPU reach the device check), the names, docstrings
and signatures, and the BF16 configs the heuristic picks. GPU tier: every output against a
float64 reference of the same BF16 values (calc_diff, then element-wise with the worst element printed), outputs
poisoned with NaN before each call so that unwritten elements fail and elements that must not be written (padding
rows and columns, rows past masked_m) keep their poison exactly, BF16 and FP32 D with and without C (in place
too), edge shapes (N = 100 with a padded D, K = 8, K = 0, M = 0, N = 0), and two runs bitwise equal."""

import os
import random
import re
import subprocess
import sys

import pytest
import torch
from jit_helpers import signature_params
from padding_rows import check_padding_rows, zeroed_padding_rows

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.utils import align

gpu = pytest.mark.gpu

LAYOUTS = ("nt", "nn", "tn", "tt")
FAMILIES = ("bf16_gemm", "cublaslt_gemm")
# calc_diff bounds against float64: BF16 D is bounded by its rounding (about 1.4e-6); FP32 D accumulates the exact
# BF16 products in FP32 (about 1e-11 for K = 7168), so 1e-8 also catches an FP32 result rounded through BF16.
MAX_DIFF = {torch.bfloat16: 1e-5, torch.float32: 1e-8}
# Element-wise: |d - ref| <= rtol * |ref| + atol * rms(ref), (rtol, atol) per D dtype. BF16: one unit in the last
# place, plus what split-K partial sums rounded to BF16 add (cuBLAS, by PyTorch's default
# allow_bf16_reduced_precision_reduction, errs by about 1% of rms(ref)); a wrong tile errs by about rms(ref).
TOL = {torch.bfloat16: (2.0**-7, 2.0**-5), torch.float32: (1e-4, 1e-4)}


def a_shape_text(layout: str) -> str:
    return "[M, K]" if layout[0] == "n" else "[K, M]"


def b_shape_text(layout: str) -> str:
    return "[N, K]" if layout[1] == "t" else "[K, N]"


def transposed_copy(x: torch.Tensor) -> torch.Tensor:
    """x.t() stored row-major with its row stride padded to 16 bytes (TMA), as an MN-major operand must be held
    when M or N is not a multiple of 8."""
    rows, cols = x.shape[1], x.shape[0]
    padded = torch.empty(rows, (cols + 7) // 8 * 8, device=x.device, dtype=x.dtype)[:, :cols]
    padded.copy_(x.t())
    return padded


def to_layout(layout: str, a_mk: torch.Tensor, b_nk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A [M, K] and B [N, K] stored as `layout` reads them: A [M, K] (n) or [K, M] (t), B [N, K] (t) or [K, N] (n),
    row-major (transposed copies with 16-byte row strides)."""
    a = a_mk if layout[0] == "n" else transposed_copy(a_mk)
    b = b_nk if layout[1] == "t" else transposed_copy(b_nk)
    return a, b


def other_major(t: torch.Tensor) -> torch.Tensor:
    """The same values and shape, stored with stride 1 along the first dimension instead of the last."""
    return t.t().contiguous().t()


def no_unit_stride(t: torch.Tensor) -> torch.Tensor:
    """The same shape with stride 1 along neither dimension (every other element of wider rows): no major at all."""
    rows, cols = t.shape
    return torch.zeros(rows, 2 * cols, device=t.device, dtype=t.dtype)[:, ::2]


# ----------------------------------------------------------------------------- CPU tier
M, N, K = 128, 64, 256


def cpu_operands(layout: str, out_dtype: torch.dtype = torch.float32):
    a, b = to_layout(layout, torch.zeros(M, K, dtype=torch.bfloat16), torch.zeros(N, K, dtype=torch.bfloat16))
    return a, b, torch.empty(M, N, dtype=out_dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    "case",
    [
        "on_cpu",
        "on_cpu_bf16_c",
        "on_cpu_in_place",
        "a_dtype",
        "b_dtype",
        "a_3d",
        "b_1d",
        "a_major",
        "b_major",
        "k_mismatch",
        "d_dtype",
        "d_3d",
        "d_shape",
        "d_column_major",
        "c_dtype",
        "c_shape",
        "c_column_major",
        "c_overlap",
    ],
)
def test_cublaslt_bad_inputs_raise_value_error(layout: str, case: str) -> None:
    a, b, d = cpu_operands(layout)
    c = None
    pattern = r"a must be on a CUDA device"
    if case == "on_cpu_bf16_c":
        d = d.bfloat16()
        c = torch.zeros_like(d)
    elif case == "on_cpu_in_place":
        c = d
    elif case == "a_dtype":
        a = a.half()
        pattern = r"a must have dtype torch\.bfloat16, torch\.float32, torch\.float8_e4m3fn or torch\.float8_e5m2, got a "
        pattern += r"torch\.float16"
    elif case == "b_dtype":
        b, pattern = b.half(), r"b \(a's dtype\) must have dtype torch\.bfloat16, got a torch\.float16 tensor"
    elif case == "a_3d":
        a, pattern = a.unsqueeze(0), r"a must be 2-D"
    elif case == "b_1d":
        b, pattern = b.flatten(), r"b must be 2-D"
    elif case == "a_major":
        a = no_unit_stride(a)
        pattern = rf"a \({re.escape(a_shape_text(layout))}\) must have stride 1 along K \(K-major\) or along its other"
    elif case == "b_major":
        b = no_unit_stride(b)
        pattern = rf"b \({re.escape(b_shape_text(layout))}\) must have stride 1 along K \(K-major\) or along its other"
    elif case == "k_mismatch":
        _, b = to_layout(layout, torch.zeros(0, 0), torch.zeros(N, K + 16, dtype=torch.bfloat16))
        pattern = rf"b must be {re.escape(b_shape_text(layout))} with K = {K} \(a's K\)"
    elif case == "d_dtype":
        d, pattern = d.half(), r"d must have dtype torch\.bfloat16 or torch\.float32"
    elif case == "d_3d":
        d, pattern = d.unsqueeze(0), r"d must be 2-D"
    elif case == "d_shape":
        d, pattern = torch.empty(M, N + 8), rf"d must be \[M, N\] = \[{M}, {N}\]"
    elif case == "d_column_major":
        d, pattern = torch.empty(N, M).t(), r"d must be row-major"
    elif case == "c_dtype":
        c, pattern = torch.empty(M, N, dtype=torch.bfloat16), r"c \(d's dtype\) must have dtype torch\.float32"
    elif case == "c_shape":
        c, pattern = torch.empty(M, N - 8), rf"c must be \[M, N\] = \[{M}, {N}\] \(d's shape\)"
    elif case == "c_column_major":
        c, pattern = torch.empty(N, M).t(), r"c must be row-major"
    elif case == "c_overlap":
        storage = torch.empty(M * N + N)
        d, c = storage[: M * N].view(M, N), storage[N:].view(M, N)
        pattern = r"c must be d itself or not overlap d"
    with pytest.raises(ValueError, match=pattern):
        getattr(deep_gemm, f"cublaslt_gemm_{layout}")(a, b, d, c)


def test_cublaslt_names_docstrings_and_signatures() -> None:
    for layout in LAYOUTS:
        name = f"cublaslt_gemm_{layout}"
        fn = getattr(deep_gemm, name)
        assert name in deep_gemm.__all__
        assert callable(fn) and "cuBLAS" in (fn.__doc__ or ""), f"{name} has no docstring"
        assert signature_params(fn) == [("a", None), ("b", None), ("d", None), ("c", "None")], name


def test_bf16_names_and_signatures() -> None:
    for layout in LAYOUTS:
        dims = "'nk'" if layout[0] == "n" else "'mn'"
        fn = getattr(deep_gemm, f"bf16_gemm_{layout}")
        assert (fn.__doc__ or "").strip(), f"bf16_gemm_{layout} has no docstring"
        assert signature_params(fn) == [("a", None), ("b", None), ("d", None), ("c", "None"), ("compiled_dims", dims)]
    grouped = [("a", None), ("b", None), ("d", None), ("grouped_layout", None), ("compiled_dims", "'nk'")]
    grouped += [("use_psum_layout", "False"), ("ensure_zero_padding", "True")]
    assert signature_params(deep_gemm.m_grouped_bf16_gemm_nn_contiguous) == grouped
    grouped += [("expected_m_for_psum_layout", "None")]
    assert signature_params(deep_gemm.m_grouped_bf16_gemm_nt_contiguous) == grouped
    masked = [
        ("a", None),
        ("b", None),
        ("d", None),
        ("masked_m", None),
        ("expected_m", None),
        ("compiled_dims", "'nk'"),
    ]
    assert signature_params(deep_gemm.m_grouped_bf16_gemm_nt_masked) == masked
    assert deep_gemm.bf16_m_grouped_gemm_nt_masked is deep_gemm.m_grouped_bf16_gemm_nt_masked
    k_grouped = [("a", None), ("b", None), ("d", None), ("ks_cpu", None), ("grouped_layout", None), ("c", "None")]
    k_grouped += [("compiled_dims", "'mn'"), ("use_psum_layout", "False")]
    assert signature_params(deep_gemm.k_grouped_bf16_gemm_tn_contiguous) == k_grouped


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    "case",
    [
        "on_cpu",
        "on_cpu_in_place",
        "a_dtype",
        "b_3d",
        "a_major",
        "b_major",
        "row_stride",
        "k_mismatch",
        "d_dtype",
        "c_dtype",
        "c_overlap",
        "compiled_dims",
    ],
)
def test_bf16_gemm_bad_inputs_raise_value_error(layout: str, case: str) -> None:
    """The BF16 GEMMs check everything checkable on the host first (the device last): each bad input raises
    ValueError naming the argument and what was expected."""
    a, b, d = cpu_operands(layout)
    c, compiled_dims = None, "mn"
    a_shape, b_shape = re.escape(a_shape_text(layout)), re.escape(b_shape_text(layout))
    pattern = r"a must be on a CUDA device"
    if case == "on_cpu_in_place":
        c = d
    elif case == "a_dtype":
        a, pattern = a.half(), r"a must have dtype torch\.bfloat16, got a torch\.float16 tensor"
    elif case == "b_3d":
        b, pattern = b.unsqueeze(0), r"b must be 2-D"
    elif case == "a_major":
        a, pattern = no_unit_stride(a), rf"a \({a_shape}\) must have stride 1 along K \(K-major\) or along its other"
    elif case == "b_major":
        b, pattern = no_unit_stride(b), rf"b \({b_shape}\) must have stride 1 along K \(K-major\) or along its other"
    elif case == "row_stride":
        # a row stride of 132 elements (264 bytes): TMA needs multiples of 16 bytes
        a = torch.zeros(a.shape[0], 132, dtype=torch.bfloat16)[:, : a.shape[1]]
        pattern = r"a: stride 132 of dim 0 must be a multiple of 16 bytes for TMA"
    elif case == "k_mismatch":
        _, b = to_layout(layout, torch.zeros(0, 0), torch.zeros(N, K + 16, dtype=torch.bfloat16))
        pattern = rf"b must be {b_shape} with K = {K} \(a's K\)"
    elif case == "d_dtype":
        d, pattern = d.half(), r"d must have dtype torch\.bfloat16 or torch\.float32"
    elif case == "c_dtype":
        c, pattern = torch.empty(M, N, dtype=torch.bfloat16), r"c \(d's dtype\) must have dtype torch\.float32"
    elif case == "c_overlap":
        storage = torch.empty(M * N + N)
        d, c = storage[: M * N].view(M, N), storage[N:].view(M, N)
        pattern = r"c must be d itself or not overlap d"
    elif case == "compiled_dims":
        compiled_dims, pattern = "mx", r"compiled_dims must use only the letters m, n, k"
    with pytest.raises(ValueError, match=pattern):
        getattr(deep_gemm, f"bf16_gemm_{layout}")(a, b, d, c, compiled_dims)


@pytest.mark.parametrize(
    ("fn", "case", "pattern"),
    [
        ("nt_contiguous", "b_2d", r"b must be 3-D"),
        ("nn_contiguous", "k_mismatch", r"b must be \[G, K, N\] with K = 256 \(a's K\)"),
        ("nt_contiguous", "d_fp32", r"d must have dtype torch\.bfloat16"),
        ("nt_contiguous", "layout_rows", r"grouped_layout must be int32 \[M\] = \[128\]"),
        ("nt_contiguous", "on_cpu", r"a must be on a CUDA device"),
        ("nt_masked", "max_m", r"max_m = 100\) must be a multiple of 64"),
        ("nt_masked", "masked_m_dtype", r"masked_m must have dtype torch\.int32"),
        ("nt_masked", "on_cpu", r"a must be on a CUDA device"),
    ],
)
def test_m_grouped_bf16_bad_inputs_raise_value_error(fn: str, case: str, pattern: str) -> None:
    g, n, k = 2, 64, 256
    b = (
        torch.zeros(g, k, n, dtype=torch.bfloat16)
        if fn.startswith("nn")
        else torch.zeros(g, n, k, dtype=torch.bfloat16)
    )
    if fn == "nt_masked":
        max_m = 100 if case == "max_m" else 128
        a = torch.zeros(g, max_m, k, dtype=torch.bfloat16)
        d = torch.empty(g, max_m, n, dtype=torch.bfloat16)
        masked_m = torch.zeros(g, dtype=torch.int64 if case == "masked_m_dtype" else torch.int32)
        with pytest.raises(ValueError, match=pattern):
            deep_gemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, 64)
        return
    a = torch.zeros(128, k, dtype=torch.bfloat16)
    d = torch.empty(128, n, dtype=torch.float32 if case == "d_fp32" else torch.bfloat16)
    layout = torch.zeros(64 if case == "layout_rows" else 128, dtype=torch.int32)
    if case == "b_2d":
        b = b[0]
    elif case == "k_mismatch":
        b = torch.zeros(g, k + 16, n, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=pattern):
        getattr(deep_gemm, f"m_grouped_bf16_gemm_{fn}")(a, b, d, layout)


@pytest.mark.parametrize(
    ("case", "pattern"),
    [
        ("k_negative", r"ks_cpu\[0\] = -8: each group's K must be a non-negative multiple of 1"),
        ("d_bf16", r"d \(k-grouped GEMMs write FP32\) must have dtype torch\.float32"),
        ("a_short", r"a must be \[sum\(K\), M\] with at least 384 rows and M = 128"),
        ("b_column_major", r"b must be contiguous in its last dimension \(row-major \[sum\(K\), N\]\)"),
        ("on_cpu", r"a must be on a CUDA device"),
    ],
)
def test_k_grouped_bf16_bad_inputs_raise_value_error(case: str, pattern: str) -> None:
    ks, m, n = [256, 128], 128, 64
    a, b = torch.zeros(sum(ks), m, dtype=torch.bfloat16), torch.zeros(sum(ks), n, dtype=torch.bfloat16)
    d = torch.empty(len(ks), m, n, dtype=torch.bfloat16 if case == "d_bf16" else torch.float32)
    if case == "k_negative":
        ks = [-8, 128]
    elif case == "a_short":
        a = a[:200]
    elif case == "b_column_major":
        b = other_major(b)
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, torch.tensor(ks, dtype=torch.int32))


def test_bf16_heuristic() -> None:
    """BF16 configs: no three-warpgroup tiles, accumulators within the register budget, BLOCK_N a multiple of 64 for
    an MN-major B, FP32 D through TMA in 32-column chunks, split-K (never with a TMA store) for decode shapes with
    any D and C (the reduction adds C), stages that fit."""
    config = deep_gemm._C.get_gemm_config
    for m, n, k in [(1, 7168, 2048), (128, 2112, 7168), (4096, 7168, 7168), (4096, 129280, 7168), (8192, 256, 7168)]:
        for mn_a in (False, True):
            for mn_b in (False, True):
                for fp32, has_c in ((False, False), (True, False), (True, True), (False, True)):
                    cfg = config(m, n, k, bf16=True, mn_major_a=mn_a, mn_major_b=mn_b, fp32_out=fp32, has_c=has_c)
                    assert cfg["bf16"] and cfg["num_math_warpgroups"] in (1, 2), cfg
                    slices = cfg["block_m"] // cfg["num_math_warpgroups"] // 64
                    assert slices * cfg["block_n"] // 2 <= 128, cfg
                    assert not mn_b or cfg["block_n"] % 64 == 0, cfg
                    assert cfg["num_splits"] == 1 or not cfg["use_tma_store"], cfg
                    assert not (fp32 and cfg["use_tma_store"]) or cfg["block_n"] % 32 == 0, cfg
                    assert cfg["smem_bytes"] <= 232448 and cfg["num_stages"] >= 2, cfg
                    # FP32 D through TMA stages 1 .. BLOCK_N / 32 chunks per math warpgroup; other kernels none
                    tma_fp32 = fp32 and cfg["use_tma_store"]
                    assert (1 <= cfg["fp32_buffers"] <= cfg["block_n"] // 32) if tma_fp32 else not cfg["fp32_buffers"]
    # A buffer per 32-column chunk where 4 stages still fit (128 x 96 tiles: 3 buffers, 6 stages), else as many as
    # keep 4 (128 x 256 tiles: 2 buffers, 4 stages)
    cfg = config(128, 24576, 1536, bf16=True, fp32_out=True, has_c=True, stream_k=0)
    assert (cfg["block_n"], cfg["fp32_buffers"], cfg["num_stages"]) == (96, 3, 6), cfg
    cfg = config(4096, 4096, 7168, bf16=True, fp32_out=True, has_c=True, stream_k=0)
    assert (cfg["block_n"], cfg["fp32_buffers"], cfg["num_stages"]) == (256, 2, 4), cfg
    # A decode shape with few tiles splits K also with FP32 D and a C
    assert config(128, 2112, 7168, bf16=True, fp32_out=True, has_c=True)["num_splits"] > 1
    with pytest.raises(ValueError, match="mn_major_a, mn_major_b and fp32_out describe BF16 GEMMs"):
        config(128, 128, 128, mn_major_a=True)


# ----------------------------------------------------------------------------- GPU tier: helpers
def randn(*shape: int, seed: int, scale: float = 1.0, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, generator=generator, device="cuda") * scale).to(dtype)


def dtype_id(dtype: torch.dtype) -> str:
    return "bf16" if dtype == torch.bfloat16 else "fp32"


def check_output(d: torch.Tensor, ref: torch.Tensor, case: str) -> None:
    """d (any shape) against its float64 reference: every element finite (NaN poison: unwritten), calc_diff, and
    element-wise with the worst element named."""
    assert d.shape == ref.shape, f"{case}: shape {tuple(d.shape)} != {tuple(ref.shape)}"
    if d.numel() == 0:
        return
    finite = torch.isfinite(d)
    if not finite.all():
        first = tuple((~finite).nonzero()[0].tolist())
        raise AssertionError(f"{case}: {int((~finite).sum())} elements unwritten or not finite, first at {first}")
    diff = calc_diff(d, ref)
    assert diff < MAX_DIFF[d.dtype], f"{case}: calc_diff vs float64 = {diff:.3e} (bound {MAX_DIFF[d.dtype]:.0e})"
    rms = ref.square().mean().sqrt()
    rtol, atol = TOL[d.dtype]
    excess = (d.double() - ref).abs() - (rtol * ref.abs() + atol * rms)
    worst = int(excess.argmax())
    if excess.view(-1)[worst] > 0:
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), d.shape))
        raise AssertionError(f"{case}: element {index} = {d[index].item()!r}, float64 reference {ref[index].item()!r}")


def bitwise_equal(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Same bits (NaN poison included)."""
    as_int = {torch.bfloat16: torch.int16, torch.float32: torch.int32}
    return x.dtype == y.dtype and torch.equal(x.view(as_int[x.dtype]), y.view(as_int[y.dtype]))


def poisoned(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def run_gemm_cases(family: str, layout: str, m: int, n: int, k: int, cases, seed: int) -> None:
    """One (family, layout, M, N, K): each (out_dtype, with_c) case into a poisoned D, checked against float64;
    with C also in place (c is d); the deep_gemm kernels also twice, bitwise equal."""
    fn = getattr(deep_gemm, f"{family}_{layout}")
    a_mk, b_nk = randn(m, k, seed=seed), randn(n, k, seed=seed + 1)
    a, b = to_layout(layout, a_mk, b_nk)
    product = a_mk.double() @ b_nk.double().t()
    del a_mk, b_nk
    for out_dtype, with_c in cases:
        case = f"{family}_{layout}-m{m}-n{n}-k{k}-{dtype_id(out_dtype)}{'-c' if with_c else ''}"
        c = randn(m, n, seed=seed + 2, scale=8.0, dtype=out_dtype) if with_c else None
        ref = product + c.double() if with_c else product
        d = poisoned(m, n, dtype=out_dtype)
        fn(a, b, d, c)
        check_output(d, ref, case)
        if family == "bf16_gemm":
            d2 = poisoned(m, n, dtype=out_dtype)
            fn(a, b, d2, c)
            assert bitwise_equal(d, d2), f"{case}: two runs differ"
        if with_c:
            d3 = c.clone()
            fn(a, b, d3, d3)
            check_output(d3, ref, case + "-in-place")
            if family == "bf16_gemm":
                assert bitwise_equal(d, d3), f"{case}: in-place accumulation differs from out-of-place"
        del d, ref, c
    torch.cuda.empty_cache()


ALL_CASES = [(dtype, with_c) for dtype in (torch.bfloat16, torch.float32) for with_c in (False, True)]


# ----------------------------------------------------------------------------- GPU tier: dense
@gpu
@pytest.mark.parametrize("m", [1, 64, 128, 4096, 4097], ids=lambda m: f"m{m}")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("family", FAMILIES)
def test_gemm_every_layout_and_output(family: str, layout: str, m: int) -> None:
    # Every layout x D dtype x C on/off over the M list, on one DeepSeek (N, K)
    run_gemm_cases(family, layout, m, 2112, 7168, ALL_CASES, seed=m)


@gpu
@pytest.mark.parametrize(
    ("n", "k"),
    [(24576, 1536), (7168, 16384), (4096, 7168), (7168, 2048)],
    ids=["n24576-k1536", "n7168-k16384", "n4096-k7168", "n7168-k2048"],
)
@pytest.mark.parametrize("m", [128, 4097], ids=lambda m: f"m{m}")
@pytest.mark.parametrize("layout", ["nt", "tn"])
@pytest.mark.parametrize("family", FAMILIES)
def test_gemm_deepseek_shapes(family: str, layout: str, m: int, n: int, k: int) -> None:
    run_gemm_cases(family, layout, m, n, k, [(torch.float32, True), (torch.bfloat16, False)], seed=m + n + k)


@gpu
@pytest.mark.parametrize(
    ("layout", "m", "n"),
    [("nt", 1, 256), ("nt", 4096, 256), ("tn", 4096, 256), ("nt", 128, 129280), ("nt", 4096, 129280)],
    ids=["nt-m1-n256", "nt-m4096-n256", "tn-m4096-n256", "nt-m128-n129280", "nt-m4096-n129280"],
)
@pytest.mark.parametrize("family", FAMILIES)
def test_gemm_fp32_output_shapes(family: str, layout: str, m: int, n: int) -> None:
    run_gemm_cases(family, layout, m, n, 7168, [(torch.float32, True), (torch.float32, False)], seed=m + n)


@gpu
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=dtype_id)
@pytest.mark.parametrize("family", FAMILIES)
def test_gemm_n_unaligned_with_padded_d(family: str, out_dtype: torch.dtype) -> None:
    # N = 100 (not a multiple of 8) into a D whose rows are padded to 128: the padding columns keep their poison
    m, n, k = 300, 100, 512
    fn = getattr(deep_gemm, f"{family}_nt")
    a, b = randn(m, k, seed=1), randn(n, k, seed=2)
    product = a.double() @ b.double().t()
    for with_c in (False, True):
        case = f"{family}_nt-m{m}-n{n}-k{k}-padded-{dtype_id(out_dtype)}{'-c' if with_c else ''}"
        c = randn(m, n, seed=3, scale=8.0, dtype=out_dtype) if with_c else None
        wide = poisoned(m, 128, dtype=out_dtype)
        d = wide[:, :n]
        fn(a, b, d, c)
        check_output(d, product + c.double() if with_c else product, case)
        assert wide[:, n:].isnan().all(), f"{case}: the padding columns of d were written"


def run_fp32_c_storages(m: int, n: int, k: int, layout: str = "nt") -> None:
    """FP32 D = C + A @ B.T with C held four ways, each into a poisoned D with padded rows: dense (the kernel
    TMA-loads C), rows padded to a 16-byte multiple (TMA too, another row stride), rows 4 bytes off a 16-byte
    boundary and a row stride of N + 1 (TMA cannot address them: read from global memory), and in place. Every
    result against float64, the padding columns of D untouched, and all of them bitwise equal (each adds C to the
    same FP32 sums once)."""
    fn = getattr(deep_gemm, f"bf16_gemm_{layout}")
    a_mk, b_nk = randn(m, k, seed=m), randn(n, k, seed=n)
    a, b = to_layout(layout, a_mk, b_nk)
    c = randn(m, n, seed=k, scale=8.0, dtype=torch.float32)
    ref = a_mk.double() @ b_nk.double().t() + c.double()
    storages = {
        "dense": c,
        "padded": torch.empty(m, n + 4, device="cuda").copy_(torch.nn.functional.pad(c, (0, 4)))[:, :n],
        "misaligned": torch.empty(m * n + 1, device="cuda")[1:].view(m, n).copy_(c),
        "odd-stride": torch.empty(m, n + 1, device="cuda")[:, :n].copy_(c),
    }
    results = {}
    for name, c_storage in storages.items():
        case = f"bf16_gemm_{layout}-m{m}-n{n}-k{k}-fp32-c-{name}"
        wide = poisoned(m, n + 8, dtype=torch.float32)
        d = wide[:, :n]
        fn(a, b, d, c_storage)
        check_output(d, ref, case)
        assert wide[:, n:].isnan().all(), f"{case}: the padding columns of d were written"
        assert torch.equal(c_storage, c), f"{case}: c was modified"
        results[name] = d
    d = c.clone()
    fn(a, b, d, d)
    results["in-place"] = d
    for name, d in results.items():
        assert bitwise_equal(d, results["dense"]), f"bf16_gemm_{layout}-m{m}-n{n}-k{k}: C {name} differs from dense C"


@gpu
@pytest.mark.parametrize(("m", "n", "k"), [(300, 2112, 7168), (4097, 256, 1536), (1, 7168, 512), (129, 4096, 2048)])
@pytest.mark.parametrize("layout", ["nt", "tn"])
def test_gemm_fp32_c_storages(layout: str, m: int, n: int, k: int) -> None:
    run_fp32_c_storages(m, n, k, layout)


def run_script_printing_configs(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Python `script` in a new process (DG_TUNE is read when a shape is first planned) with `env`
    added and DG_PRINT_CONFIGS=1; it must succeed."""
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=os.path.dirname(__file__),
        env=dict(os.environ, **env, DG_PRINT_CONFIGS="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out


@gpu
@pytest.mark.parametrize(("block_n", "fp32_buffers"), [(96, None), (160, 2), (224, 4), (128, 1)])
def test_gemm_fp32_c_odd_chunk_counts(block_n: int, fp32_buffers: int | None) -> None:
    # BLOCK_N = 96, 160, 224: an odd number of 32-column chunks (3, 5, 7) per tile; with fewer staging buffers than
    # chunks (forced: 2 of 5, 4 of 7) the ring's position moves on from tile to tile, so that C's loads and D's
    # stores use the buffers in a different order in each tile; one buffer: every chunk waits for the last store.
    # Forced per process (DG_TUNE's bf16_gemm section is read when a shape is first planned).
    script = (
        "import test_bf16_gemm as t\nt.run_fp32_c_storages(1000, 1000, 1024)\nt.run_fp32_c_storages(256, 2112, 512)\n"
    )
    tune = f"bf16_gemm:block_n={block_n}"
    if fp32_buffers is not None:
        tune += f",fp32_buffers={fp32_buffers}"
    out = run_script_printing_configs(script, dict(DG_TUNE=tune))
    plans = [line for line in out.stderr.splitlines() if "sm90_gemm" in line and "d=fp32" in line]
    buffers = f"fp32_buffers={fp32_buffers if fp32_buffers is not None else block_n // 32} "
    assert plans and all(f"BLOCK_N={block_n} " in line and buffers in line for line in plans), out.stderr


@gpu
def test_gemm_stream_k_forced() -> None:
    # Stream-K on every plan (forced; no split-K, no multicast): each layout, D dtype and C (also in place), and
    # the FP32 C storages (TMA-loaded, read directly, in place), against float64 and bitwise repeatable
    script = (
        "import test_bf16_gemm as t\n"
        "for layout in t.LAYOUTS:\n"
        "    t.run_gemm_cases('bf16_gemm', layout, 300, 2112, 7168, t.ALL_CASES, seed=11)\n"
        "    t.run_gemm_cases('bf16_gemm', layout, 1000, 1000, 1040, t.ALL_CASES, seed=12)\n"
        "t.run_fp32_c_storages(1000, 1000, 1024)\n"
    )
    out = run_script_printing_configs(script, dict(DG_TUNE="bf16_gemm:stream_k=1,split_k=1,multicast=0"))
    plans = [line for line in out.stderr.splitlines() if line.startswith("[deep_gemm] sm90_gemm m=")]
    assert plans and all("stream_k=1 " in line for line in plans), out.stderr


@gpu
def test_gemm_multicast_on_a_forced() -> None:
    # Tile pairs along N sharing A (forced; never the heuristic's pick): the layouts with a K-major A, every D dtype
    # and C, odd and even column-block counts, against float64 and bitwise repeatable
    script = (
        "import test_bf16_gemm as t\n"
        "for layout in ('nt', 'nn'):\n"
        "    t.run_gemm_cases('bf16_gemm', layout, 300, 2112, 7168, t.ALL_CASES, seed=13)\n"
        "    t.run_gemm_cases('bf16_gemm', layout, 129, 1000, 1040, t.ALL_CASES, seed=14)\n"
    )
    out = run_script_printing_configs(script, dict(DG_TUNE="bf16_gemm:multicast_on_a=1"))
    plans = [line for line in out.stderr.splitlines() if line.startswith("[deep_gemm] sm90_gemm m=")]
    assert plans and all("multicast=2(A) " in line for line in plans), out.stderr


@gpu
def test_gemm_ignores_the_fp8_gemm_tune() -> None:
    # DG_TUNE's fp8_gemm section does not steer the BF16 GEMMs (each family reads only its own section): the same
    # plans as with nothing forced, and results against float64
    script = (
        "import test_bf16_gemm as t\n"
        "t.run_gemm_cases('bf16_gemm', 'nt', 300, 2112, 7168, t.ALL_CASES, seed=15)\n"
        "t.run_fp32_c_storages(1000, 1000, 1024)\n"
    )

    def plans(tune: str) -> list[str]:
        out = run_script_printing_configs(script, dict(DG_TUNE=tune))
        return [line for line in out.stderr.splitlines() if line.startswith("[deep_gemm] sm90_gemm m=")]

    default = plans("")
    assert default and plans("fp8_gemm:block_m=64,block_n=48,split_k=3,stream_k=2,multicast_on_a=1") == default


@gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("family", FAMILIES)
def test_gemm_k8(family: str, layout: str) -> None:
    run_gemm_cases(family, layout, 192, 256, 8, ALL_CASES, seed=8)


@gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("family", FAMILIES)
def test_gemm_empty_shapes(family: str, layout: str) -> None:
    fn = getattr(deep_gemm, f"{family}_{layout}")
    # K = 0: D = C, or zeros
    m, n = 64, 128
    a, b = to_layout(layout, randn(m, 0, seed=0), randn(n, 0, seed=0))
    for out_dtype in (torch.bfloat16, torch.float32):
        d = poisoned(m, n, dtype=out_dtype)
        fn(a, b, d)
        assert torch.equal(d, torch.zeros_like(d)), f"{family}_{layout} K = 0 without C: D must be zero"
        c = randn(m, n, seed=1, dtype=out_dtype)
        d = poisoned(m, n, dtype=out_dtype)
        fn(a, b, d, c)
        assert torch.equal(d, c), f"{family}_{layout} K = 0: D must equal C"
        d = c.clone()
        fn(a, b, d, d)
        assert torch.equal(d, c), f"{family}_{layout} K = 0 in place: D must keep C"
    # M = 0 and N = 0: nothing to do, nothing written
    for m, n in ((0, 128), (64, 0)):
        a, b = to_layout(layout, randn(m, 256, seed=0), randn(n, 256, seed=0))
        for out_dtype in (torch.bfloat16, torch.float32):
            d = poisoned(m, n, dtype=out_dtype)
            fn(a, b, d)
            fn(a, b, d, torch.zeros_like(d))
    torch.cuda.synchronize()


@gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("family", FAMILIES)
def test_gemm_rejects_wrong_layout(family: str, layout: str) -> None:
    fn = getattr(deep_gemm, f"{family}_{layout}")
    a, b = to_layout(layout, randn(256, 512, seed=0), randn(384, 512, seed=1))
    d = torch.empty(256, 384, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"\ba\b"):
        fn(no_unit_stride(a), b, d)
    with pytest.raises(ValueError, match=r"\bb\b"):
        fn(a, no_unit_stride(b), d)
    with pytest.raises(ValueError, match=r"\bd\b"):
        fn(a, b, torch.empty(384, 256, device="cuda", dtype=torch.bfloat16).t())
    with pytest.raises(ValueError, match=r"\bc\b"):
        fn(a, b, d, torch.empty(256, 384, device="cuda", dtype=torch.float32))


# ----------------------------------------------------------------------------- GPU tier: m-grouped
def make_m_grouped_inputs(num_groups: int, expected_m: int, n: int, k: int, seed: int):
    """Random per-group row counts (U(0.7, 1.3) x expected, about one group in five empty), each segment starting
    at a multiple of the contiguous-layout alignment; A [M, K], B [G, N, K], per-row ids and cumulative ends."""
    rng = random.Random(seed)
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    sizes = [0 if rng.random() < 0.2 else int(expected_m * rng.uniform(0.7, 1.3)) for _ in range(num_groups)]
    sizes[0] = max(sizes[0], 1)
    segments, row = [], 0
    for size in sizes:
        segments.append((row, row + size))
        row = align(row + size, alignment)
    m = max(row, alignment)
    a, b_nk = randn(m, k, seed=seed), randn(num_groups, n, k, seed=seed + 1)
    per_row = torch.full((m,), -1, device="cuda", dtype=torch.int32)
    for g, (s, e) in enumerate(segments):
        per_row[s:e] = g
    ends = torch.tensor([e for _, e in segments], device="cuda", dtype=torch.int32)
    return a, b_nk, per_row, ends, segments


def check_m_grouped(d, a, b_nk, segments, zeroed: torch.Tensor, case: str) -> None:
    """Each group's rows against float64; padding rows zero where ``zeroed``, else untouched."""
    written = torch.zeros(d.shape[0], dtype=torch.bool, device="cuda")
    for g, (s, e) in enumerate(segments):
        if s < e:
            check_output(d[s:e], a[s:e].double() @ b_nk[g].double().t(), f"{case} group {g}")
            written[s:e] = True
    check_padding_rows(d, written, zeroed, case)


@gpu
@pytest.mark.parametrize("psum", [False, True], ids=["per_row", "psum"])
@pytest.mark.parametrize("layout", ["nt", "nn"])
@pytest.mark.parametrize(
    ("num_groups", "expected_m", "n", "k"),
    [(4, 1024, 4096, 7168), (8, 512, 7168, 2048), (5, 300, 576, 1040)],
    ids=["G4-m1024-n4096-k7168", "G8-m512-n7168-k2048", "G5-m300-n576-k1040"],
)
def test_m_grouped_contiguous(num_groups: int, expected_m: int, n: int, k: int, layout: str, psum: bool) -> None:
    a, b_nk, per_row, ends, segments = make_m_grouped_inputs(num_groups, expected_m, n, k, seed=num_groups + k)
    b = b_nk if layout == "nt" else b_nk.transpose(1, 2).contiguous()  # [G, N, K] or [G, K, N]
    fn = getattr(deep_gemm, f"m_grouped_bf16_gemm_{layout}_contiguous")
    kwargs = {"use_psum_layout": True} if psum else {}
    if psum and layout == "nt":  # (the nn form has no expected_m_for_psum_layout, as in the reference)
        kwargs["expected_m_for_psum_layout"] = expected_m
    grouped_layout = ends if psum else per_row
    case = f"m_grouped_{layout}-G{num_groups}-m{expected_m}-n{n}-k{k}-{'psum' if psum else 'per_row'}"
    # (psum padding rows left untouched, per-row ones of group segments zeroed: test_compat_gemm.py checks
    # ensure_zero_padding=True, the default)
    kwargs["ensure_zero_padding"] = False
    d = poisoned(a.shape[0], n, dtype=torch.bfloat16)
    fn(a, b, d, grouped_layout, **kwargs)
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    check_m_grouped(d, a, b_nk, segments, zeroed_padding_rows(per_row, num_groups, alignment, False, psum), case)
    d2 = poisoned(a.shape[0], n, dtype=torch.bfloat16)
    fn(a, b, d2, grouped_layout, **kwargs)
    assert bitwise_equal(d, d2), f"{case}: two runs differ"


@gpu
@pytest.mark.parametrize(("num_groups", "expected_m"), [(6, 1024), (32, 192), (16, 1)])
def test_m_grouped_masked(num_groups: int, expected_m: int) -> None:
    rng = random.Random(num_groups * 1000 + expected_m)
    max_m, n, k = 2048, 4096, 7168
    counts = [
        0 if rng.random() < 0.15 else min(max_m, int(expected_m * rng.uniform(0.7, 1.3)) + 1) for _ in range(num_groups)
    ]
    counts[-1] = max_m if expected_m > 512 else counts[-1]
    a, b = randn(num_groups, max_m, k, seed=num_groups), randn(num_groups, n, k, seed=expected_m)
    masked_m = torch.tensor(counts, device="cuda", dtype=torch.int32)
    case = f"masked-G{num_groups}-m{expected_m}"
    d = poisoned(num_groups, max_m, n, dtype=torch.bfloat16)
    deep_gemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)
    for g, rows in enumerate(counts):
        if rows:
            check_output(d[g, :rows], a[g, :rows].double() @ b[g].double().t(), f"{case} group {g}")
        assert d[g, rows:].isnan().all(), f"{case}: group {g} rows past masked_m were written"
    d2 = poisoned(num_groups, max_m, n, dtype=torch.bfloat16)
    deep_gemm.bf16_m_grouped_gemm_nt_masked(a, b, d2, masked_m, expected_m)
    assert bitwise_equal(d, d2), f"{case}: two runs differ"


# ----------------------------------------------------------------------------- GPU tier: k-grouped
def make_k_grouped_inputs(num_groups: int, m: int, n: int, expected_k: int, seed: int, psum: bool = False):
    """Random K per group (U(0.7, 1.3) x expected, a multiple of 16), group 1 empty and the last K = 80 (a tail
    past 64); A [sum K, M] and B [sum K, N] with group g's rows from start_g (psum: each start aligned, the rows
    between groups NaN, which must not be read); the K list, the layout tensor and the starts."""
    rng = random.Random(seed)
    ks = [align(int(expected_k * rng.uniform(0.7, 1.3)), 16) + 16 for _ in range(num_groups)]
    if num_groups > 1:
        ks[1] = 0
    if num_groups > 2:
        ks[-1] = 80
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    starts, end = [], 0
    for k in ks:
        starts.append(align(end, alignment) if psum else end)
        end = starts[-1] + k
    a = torch.full((end, m), float("nan"), device="cuda", dtype=torch.bfloat16)
    b = torch.full((end, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    for g, (k, start) in enumerate(zip(ks, starts, strict=True)):
        a[start : start + k] = randn(k, m, seed=seed + 2 * g)
        b[start : start + k] = randn(k, n, seed=seed + 2 * g + 1)
    layout_values = [s + k for s, k in zip(starts, ks, strict=True)] if psum else ks
    layout = torch.tensor(layout_values, device="cuda", dtype=torch.int32)
    return a, b, ks, layout, starts


def check_k_grouped(d, c, a, b, ks, starts, case: str) -> None:
    for g, (k, start) in enumerate(zip(ks, starts, strict=True)):
        base = c[g] if c is not None else torch.zeros_like(d[g])
        if k == 0:
            assert torch.equal(d[g], base), f"{case}: empty group {g} is not C (or zero)"
            continue
        product = a[start : start + k].double().t() @ b[start : start + k].double()
        check_output(d[g], base.double() + product, f"{case} group {g}")


@gpu
@pytest.mark.parametrize(
    ("num_groups", "m", "n", "expected_k"),
    [(4, 4096, 7168, 8192), (8, 7168, 2048, 4096), (3, 200, 136, 300)],
    ids=["G4-m4096-n7168-k8192", "G8-m7168-n2048-k4096", "G3-m200-n136-k300"],
)
def test_k_grouped_tn(num_groups: int, m: int, n: int, expected_k: int) -> None:
    a, b, ks, layout, starts = make_k_grouped_inputs(num_groups, m, n, expected_k, seed=num_groups * 7 + m)
    case = f"k_grouped_tn-G{num_groups}-m{m}-n{n}-k{expected_k}"
    c = randn(num_groups, m, n, seed=5, scale=32.0, dtype=torch.float32)
    d = poisoned(num_groups, m, n, dtype=torch.float32)
    deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, layout, c=c)
    check_k_grouped(d, c, a, b, ks, starts, case + "-c")
    d2 = poisoned(num_groups, m, n, dtype=torch.float32)
    deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d2, ks, layout, c=c)
    assert bitwise_equal(d, d2), f"{case}: two runs differ"
    d3 = c.clone()
    deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d3, ks, layout, c=d3)
    assert bitwise_equal(d, d3), f"{case}: in-place accumulation differs"
    d4 = poisoned(num_groups, m, n, dtype=torch.float32)
    deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d4, ks, layout)
    check_k_grouped(d4, None, a, b, ks, starts, case + "-no-c")


@gpu
def test_k_grouped_tn_psum() -> None:
    num_groups, m, n = 5, 384, 512
    a, b, ks, layout, starts = make_k_grouped_inputs(num_groups, m, n, 1000, seed=11, psum=True)
    c = randn(num_groups, m, n, seed=12, dtype=torch.float32)
    d = poisoned(num_groups, m, n, dtype=torch.float32)
    deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, layout, c=c, use_psum_layout=True)
    check_k_grouped(d, c, a, b, ks, starts, "k_grouped_tn-psum")


@gpu
def test_k_grouped_tn_all_empty() -> None:
    m, n, ks = 256, 128, [0, 0]
    a, b = (
        torch.empty(0, m, device="cuda", dtype=torch.bfloat16),
        torch.empty(0, n, device="cuda", dtype=torch.bfloat16),
    )
    layout = torch.zeros(2, device="cuda", dtype=torch.int32)
    c = randn(2, m, n, seed=0, dtype=torch.float32)
    d = poisoned(2, m, n, dtype=torch.float32)
    deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, layout, c=c)
    assert torch.equal(d, c), "all groups empty: D must equal C"
    deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, layout)
    assert torch.equal(d, torch.zeros_like(d)), "all groups empty, no C: D must be zero"


@gpu
def test_mn_major_operand_needs_aligned_row_stride() -> None:
    """An MN-major A [K, M] with M = 4097 stored densely has a row stride of 8194 bytes: TMA cannot read it, and
    the error names the operand and the 16-byte rule (pad the row stride, as transposed_copy does)."""
    a = torch.zeros(256, 4097, device="cuda", dtype=torch.bfloat16)
    b = torch.zeros(256, 128, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(4097, 128, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"a: stride 4097 of dim 0 must be a multiple of 16 bytes"):
        deep_gemm.bf16_gemm_tn(a, b, d)
