"""The C++ entry points called the reference's way (DeepGEMM 2.6.1's `deep_gemm` API): names, argument order and
defaults, positional and keyword binding, the runtime settings' semantics, the FP8 layouts SM90 cannot run, BF16 and
cuBLASLt operands whose major is read from their strides, FP8 / FP32 cuBLASLt operands, and ensure_zero_padding.

CPU tier: signatures and binding (a call that binds reaches the device check, "must be on a CUDA device"), errors
for bad values, settings. GPU tier (marker `gpu`): the calls against float64 references of the same math, into
NaN-poisoned outputs."""

import random

import pytest
import torch
from jit_helpers import signature_params
from padding_rows import check_padding_rows, zeroed_padding_rows

import deep_gemm
from deep_gemm.testing import calc_diff

gpu = pytest.mark.gpu
ON_CPU = r"must be on a CUDA device"


def params(*names: str, **defaults: str) -> list[tuple[str, str | None]]:
    return [(n, None) for n in names] + list(defaults.items())


FP8_DENSE = dict(c="None", recipe="None", recipe_a="None", recipe_b="None")
FP8_GROUPED_NT = params(
    "a", "b", "d", "grouped_layout", recipe="None", recipe_a="None", recipe_b="None", compiled_dims="'nk'",
    disable_ue8m0_cast="False", use_psum_layout="False", ensure_zero_padding="True",
    expected_m_for_psum_layout="None",
)  # fmt: skip
FP8_GROUPED_NN = FP8_GROUPED_NT[:-1]
FP8_MASKED = params(
    "a", "b", "d", "masked_m", "expected_m", recipe="None", recipe_a="None", recipe_b="None", compiled_dims="'nk'",
    disable_ue8m0_cast="False",
)  # fmt: skip
K_GROUPED_FP8 = params(
    "a", "b", "d", "ks_cpu", "grouped_layout", c="None", recipe="(1, 1, 128)", compiled_dims="'mn'",
    use_psum_layout="False",
)  # fmt: skip

# Every row of the reference's top-level `_C` list that deep_gemm serves, but the MQA ones
REFERENCE_SIGNATURES = {
    "set_num_sms": params("new_num_sms"),
    "get_num_sms": [],
    "set_tc_util": params("new_tc_util"),
    "get_tc_util": [],
    "set_ignore_compile_dims": params("new_value"),
    "set_block_size_multiple_of": params("new_value"),
    "set_pdl": params("new_enable_pdl"),
    "get_pdl": [],
    **{f"cublaslt_gemm_{x}": params("a", "b", "d", c="None") for x in ("nt", "nn", "tn", "tt")},
    **{
        f"{prefix}_gemm_{x}": params("a", "b", "d", **FP8_DENSE, compiled_dims=dims, disable_ue8m0_cast="False")
        for prefix in ("fp8", "fp8_fp4")
        for x, dims in (("nt", "'nk'"), ("nn", "'nk'"), ("tn", "'mn'"), ("tt", "'mn'"))
    },
    "m_grouped_fp8_gemm_nt_contiguous": FP8_GROUPED_NT,
    "m_grouped_fp8_fp4_gemm_nt_contiguous": FP8_GROUPED_NT,
    "m_grouped_fp8_gemm_nn_contiguous": FP8_GROUPED_NN,
    "m_grouped_fp8_fp4_gemm_nn_contiguous": FP8_GROUPED_NN,
    "m_grouped_fp8_gemm_nt_masked": FP8_MASKED,
    "m_grouped_fp8_fp4_gemm_nt_masked": FP8_MASKED,
    "fp8_m_grouped_gemm_nt_masked": FP8_MASKED,
    "k_grouped_fp8_gemm_nt_contiguous": K_GROUPED_FP8,
    "k_grouped_fp8_gemm_tn_contiguous": K_GROUPED_FP8,
    **{
        f"bf16_gemm_{x}": params("a", "b", "d", c="None", compiled_dims=dims)
        for x, dims in (("nt", "'nk'"), ("nn", "'nk'"), ("tn", "'mn'"), ("tt", "'mn'"))
    },
    "m_grouped_bf16_gemm_nt_contiguous": params(
        "a", "b", "d", "grouped_layout", compiled_dims="'nk'", use_psum_layout="False", ensure_zero_padding="True",
        expected_m_for_psum_layout="None",
    ),
    "m_grouped_bf16_gemm_nn_contiguous": params(
        "a", "b", "d", "grouped_layout", compiled_dims="'nk'", use_psum_layout="False", ensure_zero_padding="True"
    ),
    "m_grouped_bf16_gemm_nt_masked": params("a", "b", "d", "masked_m", "expected_m", compiled_dims="'nk'"),
    "bf16_m_grouped_gemm_nt_masked": params("a", "b", "d", "masked_m", "expected_m", compiled_dims="'nk'"),
    "k_grouped_bf16_gemm_tn_contiguous": params(
        "a", "b", "d", "ks_cpu", "grouped_layout", c="None", compiled_dims="'mn'", use_psum_layout="False"
    ),
    "transform_sf_into_required_layout": params(
        "sf", "mn", "k", "recipe", num_groups="None", is_sfa="None", disable_ue8m0_cast="False", psum_layout="None"
    ),
    "get_mn_major_tma_aligned_packed_ue8m0_tensor": params("sf", psum_layout="None"),
}


# ----------------------------------------------------------------------------- CPU tier
@pytest.mark.parametrize("name", sorted(REFERENCE_SIGNATURES))
def test_reference_signature(name: str) -> None:
    fn = getattr(deep_gemm, name)
    assert name in deep_gemm.__all__, name
    assert (fn.__doc__ or "").strip(), f"{name} has no docstring"
    assert signature_params(fn) == REFERENCE_SIGNATURES[name], name


def bf16_grouped_operands(layout: str = "nt", device: str = "cpu"):
    g, m, n, k = 2, 256, 64, 128
    a = torch.zeros(m, k, dtype=torch.bfloat16, device=device)
    b = torch.zeros(g, n, k, dtype=torch.bfloat16, device=device)
    if layout == "nn":
        b = b.transpose(1, 2).contiguous()
    d = torch.empty(m, n, dtype=torch.bfloat16, device=device)
    return a, b, d, torch.zeros(m, dtype=torch.int32, device=device)


@pytest.mark.parametrize(
    "call",
    [
        # The reference's positional order: compiled_dims, use_psum_layout, ensure_zero_padding, expected_m
        lambda a, b, d, lay: deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, lay, "nk", False, True, None),
        lambda a, b, d, lay: deep_gemm.m_grouped_bf16_gemm_nt_contiguous(
            a, b, d, lay, compiled_dims="nk", use_psum_layout=False, ensure_zero_padding=False,
            expected_m_for_psum_layout=256),
        lambda a, b, d, lay: deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, lay, ensure_zero_padding=True),
        lambda a, b, d, lay: deep_gemm.m_grouped_bf16_gemm_nn_contiguous(
            a, b.transpose(1, 2).contiguous(), d, lay, "nk", False, False),
        lambda a, b, d, lay: deep_gemm.m_grouped_bf16_gemm_nn_contiguous(
            a=a, b=b.transpose(1, 2).contiguous(), d=d, grouped_layout=lay, ensure_zero_padding=True),
        lambda a, b, d, lay: deep_gemm.m_grouped_fp8_gemm_nt_contiguous(
            (a.to(torch.float8_e4m3fn), torch.zeros(256, 1)), (b.to(torch.float8_e4m3fn), torch.zeros(2, 1, 1)),
            d, lay, None, None, None, "nk", False, False, False, None),
    ],
)  # fmt: skip
def test_grouped_calls_bind_the_reference_way(call) -> None:
    # A call that binds reaches the device check (the operands are on the CPU)
    with pytest.raises(ValueError, match=ON_CPU):
        call(*bf16_grouped_operands())


def test_grouped_positional_argument_seven_is_ensure_zero_padding() -> None:
    a, b, d, lay = bf16_grouped_operands()
    # position 7 takes a bool (ensure_zero_padding), position 8 the int expected_m_for_psum_layout; nn has no 8th
    with pytest.raises(TypeError):
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, lay, "nk", False, "yes")
    with pytest.raises(TypeError):
        deep_gemm.m_grouped_bf16_gemm_nn_contiguous(a, b, d, lay, "nk", False, True, None)


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("fp8_gemm_nn", "fp8_gemm_nt"),
        ("fp8_gemm_tn", "fp8_gemm_nt"),
        ("fp8_gemm_tt", "fp8_gemm_nt"),
        ("fp8_fp4_gemm_nn", "fp8_gemm_nt"),
        ("fp8_fp4_gemm_tn", "fp8_gemm_nt"),
        ("fp8_fp4_gemm_tt", "fp8_gemm_nt"),
        ("m_grouped_fp8_gemm_nn_contiguous", "m_grouped_fp8_gemm_nt_contiguous"),
        ("m_grouped_fp8_fp4_gemm_nn_contiguous", "m_grouped_fp8_gemm_nt_contiguous"),
    ],
)
def test_fp8_layouts_sm90_cannot_run_raise_not_implemented(name: str, hint: str) -> None:
    fn = getattr(deep_gemm, name)
    expected = REFERENCE_SIGNATURES[name]
    positional = [None] * sum(default is None for _, default in expected)
    pattern = rf"{name}: FP8 wgmma on SM90 reads only K-major operands.*{hint}"
    with pytest.raises(deep_gemm._C.NotImplementedError, match=pattern):
        fn(*positional)
    with pytest.raises(NotImplementedError, match=pattern):
        fn(*positional, compiled_dims="mn", disable_ue8m0_cast=True)
    with pytest.raises(NotImplementedError, match=pattern):
        fn(**{p: None for p, default in expected if default is None})
    with pytest.raises(TypeError):
        fn(*positional, bogus=1)


def test_set_tc_util_semantics() -> None:
    try:
        deep_gemm.set_tc_util(0)
        assert deep_gemm.get_tc_util() == 100
        deep_gemm.set_tc_util(new_tc_util=37)
        assert deep_gemm.get_tc_util() == 37
        for bad in (-1, 101):
            with pytest.raises(ValueError, match=r"new_tc_util must be in \[0, 100\]"):
                deep_gemm.set_tc_util(bad)
        assert deep_gemm.get_tc_util() == 37
    finally:
        deep_gemm.set_tc_util(100)


def test_set_num_sms_semantics_without_a_device() -> None:
    deep_gemm.set_num_sms(0)  # reset: needs no device
    deep_gemm.set_num_sms(new_num_sms=0)
    with pytest.raises(ValueError, match=r"new_num_sms must be 0 \(all SMs\) or positive, got -1"):
        deep_gemm.set_num_sms(-1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without a GPU")
def test_set_num_sms_positive_needs_the_device() -> None:
    # (the limit is checked against the device's SM count: no device, a clear error)
    with pytest.raises(RuntimeError, match="libcuda.so.1|cuInit failed"):
        deep_gemm.set_num_sms(8)


def test_set_ignore_compile_dims() -> None:
    try:
        assert deep_gemm.get_ignore_compile_dims() is False
        deep_gemm.set_ignore_compile_dims(True)
        assert deep_gemm.get_ignore_compile_dims() is True
        # compiled_dims is still checked
        a, b, d, _ = bf16_grouped_operands()
        with pytest.raises(ValueError, match="compiled_dims must use only the letters m, n, k"):
            deep_gemm.bf16_gemm_nt(a, b[0], d, None, "nq")
        deep_gemm.set_ignore_compile_dims(new_value=False)
        assert deep_gemm.get_ignore_compile_dims() is False
    finally:
        deep_gemm.set_ignore_compile_dims(False)


def test_set_block_size_multiple_of() -> None:
    try:
        deep_gemm.set_block_size_multiple_of(64)
        assert deep_gemm.get_block_size_multiple_of() == (0, 64)
        deep_gemm.set_block_size_multiple_of((32, 128))
        assert deep_gemm.get_block_size_multiple_of() == (32, 128)
        deep_gemm.set_block_size_multiple_of(new_value=[16, 16])
        assert deep_gemm.get_block_size_multiple_of() == (16, 16)
        with pytest.raises(ValueError, match="an int or a pair of ints"):
            deep_gemm.set_block_size_multiple_of((1, 2, 3))
        with pytest.raises(ValueError, match=r"must be in \[0, 256\]"):
            deep_gemm.set_block_size_multiple_of(-16)
        with pytest.raises(ValueError, match=r"must be in \[0, 256\]"):
            deep_gemm.set_block_size_multiple_of((64, 512))
        with pytest.raises(TypeError):
            deep_gemm.set_block_size_multiple_of("64")
        assert deep_gemm.get_block_size_multiple_of() == (16, 16)
    finally:
        deep_gemm.set_block_size_multiple_of(0)


@pytest.mark.parametrize("bf16", [False, True], ids=["fp8", "bf16"])
def test_heuristic_applies_block_size_multiple_of(bf16: bool) -> None:
    """The GEMM heuristic (on the CPU) picks only tiles whose BLOCK_M / BLOCK_N are multiples of the set values. The
    shapes' unconstrained picks are not (BLOCK_N 112, 144, 160, 96, 80), so the constraint changes them."""
    config = deep_gemm._C.get_gemm_config
    shapes = [(512, 7168, 7168), (1024, 2112, 7168), (1024, 7168, 7168), (512, 1536, 7168), (512, 576, 7168)]
    changed = 0
    for m, n, k in shapes:
        free = config(m, n, k, bf16=bf16)
        for multiple in [(0, 32), (0, 64), (0, 128), (128, 0), (64, 128)]:
            c = config(m, n, k, bf16=bf16, block_size_multiple_of=multiple)
            assert multiple[0] == 0 or c["block_m"] % multiple[0] == 0, (m, n, k, multiple, c)
            assert multiple[1] == 0 or c["block_n"] % multiple[1] == 0, (m, n, k, multiple, c)
            changed += (c["block_m"], c["block_n"]) != (free["block_m"], free["block_n"])
        assert config(m, n, k, bf16=bf16, block_size_multiple_of=(0, 0)) == free
    assert changed >= len(shapes)
    # (m-grouped layouts never take BLOCK_M = 256: nothing fits a multiple of 256)
    with pytest.raises(ValueError, match=r"set_block_size_multiple_of\(256, 0\)"):
        config(4096, 4096, 7168, bf16=bf16, gemm_type=1, block_size_multiple_of=(256, 0))


@gpu
@pytest.mark.parametrize("multiple", [(0, 64), (128, 0), (64, 128)], ids=lambda v: f"m{v[0]}-n{v[1]}")
def test_gemms_run_with_block_size_multiple_of(multiple) -> None:
    """The constrained tiles compute the same math: FP8 (1024 x 2112 x 7168, unconstrained BLOCK_N 144) against
    float64 of the dequantized operands, BF16 against float64 of its operands; outputs poisoned."""
    from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8

    m, n, k = 1024, 2112, 7168
    torch.manual_seed(sum(multiple))
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a, sfa = per_token_cast_to_fp8(x, use_ue8m0=False)
    b, sfb = per_block_cast_to_fp8(w, use_ue8m0=False)
    try:
        deep_gemm.set_block_size_multiple_of(multiple)
        d8 = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d8)
        d16 = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        deep_gemm.bf16_gemm_nt(x, w, d16)
    finally:
        deep_gemm.set_block_size_multiple_of(0)
    a64 = a.double() * sfa.double().repeat_interleave(128, dim=1)[:, :k]
    b64 = b.double() * sfb.double().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[:n, :k]
    assert torch.isfinite(d8).all() and torch.isfinite(d16).all()
    assert calc_diff(d8, a64 @ b64.T) < 5e-6
    assert calc_diff(d16, x.double() @ w.double().T) < 5e-6


def mn_major(x: torch.Tensor) -> torch.Tensor:
    """The same values and shape, stored with stride 1 along the second-to-last dimension (x.T.contiguous().T)."""
    return x.transpose(-1, -2).contiguous().transpose(-1, -2)


def strided_both(x: torch.Tensor) -> torch.Tensor:
    """The same shape with stride 1 along neither dimension."""
    rows, cols = x.shape
    return torch.zeros(rows, cols * 2, dtype=x.dtype)[:, ::2]


@pytest.mark.parametrize("family", ["bf16", "cublaslt"])
@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
@pytest.mark.parametrize("storage", ["as_named", "a_swapped", "b_swapped", "both_swapped"])
def test_majors_come_from_strides(family: str, layout: str, storage: str) -> None:
    m, n, k = 64, 128, 256
    a = torch.zeros(m, k, dtype=torch.bfloat16) if layout[0] == "n" else torch.zeros(k, m, dtype=torch.bfloat16)
    b = torch.zeros(n, k, dtype=torch.bfloat16) if layout[1] == "t" else torch.zeros(k, n, dtype=torch.bfloat16)
    a = mn_major(a) if storage in ("a_swapped", "both_swapped") else a
    b = mn_major(b) if storage in ("b_swapped", "both_swapped") else b
    d = torch.empty(m, n, dtype=torch.float32)
    fn = getattr(deep_gemm, f"{family}_gemm_{layout}")
    with pytest.raises(ValueError, match=ON_CPU):  # (bound and checked: only the device is left)
        fn(a, b, d)


@pytest.mark.parametrize("family", ["bf16", "cublaslt"])
@pytest.mark.parametrize("operand", ["a", "b"])
def test_operand_with_no_unit_stride_raises(family: str, operand: str) -> None:
    m, n, k = 64, 128, 256
    a, b = torch.zeros(m, k, dtype=torch.bfloat16), torch.zeros(n, k, dtype=torch.bfloat16)
    if operand == "a":
        a = strided_both(a)
    else:
        b = strided_both(b)
    pattern = rf"{operand} \(\[[MN], K\]\) must have stride 1 along K \(K-major\) or along its other dimension"
    with pytest.raises(ValueError, match=pattern):
        getattr(deep_gemm, f"{family}_gemm_nt")(a, b, torch.empty(m, n))


def test_m_grouped_bf16_b_major_from_strides() -> None:
    a, b, d, lay = bf16_grouped_operands()
    # nt with an N-major [G, N, K] view, nn with a K-major [G, K, N] view: both bind and reach the device check
    with pytest.raises(ValueError, match=ON_CPU):
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, mn_major(b), d, lay)
    with pytest.raises(ValueError, match=ON_CPU):
        deep_gemm.m_grouped_bf16_gemm_nn_contiguous(a, b.transpose(1, 2), d, lay)
    # the groups of the storage must still be stacked densely
    spread = torch.zeros(2, 128, 128, dtype=torch.bfloat16)[:, :64, :]
    with pytest.raises(ValueError, match="b: the groups must be stacked densely"):
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, spread, d, lay)


@pytest.mark.parametrize(
    ("case", "pattern"),
    [
        ("fp8_mn_major", r"FP8 operands must both be K-major"),
        ("fp8_k_unaligned", r"FP8 operands need K and N multiples of 16"),
        ("fp8_b_bf16", r"b must be FP8"),
        ("e5m2_both", r"may not both be torch.float8_e5m2"),
        ("fp32_into_bf16", r"d must have dtype torch.float32 for FP32 operands"),
        ("mixed_bf16_fp32", r"b \(a's dtype\) must have dtype torch.bfloat16"),
        ("fp16", r"a must have dtype torch.bfloat16, torch.float32, torch.float8_e4m3fn or torch.float8_e5m2"),
        ("fp8_on_cpu", ON_CPU),
        ("fp32_on_cpu", ON_CPU),
    ],
)
def test_cublaslt_dtypes(case: str, pattern: str) -> None:
    m, n, k = 32, 64, 128
    e4m3 = torch.float8_e4m3fn
    a, b = torch.zeros(m, k, dtype=e4m3), torch.zeros(n, k, dtype=e4m3)
    d = torch.empty(m, n, dtype=torch.bfloat16)
    if case == "fp8_mn_major":
        a = mn_major(a)
    elif case == "fp8_k_unaligned":
        a, b = torch.zeros(m, k + 8, dtype=e4m3), torch.zeros(n, k + 8, dtype=e4m3)
    elif case == "fp8_b_bf16":
        b = b.bfloat16()
    elif case == "e5m2_both":
        a, b = a.to(torch.float8_e5m2), b.to(torch.float8_e5m2)
    elif case == "fp32_into_bf16":
        a, b = a.float(), b.float()
    elif case == "mixed_bf16_fp32":
        a, b = a.bfloat16(), b.float()
    elif case == "fp16":
        a, b = a.half(), b.half()
    elif case == "fp32_on_cpu":
        a, b, d = a.float(), b.float(), d.float()
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.cublaslt_gemm_nt(a, b, d)


@pytest.mark.parametrize("name", ["k_grouped_fp8_gemm_nt_contiguous", "k_grouped_fp8_gemm_tn_contiguous",
                                  "k_grouped_bf16_gemm_tn_contiguous"])  # fmt: skip
def test_k_grouped_ks_cpu_none_raises_clearly(name: str) -> None:
    d = torch.empty(2, 128, 128)
    layout = torch.zeros(2, dtype=torch.int32)
    operand = (torch.zeros(1), torch.zeros(1)) if "fp8" in name else torch.zeros(1)
    with pytest.raises(ValueError, match=rf"{name}: ks_cpu must be the list of the groups' K on SM90"):
        getattr(deep_gemm, name)(operand, operand, d, None, layout)
    with pytest.raises(ValueError, match="ks_cpu must be the list"):
        getattr(deep_gemm, name)(operand, operand, d, ks_cpu=None, grouped_layout=layout, use_psum_layout=True)


def test_k_grouped_default_recipe_is_the_reference_one() -> None:
    # (1, 1, 128) is the only recipe: the default binds and the call reaches the device check
    ks = [128, 256]
    a = (torch.zeros(128 * 384, dtype=torch.float8_e4m3fn), torch.zeros(3, 128))
    b = (torch.zeros(64 * 384, dtype=torch.float8_e4m3fn), torch.zeros(3, 64))
    d, layout = torch.empty(2, 128, 64), torch.tensor(ks, dtype=torch.int32)
    with pytest.raises(ValueError, match=ON_CPU):
        deep_gemm.k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks, layout)
    with pytest.raises(ValueError, match=r"recipe must be \(1, 1, 128\)"):
        deep_gemm.k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks, layout, None, (1, 128, 128))


def test_psum_layout_of_the_scale_transforms_is_checked() -> None:
    sf = torch.ones(256, 2)
    with pytest.raises(ValueError, match=r"psum_layout must have dtype torch.int32"):
        deep_gemm.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"psum_layout must be int32 \[G\]"):
        deep_gemm.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum_layout=torch.zeros(2, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"psum_layout must have dtype torch.int32"):
        deep_gemm.transform_sf_into_required_layout(sf, 256, 256, (1, 128), None, None, False, torch.zeros(2))
    with pytest.raises(ValueError, match=r"sf must be on a CUDA device"):
        deep_gemm.transform_sf_into_required_layout(
            sf, 256, 256, (1, 128), psum_layout=torch.zeros(2, dtype=torch.int32))


# ----------------------------------------------------------------------------- GPU tier
def randn(*shape: int, seed: int, dtype=torch.bfloat16) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32).to(dtype)


def poisoned(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def check_close(d: torch.Tensor, ref: torch.Tensor, case: str, tol: float) -> None:
    assert torch.isfinite(d).all(), f"{case}: unwritten (NaN) or non-finite elements"
    diff = calc_diff(d, ref)
    assert diff < tol, f"{case}: calc_diff vs float64 = {diff}"


@gpu
@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
@pytest.mark.parametrize("storage", ["as_named", "a_swapped", "b_swapped", "both_swapped"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_bf16_gemm_majors_from_strides(layout: str, storage: str, out_dtype: torch.dtype) -> None:
    m, n, k = 264, 320, 392
    a_mk, b_nk = randn(m, k, seed=1), randn(n, k, seed=2)
    a = a_mk if layout[0] == "n" else a_mk.t()  # the shape the name says
    b = b_nk if layout[1] == "t" else b_nk.t()
    # the storage: row-major in the named shape, or swapped (stride 1 along the other dimension)
    a = mn_major(a) if storage in ("a_swapped", "both_swapped") else a.contiguous()
    b = mn_major(b) if storage in ("b_swapped", "both_swapped") else b.contiguous()
    c = randn(m, n, seed=3, dtype=out_dtype)
    ref = a_mk.double() @ b_nk.double().t()
    fn = getattr(deep_gemm, f"bf16_gemm_{layout}")
    case = f"bf16_gemm_{layout} {storage} {out_dtype}"
    d = poisoned(m, n, dtype=out_dtype)
    fn(a, b, d)
    check_close(d, ref, case, 1e-5 if out_dtype == torch.float32 else 2e-5)
    d = poisoned(m, n, dtype=out_dtype)
    fn(a, b, d, c)
    check_close(d, ref + c.double(), case + " with c", 1e-5 if out_dtype == torch.float32 else 2e-5)


@gpu
@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
@pytest.mark.parametrize("storage", ["as_named", "a_swapped", "b_swapped", "both_swapped"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_cublaslt_majors_from_strides(layout: str, storage: str, dtype: torch.dtype) -> None:
    m, n, k = 136, 200, 328
    a_mk, b_nk = randn(m, k, seed=4, dtype=dtype), randn(n, k, seed=5, dtype=dtype)
    a = a_mk if layout[0] == "n" else a_mk.t()
    b = b_nk if layout[1] == "t" else b_nk.t()
    a = mn_major(a) if storage in ("a_swapped", "both_swapped") else a.contiguous()
    b = mn_major(b) if storage in ("b_swapped", "both_swapped") else b.contiguous()
    ref = a_mk.double() @ b_nk.double().t()
    c = randn(m, n, seed=6, dtype=torch.float32)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # (FP32 operands: full FP32 products)
    try:
        d = poisoned(m, n, dtype=torch.float32)
        getattr(deep_gemm, f"cublaslt_gemm_{layout}")(a, b, d)
        check_close(d, ref, f"cublaslt_gemm_{layout} {storage} {dtype}", 1e-6)
        d = poisoned(m, n, dtype=torch.float32)
        getattr(deep_gemm, f"cublaslt_gemm_{layout}")(a, b, d, c)
        check_close(d, ref + c.double(), f"cublaslt_gemm_{layout} {storage} {dtype} with c", 1e-6)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


@gpu
@pytest.mark.parametrize(("a_dtype", "b_dtype"), [(torch.float8_e4m3fn, torch.float8_e4m3fn),
                                                  (torch.float8_e4m3fn, torch.float8_e5m2),
                                                  (torch.float8_e5m2, torch.float8_e4m3fn)])  # fmt: skip
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("with_c", ["no_c", "c", "in_place"])
def test_cublaslt_fp8(a_dtype: torch.dtype, b_dtype: torch.dtype, out_dtype: torch.dtype, with_c: str) -> None:
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("cuBLASLt FP8 needs SM89 or later")
    m, n, k = 200, 256, 512
    a = (randn(m, k, seed=7) * 4).to(a_dtype)
    b = (randn(n, k, seed=8) * 4).to(b_dtype)
    ref = a.double() @ b.double().t()  # (per-tensor scale 1)
    # (C of the product's size, RMS ~4 * 4 * sqrt(512) = 362: a C dropped or D overwritten instead of added then
    # errs by calc_diff ~0.5, where a unit C would hide under BF16 D's tolerance)
    c = (randn(m, n, seed=9, dtype=torch.float32) * 300).to(out_dtype)
    # a D with padded rows (not contiguous) too: the product goes through a temporary
    wide = poisoned(m, n + 16, dtype=out_dtype)
    for d in (poisoned(m, n, dtype=out_dtype), wide[:, :n]):
        case = f"cublaslt fp8 {a_dtype}x{b_dtype} -> {out_dtype} {with_c} stride {d.stride(0)}"
        if with_c == "no_c":
            deep_gemm.cublaslt_gemm_nt(a, b, d)
            expected = ref
        elif with_c == "c":
            deep_gemm.cublaslt_gemm_nt(a, b, d, c)
            expected = ref + c.double()
        else:
            d.copy_(c)
            deep_gemm.cublaslt_gemm_nt(a, b, d, d)
            expected = ref + c.double()
        check_close(d, expected, case, 1e-6 if out_dtype == torch.float32 else 2e-5)
    assert wide[:, n:].isnan().all(), "the padding columns of d were written"


def grouped_layouts(num_groups: int, expected_m: int, seed: int):
    """Random group sizes (about one group in five empty), segments aligned as the contiguous layout needs; the
    per-row ids, the cumulative ends, the segments and the padding-row mask."""
    rng = random.Random(seed)
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    sizes = [0 if rng.random() < 0.2 else max(1, int(expected_m * rng.uniform(0.7, 1.3))) for _ in range(num_groups)]
    segments, row = [], 0
    for size in sizes:
        segments.append((row, row + size))
        row = (row + size + alignment - 1) // alignment * alignment
    m = max(row, alignment) + alignment  # (a trailing block of padding past the last group too)
    per_row = torch.full((m,), -1, device="cuda", dtype=torch.int32)
    padding = torch.ones(m, dtype=torch.bool, device="cuda")
    for g, (s, e) in enumerate(segments):
        per_row[s:e] = g
        padding[s:e] = False
    ends = torch.tensor([e for _, e in segments], device="cuda", dtype=torch.int32)
    return m, per_row, ends, segments, padding


def check_zero_padding(d: torch.Tensor, per_row: torch.Tensor, num_groups: int, padding: torch.Tensor, zero: bool,
                       psum: bool, case: str) -> None:  # fmt: skip
    """Padding rows zero as padding_rows.zeroed_padding_rows says (all with ensure_zero_padding; without it, per-row,
    those of group segments, which the reference's SM90 kernel writes), the others untouched (NaN)."""
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    check_padding_rows(d, ~padding, zeroed_padding_rows(per_row, num_groups, alignment, zero, psum), case)


@gpu
@pytest.mark.parametrize("psum", [False, True], ids=["per_row", "psum"])
@pytest.mark.parametrize("layout", ["nt", "nn"])
# (an N-major B needs 16-byte row strides, N a multiple of 8: n = 100 runs K-major only)
@pytest.mark.parametrize(("b_major", "n"), [("k", 576), ("n", 576), ("k", 100)])
@pytest.mark.parametrize("in_gemm", [False, True], ids=["zero_kernel", "in_gemm"])
def test_m_grouped_bf16_ensure_zero_padding_and_b_major(psum: bool, layout: str, b_major: str, n: int, in_gemm: bool,
                                                        monkeypatch) -> None:  # fmt: skip
    if in_gemm:  # (the padding rows zeroed by the GEMM's producer warps: opt-in until it has run on a GPU)
        monkeypatch.setenv("DG_TUNE", "bf16_gemm:zero_padding_in_gemm=1")
    num_groups, k = 5, 1040
    m, per_row, ends, segments, padding = grouped_layouts(num_groups, 300, seed=n + num_groups)
    a, b_nk = randn(m, k, seed=10), randn(num_groups, n, k, seed=11)
    b = b_nk if layout == "nt" else b_nk.transpose(1, 2)  # the shape the name says
    stored_k_major = b_major == "k"
    if layout == "nt":
        b = b.contiguous() if stored_k_major else mn_major(b)
    else:
        b = mn_major(b) if stored_k_major else b.contiguous()
    fn = getattr(deep_gemm, f"m_grouped_bf16_gemm_{layout}_contiguous")
    layout_tensor = ends if psum else per_row
    for zero in (True, False):
        case = f"m_grouped_bf16_{layout} B {b_major}-major n{n} {'psum' if psum else 'per_row'} zero={zero}"
        # D with padded rows when N is not a multiple of 8 (the zeroing kernel's 2-byte path)
        wide = poisoned(m, (n + 7) // 8 * 8 + 8, dtype=torch.bfloat16)
        d = wide[:, :n]
        if zero:
            fn(a, b, d, layout_tensor, "nk", psum)  # (the default: ensure_zero_padding=True)
        else:
            fn(a, b, d, layout_tensor, use_psum_layout=psum, ensure_zero_padding=False)
        for g, (s, e) in enumerate(segments):
            if s < e:
                check_close(d[s:e], a[s:e].double() @ b_nk[g].double().t(), f"{case} group {g}", 2e-5)
        check_zero_padding(d, per_row, num_groups, padding, zero, psum, case)
        assert wide[:, n:].isnan().all(), f"{case}: columns past N were written"


@gpu
@pytest.mark.parametrize("psum", [False, True], ids=["per_row", "psum"])
@pytest.mark.parametrize("in_gemm", [False, True], ids=["zero_kernel", "in_gemm"])
def test_m_grouped_fp8_ensure_zero_padding(psum: bool, in_gemm: bool, monkeypatch) -> None:
    if in_gemm:  # (the padding rows zeroed by the GEMM's producer warps: opt-in until it has run on a GPU)
        monkeypatch.setenv("DG_TUNE", "fp8_gemm:zero_padding_in_gemm=1")
    num_groups, n, k = 6, 512, 768
    m, per_row, ends, segments, padding = grouped_layouts(num_groups, 256, seed=3)
    a = (randn(m, k, seed=12) * 2).to(torch.float8_e4m3fn)
    sfa = torch.rand(m, k // 128, device="cuda") + 0.5
    b = (randn(num_groups, n, k, seed=13) * 2).to(torch.float8_e4m3fn)
    sfb = torch.rand(num_groups, n // 128, k // 128, device="cuda") + 0.5
    layout = ends if psum else per_row
    for zero in (True, False):
        case = f"m_grouped_fp8 {'psum' if psum else 'per_row'} zero={zero}"
        d = poisoned(m, n, dtype=torch.bfloat16)
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout, use_psum_layout=psum,
                                                   ensure_zero_padding=zero)  # fmt: skip
        for g, (s, e) in enumerate(segments):
            if s == e:
                continue
            a_g = a[s:e].double() * sfa[s:e].double().repeat_interleave(128, dim=1)
            b_g = b[g].double() * sfb[g].double().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)
            check_close(d[s:e], a_g @ b_g.t(), f"{case} group {g}", 2e-5)
        check_zero_padding(d, per_row, num_groups, padding, zero, psum, case)


@gpu
def test_m_grouped_zero_padding_counts_bad_ids_as_padding() -> None:
    # Per-row ids outside [0, G) are padding: zeroed like -1
    m, per_row, _, segments, padding = grouped_layouts(4, 256, seed=5)
    a, b = randn(m, 256, seed=14), randn(4, 256, 256, seed=15)
    s, e = next(seg for seg in segments if seg[1] > seg[0])
    bad = per_row.clone()
    bad[s:e] = 4
    padding = padding.clone()
    padding[s:e] = True
    d = poisoned(m, 256, dtype=torch.bfloat16)
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, bad)
    check_zero_padding(d, bad, 4, padding, True, False, "ids equal to G")


@gpu
def test_set_num_sms_bounds_and_reset() -> None:
    device_sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    try:
        with pytest.raises(ValueError, match=rf"new_num_sms must be at most the {device_sms} SMs"):
            deep_gemm.set_num_sms(device_sms + 1)
        deep_gemm.set_num_sms(device_sms // 2)
        assert deep_gemm.get_num_sms() == device_sms // 2
        deep_gemm.set_num_sms(0)
        assert deep_gemm.get_num_sms() == device_sms
    finally:
        deep_gemm.set_num_sms(0)


@gpu
def test_ignore_compile_dims_gives_the_same_results() -> None:
    m, n, k = 200, 256, 512
    a, b = randn(m, k, seed=16), randn(n, k, seed=17)
    d1, d2 = poisoned(m, n, dtype=torch.float32), poisoned(m, n, dtype=torch.float32)
    deep_gemm.bf16_gemm_nt(a, b, d1, compiled_dims="mnk")
    try:
        deep_gemm.set_ignore_compile_dims(True)
        deep_gemm.bf16_gemm_nt(a, b, d2, compiled_dims="mnk")
    finally:
        deep_gemm.set_ignore_compile_dims(False)
    # (the config may differ with runtime dimensions, so each result is checked on its own)
    check_close(d1, a.double() @ b.double().t(), "compiled dims", 1e-5)
    check_close(d2, a.double() @ b.double().t(), "ignore_compile_dims", 1e-5)
