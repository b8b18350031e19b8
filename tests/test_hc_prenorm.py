"""tf32_hc_prenorm_gemm: D = A @ B.T on TF32 tensor cores and sqr_sum = row sums of A^2, with and without num_splits.

Oracle: float64 of the exact math the kernel defines: A BF16 (exactly TF32) times B rounded to TF32 to nearest, ties
away from zero (cvt.rna), products exact, and the row sums of A^2 of the same BF16 values; the kernel accumulates both
in FP32, so each element is bounded by the FP32 accumulation error of its chain (bounds below). Split partials: split s
covers the K blocks of 64 [s * KB // S, (s + 1) * KB // S), KB = K // 64, each checked against the float64 result of
its own K range, and their sum against the whole.

CPU tier: the reference signature, every bad input raises ValueError naming the argument, every N compiles with NVCC
and NVRTC without spills and runs on HMMA TF32. GPU tier (`gpu`): outputs poisoned with NaN, M edges, the three K of
the models, strided operands, bitwise repeatability, CUDA-graph capture.
"""

import pytest
import torch
from jit_helpers import dump_sass, signature_params

import deep_gemm
from deep_gemm.testing import calc_diff

gpu = pytest.mark.gpu

NS = [24, 32]
KS = [7168, 7680, 28672]


# ----------------------------------------------------------------------------- CPU tier
def test_signature_is_the_reference() -> None:
    fn = deep_gemm.tf32_hc_prenorm_gemm
    assert signature_params(fn) == [("a", None), ("b", None), ("d", None), ("sqr_sum", None), ("num_splits", "None")]
    assert "tf32_hc_prenorm_gemm" in deep_gemm.__all__
    doc = fn.__doc__
    for word in ("num_splits", "sqr_sum", "TF32", "split", "ValueError"):
        assert word in doc, word


M, N, K = 16, 32, 256


def cpu_args(case: str):
    """(a, b, d, sqr_sum, num_splits) on the CPU, bad in the way `case` says, with the message expected."""
    a = torch.zeros(M, K, dtype=torch.bfloat16)
    b = torch.zeros(N, K)
    d, sqr_sum, num_splits = torch.empty(M, N), torch.empty(M), None
    pattern = r"a must be on a CUDA device"
    if case == "a_dtype":
        a, pattern = a.float(), r"a must have dtype torch.bfloat16, got a torch.float32"
    elif case == "b_dtype":
        b, pattern = b.bfloat16(), r"b must have dtype torch.float32, got a torch.bfloat16"
    elif case == "a_3d":
        a, pattern = a.unsqueeze(0), r"a must be 2-D"
    elif case == "b_1d":
        b, pattern = b[0], r"b must be 2-D"
    elif case == "k_mismatch":
        b, pattern = torch.zeros(N, K + 64), r"b must be \[N, K\] with K = 256"
    elif case == "n_too_large":
        b, d, pattern = torch.zeros(40, K), torch.empty(M, 40), r"b: N .* multiple of 8 in \[8, 32\] .* N = 40"
    elif case == "n_not_multiple_of_8":
        b, d, pattern = torch.zeros(12, K), torch.empty(M, 12), r"b: N .* multiple of 8 .* N = 12"
    elif case == "k_not_multiple_of_64":
        a, b = torch.zeros(M, 96, dtype=torch.bfloat16), torch.zeros(N, 96)
        pattern = r"a: K must be a positive multiple of 64, got K = 96"
    elif case == "k_zero":
        a, b = torch.zeros(M, 0, dtype=torch.bfloat16), torch.zeros(N, 0)
        pattern = r"a: K must be a positive multiple of 64"
    elif case == "a_mn_major":
        a, pattern = torch.zeros(K, M, dtype=torch.bfloat16).T, r"a must be K-major"
    elif case == "b_mn_major":
        b, pattern = torch.zeros(K, N).T, r"b must be K-major"
    elif case == "a_row_stride":
        a, pattern = torch.zeros(M, K + 4, dtype=torch.bfloat16)[:, :K], r"a: the row stride must be a multiple of 8"
    elif case == "b_row_stride":
        b, pattern = torch.zeros(N, K + 2)[:, :K], r"b: the row stride must be a multiple of 4"
    elif case == "a_misaligned":
        a, pattern = torch.zeros(M * K + 4, dtype=torch.bfloat16)[4:].view(M, K), r"a: data pointer must be 16-byte"
    elif case == "splits_zero":
        num_splits, pattern = 0, r"num_splits must be None or in \[1, K / 64 = 4\].* got 0"
    elif case == "splits_too_many":
        num_splits, pattern = 5, r"num_splits must be None or in \[1, K / 64 = 4\].* got 5"
    elif case == "d_split_shape_without_splits":
        d, pattern = torch.empty(2, M, N), r"d must be \[M, N\] \(no num_splits\) = \[16, 32\]"
    elif case == "d_plain_shape_with_splits":
        num_splits, pattern = 2, r"d must be \[num_splits, M, N\] = \[2, 16, 32\]"
    elif case == "sqr_sum_shape_with_splits":
        num_splits, d = 2, torch.empty(2, M, N)
        pattern = r"sqr_sum must be \[num_splits, M\] = \[2, 16\]"
    elif case == "sqr_sum_shape":
        sqr_sum, pattern = torch.empty(M, 1), r"sqr_sum must be \[M\] \(no num_splits\) = \[16\]"
    elif case == "d_dtype":
        d, pattern = d.bfloat16(), r"d must have dtype torch.float32"
    elif case == "sqr_sum_dtype":
        sqr_sum, pattern = sqr_sum.double(), r"sqr_sum must have dtype torch.float32"
    elif case == "d_not_contiguous":
        d, pattern = torch.empty(N, M).T, r"d must be contiguous"
    elif case == "d_overlaps_sqr_sum":
        storage = torch.empty(M * N)
        d, sqr_sum, pattern = storage.view(M, N), storage[:M], r"d must not overlap sqr_sum"
    elif case == "d_overlaps_b":
        b = torch.zeros(N * K)
        d, b, pattern = b[: M * N].view(M, N), b.view(N, K), r"d must not overlap b"
    elif case != "on_cpu":
        raise AssertionError(case)
    return (a, b, d, sqr_sum, num_splits), pattern


@pytest.mark.parametrize(
    "case",
    [
        "on_cpu", "a_dtype", "b_dtype", "a_3d", "b_1d", "k_mismatch", "n_too_large", "n_not_multiple_of_8",
        "k_not_multiple_of_64", "k_zero", "a_mn_major", "b_mn_major", "a_row_stride", "b_row_stride", "a_misaligned",
        "splits_zero", "splits_too_many", "d_split_shape_without_splits", "d_plain_shape_with_splits",
        "sqr_sum_shape_with_splits", "sqr_sum_shape", "d_dtype", "sqr_sum_dtype", "d_not_contiguous",
        "d_overlaps_sqr_sum", "d_overlaps_b",
    ],
)  # fmt: skip
def test_bad_inputs_raise_value_error(case: str) -> None:
    args, pattern = cpu_args(case)
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.tf32_hc_prenorm_gemm(*args)


def test_valid_split_shapes_reach_the_device_check() -> None:
    """num_splits = S with d [S, M, N], sqr_sum [S, M] passes every host check (only the device check is left)."""
    a, b = torch.zeros(M, K, dtype=torch.bfloat16), torch.zeros(N, K)
    for s in (1, 2, 4):
        with pytest.raises(ValueError, match=r"a must be on a CUDA device"):
            deep_gemm.tf32_hc_prenorm_gemm(a, b, torch.empty(s, M, N), torch.empty(s, M), num_splits=s)


@pytest.mark.parametrize("use_nvrtc", [False, True], ids=["nvcc", "nvrtc"])
@pytest.mark.parametrize("n", [8, 16, 24, 32], ids=lambda n: f"n{n}")
def test_kernel_compiles_without_spills(tmp_path, monkeypatch, n: int, use_nvrtc: bool) -> None:
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DG_JIT_PTXAS_CHECK", "1")
    result = deep_gemm.compile_kernel("sm90_tf32_hc_prenorm_gemm", {"n": n}, use_nvrtc=use_nvrtc)
    assert result["compiler"] == ("nvrtc" if use_nvrtc else "nvcc")
    assert result["registers"] > 0, result["ptxas_report"]
    assert result["stack_frame_bytes"] == 0, result["ptxas_report"]
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]
    sass = dump_sass(result["cubin_path"])
    # One stage: 2 k8 steps x 4 m16 tiles x N / 8 n8 tiles per warp, on TF32 tensor cores fed by cp.async
    assert sass.count("HMMA.1688.F32.TF32") >= 2 * 4 * (n // 8), sass.count("HMMA.1688.F32.TF32")
    assert "LDGSTS" in sass and "LDL" not in sass and "STL" not in sass


def test_bad_compile_params_raise() -> None:
    with pytest.raises(ValueError, match=r"N must be a multiple of 8 in \[8, 32\], got 40"):
        deep_gemm.compile_kernel("sm90_tf32_hc_prenorm_gemm", {"n": 40})
    with pytest.raises(ValueError, match=r"num_stages must be in \[2, 16\], got 1"):
        deep_gemm.compile_kernel("sm90_tf32_hc_prenorm_gemm", {"num_stages": 1})
    with pytest.raises(ValueError, match=r"shared memory"):
        deep_gemm.compile_kernel("sm90_tf32_hc_prenorm_gemm", {"n": 32, "num_stages": 12})
    with pytest.raises(ValueError, match=r"block_m must be 64 or 128, got 96"):
        deep_gemm.compile_kernel("sm90_tf32_hc_prenorm_gemm", {"block_m": 96})
    with pytest.raises(ValueError, match=r"unknown parameter 'block_n'"):
        deep_gemm.compile_kernel("sm90_tf32_hc_prenorm_gemm", {"block_n": 64})


def test_block_m_64_compiles_without_spills(tmp_path, monkeypatch) -> None:
    """The 64-row tiling (two m16 tiles per warp, 12 stages) at the widest N."""
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DG_JIT_PTXAS_CHECK", "1")
    n = 32
    result = deep_gemm.compile_kernel("sm90_tf32_hc_prenorm_gemm", {"n": n, "block_m": 64})
    assert result["stack_frame_bytes"] == 0, result["ptxas_report"]
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]
    sass = dump_sass(result["cubin_path"])
    assert sass.count("HMMA.1688.F32.TF32") >= 2 * 2 * (n // 8), sass.count("HMMA.1688.F32.TF32")
    assert "LDGSTS" in sass and "LDL" not in sass and "STL" not in sass


# The tiling the plan picks (num_splits=None, 132 SMs) for shapes of the GPU tests below: each kind is covered there
PLAN_CASES = [
    ((1, 24, 7168), (128, 56, "second_pass")),
    ((1, 32, 28672), (128, 132, "second_pass")),
    ((1024, 24, 7168), (64, 8, "cluster")),
    ((1024, 32, 28672), (128, 16, "second_pass")),
    ((4096, 32, 7680), (128, 4, "cluster")),
    ((8192, 24, 28672), (128, 2, "cluster")),
]


@pytest.mark.parametrize(("shape", "expected"), PLAN_CASES, ids=lambda v: "x".join(map(str, v)))
def test_plan_picks_each_tiling(shape, expected) -> None:
    plan = deep_gemm._C.get_hc_prenorm_plan(*shape, num_sms=132)
    assert (plan["block_m"], plan["num_splits"], plan["reduction"]) == expected, plan


@pytest.mark.parametrize("k", KS, ids=lambda k: f"k{k}")
@pytest.mark.parametrize("n", NS, ids=lambda n: f"n{n}")
def test_plan_fills_the_sms(n: int, k: int) -> None:
    """From M = 1024 every plan puts at least 120 of 132 SMs to work in one wave; below, at least 100 or as many as
    splits of two K blocks allow (the second pass's splits); every split has at least two K blocks."""
    for m in (1, 16, 64, 256, 1024, 4096, 8192):
        plan = deep_gemm._C.get_hc_prenorm_plan(m, n, k, num_sms=132)
        ctas = -(-m // plan["block_m"]) * plan["num_splits"]
        assert (min(100, k // 128) if m < 1024 else 120) <= ctas <= 132, (m, plan)
        assert k // 64 >= 2 * plan["num_splits"], (m, plan)
        s = plan["num_splits"]
        assert plan["reduction"] == ("none" if s == 1 else "cluster" if s <= 8 else "second_pass"), (m, plan)


def test_deterministic_plan_depends_on_k_only() -> None:
    """set_deterministic: the split count (the only thing that orders a row's sums) is min(8, K / 64) for every M and
    SM count, added in a cluster."""
    for k in (64, 128, 7168, 28672):
        for m in (1, 7, 1024, 8192):
            for num_sms in (8, 132):
                plan = deep_gemm._C.get_hc_prenorm_plan(m, 32, k, num_sms=num_sms, deterministic=True)
                assert plan["num_splits"] == min(8, k // 64), (k, m, num_sms, plan)
                assert plan["reduction"] == ("cluster" if k > 64 else "none"), plan


def test_plan_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"get_hc_prenorm_plan: need m >= 1"):
        deep_gemm._C.get_hc_prenorm_plan(1, 24, 100)
    with pytest.raises(ValueError, match=r"get_hc_prenorm_plan: need m >= 1"):
        deep_gemm._C.get_hc_prenorm_plan(0, 24, 7168)


def test_bench_suite_is_registered() -> None:
    from deep_gemm.bench import get_suite, hc

    suite = get_suite("hc")
    assert suite.parse_shape("4096x24x28672") == (4096, 24, 28672)
    with pytest.raises(ValueError, match=r"expected a shape MxNxK"):
        suite.parse_shape("4096x24")
    assert {k for _, _, k in hc.HC_SHAPES} == set(KS) and {n for _, n, _ in hc.HC_SHAPES} == set(NS)


# ----------------------------------------------------------------------------- GPU tier: helpers
def tf32_rna(x: torch.Tensor) -> torch.Tensor:
    """FP32 rounded to TF32 (10-bit mantissa) to nearest, ties away from zero, as cvt.rna.tf32.f32; inf/NaN kept."""
    bits = x.view(torch.int32)
    rounded = ((bits + 0x1000) & -0x2000).view(torch.float32)
    return torch.where(torch.isfinite(x), rounded, x)


def reference(a: torch.Tensor, b: torch.Tensor, k_begin: int = 0, k_end: int | None = None):
    """float64 (D [M, N], sqr_sum [M], sum_k |a| |tf32(b)| [M, N]) over K columns [k_begin, k_end)."""
    a64 = a[:, k_begin:k_end].double()
    b64 = tf32_rna(b[:, k_begin:k_end].contiguous()).double()
    return a64 @ b64.T, a64.square().sum(-1), a64.abs() @ b64.abs().T


def check(d: torch.Tensor, sqr_sum: torch.Tensor, ref, k: int, case: str) -> None:
    """d and sqr_sum (FP32) against float64: all written (NaN poison), calc_diff, element-wise bounds of FP32
    accumulation. D: a warp's chain has k / 32 mma steps (two roundings at most each, 2^-22 with truncation) plus the
    four k-slice adds, over sum |a| |b|. sqr_sum: positive terms, k / 16 + 8 roundings of 2^-24 at most, relative."""
    ref_d, ref_sq, abs_d = ref
    assert d.shape == ref_d.shape and sqr_sum.shape == ref_sq.shape, case
    for name, t in (("d", d), ("sqr_sum", sqr_sum)):
        bad = ~torch.isfinite(t)
        if bad.any():
            raise AssertionError(f"{case}: {name} has {int(bad.sum())} unwritten or non-finite elements, first at "
                                 f"{tuple(bad.nonzero()[0].tolist())}")
    if d.numel():
        assert calc_diff(d, ref_d) < 1e-9, f"{case}: calc_diff(d) = {calc_diff(d, ref_d):.3e}"
    d_bound = (2 * k / 32 + 8) * 2.0**-22 * abs_d + 1e-30
    excess = (d.double() - ref_d).abs() - d_bound
    worst = int(excess.argmax()) if excess.numel() else 0
    if excess.numel() and excess.view(-1)[worst] > 0:
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), d.shape))
        raise AssertionError(f"{case}: d{idx} = {d[idx].item()!r}, float64 {ref_d[idx].item()!r}")
    sq_bound = (k / 16 + 8) * 2.0**-24 * ref_sq + 1e-30
    sq_excess = (sqr_sum.double() - ref_sq).abs() - sq_bound
    if sq_excess.numel() and sq_excess.max() > 0:
        row = int(sq_excess.argmax())
        raise AssertionError(f"{case}: sqr_sum[{row}] = {sqr_sum[row].item()!r}, float64 {ref_sq[row].item()!r}")


def operands(m: int, n: int, k: int, seed: int):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, generator=generator, device="cuda").bfloat16()
    b = torch.randn(n, k, generator=generator, device="cuda") * 0.05
    return a, b


def poisoned(*shape: int) -> torch.Tensor:
    return torch.full(shape, float("nan"), device="cuda")


def split_ranges(k: int, num_splits: int) -> list[tuple[int, int]]:
    kb = k // 64
    return [(s * kb // num_splits * 64, (s + 1) * kb // num_splits * 64) for s in range(num_splits)]


# ----------------------------------------------------------------------------- GPU tier
@gpu
@pytest.mark.parametrize("k", KS, ids=lambda k: f"k{k}")
@pytest.mark.parametrize("n", NS, ids=lambda n: f"n{n}")
@pytest.mark.parametrize("m", [1, 7, 129, 1024, 4096, 8192], ids=lambda m: f"m{m}")
def test_results_without_splits(m: int, n: int, k: int) -> None:
    """num_splits=None: every tiling of the plan (test_plan_picks_each_tiling): small M splits K wider than a cluster
    and sums the partials in a second pass, M = 1024 takes 64-row blocks in clusters of 8 (K 7168 / 7680) or 128-row
    ones with the second pass (K 28672), large M 128-row blocks in clusters of 2 or 4; all write [M, N] and [M]."""
    a, b = operands(m, n, k, seed=m * 7 + n + k)
    d, sqr_sum = poisoned(m, n), poisoned(m)
    deep_gemm.tf32_hc_prenorm_gemm(a, b, d, sqr_sum)
    check(d, sqr_sum, reference(a, b), k, f"m{m}-n{n}-k{k}")
    d2, sqr_sum2 = poisoned(m, n), poisoned(m)
    deep_gemm.tf32_hc_prenorm_gemm(a, b, d2, sqr_sum2)
    assert torch.equal(d.view(torch.int32), d2.view(torch.int32)), "not bitwise repeatable"
    assert torch.equal(sqr_sum.view(torch.int32), sqr_sum2.view(torch.int32)), "not bitwise repeatable"


@gpu
@pytest.mark.parametrize("num_splits", [1, 3, 16, 112], ids=lambda s: f"s{s}")
@pytest.mark.parametrize(("m", "n", "k"), [(1, 24, 7168), (129, 32, 7680), (2048, 24, 28672), (300, 32, 7168)])
def test_split_partials(m: int, n: int, k: int, num_splits: int) -> None:
    """Each partial against the float64 result of its K range; their sum against the whole."""
    a, b = operands(m, n, k, seed=num_splits + m)
    d, sqr_sum = poisoned(num_splits, m, n), poisoned(num_splits, m)
    deep_gemm.tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits=num_splits)
    ranges = split_ranges(k, num_splits)
    for s, (k0, k1) in enumerate(ranges):
        assert k1 > k0
        check(d[s], sqr_sum[s], reference(a, b, k0, k1), k1 - k0, f"split {s} of {num_splits}, K [{k0}, {k1})")
    check(d.sum(0), sqr_sum.sum(0), reference(a, b), k, f"sum of {num_splits} splits")


@gpu
def test_every_k_block_in_exactly_one_split() -> None:
    """One-hot columns of A: partial s holds B's column k exactly when k is in split s's range (no block dropped,
    repeated or moved), for a split count that does not divide the blocks."""
    m, n, k, num_splits = 112, 32, 7168, 5
    a = torch.zeros(m, k, device="cuda", dtype=torch.bfloat16)
    cols = torch.arange(m, device="cuda") * 64 + torch.arange(m, device="cuda") % 64  # one column per K block
    a[torch.arange(m, device="cuda"), cols] = 1
    b = tf32_rna(torch.randn(n, k, device="cuda"))
    d, sqr_sum = poisoned(num_splits, m, n), poisoned(num_splits, m)
    deep_gemm.tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits=num_splits)
    for s, (k0, k1) in enumerate(split_ranges(k, num_splits)):
        inside = (cols >= k0) & (cols < k1)
        expected = torch.where(inside[:, None], b[:, cols].T, torch.zeros((), device="cuda"))
        assert torch.equal(d[s], expected), f"split {s}: wrong K blocks"
        assert torch.equal(sqr_sum[s], inside.float()), f"split {s}: wrong K blocks in sqr_sum"


@gpu
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_b_is_rounded_to_nearest_ties_away(sign: float) -> None:
    """B = +-(1 + 2^-11), halfway between two TF32 values: ties away gives K (1 + 2^-10) (truncation would give K);
    A all ones, so sqr_sum = K exactly."""
    m, n, k = 64, 24, 7168
    a = torch.ones(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.full((n, k), sign * (1 + 2.0**-11), device="cuda")
    d, sqr_sum = poisoned(m, n), poisoned(m)
    deep_gemm.tf32_hc_prenorm_gemm(a, b, d, sqr_sum)
    assert torch.equal(d, torch.full_like(d, sign * k * (1 + 2.0**-10))), d[0, 0].item()
    assert torch.equal(sqr_sum, torch.full_like(sqr_sum, float(k)))


@gpu
@pytest.mark.parametrize("num_sms", [4, 10, 14, 30], ids=lambda s: f"sms{s}")
def test_automatic_cluster_split_sizes(num_sms: int) -> None:
    """M = 129 with set_num_sms giving plans of 2, 5 and 7 cluster splits over two 128-row blocks and 8 over three
    64-row blocks (clusters of 5 and 7 CTAs share the rows unevenly among their ranks; the last 64-row block has one
    row)."""
    m, n, k = 129, 32, 7680
    a, b = operands(m, n, k, seed=num_sms)
    previous = deep_gemm.get_num_sms()
    deep_gemm.set_num_sms(num_sms)
    try:
        d, sqr_sum = poisoned(m, n), poisoned(m)
        deep_gemm.tf32_hc_prenorm_gemm(a, b, d, sqr_sum)
        d2, sqr_sum2 = poisoned(m, n), poisoned(m)
        deep_gemm.tf32_hc_prenorm_gemm(a, b, d2, sqr_sum2)
    finally:
        deep_gemm.set_num_sms(previous)
    check(d, sqr_sum, reference(a, b), k, f"num_sms {num_sms}")
    assert torch.equal(d.view(torch.int32), d2.view(torch.int32)), "not bitwise repeatable"
    assert torch.equal(sqr_sum.view(torch.int32), sqr_sum2.view(torch.int32)), "not bitwise repeatable"


@gpu
def test_strided_operands() -> None:
    """Row strides wider than K (16-byte multiples) for a and b."""
    m, n, k = 300, 32, 7680
    a_full, b_full = operands(m, n, k + 128, seed=5)
    a, b = a_full[:, 64 : 64 + k], b_full[:, 4 : 4 + k]
    d, sqr_sum = poisoned(m, n), poisoned(m)
    deep_gemm.tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits=None)
    check(d, sqr_sum, reference(a, b), k, "strided")


@gpu
def test_empty_m_is_a_no_op() -> None:
    a, b = operands(0, 24, 7168, seed=1)
    deep_gemm.tf32_hc_prenorm_gemm(a, b, poisoned(0, 24), poisoned(0))
    deep_gemm.tf32_hc_prenorm_gemm(a, b, poisoned(2, 0, 24), poisoned(2, 0), num_splits=2)


@gpu
@pytest.mark.parametrize("num_splits", [None, 4], ids=["auto", "s4"])
@pytest.mark.parametrize("m", [7, 4096], ids=lambda m: f"m{m}")
def test_graph_capture(m: int, num_splits: int | None) -> None:
    """Captured once (m7 without num_splits: the second pass, its workspace from the graph's pool; m4096: clusters of
    4), replayed on new inputs."""
    n, k = 24, 7168
    a, b = operands(m, n, k, seed=11)
    shape = (m, n) if num_splits is None else (num_splits, m, n)
    d, sqr_sum = poisoned(*shape), poisoned(*shape[:-1])
    deep_gemm.tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits=num_splits)  # compile and load before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        deep_gemm.tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits=num_splits)
    a_new, b_new = operands(m, n, k, seed=12)
    a.copy_(a_new)
    b.copy_(b_new)
    d.fill_(float("nan"))
    sqr_sum.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    if num_splits is None:
        check(d, sqr_sum, reference(a_new, b_new), k, "graph replay")
    else:
        check(d.sum(0), sqr_sum.sum(0), reference(a_new, b_new), k, "graph replay, summed splits")
