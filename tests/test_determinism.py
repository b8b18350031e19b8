"""Determinism: which calls give the same bits run to run, and which give a row the same bits whatever M is
(batch invariance), with and without `deep_gemm.set_deterministic(True)` (README, "Determinism").

Claims and their tests:
- Run to run, default settings: the GEMMs (split-K added in a cluster in split order, stream-K contributions added by
  the owner in a fixed order) and tf32_hc_prenorm_gemm (cluster or second-pass sums in split order) are bitwise
  repeatable: two calls, compared bit for bit, on shapes whose plans use split-K, stream-K and each HC tiling.
- Batch invariance needs set_deterministic(True): the GEMM heuristic drops split-K and stream-K (the only choices that
  change a row's K order; BLOCK_M / BLOCK_N may still change with M, which leaves a row's sums alone), and the HC
  pre-norm splits K by K alone. Test: rows computed with M = 1, 7 and 129 and within M = 4096 compared bit for bit;
  the masked grouped GEMM's rows with expected_m = 1 and 4096.
- Under set_deterministic(True) the cuBLAS-served calls raise NotImplementedError.

CPU tier: the switch, its signature, the heuristic's choices under it, the errors. GPU tier (`gpu`): the claims above.
"""

import pytest
import torch
from jit_helpers import signature_params

import deep_gemm
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8

gpu = pytest.mark.gpu


@pytest.fixture
def deterministic():
    """set_deterministic(True) for the test, restored after."""
    previous = deep_gemm.get_deterministic()
    deep_gemm.set_deterministic(True)
    try:
        yield
    finally:
        deep_gemm.set_deterministic(previous)


# ----------------------------------------------------------------------------- CPU tier
def test_switch_round_trip_and_signature() -> None:
    assert signature_params(deep_gemm.set_deterministic) == [("new_value", None)]
    assert signature_params(deep_gemm.get_deterministic) == []
    assert deep_gemm.get_deterministic() is False
    try:
        deep_gemm.set_deterministic(True)
        assert deep_gemm.get_deterministic() is True
        deep_gemm.set_deterministic(new_value=False)
        assert deep_gemm.get_deterministic() is False
    finally:
        deep_gemm.set_deterministic(False)
    for name in ("set_deterministic", "get_deterministic"):
        assert name in deep_gemm.__all__ and (getattr(deep_gemm, name).__doc__ or "").strip()


# Shapes whose default plans use split-K (small M) or stream-K (large M)
SPLIT_K_SHAPES = [(1, 4096, 7168), (128, 2112, 7168), (256, 576, 7168)]
STREAM_K_SHAPES = [(4096, 7168, 2048), (4096, 4096, 7168)]


@pytest.mark.parametrize("bf16", [False, True], ids=["fp8", "bf16"])
def test_heuristic_has_no_split_k_or_stream_k_when_deterministic(bf16: bool) -> None:
    config = deep_gemm._C.get_gemm_config
    free = [config(m, n, k, bf16=bf16) for m, n, k in SPLIT_K_SHAPES + STREAM_K_SHAPES]
    if not bf16:  # (the shapes do exercise both: the switch has something to remove)
        assert any(c["num_splits"] > 1 for c in free) and any(c["stream_k"] for c in free)
    for m in (1, 7, 64, 129, 1024, 4096, 8192):
        for n, k in ((2112, 7168), (7168, 2048), (4096, 7168), (576, 7168), (24576, 1536)):
            c = config(m, n, k, bf16=bf16, deterministic=True)
            assert c["num_splits"] == 1 and c["stream_k"] == 0, (m, n, k, c)


def test_forced_split_k_or_stream_k_is_an_error_when_deterministic() -> None:
    config = deep_gemm._C.get_gemm_config
    with pytest.raises(ValueError, match=r"set_deterministic\(True\) forbids split-K and stream-K"):
        config(128, 2112, 7168, tune="fp8_gemm:split_k=2", deterministic=True)
    with pytest.raises(ValueError, match=r"set_deterministic\(True\) forbids split-K and stream-K"):
        config(4096, 4096, 7168, stream_k=1, deterministic=True)
    assert config(128, 2112, 7168, tune="fp8_gemm:split_k=1", deterministic=True)["num_splits"] == 1


def test_cublaslt_raises_when_deterministic(deterministic) -> None:
    a = torch.zeros(4, 64, dtype=torch.bfloat16)
    b = torch.zeros(8, 64, dtype=torch.bfloat16)
    d = torch.zeros(4, 8, dtype=torch.bfloat16)
    for name in ("cublaslt_gemm_nt", "cublaslt_gemm_nn", "cublaslt_gemm_tn", "cublaslt_gemm_tt"):
        with pytest.raises(NotImplementedError, match=r"set_deterministic\(True\) is on"):
            getattr(deep_gemm, name)(a, b, d)


# ----------------------------------------------------------------------------- GPU tier: helpers
def fp8_gemm(x: torch.Tensor, b) -> torch.Tensor:
    a = per_token_cast_to_fp8(x, use_ue8m0=False)
    d = torch.full((x.shape[0], b[0].shape[0]), float("nan"), device="cuda", dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt(a, b, d)
    return d


def bf16_gemm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    d = torch.full((x.shape[0], w.shape[0]), float("nan"), device="cuda", dtype=torch.bfloat16)
    deep_gemm.bf16_gemm_nt(x, w, d)
    return d


def hc_prenorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    m, n = x.shape[0], w.shape[0]
    d = torch.full((m, n), float("nan"), device="cuda")
    sqr_sum = torch.full((m,), float("nan"), device="cuda")
    deep_gemm.tf32_hc_prenorm_gemm(x, w, d, sqr_sum)
    return torch.cat([d, sqr_sum[:, None]], dim=1)


def operands(kind: str, n: int, k: int, max_m: int, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(max_m, k, device="cuda", generator=g).bfloat16()
    if kind == "fp8":
        w = per_block_cast_to_fp8(torch.randn(n, k, device="cuda", generator=g).bfloat16(), use_ue8m0=False)
        return x, w, fp8_gemm
    if kind == "bf16":
        return x, torch.randn(n, k, device="cuda", generator=g).bfloat16(), bf16_gemm
    return x, torch.randn(n, k, device="cuda", generator=g) * 0.05, hc_prenorm


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def assert_same_bits(x: torch.Tensor, y: torch.Tensor, what: str) -> None:
    assert torch.isfinite(x).all() and torch.isfinite(y).all(), f"{what}: unwritten outputs"
    if not torch.equal(bits(x), bits(y)):
        diff = (bits(x) != bits(y)).nonzero()
        raise AssertionError(f"{what}: {diff.shape[0]} elements differ, first at {tuple(diff[0].tolist())}")


# ----------------------------------------------------------------------------- GPU tier
@gpu
@pytest.mark.parametrize("kind", ["fp8", "bf16"])
@pytest.mark.parametrize("shape", SPLIT_K_SHAPES + STREAM_K_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_run_to_run_with_default_settings(kind: str, shape: tuple[int, int, int]) -> None:
    """Default settings (split-K and stream-K where the heuristic picks them): two calls give the same bits."""
    m, n, k = shape
    x, w, fn = operands(kind, n, k, m, seed=m + n)
    assert_same_bits(fn(x, w), fn(x, w), f"{kind} {shape}")


@gpu
@pytest.mark.parametrize(("m", "n", "k"), [(1, 24, 7168), (1024, 24, 7168), (1024, 32, 28672), (8192, 32, 7680)])
def test_hc_prenorm_run_to_run_with_default_settings(m: int, n: int, k: int) -> None:
    """Every HC tiling (second pass, 64-row clusters, 128-row clusters): two calls give the same bits."""
    x, w, fn = operands("hc", n, k, m, seed=m)
    assert_same_bits(fn(x, w), fn(x, w), f"hc m{m}-n{n}-k{k}")


BATCH_CASES = [(kind, n, k) for kind in ("fp8", "bf16") for n, k in ((2112, 7168), (7168, 2048))] + [
    ("hc", 24, 7168), ("hc", 32, 28672)
]


@gpu
@pytest.mark.parametrize(("kind", "n", "k"), BATCH_CASES, ids=[f"{c[0]}-n{c[1]}-k{c[2]}" for c in BATCH_CASES])
def test_rows_do_not_depend_on_m_when_deterministic(deterministic, kind: str, n: int, k: int) -> None:
    """set_deterministic(True): rows of M = 4096 equal the same rows computed with M = 1, 7 and 129, bit for bit (the
    default plans of these M differ: split-K at M = 1, stream-K or three-warpgroup tiles at 4096, second pass or
    cluster widths for the HC pre-norm); and a second run of M = 4096 equals the first."""
    x, w, fn = operands(kind, n, k, 4096, seed=n + k)
    full = fn(x, w)
    for m in (1, 7, 129):
        assert_same_bits(fn(x[:m].contiguous(), w), full[:m], f"{kind} n{n}-k{k}: M = {m} vs rows of M = 4096")
    assert_same_bits(fn(x, w), full, f"{kind} n{n}-k{k}: two runs of M = 4096")


@gpu
def test_deterministic_results_are_still_right(deterministic) -> None:
    """The pinned plans compute the same math: against float64 of the dequantized FP8 operands."""
    m, n, k = 129, 2112, 7168
    x, w, fn = operands("fp8", n, k, m, seed=3)
    d = fn(x, w)
    a, sfa = per_token_cast_to_fp8(x, use_ue8m0=False)
    sfa_full = sfa.double().repeat_interleave(128, dim=1)[:, :k]
    sfb_full = w[1].double().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[:n, :k]
    ref = (a.double() * sfa_full) @ (w[0].double() * sfb_full).T
    assert deep_gemm.testing.calc_diff(d, ref) < 5e-6


@gpu
def test_einsum_cublaslt_raises_when_deterministic(deterministic) -> None:
    a = torch.randn(4, 128, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 128, 512, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(4, 128, 128, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match=r"set_deterministic\(True\) is on"):
        deep_gemm.einsum("bhr,hdr->bhd", a, b, d, use_cublaslt=True)
    deep_gemm.einsum("bhr,hdr->bhd", a, b, d)  # (the deep_gemm kernel path still runs)
    assert torch.isfinite(d).all()


@gpu
def test_masked_grouped_rows_do_not_depend_on_expected_m_when_deterministic(deterministic) -> None:
    """m_grouped_fp8_gemm_nt_masked: the plan follows expected_m (64- or 128-row blocks); the valid rows of each
    group are the same bits for expected_m = 1 and 4096, and for masked_m of 1 and of the full group (run-to-run of
    the masked layout too: tests/test_grouped_gemm.py covers the contiguous and k-grouped ones)."""
    from test_grouped_gemm import make_masked_inputs

    groups, max_m, n, k = 4, 256, 4096, 7168
    a, sfa, b, sfb = make_masked_inputs(groups, max_m, n, k)

    def run(counts: list[int], expected_m: int) -> torch.Tensor:
        d = torch.full((groups, max_m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        masked_m = torch.tensor(counts, device="cuda", dtype=torch.int32)
        deep_gemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m)
        return d

    full = run([max_m] * groups, max_m)
    assert_same_bits(run([max_m] * groups, max_m), full, "masked: two runs")
    one = run([1] * groups, 1)
    assert_same_bits(one[:, :1], full[:, :1], "masked: row 0 with masked_m = 1 vs the full groups")
