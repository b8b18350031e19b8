"""fp8_gemm_nt_skip_head_mid: the FP8 GEMM whose output skips a middle band of every head.

CPU tier: the signature as the reference's, every bad input raises ValueError naming the argument (head_splits that
do not add up, d's width, dtypes, recipe), valid inputs on the CPU reach the device check, and the kernel the call
runs (the 1d2d FP8 GEMM at the tested shapes) compiles without spills. GPU tier: the written columns against a
float64 reference of the same FP8 values and scales, every mid column keeps its poison bit for bit, written columns
were poisoned before the call (NaN), odd head sizes, mid = 0, left = 0, right = 0, and a CUDA graph replay."""

import pytest
import torch
from jit_helpers import compile_params, parameter_names
from kernel_trace import count, launched_kernels

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.utils import ceil_div, per_block_cast_to_fp8, per_token_cast_to_fp8

gpu = pytest.mark.gpu


def test_signature_as_reference() -> None:
    entries = parameter_names(deep_gemm.fp8_gemm_nt_skip_head_mid)
    names = [e.split(":")[0] for e in entries]
    assert names == ["a", "b", "d", "head_splits", "recipe", "compiled_dims", "disable_ue8m0_cast"], entries
    assert entries[4].endswith("= None") and entries[5].endswith("= 'nk'") and entries[6].endswith("= False"), entries
    assert len(deep_gemm.fp8_gemm_nt_skip_head_mid.__doc__.splitlines()) > 5


# ----------------------------------------------------------------------------- validation (CPU tier)
def cpu_operands(m: int = 64, heads: int = 2, splits=(64, 32, 64), k: int = 256):
    left, mid, right = splits
    n = heads * (left + right)
    a = torch.zeros(m, k, dtype=torch.float8_e4m3fn)
    b = torch.zeros(n, k, dtype=torch.float8_e4m3fn)
    sfa = torch.ones(m, ceil_div(k, 128))
    sfb = torch.ones(ceil_div(n, 128), ceil_div(k, 128))
    d = torch.empty(m, heads * (left + mid + right), dtype=torch.bfloat16)
    return a, sfa, b, sfb, d


@pytest.mark.parametrize(
    ("case", "pattern"),
    [
        ("splits_not_dividing", r"head_splits: B's N = 256 must be a multiple of left \+ right = 96"),
        ("splits_negative", r"head_splits must be \(left, mid, right\) with non-negative sizes"),
        ("splits_empty", r"head_splits must be .* left \+ right > 0"),
        ("d_width", r"d must have H \* \(left \+ mid \+ right\) = 2 \* 160 = 320 columns"),
        ("d_rows", r"d must have M = 64 rows"),
        ("d_dtype", r"d \(recipe \(1, 128, 128\) writes BF16\) must have dtype torch.bfloat16"),
        ("d_col_major", r"d must be row-major"),
        ("a_dtype", r"a\[0\] \(A\) must have dtype torch.float8_e4m3fn"),
        ("b_k", r"b\[0\] \(B\) must be \[N, K\] with K = 256"),
        ("sfb_shape", r"b\[1\] \(sfb\) must be \[ceil\(N/128\), ceil\(K/128\)\] = \[2, 2\]"),
        ("recipe", r"recipe must be None or \(1, 128, 128\)"),
        ("compiled_dims", r"compiled_dims must use only the letters m, n, k"),
        ("d_overlaps_b", r"d must not overlap b\[0\] \(B\)"),
        ("on_cpu", r"a\[0\] \(A\) must be on a CUDA device"),
    ],
)
def test_bad_inputs_raise_value_error(case: str, pattern: str) -> None:
    a, sfa, b, sfb, d = cpu_operands()
    splits, kwargs = (64, 32, 64), {}
    if case == "splits_not_dividing":
        splits = (64, 32, 32)
    elif case == "splits_negative":
        splits = (64, -32, 64)
    elif case == "splits_empty":
        splits = (0, 32, 0)
    elif case == "d_width":
        d = torch.empty(64, 300, dtype=torch.bfloat16)
    elif case == "d_rows":
        d = torch.empty(63, 320, dtype=torch.bfloat16)
    elif case == "d_dtype":
        d = d.float()
    elif case == "d_col_major":
        d = d.t().contiguous().t()
    elif case == "a_dtype":
        a = a.to(torch.bfloat16)
    elif case == "b_k":
        b = torch.zeros(256, 128, dtype=torch.float8_e4m3fn)
    elif case == "sfb_shape":
        sfb = torch.ones(3, 2)
    elif case == "recipe":
        kwargs["recipe"] = (1, 1, 128)
    elif case == "compiled_dims":
        kwargs["compiled_dims"] = "x"
    elif case == "d_overlaps_b":
        # (B starts 512 bytes before D's last byte: they share D's last row)
        storage = torch.zeros(64 * 320 * 2 + 256 * 256, dtype=torch.uint8)
        d = storage[: 64 * 320 * 2].view(torch.bfloat16).view(64, 320)
        b = storage[64 * 320 * 2 - 512 :][: 256 * 256].view(torch.float8_e4m3fn).view(256, 256)
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.fp8_gemm_nt_skip_head_mid((a, sfa), (b, sfb), d, splits, **kwargs)


def test_mid_zero_and_any_sizes_accepted_on_the_host() -> None:
    """No alignment is asked of left, mid or right: odd sizes pass every host check and reach the device check."""
    for splits in [(64, 0, 64), (40, 24, 24), (0, 16, 96), (96, 16, 0), (7, 3, 9)]:
        a, sfa, b, sfb, d = cpu_operands(splits=splits)
        with pytest.raises(ValueError, match=r"a\[0\] \(A\) must be on a CUDA device"):
            deep_gemm.fp8_gemm_nt_skip_head_mid((a, sfa), (b, sfb), d, splits)


# ----------------------------------------------------------------------------- GPU tier
def dequantized_reference(a, sfa, b, sfb) -> torch.Tensor:
    """float64 product of exactly the FP8 values and scales the kernel sees."""
    m, k = a.shape
    n = b.shape[0]
    sfa_full = sfa.double().repeat_interleave(128, dim=1)[:, :k]
    sfb_full = sfb.double().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[:n, :k]
    return (a.double() * sfa_full) @ (b.double() * sfb_full).t()


def place_heads(gemm: torch.Tensor, splits) -> torch.Tensor:
    """The GEMM's [M, H * (left + right)] columns at their D positions, NaN in the mid columns."""
    left, mid, right = splits
    m, n = gemm.shape
    heads = n // (left + right)
    out = torch.full((m, heads, left + mid + right), float("nan"), dtype=gemm.dtype, device=gemm.device)
    g = gemm.view(m, heads, left + right)
    out[:, :, :left] = g[:, :, :left]
    out[:, :, left + mid :] = g[:, :, left:]
    return out.view(m, -1)


def mid_mask(heads: int, splits, device) -> torch.Tensor:
    left, mid, right = splits
    mask = torch.zeros(heads, left + mid + right, dtype=torch.bool, device=device)
    mask[:, left : left + mid] = True
    return mask.view(-1)


POISON = 0x7FC1  # a NaN bit pattern no computation produces (canonical NaN is 0x7FC0)


GUARD_ROWS, GUARD_COLS = 2, 72  # (72: the row stride keeps cols' residue mod 8, so D is as aligned as a dense one)


def poisoned(m: int, cols: int, mid: torch.Tensor) -> torch.Tensor:
    """D [m, cols] (NaN, its mid columns POISON) as a window of a POISON buffer with guard rows below and guard
    columns to the right, which no store may reach (`check` asserts it)."""
    buf = torch.empty(m + GUARD_ROWS, cols + GUARD_COLS, dtype=torch.bfloat16, device="cuda")
    buf.view(torch.int16).fill_(POISON)
    d = buf[:m, :cols]
    d.view(torch.int16)[:, ~mid] = torch.tensor(float("nan"), dtype=torch.bfloat16).view(torch.int16).item()
    return d


def check(d: torch.Tensor, ref64: torch.Tensor, mid: torch.Tensor, case: str) -> None:
    m, cols = d.shape
    buf = d._base.view(torch.int16)
    assert buf.shape == (m + GUARD_ROWS, cols + GUARD_COLS), f"{case}: D is not poisoned()'s window"
    assert (buf[m:] == POISON).all() and (buf[:m, cols:] == POISON).all(), f"{case}: a store landed outside D"
    assert (d.view(torch.int16)[:, mid] == POISON).all(), f"{case}: a mid column was written"
    written, expected = d[:, ~mid], ref64[:, ~mid]
    assert torch.isfinite(written).all(), f"{case}: a left/right column was not written"
    err = (written.double() - expected).abs()
    tol = 2.0**-7 * expected.abs() + 2.0**-7 * expected.pow(2).mean().sqrt()
    worst = (err - tol).argmax()
    assert (err <= tol).all(), (
        f"{case}: element {divmod(worst.item(), written.shape[1])} = {written.flatten()[worst].item()}, "
        f"reference {expected.flatten()[worst].item()}"
    )
    assert calc_diff(written, expected) < 5e-6, case


SHAPES = [
    # (M, K, heads, (left, mid, right))
    (128, 7168, 2, (128, 64, 128)),
    (1000, 1536, 64, (128, 64, 64)),
    (7, 256, 3, (40, 24, 24)),
    (129, 512, 4, (7, 3, 9)),
    (64, 384, 2, (96, 0, 32)),
    (33, 256, 3, (0, 16, 48)),
    (33, 256, 3, (48, 16, 0)),
]


# The epilogue column remap (left and right whole 64-column chunks): opt-in until it has run on a GPU
FUSED_TUNE = "fp8_gemm:skip_head_mid_fused=1"
FUSED_SHAPES = [
    (128, 7168, 2, (128, 64, 128)),
    (1000, 1536, 64, (128, 64, 64)),
    (4096, 1536, 128, (128, 64, 64)),
    (33, 256, 3, (0, 16, 64)),
    (7, 512, 5, (64, 192, 0)),
    (129, 384, 4, (64, 40, 64)),  # (2 * 64 columns a head: the last tile holds columns of a phantom head)
]


@gpu
@pytest.mark.parametrize(("m", "k", "heads", "splits"), FUSED_SHAPES)
def test_skip_head_mid_fused_epilogue_matches_reference(m: int, k: int, heads: int, splits, monkeypatch) -> None:
    monkeypatch.setenv("DG_TUNE", FUSED_TUNE)
    test_skip_head_mid_matches_reference(m, k, heads, splits)


# (M, N, K, head splits): the GEMMs the call runs by default (the 1d2d FP8 kernel at the heuristic's configs; the
# columns placed by strided copies), then with the fused epilogue (the head splits compiled in, planned without
# split-K, whose direct store has no remap)
COMPILE_CASES = [(128, 2 * 256, 7168, None), (4096, 64 * 192, 1536, None)] + [
    (m, heads * (left + right), k, (left, mid, right)) for m, k, heads, (left, mid, right) in FUSED_SHAPES
]


@pytest.mark.nvcc
@pytest.mark.parametrize(("m", "n", "k", "splits"), COMPILE_CASES)
def test_kernels_compile_without_spills(tmp_path, monkeypatch, m: int, n: int, k: int, splits) -> None:
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("DG_JIT_PTXAS_CHECK", "1")
    if splits is None:
        params = compile_params(deep_gemm._C.get_gemm_config(m, n, k), n, k)
    else:
        left, mid, right = splits
        params = compile_params(deep_gemm._C.get_gemm_config(m, n, k, num_splits=1), n, k, head_left=left,
                                head_mid=mid, head_right=right)  # fmt: skip
    result = deep_gemm.compile_kernel("sm90_gemm", params)
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]
    assert result["stack_frame_bytes"] == 0, result["ptxas_report"]


@gpu
@pytest.mark.parametrize(("m", "k", "heads", "splits"), SHAPES)
def test_skip_head_mid_matches_reference(m: int, k: int, heads: int, splits) -> None:
    left, mid, right = splits
    n = heads * (left + right)
    torch.manual_seed(m * 31 + k + heads)
    a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
    b, sfb = per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
    mask = mid_mask(heads, splits, "cuda")
    d = poisoned(m, heads * (left + mid + right), mask)
    deep_gemm.fp8_gemm_nt_skip_head_mid((a, sfa), (b, sfb), d, splits)
    ref = place_heads(dequantized_reference(a, sfa, b, sfb), splits)
    check(d, ref, mask, f"M={m} K={k} H={heads} splits={splits}")
    # With mid = 0 it is exactly fp8_gemm_nt
    if mid == 0:
        d_plain = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d_plain)
        assert torch.equal(d, d_plain)


@gpu
def test_skip_head_mid_fused_takes_its_path(monkeypatch) -> None:
    # What the opt-in key changes, by the kernels a call launches: no scratch D and no strided copies, one GEMM
    m, k, heads, splits = 256, 1024, 8, (64, 32, 64)
    n = heads * (splits[0] + splits[2])
    a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
    b, sfb = per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
    d = poisoned(m, heads * sum(splits), mid_mask(heads, splits, "cuda"))

    def call() -> None:
        deep_gemm.fp8_gemm_nt_skip_head_mid((a, sfa), (b, sfb), d, splits)

    default = launched_kernels(call)
    assert count(default, "sm90_gemm_kernel") == 1 and count(default, "copy") >= 1, default
    monkeypatch.setenv("DG_TUNE", FUSED_TUNE)
    fused = launched_kernels(call)
    assert count(fused, "sm90_gemm_kernel") == 1 and count(fused, "copy") == 0, fused


@gpu
def test_skip_head_mid_graph_replay() -> None:
    m, k, heads, splits = 256, 1024, 8, (64, 32, 64)
    n = heads * (splits[0] + splits[2])
    a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
    b, sfb = per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
    mask = mid_mask(heads, splits, "cuda")
    d = poisoned(m, heads * sum(splits), mask)
    deep_gemm.fp8_gemm_nt_skip_head_mid((a, sfa), (b, sfb), d, splits)  # (compiles the kernel before capture)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        deep_gemm.fp8_gemm_nt_skip_head_mid((a, sfa), (b, sfb), d, splits)
    # New inputs in place, D poisoned again: the replay must write the new product and leave mid alone
    a_new, sfa_new = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
    a.copy_(a_new)
    sfa.copy_(sfa_new)
    d.copy_(poisoned(m, heads * sum(splits), mask))
    graph.replay()
    torch.cuda.synchronize()
    check(d, place_heads(dequantized_reference(a, sfa, b, sfb), splits), mask, "graph replay")
