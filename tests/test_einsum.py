"""einsum (BF16: 'bmk,bnk->mn', 'bhr,hdr->bhd', 'bhd,hdr->bhr') and fp8_einsum ('bhr,hdr->bhd').

CPU tier: signatures as the reference's; every bad input raises naming the argument (an unknown expr -> ValueError
naming it; the SM100-only fp8_einsum expressions -> NotImplementedError; dtypes, ranks, shapes, strides, c rules,
use_cublaslt with 'bmk,bnk->mn', recipe); valid inputs on the CPU reach the device check; the GEMM kernels the calls
run at the issue's shapes compile without spills (DG_JIT_PTXAS_CHECK=1). GPU tier: every output against a float64
reference of the same BF16 (or FP8 and scales) values, outputs poisoned with NaN first, strided views of A and D
(heads of a wider tensor), odd sizes, FP32 accumulation in place (c is d), the cuBLAS path, and a CUDA graph replay."""

import pytest
import torch
from jit_helpers import compile_params, parameter_names
from kernel_trace import count, launched_kernels

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.utils import ceil_div, per_block_cast_to_fp8, per_token_cast_to_fp8

gpu = pytest.mark.gpu


def test_signatures_as_reference() -> None:
    einsum = parameter_names(deep_gemm.einsum)
    assert [p.split(":")[0] for p in einsum] == ["expr", "a", "b", "d", "c", "use_cublaslt"], einsum
    assert einsum[4].endswith("= None") and einsum[5].endswith("= False"), einsum
    fp8 = parameter_names(deep_gemm.fp8_einsum)
    assert [p.split(":")[0] for p in fp8] == ["expr", "a", "b", "d", "c", "recipe"], fp8
    assert fp8[4].endswith("= None") and fp8[5].endswith("= (1, 128, 128)"), fp8
    for fn in (deep_gemm.einsum, deep_gemm.fp8_einsum):
        assert len(fn.__doc__.splitlines()) > 5


# ----------------------------------------------------------------------------- validation (CPU tier)
def bf16(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape, dtype=torch.bfloat16)


def per_head_operands(expr: str, batch: int = 4, heads: int = 2, dim_d: int = 64, dim_r: int = 128):
    if expr == "bhr,hdr->bhd":
        return bf16(batch, heads, dim_r), bf16(heads, dim_d, dim_r), bf16(batch, heads, dim_d)
    return bf16(batch, heads, dim_d), bf16(heads, dim_d, dim_r), bf16(batch, heads, dim_r)


@pytest.mark.parametrize(
    ("case", "pattern"),
    [
        ("unknown_expr", r"expr must be one of 'bmk,bnk->mn', 'bhr,hdr->bhd', 'bhd,hdr->bhr' .* got 'bhr,hdr->bdh'"),
        ("spaced_expr", r"expr must be one of .* got 'bhr, hdr -> bhd'"),
        ("c_per_head", r"c must be None for 'bhr,hdr->bhd'"),
        ("a_dtype", r"a must have dtype torch.bfloat16"),
        ("b_dtype", r"b must have dtype torch.bfloat16"),
        ("d_dtype", r"d must have dtype torch.bfloat16"),
        ("a_rank", r"a must be 3-D"),
        ("d_rank", r"d must be 3-D"),
        ("b_heads", r"b must be \[h, d, r\] with a's h and r = \[2, 64, 128\]"),
        ("d_shape", r"d must be \[b, h, d\] = \[4, 2, 64\]"),
        ("a_last_stride", r"a must be contiguous in its last dimension"),
        ("a_unaligned_head", r"a: stride 60 of dim 1 must be a multiple of 16 bytes"),
        ("d_last_stride", r"d must be contiguous in its last dimension"),
        ("d_overlaps_a", r"d must not overlap a"),
        ("on_cpu", r"a must be on a CUDA device"),
    ],
)
def test_per_head_bad_inputs(case: str, pattern: str) -> None:
    expr = "bhr,hdr->bhd"
    a, b, d = per_head_operands(expr)
    kwargs = {}
    if case == "unknown_expr":
        expr = "bhr,hdr->bdh"
    elif case == "spaced_expr":
        expr = "bhr, hdr -> bhd"
    elif case == "c_per_head":
        kwargs["c"] = d
    elif case == "a_dtype":
        a = a.float()
    elif case == "b_dtype":
        b = b.half()
    elif case == "d_dtype":
        d = d.float()
    elif case == "a_rank":
        a = a[0]
    elif case == "d_rank":
        d = d.flatten(1)
    elif case == "b_heads":
        b = bf16(3, 64, 128)
    elif case == "d_shape":
        d = bf16(4, 2, 65)
    elif case == "a_last_stride":
        a = bf16(4, 128, 2).transpose(1, 2)
    elif case == "a_unaligned_head":
        a = bf16(4, 2, 60)[:, :, :60]
        b = bf16(2, 64, 60)
    elif case == "d_last_stride":
        d = bf16(4, 64, 2).transpose(1, 2)
    elif case == "d_overlaps_a":
        d = a[:, :, :64]
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.einsum(expr, a, b, d, **kwargs)


def test_bhd_hdr_bhr_shapes_checked() -> None:
    expr = "bhd,hdr->bhr"
    a, b, d = per_head_operands(expr)
    with pytest.raises(ValueError, match=r"b must be \[h, d, r\] with a's h and d = \[2, 64, 128\]"):
        deep_gemm.einsum(expr, a, bf16(2, 32, 128), d)
    with pytest.raises(ValueError, match=r"d must be \[b, h, r\] = \[4, 2, 128\]"):
        deep_gemm.einsum(expr, a, b, bf16(4, 2, 64))
    with pytest.raises(ValueError, match=r"a must be on a CUDA device"):
        deep_gemm.einsum(expr, a, b, d)
    with pytest.raises(ValueError, match=r"a must be on a CUDA device"):
        deep_gemm.einsum(expr, a, b, d, use_cublaslt=True)


@pytest.mark.parametrize(
    ("case", "pattern"),
    [
        ("use_cublaslt", r"use_cublaslt=True serves 'bhr,hdr->bhd' and 'bhd,hdr->bhr' only"),
        ("b_batch", r"b must be \[b, n, k\] with a's b and k = \[3, 32, 64\]"),
        ("d_shape", r"d must be \[m, n\] = \[16, 32\]"),
        ("d_dtype", r"d must have dtype torch.bfloat16 or torch.float32"),
        ("c_not_d", r"c must be None or d itself with FP32 d"),
        ("c_bf16", r"c must be None or d itself with FP32 d"),
        ("d_col_major", r"d must be row-major"),
        ("on_cpu", r"a must be on a CUDA device"),
        ("on_cpu_in_place", r"a must be on a CUDA device"),
    ],
)
def test_bmk_bnk_mn_bad_inputs(case: str, pattern: str) -> None:
    a, b, d = bf16(3, 16, 64), bf16(3, 32, 64), torch.zeros(16, 32)
    kwargs = {}
    if case == "use_cublaslt":
        kwargs["use_cublaslt"] = True
    elif case == "b_batch":
        b = bf16(2, 32, 64)
    elif case == "d_shape":
        d = torch.zeros(32, 16)
    elif case == "d_dtype":
        d = d.half()
    elif case == "c_not_d":
        kwargs["c"] = d.clone()
    elif case == "c_bf16":
        d = d.bfloat16()
        kwargs["c"] = d
    elif case == "d_col_major":
        d = torch.zeros(32, 16).t()
    elif case == "on_cpu_in_place":
        kwargs["c"] = d
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.einsum("bmk,bnk->mn", a, b, d, **kwargs)


def fp8_operands(batch: int = 4, heads: int = 2, dim_d: int = 64, dim_r: int = 256):
    a = torch.zeros(batch, heads, dim_r, dtype=torch.float8_e4m3fn)
    sfa = torch.ones(batch, heads, ceil_div(dim_r, 128))
    b = torch.zeros(heads, dim_d, dim_r, dtype=torch.float8_e4m3fn)
    sfb = torch.ones(heads, ceil_div(dim_d, 128), ceil_div(dim_r, 128))
    return a, sfa, b, sfb, bf16(batch, heads, dim_d)


@pytest.mark.parametrize(
    ("case", "error", "pattern"),
    [
        ("sm100_bhd", NotImplementedError, r"'bhd,hdr->bhr' is served on SM100 only"),
        ("sm100_hdr", NotImplementedError, r"'bhd,bhr->hdr' is served on SM100 only"),
        ("unknown_expr", ValueError, r"expr must be 'bhr,hdr->bhd' .* got 'bmk,bnk->mn'"),
        ("recipe", ValueError, r"recipe must be \(1, 128, 128\)"),
        ("with_c", ValueError, r"c must be None"),
        ("a_dtype", ValueError, r"a\[0\] \(A\) must have dtype torch.float8_e4m3fn"),
        ("b_shape", ValueError, r"b\[0\] \(B\) must be \[h, d, r\] with A's h and r = \[2, 64, 256\]"),
        ("sfa_shape", ValueError, r"a\[1\] \(sfa\) must be \[b, h, ceil\(r/128\)\] = \[4, 2, 2\]"),
        ("sfb_shape", ValueError, r"b\[1\] \(sfb\) must be \[h, ceil\(d/128\), ceil\(r/128\)\] = \[2, 1, 2\]"),
        ("sfa_dtype", ValueError, r"a\[1\] \(sfa\) must have dtype torch.float32"),
        ("d_dtype", ValueError, r"d must have dtype torch.bfloat16"),
        ("d_shape", ValueError, r"d must be \[b, h, d\] = \[4, 2, 64\]"),
        ("a_unaligned", ValueError, r"a\[0\] \(A\): stride 200 of dim 1 must be a multiple of 16 bytes"),
        ("on_cpu", ValueError, r"a\[0\] \(A\) must be on a CUDA device"),
    ],
)
def test_fp8_einsum_bad_inputs(case: str, error: type, pattern: str) -> None:
    a, sfa, b, sfb, d = fp8_operands()
    expr, kwargs = "bhr,hdr->bhd", {}
    if case == "sm100_bhd":
        expr = "bhd,hdr->bhr"
    elif case == "sm100_hdr":
        expr = "bhd,bhr->hdr"
    elif case == "unknown_expr":
        expr = "bmk,bnk->mn"
    elif case == "recipe":
        kwargs["recipe"] = (1, 1, 128)
    elif case == "with_c":
        kwargs["c"] = d
    elif case == "a_dtype":
        a = a.to(torch.bfloat16)
    elif case == "b_shape":
        b = torch.zeros(2, 64, 128, dtype=torch.float8_e4m3fn)
    elif case == "sfa_shape":
        sfa = torch.ones(4, 2, 1)
    elif case == "sfb_shape":
        sfb = torch.ones(2, 2, 2)
    elif case == "sfa_dtype":
        sfa = sfa.double()
    elif case == "d_dtype":
        d = d.float()
    elif case == "d_shape":
        d = bf16(4, 2, 128)
    elif case == "a_unaligned":
        a, sfa, b, sfb, d = fp8_operands(dim_r=200)
    with pytest.raises(error, match=pattern):
        deep_gemm.fp8_einsum(expr, (a, sfa), (b, sfb), d, **kwargs)


# The GEMMs the calls run at the shapes (b tokens, h = 128, r = 512, d = 128): the per-head expressions one
# m-grouped masked GEMM over the h heads (M planned as h * b, rows per group b rounded up to 64: BLOCK_M divides
# 128 or only 64); 'bmk,bnk->mn' per batch entry M = N = K = 4096, FP32 D (the first launch without C, then in
# place). On the H100 / H200 (132 SMs). The BF16 per-head GEMMs take N at run time (0 below): compiled in, N = 512
# with the 64 x 256 masked tile spills.
def masked(batch: int, n: int, k: int, **kwargs) -> dict:
    max_m = ceil_div(batch, 64) * 64
    return dict(m=128 * batch, n=n, k=k, gemm_type=3, num_groups=128, grouped_alignment=128 if max_m % 128 == 0 else 64,
                **kwargs)


COMPILED = [
    # (name, get_gemm_config arguments, N, K, extra compile parameters)
    ("bhr_hdr_bhd_prefill", masked(4096, 128, 512, bf16=True), 0, 512, {}),
    ("bhr_hdr_bhd_decode", masked(64, 128, 512, bf16=True), 0, 512, {}),
    ("bhr_hdr_bhd_512", masked(512, 128, 512, bf16=True), 0, 512, {}),
    ("bhd_hdr_bhr_prefill", masked(4096, 512, 128, bf16=True, mn_major_b=True), 0, 128, dict(mn_major_b=1)),
    ("bhd_hdr_bhr_decode", masked(64, 512, 128, bf16=True, mn_major_b=True), 0, 128, dict(mn_major_b=1)),
    ("bhd_hdr_bhr_512", masked(512, 512, 128, bf16=True, mn_major_b=True), 0, 128, dict(mn_major_b=1)),
    ("bmk_bnk_mn_first", dict(m=4096, n=4096, k=4096, bf16=True, fp32_out=True), 4096, 4096, dict(fp32_out=1)),
    ("bmk_bnk_mn_accumulate", dict(m=4096, n=4096, k=4096, bf16=True, fp32_out=True, has_c=True), 4096, 4096,
     dict(fp32_out=1, has_c=1)),
    ("fp8_bhr_hdr_bhd_prefill", masked(4096, 128, 512), 128, 512, {}),
    ("fp8_bhr_hdr_bhd_decode", masked(64, 128, 512), 128, 512, {}),
    ("fp8_bhr_hdr_bhd_512", masked(512, 128, 512), 128, 512, {}),
    # the batched masked mode (A and D in place through 3-D maps; DG_TUNE einsum_batched=1 for now)
    ("batched_bhr_hdr_bhd_prefill", masked(4096, 128, 512, bf16=True), 0, 512, dict(batched=1)),
    ("batched_bhd_hdr_bhr_decode", masked(64, 512, 128, bf16=True, mn_major_b=True), 0, 128,
     dict(mn_major_b=1, batched=1)),
    ("batched_fp8_bhr_hdr_bhd_decode", masked(64, 128, 512), 128, 512, dict(batched=1)),
    # 'bmk,bnk->mn' in the K-batched mode: one GEMM over b x k (K given at run time: the entry's)
    ("k_batched_bmk_bnk_mn_fp32", dict(m=4096, n=4096, k=8 * 4096, bf16=True, fp32_out=True, has_c=True), 4096, 0,
     dict(fp32_out=1, has_c=1, k_batched=1)),
    ("k_batched_bmk_bnk_mn_bf16", dict(m=4096, n=7168, k=8 * 4096, bf16=True), 7168, 0, dict(k_batched=1)),
]  # fmt: skip


@pytest.mark.nvcc
@pytest.mark.parametrize(("name", "config", "n", "k", "extra"), COMPILED, ids=[c[0] for c in COMPILED])
def test_kernels_compile_without_spills(tmp_path, monkeypatch, name, config, n, k, extra) -> None:
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("DG_JIT_PTXAS_CHECK", "1")
    cfg = deep_gemm._C.get_gemm_config(**config)
    result = deep_gemm.compile_kernel("sm90_gemm", compile_params(cfg, n, k, **extra))
    assert result["registers"] > 0, result["ptxas_report"]
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]
    assert result["stack_frame_bytes"] == 0, result["ptxas_report"]


# ----------------------------------------------------------------------------- GPU tier
def randn(*shape: int, seed: int) -> torch.Tensor:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=generator, device="cuda").to(torch.bfloat16)


def nan_like(shape, dtype=torch.bfloat16, pad: int = 0) -> torch.Tensor:
    """A NaN-filled tensor of `shape`; with `pad`, a view of one whose last dimension is `pad` wider (D then has
    strides of its own, as a head slice of a bigger buffer)."""
    full = torch.full((*shape[:-1], shape[-1] + pad), float("nan"), dtype=dtype, device="cuda")
    return full[..., : shape[-1]]


def check_close(d: torch.Tensor, ref64: torch.Tensor, case: str, rtol: float = 2.0**-7, atol: float = 2.0**-7,
                max_diff: float = 5e-6) -> None:
    assert d.shape == ref64.shape, case
    assert torch.isfinite(d).all(), f"{case}: non-finite (unwritten?) outputs"
    flat, ref = d.double().flatten(), ref64.flatten()
    err = (flat - ref).abs()
    tol = rtol * ref.abs() + atol * ref.pow(2).mean().sqrt()
    worst = (err - tol).argmax().item()
    assert (err <= tol).all(), f"{case}: element {worst} = {flat[worst].item()}, reference {ref[worst].item()}"
    assert calc_diff(d, ref64) < max_diff, f"{case}: calc_diff = {calc_diff(d, ref64)}"


PER_HEAD_SHAPES = [
    # (b, h, d, r): the shapes, then odd ones
    (64, 128, 128, 512),
    (512, 128, 128, 512),
    (4096, 128, 128, 512),
    (1, 3, 128, 512),
    (7, 5, 40, 72),
    (129, 2, 200, 136),
]


@gpu
@pytest.mark.parametrize("use_cublaslt", [False, True], ids=["deep_gemm", "cublas"])
@pytest.mark.parametrize("expr", ["bhr,hdr->bhd", "bhd,hdr->bhr"])
@pytest.mark.parametrize(("batch", "heads", "dim_d", "dim_r"), PER_HEAD_SHAPES)
def test_per_head_matches_reference(expr, batch, heads, dim_d, dim_r, use_cublaslt) -> None:
    check_per_head(expr, batch, heads, dim_d, dim_r, use_cublaslt)


# The batched masked mode, opt-in until it has run on a GPU (then the default): A and D in place, no copies
BATCHED_TUNE = "bf16_gemm:einsum_batched=1;fp8_gemm:einsum_batched=1"


@gpu
@pytest.mark.parametrize("expr", ["bhr,hdr->bhd", "bhd,hdr->bhr"])
@pytest.mark.parametrize(("batch", "heads", "dim_d", "dim_r"), PER_HEAD_SHAPES)
def test_per_head_batched_mode_matches_reference(expr, batch, heads, dim_d, dim_r, monkeypatch) -> None:
    monkeypatch.setenv("DG_TUNE", BATCHED_TUNE)
    check_per_head(expr, batch, heads, dim_d, dim_r, False)


@gpu
@pytest.mark.parametrize(("batch", "heads", "dim_d", "dim_r"), [(64, 128, 128, 512), (129, 5, 200, 384), (1, 3, 128, 512)])
def test_fp8_einsum_batched_mode_matches_reference(batch, heads, dim_d, dim_r, monkeypatch) -> None:
    monkeypatch.setenv("DG_TUNE", BATCHED_TUNE)
    a, sfa, b, sfb = fp8_inputs(batch, heads, dim_d, dim_r, seed=batch + heads + 7)
    d = nan_like((batch, heads, dim_d), pad=16)
    deep_gemm.fp8_einsum("bhr,hdr->bhd", (a, sfa), (b, sfb), d)
    check_close(d, fp8_reference(a, sfa, b, sfb), f"batched fp8 b={batch} h={heads} d={dim_d} r={dim_r}")
    assert torch.isnan(d._base[..., dim_d:]).all(), "batched fp8: the padding columns of D were written"


def check_per_head(expr, batch, heads, dim_d, dim_r, use_cublaslt) -> None:
    bhr = expr == "bhr,hdr->bhd"
    seed = batch * 1000 + heads * 10 + dim_d + dim_r
    # A as a head slice of a wider tensor (its strides are not the contiguous ones), D likewise
    a_last = dim_r if bhr else dim_d
    a = randn(batch, heads, a_last + 8, seed=seed)[:, :, :a_last]
    b = randn(heads, dim_d, dim_r, seed=seed + 1)
    if heads < 128:  # (B's heads not stacked densely either: the GEMM needs them so, and gets a copy)
        b = randn(heads, dim_d + 8, dim_r, seed=seed + 1)[:, :dim_d]
    d = nan_like((batch, heads, dim_d if bhr else dim_r), pad=16)
    deep_gemm.einsum(expr, a, b, d, use_cublaslt=use_cublaslt)
    ref = torch.einsum(expr, a.double(), b.double())
    # (cuBLAS may reduce in BF16 partial sums: PyTorch's allow_bf16_reduced_precision_reduction)
    atol = 2.0**-5 if use_cublaslt else 2.0**-7
    check_close(d, ref, f"{expr} b={batch} h={heads} d={dim_d} r={dim_r}", atol=atol,
                max_diff=1e-4 if use_cublaslt else 5e-6)
    assert torch.isnan(d._base[..., d.shape[-1] :]).all(), f"{expr}: the padding columns of D were written"


@gpu
@pytest.mark.parametrize("k_batched", [False, True], ids=["per_entry", "k_batched"])
@pytest.mark.parametrize("mode", ["bf16", "fp32", "fp32_in_place"])
@pytest.mark.parametrize(("s", "m", "n", "k"), [(8, 4096, 4096, 4096), (3, 129, 200, 72), (1, 7, 64, 128)])
def test_bmk_bnk_mn_matches_reference(mode, s, m, n, k, k_batched, monkeypatch) -> None:
    if k_batched:  # (the K-batched mode: opt-in until it has run on a GPU)
        monkeypatch.setenv("DG_TUNE", BATCHED_TUNE)
    a = randn(s, m, k, seed=s + m)
    b = randn(s, n, k, seed=s + n + 1)
    ref = torch.einsum("bmk,bnk->mn", a.double(), b.double())
    if mode == "bf16":
        d = nan_like((m, n), pad=8)
        deep_gemm.einsum("bmk,bnk->mn", a, b, d)
        check_close(d, ref, f"BF16 d s={s} m={m} n={n} k={k}")
        return
    d = nan_like((m, n), dtype=torch.float32, pad=4)
    if mode == "fp32_in_place":
        c0 = randn(m, n, seed=7).float() * 10
        d.copy_(c0)
        deep_gemm.einsum("bmk,bnk->mn", a, b, d, c=d)
        ref = ref + c0.double()
    else:
        deep_gemm.einsum("bmk,bnk->mn", a, b, d)
    # FP32 sums of exact BF16 products: only FP32 rounding (sum over s * k = 32768 products: about 1e-5 of rms),
    # far below BF16's; a result rounded through BF16 or a missed batch entry fails
    check_close(d, ref, f"FP32 d ({mode}) s={s} m={m} n={n} k={k}", rtol=1e-4, atol=1e-4, max_diff=1e-8)


@gpu
@pytest.mark.parametrize("expr", ["bhr,hdr->bhd", "bhd,hdr->bhr", "bmk,bnk->mn"])
def test_batched_modes_take_their_path(expr: str, monkeypatch) -> None:
    # What the opt-in key changes, by the kernels a call launches: the per-head expressions lose the heads-first
    # copies of A and D (one GEMM, no copy), 'bmk,bnk->mn' its launch per batch entry and the FP32 accumulator's copy
    if expr == "bmk,bnk->mn":
        s, m, n, k = 3, 129, 200, 72
        a, b, d = randn(s, m, k, seed=1), randn(s, n, k, seed=2), nan_like((m, n))
        default_gemms = s
    else:
        batch, heads, dim_d, dim_r = 64, 128, 128, 512
        a = randn(batch, heads, dim_r if expr == "bhr,hdr->bhd" else dim_d, seed=3)
        b = randn(heads, dim_d, dim_r, seed=4)
        d = nan_like((batch, heads, dim_d if expr == "bhr,hdr->bhd" else dim_r))
        default_gemms = 1
    default = launched_kernels(lambda: deep_gemm.einsum(expr, a, b, d))
    assert count(default, "sm90_gemm_kernel") == default_gemms and count(default, "copy") >= 1, default
    monkeypatch.setenv("DG_TUNE", BATCHED_TUNE)
    batched = launched_kernels(lambda: deep_gemm.einsum(expr, a, b, d))
    assert count(batched, "sm90_gemm_kernel") == 1 and count(batched, "copy") == 0, batched


def fp8_inputs(batch: int, heads: int, dim_d: int, dim_r: int, seed: int):
    a_bf16 = randn(batch, heads, dim_r, seed=seed)
    a, sfa = per_token_cast_to_fp8(a_bf16.view(batch * heads, dim_r))
    a, sfa = a.view(batch, heads, dim_r), sfa.view(batch, heads, -1)
    b, sfb = per_block_cast_to_fp8(randn(heads, dim_d, dim_r, seed=seed + 1))
    return a, sfa, b, sfb


def fp8_reference(a, sfa, b, sfb) -> torch.Tensor:
    """float64 of exactly the FP8 values and scales the kernel sees."""
    dim_d, dim_r = b.shape[1], b.shape[2]
    a64 = a.double() * sfa.double().repeat_interleave(128, dim=2)[:, :, :dim_r]
    sfb_full = sfb.double().repeat_interleave(128, dim=1).repeat_interleave(128, dim=2)[:, :dim_d, :dim_r]
    return torch.einsum("bhr,hdr->bhd", a64, b.double() * sfb_full)


@gpu
@pytest.mark.parametrize(("batch", "heads", "dim_d", "dim_r"),
                         [(64, 128, 128, 512), (4096, 128, 128, 512), (1, 3, 128, 512), (129, 5, 200, 384)])
def test_fp8_einsum_matches_reference(batch, heads, dim_d, dim_r) -> None:
    a, sfa, b, sfb = fp8_inputs(batch, heads, dim_d, dim_r, seed=batch + heads)
    d = nan_like((batch, heads, dim_d), pad=16)
    deep_gemm.fp8_einsum("bhr,hdr->bhd", (a, sfa), (b, sfb), d)
    check_close(d, fp8_reference(a, sfa, b, sfb), f"fp8 b={batch} h={heads} d={dim_d} r={dim_r}")


def capture(fn) -> torch.cuda.CUDAGraph:
    fn()  # (compiles the kernels before the capture)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        fn()
    return graph


@gpu
def test_graph_replay() -> None:
    batch, heads, dim_d, dim_r = 64, 16, 128, 512
    a, b = randn(batch, heads, dim_r, seed=1), randn(heads, dim_d, dim_r, seed=2)
    d = nan_like((batch, heads, dim_d))
    x, y = randn(4, 96, 128, seed=3), randn(4, 80, 128, seed=4)
    acc = nan_like((96, 80), dtype=torch.float32)
    fa, fsfa, fb, fsfb = fp8_inputs(batch, heads, dim_d, dim_r, seed=5)
    fd = nan_like((batch, heads, dim_d))

    def run() -> None:
        deep_gemm.einsum("bhr,hdr->bhd", a, b, d)
        deep_gemm.einsum("bmk,bnk->mn", x, y, acc)
        deep_gemm.fp8_einsum("bhr,hdr->bhd", (fa, fsfa), (fb, fsfb), fd)

    graph = capture(run)
    # New inputs in place and the outputs poisoned again: the replay must compute the new results
    a.copy_(randn(batch, heads, dim_r, seed=6))
    x.copy_(randn(4, 96, 128, seed=7))
    fa2, fsfa2, _, _ = fp8_inputs(batch, heads, dim_d, dim_r, seed=8)
    fa.copy_(fa2)
    fsfa.copy_(fsfa2)
    for t in (d, acc, fd):
        t.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check_close(d, torch.einsum("bhr,hdr->bhd", a.double(), b.double()), "graph bhr,hdr->bhd")
    check_close(acc, torch.einsum("bmk,bnk->mn", x.double(), y.double()), "graph bmk,bnk->mn", rtol=1e-4, atol=1e-4,
                max_diff=1e-8)
    check_close(fd, fp8_reference(fa, fsfa, fb, fsfb), "graph fp8_einsum")
