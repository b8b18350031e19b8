"""The cast kernels: per_token_quant_fp8, silu_and_mul_quant_fp8, per_block_quant_fp8, per_token_quant_fp4 (and the
CUDA path of deep_gemm.utils.per_token_cast_to_fp8 / per_block_cast_to_fp8 / per_token_cast_to_fp4, which they serve).

Oracle: the PyTorch forms in deep_gemm.utils (per_token_cast_to_fp8_reference, per_block_cast_to_fp8_reference,
silu_and_mul_reference, per_token_cast_to_fp4_reference), run on the same GPU: the kernels must give the same bytes, values and scales, bit for bit
(the reference itself is checked against float64 in tests/test_utils.py). MN-major scales are compared as values and
by their strides against get_mn_major_tma_aligned_tensor of the reference's.

CPU tier: the kernels compile for sm_90a with NVCC without spills and convert with the e4m3 cvt; every bad argument
raises naming it; CPU inputs of the utils casts still run the PyTorch form; the bench suite is registered.
GPU tier (`gpu`): random inputs with rows of zeros, huge and tiny rows, unaligned M, K not a multiple of the group
(and not of 8: the element-wise path), BF16 and FP32, 2-D and 3-D, strided x, masked layouts with masked_m 0, partial
and full; the caching allocator's free memory poisoned before each call (the outputs are allocated by the call).
"""

import pytest
import torch
from jit_helpers import dump_sass, signature_params
from torch._subclasses.fake_tensor import FakeTensorMode

import deep_gemm
from deep_gemm.utils import casts, mn_major_tma_aligned_reference
from deep_gemm.utils.casts import (
    per_block_cast_to_fp8_reference,
    per_token_cast_to_fp8_reference,
    silu_and_mul_reference,
)
from deep_gemm.utils.fp4_casts import per_token_cast_to_fp4_reference

gpu = pytest.mark.gpu
FP8 = torch.float8_e4m3fn


# ----------------------------------------------------------------------------------------------- CPU tier
def test_signatures() -> None:
    assert signature_params(deep_gemm.per_token_quant_fp8) == [
        ("x", None), ("use_ue8m0", "False"), ("gran_k", "128"), ("use_packed_ue8m0", "False"), ("sf_mn_major", "False")
    ]  # fmt: skip
    assert signature_params(deep_gemm.silu_and_mul_quant_fp8) == [
        ("x", None), ("use_ue8m0", "False"), ("gran_k", "128"), ("use_packed_ue8m0", "False"),
        ("row_weights", "None"), ("activation_clamp", "None"), ("masked_m", "None"), ("sf_mn_major", "True"),
    ]  # fmt: skip
    assert signature_params(deep_gemm.per_block_quant_fp8) == [("x", None), ("use_ue8m0", "False")]
    # The reference's casts keep the reference's signatures
    assert [p[0] for p in signature_params(deep_gemm.utils.per_token_cast_to_fp8)] == [
        "x", "use_ue8m0", "gran_k", "use_packed_ue8m0"
    ]  # fmt: skip
    assert [p[0] for p in signature_params(deep_gemm.utils.per_block_cast_to_fp8)] == ["x", "use_ue8m0", "gran_k"]


@pytest.mark.parametrize(
    ("params", "sass_min_cvt"),
    [
        ({}, 4),  # BF16, 1 x 128, FP32 scales, vector loads
        ({"gran_k": 32, "fp32_input": 1, "ue8m0": 1, "packed_ue8m0": 1, "swiglu": 1, "aligned": 0}, 4),
    ],
    ids=["token-bf16-g128", "swiglu-fp32-g32-packed-unaligned"],
)
def test_per_token_kernel_compiles_without_spills(tmp_path, monkeypatch, params: dict, sass_min_cvt: int) -> None:
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "cache"))
    result = deep_gemm.compile_kernel("smxx_quant_per_token", params, use_nvrtc=False)
    assert result["registers"] > 0, result["ptxas_report"]
    assert result["stack_frame_bytes"] == 0, result["ptxas_report"]
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]
    sass = dump_sass(result["cubin_path"])
    # Four e4m3x2 conversions per 8 values (cvt.rn.satfinite.e4m3x2.f32 -> F2FP.SATFINITE.E4M3)
    assert sass.count("E4M3") >= sass_min_cvt, sass
    assert "SHFL.BFLY" in sass and "LDL" not in sass and "STL" not in sass
    if not params:
        assert "LDG.E.128.CONSTANT" in sass or "LDG.E.ENL2.128.CONSTANT" in sass or ".128" in sass


def test_per_block_kernel_compiles_without_spills(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "cache"))
    result = deep_gemm.compile_kernel("smxx_quant_per_block", {}, use_nvrtc=False)
    assert result["stack_frame_bytes"] == 0, result["ptxas_report"]
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]
    sass = dump_sass(result["cubin_path"])
    assert sass.count("E4M3") >= 4 * 8 and "BAR.SYNC" in sass


def test_fp4_kernel_compiles_without_spills(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "cache"))
    result = deep_gemm.compile_kernel("smxx_quant_per_token", {"fp4": 1, "ue8m0": 1, "gran_k": 32}, use_nvrtc=False)
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]
    assert "E4M3" not in dump_sass(result["cubin_path"])


def test_bad_compile_params_raise() -> None:
    with pytest.raises(ValueError, match=r"gran_k must be 32 or 128, got 64"):
        deep_gemm.compile_kernel("smxx_quant_per_token", {"gran_k": 64})
    with pytest.raises(ValueError, match=r"packed_ue8m0 needs ue8m0"):
        deep_gemm.compile_kernel("smxx_quant_per_token", {"packed_ue8m0": 1})
    with pytest.raises(ValueError, match=r"unknown parameter 'gran_k' for kernel family 'smxx_quant_per_block'"):
        deep_gemm.compile_kernel("smxx_quant_per_block", {"gran_k": 128})


def _x(*shape, dtype=torch.bfloat16, device="cpu"):
    return torch.zeros(shape, dtype=dtype, device=device)


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda: deep_gemm.per_token_quant_fp8(_x(4, 128)), r"x must be on a CUDA device"),
        (lambda: deep_gemm.per_token_quant_fp8(_x(4, 128, dtype=torch.float16)), r"x must have dtype torch.bfloat16 "
         r"or torch.float32"),
        (lambda: deep_gemm.per_token_quant_fp8(_x(128)), r"x must be 2-D \[M, K\] or 3-D"),
        (lambda: deep_gemm.per_token_quant_fp8(_x(4, 128), gran_k=64), r"gran_k must be 32 or 128"),
        (lambda: deep_gemm.per_token_quant_fp8(_x(4, 128), use_packed_ue8m0=True), r"use_packed_ue8m0=True needs "
         r"use_ue8m0=True"),
        (lambda: deep_gemm.silu_and_mul_quant_fp8(_x(4, 127)), r"x must be \[\.\.\., 2 \* I\]"),
        (lambda: deep_gemm.silu_and_mul_quant_fp8(_x(4, 256), masked_m=_x(1, dtype=torch.int32)),
         r"masked_m needs a 3-D x"),
        (lambda: deep_gemm.silu_and_mul_quant_fp8(_x(2, 4, 256), masked_m=_x(3, dtype=torch.int32)),
         r"masked_m must be a contiguous int32 \[G\] with G = 2"),
        (lambda: deep_gemm.silu_and_mul_quant_fp8(_x(2, 4, 256), masked_m=_x(2, dtype=torch.int64)),
         r"masked_m must have dtype torch.int32"),
        (lambda: deep_gemm.silu_and_mul_quant_fp8(_x(4, 256), row_weights=_x(5, dtype=torch.float32)),
         r"row_weights must be a contiguous float32 \[4\]"),
        (lambda: deep_gemm.silu_and_mul_quant_fp8(_x(2, 4, 256), row_weights=_x(4, dtype=torch.float32)),
         r"row_weights must be a contiguous float32 \[2, 4\]"),
        (lambda: deep_gemm.silu_and_mul_quant_fp8(_x(4, 256), row_weights=_x(4)), r"row_weights must have dtype "
         r"torch.float32"),
        (lambda: deep_gemm.silu_and_mul_quant_fp8(_x(4, 256), activation_clamp=-1.0), r"activation_clamp must be None "
         r"or a finite value >= 0, got -1"),
        (lambda: deep_gemm.silu_and_mul_quant_fp8(_x(4, 256), activation_clamp=float("inf")), r"activation_clamp"),
        (lambda: deep_gemm.silu_and_mul_quant_fp8(_x(4, 256)), r"x must be on a CUDA device"),
        (lambda: deep_gemm.per_block_quant_fp8(_x(4, 128)), r"x must be on a CUDA device"),
        (lambda: deep_gemm.per_block_quant_fp8(_x(4, 128, dtype=torch.float64)), r"x must have dtype"),
        (lambda: deep_gemm.per_token_quant_fp4(_x(4, 127)), r"K must be even"),
        (lambda: deep_gemm.per_token_quant_fp4(_x(4, 128)), r"x must be on a CUDA device"),
        (lambda: deep_gemm.per_token_quant_fp4(_x(4, 128), gran_k=16), r"gran_k must be 32 or 128"),
    ],
)  # fmt: skip
def test_bad_arguments_raise_naming_them(call, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        call()


def test_device_check_is_a_dynamo_constant_without_importing_dynamo() -> None:
    # (what torch.compiler.assume_constant_result would set; importing deep_gemm must not import torch._dynamo)
    from torch._dynamo.decorators import assume_constant_result

    probe = assume_constant_result(lambda: None)
    assert probe._dynamo_marked_constant is casts._sm90_or_newer._dynamo_marked_constant is True
    code = "import sys, deep_gemm; print('torch._dynamo' in sys.modules)"
    import subprocess
    import sys
    import tempfile

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tempfile.gettempdir())
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_utils_casts_of_cpu_tensors_run_the_pytorch_form() -> None:
    x = torch.randn(5, 300, dtype=torch.bfloat16)
    for args in ((False, 128, False), (True, 32, True)):
        got, ref = deep_gemm.utils.per_token_cast_to_fp8(x, *args), per_token_cast_to_fp8_reference(x, *args)
        assert all(torch.equal(a.view(torch.uint8) if a.dtype == FP8 else a,
                               b.view(torch.uint8) if b.dtype == FP8 else b) for a, b in zip(got, ref, strict=True))  # fmt: skip
    got, ref = deep_gemm.utils.per_block_cast_to_fp8(x), per_block_cast_to_fp8_reference(x)
    assert torch.equal(got[0].view(torch.uint8), ref[0].view(torch.uint8)) and torch.equal(got[1], ref[1])
    assert not casts._kernel_serves(x, (32, 128), 128)


def test_silu_and_mul_reference_matches_its_definition() -> None:
    x = torch.randn(3, 4, 10, dtype=torch.float64)
    w = torch.rand(3, 4)
    y = silu_and_mul_reference(x, w, 0.5)
    g, u = x.float()[..., :5].clamp(max=0.5), x.float()[..., 5:].clamp(-0.5, 0.5)
    assert y.dtype == torch.float32 and y.shape == (3, 4, 5)
    assert torch.equal(y, g / (1 + torch.exp(-g)) * u * w.unsqueeze(-1))
    # (torch's fused silu agrees to an ulp or so: its rounding depends on how PyTorch was compiled)
    torch.testing.assert_close(silu_and_mul_reference(x), torch.nn.functional.silu(x.float()[..., :5]) *
                               x.float()[..., 5:], rtol=1e-6, atol=1e-7)  # fmt: skip


@pytest.mark.parametrize(
    ("shape", "args"),
    [((5, 300), (False, 128, False, False)), ((2, 7, 256), (True, 32, True, True)), ((6, 1000), (True, 128, False, True)),
     ((9, 64), (False, 32, False, True))],
)  # fmt: skip
def test_fake_outputs_have_the_kernels_layouts(shape, args) -> None:
    # Under torch.compile the ops' fake outputs stand in for the kernels': the reference's shapes and dtypes, and
    # with sf_mn_major the strides of get_mn_major_tma_aligned_tensor
    use_ue8m0, gran_k, packed, mn_major = args
    want_x, want_sf = per_token_cast_to_fp8_reference(torch.zeros(shape), use_ue8m0, gran_k, packed)
    silu_x, silu_sf = per_token_cast_to_fp8_reference(torch.zeros(*shape[:-1], shape[-1] // 2), use_ue8m0, gran_k,
                                                      packed)  # fmt: skip
    with FakeTensorMode():
        x = torch.empty(shape, device="cuda", dtype=torch.bfloat16)
        got_x, got_sf = torch.ops.deep_gemm.per_token_quant_fp8(x, use_ue8m0, gran_k, packed, mn_major)
        s_x, s_sf = torch.ops.deep_gemm.silu_and_mul_quant_fp8(x, use_ue8m0, gran_k, packed, None, None, None, mn_major)
        b_x, b_sf = torch.ops.deep_gemm.per_block_quant_fp8(x, use_ue8m0)
    want_b = per_block_cast_to_fp8_reference(torch.zeros(shape), use_ue8m0)
    for got, want in ((got_x, want_x), (got_sf, want_sf), (s_x, silu_x), (s_sf, silu_sf), (b_x, want_b[0]),
                      (b_sf, want_b[1])):  # fmt: skip
        assert (got.shape, got.dtype, got.device.type) == (want.shape, want.dtype, "cuda")
    for got, want in ((got_sf, want_sf), (s_sf, silu_sf)):
        expected = mn_major_tma_aligned_reference(want.float()).stride() if mn_major else want.stride()
        assert got.stride() == expected, (got.stride(), expected)
    assert got_x.is_contiguous() and s_x.is_contiguous() and b_x.is_contiguous() and b_sf.is_contiguous()


def test_compile_fullgraph_traces_the_ops() -> None:
    # Meta inputs: the public functions trace to their ops (no graph break), the outputs from the fake kernels
    from torch._dynamo.testing import CompileCounterWithBackend

    def fn(x, x3, masked_m, w):
        a = deep_gemm.per_token_quant_fp8(x, sf_mn_major=True)
        b = deep_gemm.silu_and_mul_quant_fp8(x3, row_weights=w, activation_clamp=5.0, masked_m=masked_m)
        c = deep_gemm.per_block_quant_fp8(x, True)
        return a, b, c

    counter = CompileCounterWithBackend("aot_eager")
    args = (torch.empty(130, 512, device="meta", dtype=torch.bfloat16),
            torch.empty(2, 64, 1024, device="meta", dtype=torch.bfloat16), torch.empty(2, device="meta",
                                                                                      dtype=torch.int32),
            torch.empty(2, 64, device="meta"))  # fmt: skip
    a, b, c = torch.compile(fn, fullgraph=True, backend=counter)(*args)
    assert counter.frame_count == 1
    for op in ("per_token_quant_fp8", "silu_and_mul_quant_fp8", "per_block_quant_fp8"):
        assert f"deep_gemm.{op}" in counter.graphs[0].code, op
    assert (a[1].shape, a[1].stride()) == ((130, 4), (1, 132))
    assert (b[0].shape, b[1].shape, b[1].stride()) == ((2, 64, 512), (2, 64, 4), (256, 1, 64))
    assert (c[0].shape, c[1].shape) == ((130, 512), (2, 4))


def test_utils_casts_trace_to_the_ops_when_the_kernels_serve(monkeypatch) -> None:
    # The CUDA path of the utils casts under torch.compile(fullgraph=True): the dispatch (an import and the op call)
    # traces without a graph break. Meta inputs stand in for CUDA ones (the device test is patched to say yes).
    from torch._dynamo.testing import CompileCounterWithBackend

    from deep_gemm.utils import fp4_casts

    monkeypatch.setattr(casts, "_kernel_serves", lambda x, gran_ks, gran_k: gran_k in gran_ks)
    monkeypatch.setattr(fp4_casts, "_kernel_serves", lambda x, gran_ks, gran_k: gran_k in gran_ks)
    torch._dynamo.reset()

    def fn(x):
        return (deep_gemm.utils.per_token_cast_to_fp8(x, True, 32, True), deep_gemm.utils.per_block_cast_to_fp8(x),
                deep_gemm.utils.per_token_cast_to_fp4(x, True))  # fmt: skip

    counter = CompileCounterWithBackend("aot_eager")
    (a, a_sf), (b, b_sf), (c, c_sf) = torch.compile(fn, fullgraph=True, backend=counter)(
        torch.empty(64, 256, device="meta", dtype=torch.bfloat16)
    )
    assert counter.frame_count == 1
    for op in ("per_token_quant_fp8", "per_block_quant_fp8", "per_token_quant_fp4"):
        assert f"deep_gemm.{op}" in counter.graphs[0].code, op
    assert (a.shape, a_sf.shape, a_sf.dtype, b_sf.shape, c.shape, c.dtype) == (
        (64, 256),
        (64, 2),
        torch.int32,
        (1, 2),
        (64, 128),
        torch.int8,
    )
    torch._dynamo.reset()


def test_markstein_division_is_ieee_division_on_the_recipe() -> None:
    # The kernels divide by an FP32 scale as common/fp8_cast.cuh's `scaled`: q0 = RN(x * RN(1 / sf)),
    # e = RN(x - q0 * sf), q = RN(q0 + e * rcp). Emulated exactly (fractions, one rounding per step) on quotients at
    # and next to the e4m3 rounding midpoints, where a wrong last bit would change a byte
    from fractions import Fraction

    import numpy as np

    def rn32(value: Fraction) -> np.float32:
        c = np.float32(float(value))
        cands = (np.nextafter(c, np.float32(-np.inf)), c, np.nextafter(c, np.float32(np.inf)))
        return min(cands, key=lambda v: (abs(Fraction(float(v)) - value), int(np.array(v).view(np.uint32)) & 1))

    rng = np.random.default_rng(1)
    for _ in range(3000):
        amax = max(np.float32(abs(rng.standard_normal()) * 10.0 ** rng.integers(-6, 30)), np.float32(1e-4))
        sf = np.float32(amax / np.float32(448))
        steps = rng.integers(1, 960)  # (half-integers: the e4m3 midpoints of [1, 480) and beyond, scaled down)
        x = np.float32(float(sf) * steps / 2 / 2 ** rng.integers(0, 10)) * np.float32(rng.choice([-1, 1]))
        x = np.nextafter(x, np.float32(rng.choice([-np.inf, np.inf]))) if rng.integers(0, 2) else x
        rcp = np.float32(np.float32(1) / sf)
        q0 = np.float32(x * rcp)
        e = rn32(Fraction(float(x)) - Fraction(float(q0)) * Fraction(float(sf)))
        q = q0 if e == 0 or q0 == 0 else rn32(Fraction(float(q0)) + Fraction(float(e)) * Fraction(float(rcp)))
        want = np.float32(x / sf)
        assert np.array(q).view(np.uint32) == np.array(want).view(np.uint32), (x, sf, q, want)


def test_bench_suite_is_registered() -> None:
    from deep_gemm.bench import get_suite, quant

    suite = get_suite("quant")
    assert suite.parse_shape("4096x7168") == (4096, 7168)
    with pytest.raises(ValueError, match=r"expected a shape MxK"):
        suite.parse_shape("4096")
    assert (4096, 7168) in quant.QUANT_SHAPES


# ----------------------------------------------------------------------------------------------- GPU tier
def poison_free_memory(x: torch.Tensor, *outputs: torch.Tensor) -> None:
    """Fill free blocks of the caching allocator with 0xff bytes (an FP8 NaN, an FP32 NaN), so an output the call
    allocates and fails to write shows NaN (the call's outputs are allocated by it and cannot be pre-filled).
    One large block of 4 x.numel() bytes, then one block of each expected output's size, and of a scale tensor's
    size with its rows padded to 4 (the MN-major TMA-aligned form): the allocator serves a request from the
    smallest free block that fits in its pool, and outputs of up to 1 MiB come from the small pool, which the large
    block does not reach."""
    sizes = [4 * x.numel()]
    for t in outputs:
        sizes.append(t.numel() * t.element_size())
        if t.dim() >= 2 and t.shape[-2] > 0:
            sizes.append(t.numel() // t.shape[-2] * ((t.shape[-2] + 3) // 4 * 4) * t.element_size())
    blocks = [torch.empty(max(n, 1), dtype=torch.uint8, device="cuda") for n in sizes]
    for block in blocks:
        block.fill_(0xFF)
    del blocks


def make_input(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random rows with the edge rows a cast meets: all zeros, huge, tiny, one spike, mixed signs of one exponent."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32)
    rows = x.view(-1, shape[-1])
    huge = 1e36 if dtype == torch.float32 else 1e30
    edits = [
        lambda r: r.zero_(),
        lambda r: r.mul_(huge),
        lambda r: r.mul_(1e-30),
        lambda r: r.mul_(1e-3).index_fill_(0, torch.tensor([r.numel() // 2], device="cuda"), 448.0 * 3),
        lambda r: r.sign_().mul_(2.0**-10),
    ]
    for i, edit in enumerate(edits):
        if i < rows.size(0):
            edit(rows[(i * 7) % rows.size(0)])
    return x.to(dtype)


def assert_same_bits(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
    g = got.contiguous().view(torch.uint8) if got.dtype == FP8 else got.contiguous().view(torch.int32)
    w = want.contiguous().view(torch.uint8) if want.dtype == FP8 else want.contiguous().view(torch.int32)
    diff = (g != w).nonzero()
    assert diff.numel() == 0, (f"{what}: {diff.size(0)} of {g.numel()} elements differ, first at {diff[0].tolist()}: "
                               f"got {got[tuple(diff[0])].item()} want {want[tuple(diff[0])].item()}")  # fmt: skip


def check_mn_major(sf: torch.Tensor, padding_zeroed: bool = True) -> None:
    """sf has the strides get_mn_major_tma_aligned_tensor gives ([G?, M, W]: M stride 1, W stride align(M, 4)), and
    (padding_zeroed) the storage rows [M, align(M, 4)) of every column are zero, as that function leaves them."""
    m, words, aligned = sf.size(-2), sf.size(-1), (sf.size(-2) + 3) // 4 * 4
    assert sf.stride(-2) == 1 and sf.stride(-1) == aligned, sf.stride()
    groups = sf.size(0) if sf.dim() == 3 else 1
    if sf.dim() == 3:
        assert sf.stride(0) == aligned * words, sf.stride()
    assert sf.data_ptr() % 16 == 0
    if padding_zeroed and sf.numel() > 0:
        storage = torch.as_strided(sf, (groups, words, aligned), (aligned * words, aligned, 1))
        padding = storage[..., m:].contiguous().view(torch.int32)
        assert (padding == 0).all(), padding


TOKEN_SHAPES = [(1, 128), (7, 7168), (129, 1000), (256, 4096), (65, 96), (3, 65, 512), (2, 5, 200)]


@gpu
@pytest.mark.parametrize("shape", TOKEN_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize(
    ("use_ue8m0", "gran_k", "packed"),
    [(False, 128, False), (True, 128, False), (True, 128, True), (False, 32, False), (True, 32, True)],
    ids=["fp32sf-g128", "ue8m0-g128", "packed-g128", "fp32sf-g32", "packed-g32"],
)
@pytest.mark.parametrize("mn_major", [False, True], ids=["kmajor", "mnmajor"])
def test_per_token_is_bit_exact(shape, dtype, use_ue8m0: bool, gran_k: int, packed: bool, mn_major: bool) -> None:
    x = make_input(shape, dtype, seed=sum(shape))
    want_x, want_sf = per_token_cast_to_fp8_reference(x, use_ue8m0, gran_k, packed)
    poison_free_memory(x, want_x, want_sf)
    got_x, got_sf = deep_gemm.per_token_quant_fp8(x, use_ue8m0, gran_k, packed, sf_mn_major=mn_major)
    assert got_x.is_contiguous()
    assert_same_bits(got_x, want_x, "values")
    assert_same_bits(got_sf, want_sf, "scales")
    if mn_major:
        check_mn_major(got_sf)
    else:
        assert got_sf.is_contiguous()


@gpu
def test_per_token_strided_and_offset_inputs() -> None:
    base = make_input((300, 1030), torch.bfloat16, seed=3)
    cases = {
        "column-slice": base[:, 3:1027],  # row stride 1030 elements: not 16-byte aligned, the element-wise path
        "transposed": base[:256, :512].t(),  # stride 1 along M: copied
        "row-step": base[::2, :1024],
    }
    for name, x in cases.items():
        for args in ((False, 128, False), (True, 32, True)):
            want = per_token_cast_to_fp8_reference(x, *args)
            got = deep_gemm.per_token_quant_fp8(x, *args)
            assert_same_bits(got[0], want[0], f"{name} values")
            assert_same_bits(got[1], want[1], f"{name} scales")


@gpu
def test_empty_inputs() -> None:
    for shape in ((0, 256), (4, 0), (0, 3, 128)):
        x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        got, want = deep_gemm.per_token_quant_fp8(x), per_token_cast_to_fp8_reference(x)
        assert got[0].shape == want[0].shape and got[1].shape == want[1].shape
        got, want = deep_gemm.per_block_quant_fp8(x), per_block_cast_to_fp8_reference(x)
        assert got[0].shape == want[0].shape and got[1].shape == want[1].shape


@gpu
def test_utils_casts_on_cuda_run_the_kernels(monkeypatch) -> None:
    # (the dispatch the release turns on once these tests pass: forced here, so that they test it)
    monkeypatch.setattr(deep_gemm.utils.casts, "_CASTS_RUN_KERNELS", True)
    calls = []
    for name in ("per_token_quant_fp8", "per_block_quant_fp8"):
        original = getattr(deep_gemm.ops, name)
        monkeypatch.setattr(deep_gemm.ops, name, lambda *a, _f=original, _n=name, **k: calls.append(_n) or _f(*a, **k))
    x = make_input((100, 7168), torch.bfloat16)
    got = deep_gemm.utils.per_token_cast_to_fp8(x, use_ue8m0=True)
    want = per_token_cast_to_fp8_reference(x, True)
    assert_same_bits(got[0], want[0], "values")
    assert_same_bits(got[1], want[1], "scales")
    got = deep_gemm.utils.per_block_cast_to_fp8(x)
    want = per_block_cast_to_fp8_reference(x)
    assert_same_bits(got[0], want[0], "block values")
    assert_same_bits(got[1], want[1], "block scales")
    assert calls == ["per_token_quant_fp8", "per_block_quant_fp8"]
    # gran_k the kernels do not serve, and float16: the PyTorch form
    deep_gemm.utils.per_token_cast_to_fp8(x, gran_k=64)
    deep_gemm.utils.per_token_cast_to_fp8(x.half())
    deep_gemm.utils.per_block_cast_to_fp8(x, gran_k=64)
    assert len(calls) == 2


SILU_SHAPES = [(1, 256), (33, 4096), (200, 2 * 1000), (64, 2 * 96)]


@gpu
@pytest.mark.parametrize("shape", SILU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize(
    ("use_ue8m0", "gran_k", "packed"), [(False, 128, False), (True, 128, True), (False, 32, False)],
    ids=["fp32sf-g128", "packed-g128", "fp32sf-g32"],
)  # fmt: skip
@pytest.mark.parametrize(("weighted", "clamp"), [(False, None), (True, None), (True, 2.5)],
                         ids=["plain", "weights", "weights-clamp"])  # fmt: skip
def test_silu_and_mul_contiguous_is_bit_exact(shape, dtype, use_ue8m0, gran_k, packed, weighted, clamp) -> None:
    x = make_input(shape, dtype, seed=shape[0]) * 3
    x = x.to(dtype)
    w = torch.rand(shape[0], device="cuda") if weighted else None
    want_x, want_sf = per_token_cast_to_fp8_reference(silu_and_mul_reference(x, w, clamp), use_ue8m0, gran_k, packed)
    for mn_major in (True, False):
        poison_free_memory(x, want_x, want_sf)
        got_x, got_sf = deep_gemm.silu_and_mul_quant_fp8(x, use_ue8m0, gran_k, packed, w, clamp, None, mn_major)
        assert_same_bits(got_x, want_x, "values")
        assert_same_bits(got_sf, want_sf, "scales")
        if mn_major:
            check_mn_major(got_sf)


@gpu
@pytest.mark.parametrize("m_max", [64, 130], ids=lambda m: f"mmax{m}")
@pytest.mark.parametrize("inter", [512, 1000], ids=lambda i: f"i{i}")
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weights"])
def test_silu_and_mul_masked_is_bit_exact(m_max: int, inter: int, weighted: bool) -> None:
    groups = 4
    x = make_input((groups, m_max, 2 * inter), torch.bfloat16, seed=m_max + inter)
    masked_m = torch.tensor([0, m_max, m_max // 3, m_max + 5], dtype=torch.int32, device="cuda")  # (the last: capped)
    w = torch.rand(groups, m_max, device="cuda") if weighted else None
    want_x, want_sf = per_token_cast_to_fp8_reference(silu_and_mul_reference(x, w, 7.0), False, 128)
    poison_free_memory(x, want_x, want_sf)
    got_x, got_sf = deep_gemm.silu_and_mul_quant_fp8(x, row_weights=w, activation_clamp=7.0, masked_m=masked_m)
    check_mn_major(got_sf, padding_zeroed=False)  # (zeroed only where the last row is computed)
    assert got_x.shape == (groups, m_max, inter) and got_sf.shape == (groups, m_max, (inter + 127) // 128)
    for g, rows in enumerate(min(int(v), m_max) for v in masked_m.tolist()):
        assert_same_bits(got_x[g, :rows], want_x[g, :rows], f"group {g} values")
        assert_same_bits(got_sf[g, :rows], want_sf[g, :rows], f"group {g} scales")


@gpu
def test_silu_and_mul_scales_feed_the_masked_gemm() -> None:
    # The MN-major scales are taken by the grouped GEMM as they are (no layout kernel): the product equals the one
    # from the PyTorch cast's scales brought into the layout
    groups, m_max, inter, n = 2, 64, 512, 256
    x = make_input((groups, m_max, 2 * inter), torch.bfloat16, seed=11)
    masked_m = torch.tensor([m_max, 17], dtype=torch.int32, device="cuda")
    a = deep_gemm.silu_and_mul_quant_fp8(x, masked_m=masked_m)
    w = torch.randn(groups, n, inter, device="cuda", dtype=torch.bfloat16)
    b = torch.empty(groups, n, inter, dtype=FP8, device="cuda"), torch.empty(groups, n // 128, inter // 128,
                                                                              device="cuda")  # fmt: skip
    for g in range(groups):
        b[0][g], b[1][g] = per_block_cast_to_fp8_reference(w[g])
    want_a = per_token_cast_to_fp8_reference(silu_and_mul_reference(x))
    d = torch.full((groups, m_max, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    d_ref = d.clone()
    deep_gemm.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, m_max)
    deep_gemm.m_grouped_fp8_gemm_nt_masked(want_a, b, d_ref, masked_m, m_max)
    for g, rows in enumerate(masked_m.tolist()):
        assert torch.equal(d[g, :rows], d_ref[g, :rows]), g


BLOCK_SHAPES = [(128, 128), (300, 1000), (257, 7168), (3, 256, 384), (2, 130, 100), (1, 8)]


@gpu
@pytest.mark.parametrize("shape", BLOCK_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("use_ue8m0", [False, True], ids=["fp32sf", "ue8m0"])
def test_per_block_is_bit_exact(shape, dtype, use_ue8m0: bool) -> None:
    x = make_input(shape, dtype, seed=sum(shape) + 1)
    want_x, want_sf = per_block_cast_to_fp8_reference(x, use_ue8m0)
    poison_free_memory(x, want_x, want_sf)
    got_x, got_sf = deep_gemm.per_block_quant_fp8(x, use_ue8m0)
    assert_same_bits(got_x, want_x, "values")
    assert_same_bits(got_sf, want_sf, "scales")
    # A strided view (row step 2) gives the cast of its values
    xs = x[..., ::2, :]
    assert_same_bits(deep_gemm.per_block_quant_fp8(xs, use_ue8m0)[0], per_block_cast_to_fp8_reference(xs, use_ue8m0)[0],
                     "strided values")  # fmt: skip


FP4_SHAPES = [(1, 128), (7, 7168), (129, 1000), (65, 96), (256, 4096), (3, 34)]


@gpu
@pytest.mark.parametrize("shape", FP4_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize(
    ("use_ue8m0", "gran_k", "packed"), [(False, 128, False), (True, 128, False), (True, 32, True), (False, 32, False)],
    ids=["fp32sf-g128", "ue8m0-g128", "packed-g32", "fp32sf-g32"],
)  # fmt: skip
def test_per_token_fp4_is_bit_exact(monkeypatch, shape, dtype, use_ue8m0: bool, gran_k: int, packed: bool) -> None:
    monkeypatch.setattr(deep_gemm.utils.casts, "_CASTS_RUN_KERNELS", True)  # (the utils dispatch, checked below)
    x = make_input(shape, dtype, seed=sum(shape) + 2)
    # Values exactly on E2M1 midpoints once scaled: a row whose amax is 6 * 2^k with entries at the midpoints
    if shape[0] > 2 and shape[1] >= 16:
        grid = torch.tensor([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -2.5, -5.0, 0.0, -0.0, 4.0, 3.0])
        x[2, :16] = grid.to(dtype).cuda()
        x[2, 16:] = 0
    want = per_token_cast_to_fp4_reference(x, use_ue8m0, gran_k, packed)
    poison_free_memory(x, *want)
    got = deep_gemm.per_token_quant_fp4(x, use_ue8m0, gran_k, packed)
    assert got[0].dtype == torch.int8 and got[0].is_contiguous()
    assert_same_bits(got[0].view(torch.uint8), want[0].view(torch.uint8), "codes")
    assert_same_bits(got[1], want[1], "scales")
    # The utils function takes the kernel on CUDA
    calls = []
    original = deep_gemm.ops.per_token_quant_fp4
    monkeypatch.setattr(deep_gemm.ops, "per_token_quant_fp4", lambda *a, **k: calls.append(1) or original(*a, **k))
    via_utils = deep_gemm.utils.per_token_cast_to_fp4(x, use_ue8m0, gran_k, packed)
    assert calls == [1], "deep_gemm.utils.per_token_cast_to_fp4 did not call the kernel"
    assert torch.equal(via_utils[0], want[0]) and torch.equal(via_utils[1], want[1])
    mn = deep_gemm.per_token_quant_fp4(x, use_ue8m0, gran_k, packed, sf_mn_major=True)[1]
    check_mn_major(mn)
    assert_same_bits(mn, want[1], "MN-major scales")


@gpu
def test_compiled_casts_match_eager() -> None:
    # torch.compile(fullgraph=True) of the utils cast (which takes the kernel on CUDA) and the fused cast
    torch._dynamo.reset()
    x = make_input((96, 2048), torch.bfloat16)

    def fn(x):
        return deep_gemm.utils.per_token_cast_to_fp8(x, use_ue8m0=True), deep_gemm.silu_and_mul_quant_fp8(x)

    (got_a, got_b) = torch.compile(fn, fullgraph=True, backend="aot_eager")(x)
    want_a, want_b = fn(x)
    for got, want, what in ((got_a, want_a, "per-token"), (got_b, want_b, "silu")):
        assert_same_bits(got[0], want[0], f"{what} values")
        assert_same_bits(got[1], want[1], f"{what} scales")
        assert got[1].stride() == want[1].stride(), what


@gpu
def test_repeat_is_bitwise_identical_and_graph_capturable() -> None:
    x = make_input((512, 7168), torch.bfloat16)
    first = deep_gemm.silu_and_mul_quant_fp8(x)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = deep_gemm.silu_and_mul_quant_fp8(x)
    graph.replay()
    torch.cuda.synchronize()
    assert_same_bits(captured[0], first[0], "values")
    assert_same_bits(captured[1], first[1], "scales")
