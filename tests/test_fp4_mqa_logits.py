"""fp8_fp4_mqa_logits with FP4 q and kv (the reference's format, served on SM90 by the FP8 kernel's FP4 mode):
input validation and compilation everywhere; on a GPU, results against float64.

Operands: q int8 [S, H, D / 2] and kv int8 [S_kv, D / 2], two e2m1 values a byte (low nibble first); q scales int32
[S, H] and kv scales int32 [S_kv], the UE8M0 exponents of each row's D / 32 groups of 32 (group g in byte g).
Reference: float64 logits of the dequantized operands (e2m1 value x 2^(e - 127)), sum_h relu(q_h . k) w_h, as the
FP8 tests' reference. Bounds as the FP8 tests' (tests/test_mqa_logits.py): the kernel's e4m3 operands are exact while a
row's exponents span <= 8 binades, so the only error is the FP32 accumulation (and the BF16 rounding of the output)."""

import os

import pytest
import torch
from jit_helpers import dump_sass
from test_mqa_logits import check_logits, compress, key_ranges, poison_allocator, reference

import deep_gemm

gpu = pytest.mark.gpu

E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


# ----------------------------------------------------------------------------- operands and reference
def dequantize(packed: torch.Tensor, exponents: torch.Tensor, d: int) -> torch.Tensor:
    """float64 [..., D] of packed e2m1 [..., D / 2] with int32 UE8M0 words [...] (group g of 32 in byte g)."""
    grid = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float64, device=packed.device)
    b = packed.view(torch.uint8).long()
    codes = torch.stack([b & 0xF, b >> 4], dim=-1).flatten(-2)  # [..., D], the even value from the low nibble
    values = torch.where(codes >= 8, -grid[codes & 7], grid[codes & 7])
    e = exponents.long() & 0xFFFFFFFF
    groups = torch.stack([(e >> (8 * g)) & 0xFF for g in range(d // 32)], dim=-1)  # [..., D / 32]
    scale = torch.where(groups == 0, torch.zeros_like(groups, dtype=torch.float64), torch.exp2(groups.double() - 127))
    return values * scale.repeat_interleave(32, dim=-1)


def random_fp4(rows: tuple[int, ...], d: int, span: int, generator: torch.Generator, device: str = "cuda"):
    """Random packed bytes (every e2m1 code, both signs) and exponent words: per row a base exponent near 127 and
    its groups' exponents within `span` binades of it."""
    packed = torch.randint(-128, 128, (*rows, d // 2), generator=generator, dtype=torch.int8)
    base = torch.randint(120, 132, (*rows, 1), generator=generator)
    groups = base + torch.randint(0, span + 1, (*rows, d // 32), generator=generator)
    word = torch.zeros(rows, dtype=torch.int64)
    for g in range(d // 32):
        word |= groups[..., g] << (8 * g)
    word = torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)
    return packed.to(device), word.to(device)


def make_fp4_inputs(s: int, s_kv: int, h: int, d: int, span: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q, q_sf = random_fp4((s, h), d, span, g)
    kv, kv_sf = random_fp4((s_kv,), d, span, g)
    weights = torch.randn(s, h, generator=g).cuda()
    return q, q_sf, kv, kv_sf, weights


# ----------------------------------------------------------------------------- validation (CPU tier)
def cpu_fp4_inputs(s: int = 8, h: int = 64, d: int = 128, s_kv: int = 256):
    q = torch.zeros(s, h, d // 2, dtype=torch.int8)
    q_sf = torch.full((s, h), 0x7F7F7F7F, dtype=torch.int32)
    kv = torch.zeros(s_kv, d // 2, dtype=torch.int8)
    kv_sf = torch.full((s_kv,), 0x7F7F7F7F, dtype=torch.int32)
    weights = torch.ones(s, h)
    ks = torch.zeros(s, dtype=torch.int32)
    ke = torch.full((s,), s_kv, dtype=torch.int32)
    return dict(q=q, q_sf=q_sf, kv=kv, kv_sf=kv_sf, weights=weights, ks=ks, ke=ke)


def call(a: dict, **kwargs):
    return deep_gemm.fp8_fp4_mqa_logits((a["q"], a["q_sf"]), (a["kv"], a["kv_sf"]), a["weights"], a["ks"], a["ke"],
                                        **kwargs)  # fmt: skip


FP4_BAD_INPUTS = {
    "q_fp8_with_scales": (lambda a: a.update(q=torch.zeros(8, 64, 64, dtype=torch.float8_e4m3fn)),
                          r"q\[0\] \(q\) must be packed FP4 \(torch.int8 or torch.uint8"),
    "q_head_dim_32": (lambda a: a.update(q=torch.zeros(8, 64, 16, dtype=torch.int8)),
                      r"q\[0\] \(q, packed FP4\) must be \[S, H, D / 2\] with D \(head dim\) in \{64, 128\}"),
    "q_heads": (lambda a: a.update(q=torch.zeros(8, 8, 64, dtype=torch.int8)), r"H \(heads\) in \{16, 32, 64\}"),
    "q_sf_dtype": (lambda a: a.update(q_sf=torch.ones(8, 64)), r"q\[1\] \(q scales, packed UE8M0\) must have dtype torch.int32"),
    "q_sf_shape": (lambda a: a.update(q_sf=torch.ones(8, 64, 1, dtype=torch.int32)),
                   r"q\[1\] \(q scales\) must be \[S, H\] = \[8, 64\]"),
    "q_sf_strided": (lambda a: a.update(q_sf=torch.ones(64, 8, dtype=torch.int32).t()),
                     r"q\[1\] \(q scales\) must be contiguous"),
    "kv_fp8": (lambda a: a.update(kv=torch.zeros(256, 128, dtype=torch.float8_e4m3fn)),
               r"kv\[0\] \(kv\) must be packed FP4 \(torch.int8 or torch.uint8\) when q is FP4"),
    "kv_head_dim": (lambda a: a.update(kv=torch.zeros(256, 32, dtype=torch.int8)),
                    r"kv\[0\] \(kv, packed FP4\) must be \[S_kv, D / 2\] with D / 2 = 64"),
    "kv_sf_fp32": (lambda a: a.update(kv_sf=torch.ones(256)),
                   r"kv\[1\] \(kv scales, packed UE8M0 with FP4 kv\) must have dtype torch.int32"),
    "kv_sf_shape": (lambda a: a.update(kv_sf=torch.ones(256, 1, dtype=torch.int32)),
                    r"kv\[1\] \(kv scales\) must be \[S_kv\] = \[256\]"),
    "weights_shape": (lambda a: a.update(weights=torch.ones(8, 32)), r"weights must be \[S, H\] = \[8, 64\]"),
}


@pytest.mark.parametrize("case", sorted(FP4_BAD_INPUTS))
def test_bad_fp4_inputs_raise_value_error(case: str) -> None:
    a = cpu_fp4_inputs()
    mutate, pattern = FP4_BAD_INPUTS[case]
    mutate(a)
    with pytest.raises(ValueError, match=pattern):
        call(a)


@pytest.mark.parametrize("d", [64, 128])
def test_valid_fp4_inputs_reach_the_device_check(d: int) -> None:
    # Every argument accepted (uint8 packing too): the first error is the device's
    for dtype in (torch.int8, torch.uint8):
        a = cpu_fp4_inputs(d=d)
        a["q"], a["kv"] = a["q"].view(dtype), a["kv"].view(dtype)
        with pytest.raises(ValueError, match=r"q must be on a CUDA device"):
            call(a, clean_logits=False, max_seqlen_k=16, logits_dtype=torch.bfloat16)


def test_fp4_docstring() -> None:
    doc = deep_gemm.fp8_fp4_mqa_logits.__doc__
    for word in ("[S, H, D / 2]", "UE8M0", "int32 [S, H]", "int32 [S_kv]", "{64, 128}", "8 binades"):
        assert word in doc, word


def test_dequantize_reference_on_known_values() -> None:
    # Bytes 0x21 -> values (0.5, 1.0); 0xF8 -> (-0.0, -6.0); exponents 127 (x1) and 128 (x2) in groups 0 and 1
    packed = torch.zeros(1, 32, dtype=torch.int8)
    packed[0, 0] = 0x21
    packed[0, 16] = torch.tensor(0xF8, dtype=torch.uint8).view(torch.int8)
    word = torch.tensor([127 | (128 << 8)], dtype=torch.int32)
    x = dequantize(packed, word, 64)
    assert x[0, :2].tolist() == [0.5, 1.0] and x[0, 32:34].tolist() == [-0.0, -12.0]
    assert x.abs().sum().item() == 0.5 + 1.0 + 12.0


@pytest.mark.parametrize("d", [64, 128])
def test_dequantize_matches_the_library_cast(d: int) -> None:
    # The reference's format as deep_gemm.utils casts it (gran_k 32, packed UE8M0): this test's dequantizer agrees
    from deep_gemm.utils import cast_back_from_fp4, per_token_cast_to_fp4

    x = torch.randn(40, d, generator=torch.Generator().manual_seed(7)) * torch.exp2(torch.randint(-6, 7, (40, 1)).float())
    packed, sf = per_token_cast_to_fp4(x, use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)
    assert packed.shape == (40, d // 2) and sf.shape == (40, 1) and sf.dtype == torch.int32
    expected = cast_back_from_fp4(packed, sf, gran_k=32, use_packed_ue8m0=True).double()
    assert torch.equal(dequantize(packed, sf[:, 0], d), expected)


# ----------------------------------------------------------------------------- compilation (CPU tier)
FP4_COMPILE_CASES = [
    dict(num_heads=64, head_dim=128, fp4_operands=1),
    dict(num_heads=16, head_dim=64, fp4_operands=1, is_compressed=1, clean_logits=0, out_bf16=1),
]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(path))
    return path


@pytest.mark.parametrize("use_nvrtc", [False, True], ids=["nvcc", "nvrtc"])
@pytest.mark.parametrize("cfg", FP4_COMPILE_CASES, ids=lambda c: f"h{c['num_heads']}-d{c['head_dim']}")
def test_fp4_kernel_compiles_without_spills(cache_dir, cfg: dict, use_nvrtc: bool) -> None:
    result = deep_gemm.compile_kernel("sm90_fp8_mqa_logits", dict(cfg, num_stages=16), use_nvrtc=use_nvrtc)
    assert result["stack_frame_bytes"] == 0, result["ptxas_report"]
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]
    lines = dump_sass(result["cubin_path"]).splitlines()
    # The FP8 path's wgmmas (one m64n256k32 per 32 of D), fed from e4m3 made by byte permutes in shared memory
    k_steps = cfg["head_dim"] // 32
    assert sum("QGMMA" in line and "64x256x32" in line for line in lines) == k_steps
    assert any("PRMT" in line for line in lines), "no e2m1 -> e4m3 byte permutes"
    assert any("FENCE.VIEW.ASYNC.S" in line for line in lines), "the converted tiles need the async-proxy fence"
    assert not any(op in line for line in lines for op in ("LDL", "STL")), "local memory in SASS"
    assert sum("USETMAXREG" in line for line in lines) == 2
    assert os.path.getsize(result["cubin_path"]) > 0


@pytest.mark.nvcc
def test_fp4_bad_static_config_fails(cache_dir) -> None:
    with pytest.raises(ValueError, match=r"fp4_operands needs head_dim 64 or 128"):
        deep_gemm.compile_kernel("sm90_fp8_mqa_logits", dict(num_heads=64, head_dim=32, fp4_operands=1))
    with pytest.raises(ValueError, match=r"fp4_operands needs .* signed_sum_wgmma=0"):
        deep_gemm.compile_kernel("sm90_fp8_mqa_logits", dict(num_heads=64, head_dim=128, fp4_operands=1,
                                                             relu_by_abs=1, signed_sum_wgmma=1))  # fmt: skip


# ----------------------------------------------------------------------------- GPU tier
def run_fp4_case(s, s_kv, h, d, pattern, clean=True, compressed=False, bf16=False, span=8, seed=0, bound=None):
    q, q_sf, kv, kv_sf, weights = make_fp4_inputs(s, s_kv, h, d, span, seed)
    ks, ke = key_ranges(s, s_kv, pattern, seed)
    width = max(int((ke - ks).max()) if s > 0 else 1, 1) if compressed else s_kv
    dtype = torch.bfloat16 if bf16 else torch.float32
    poison_allocator(s * width, dtype)
    out = deep_gemm.fp8_fp4_mqa_logits((q, q_sf), (kv, kv_sf), weights, ks, ke, clean_logits=clean,
                                       max_seqlen_k=width if compressed else 0, logits_dtype=dtype)  # fmt: skip
    torch.cuda.synchronize()
    assert out.dtype == dtype and out.shape == (s, width) and out.is_contiguous()
    rows = torch.arange(s, device="cuda")
    q64, kv64 = dequantize(q, q_sf, d), dequantize(kv, kv_sf, d)
    ref = reference(q64, kv64, torch.ones(s_kv, device="cuda", dtype=torch.float64), weights, ks, ke, rows)
    if compressed:
        ref = compress(ref, ks, ke, rows, width)
    ours = out if clean else torch.where(torch.isfinite(ref), out.double(), ref)
    default_bound = 2e-5 if bf16 else 5e-6
    check_logits(ours, ref, clean, bound or default_bound, "vs float64 of the dequantized FP4 inputs",
                 elementwise=bound is None)  # fmt: skip
    return out


@gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("h", [16, 32, 64])
@pytest.mark.parametrize("pattern", ["causal", "random", "empty"])
def test_fp4_small_shapes_against_float64(h: int, d: int, pattern: str) -> None:
    # Unaligned S and S_kv: partial query blocks and kv tiles; every e2m1 code, exponents spanning 8 binades
    run_fp4_case(301, 1000, h, d, pattern)


@gpu
@pytest.mark.parametrize(("clean", "compressed", "bf16"), [(False, False, False), (True, True, False),
                                                           (False, True, True), (True, False, True)])
@pytest.mark.parametrize(("h", "d"), [(64, 128), (32, 64)])
def test_fp4_variants(h: int, d: int, clean: bool, compressed: bool, bf16: bool) -> None:
    run_fp4_case(257, 777, h, d, "causal", clean=clean, compressed=compressed, bf16=bf16, seed=1)


@gpu
@pytest.mark.parametrize(("s", "s_kv"), [(1, 1), (1, 65), (5, 63), (64, 64), (33, 129)])
def test_fp4_edge_lengths(s: int, s_kv: int) -> None:
    run_fp4_case(s, s_kv, 64, 128, "random", seed=2)
    run_fp4_case(s, s_kv, 16, 64, "causal", seed=3)


@gpu
def test_fp4_issue_shape() -> None:
    run_fp4_case(2048, 8192, 64, 128, "causal", seed=4)


@gpu
def test_fp4_exponent_spans_past_the_fold_limit() -> None:
    # Groups more than 8 binades below their row's largest round to e4m3 subnormals (or 0): their contributions are
    # below 2^-9 of the row's largest values, so the logits stay close, not exact
    run_fp4_case(301, 1000, 64, 128, "random", span=14, seed=5, bound=1e-4)


@gpu
def test_fp4_matches_the_fp8_path_on_the_same_values() -> None:
    # One exponent per row (span 0): the FP8 API gets the e2m1 values as e4m3 (exact), q unscaled (its weights times
    # the heads' scales, exact) and kv with its per-key scale; at H = 16 both take the same wgmmas and the same head
    # reduction (no pieces), so the logits agree to FP32 rounding
    s, s_kv, h, d = 129, 500, 16, 128
    g = torch.Generator().manual_seed(6)
    q, q_sf = random_fp4((s, h), d, 0, g)
    kv, kv_sf = random_fp4((s_kv,), d, 0, g)
    weights = torch.randn(s, h, generator=g).cuda()
    ks, ke = key_ranges(s, s_kv, "causal")
    fp4 = deep_gemm.fp8_fp4_mqa_logits((q, q_sf), (kv, kv_sf), weights, ks, ke)
    unit_q = torch.full_like(q_sf, 127 * 0x01010101)
    unit_kv = torch.full_like(kv_sf, 127 * 0x01010101)
    q8 = dequantize(q, unit_q, d).to(torch.float8_e4m3fn)
    kv8 = dequantize(kv, unit_kv, d).to(torch.float8_e4m3fn)
    q_scale = torch.exp2((q_sf & 0xFF).double() - 127)
    kv_scale = torch.exp2((kv_sf & 0xFF).double() - 127).float()
    fp8 = deep_gemm.fp8_mqa_logits(q8, (kv8, kv_scale), (weights.double() * q_scale).float(), ks, ke)
    valid = torch.isfinite(fp8)
    assert torch.equal(valid, torch.isfinite(fp4))
    torch.testing.assert_close(fp4[valid], fp8[valid], rtol=1e-5, atol=1e-5 * float(fp8[valid].abs().max()))


# ============================================================================= paged (fp8_fp4_paged_mqa_logits)
# The cache as the reference lays it out for FP4: uint8 [num_blocks, block_kv, 1, D / 2 + 4], per block the block_kv x
# D / 2 packed bytes, then block_kv int32 exponent words; q int8 [B, next_n, H, D / 2] with q scales int32 [B, next_n, H].
def paged_fp4_cpu_inputs(b: int = 4, t: int = 2, h: int = 64, d: int = 128, block_kv: int = 64, num_blocks: int = 16):
    return dict(q=torch.zeros(b, t, h, d // 2, dtype=torch.int8), q_sf=torch.zeros(b, t, h, dtype=torch.int32),
                kv_cache=torch.zeros(num_blocks, block_kv, 1, d // 2 + 4, dtype=torch.uint8),
                weights=torch.ones(b * t, h), context_lens=torch.full((b,), 100, dtype=torch.int32),
                block_table=torch.arange(b * 4, dtype=torch.int32).view(b, 4) % num_blocks,
                schedule_meta=torch.zeros(9, 2, dtype=torch.int32), max_context_len=256)  # fmt: skip


def paged_call(a: dict, **kwargs):
    return deep_gemm.fp8_fp4_paged_mqa_logits((a["q"], a["q_sf"]), a["kv_cache"], a["weights"], a["context_lens"],
                                              a["block_table"], a["schedule_meta"], a["max_context_len"], **kwargs)  # fmt: skip


PAGED_FP4_BAD_INPUTS = {
    "q_fp8_with_scales": (lambda a: a.update(q=torch.zeros(4, 2, 64, 64, dtype=torch.float8_e4m3fn)),
                          r"q\[0\] \(q\) must be packed FP4"),
    "q_head_dim_32": (lambda a: a.update(q=torch.zeros(4, 2, 64, 16, dtype=torch.int8)),
                      r"q\[0\] \(q, packed FP4\) must be \[B, next_n, H, D / 2\] with D \(head dim\) in \{64, 128\}"),
    "q_sf_dtype": (lambda a: a.update(q_sf=torch.zeros(4, 2, 64)), r"q\[1\] \(q scales, packed UE8M0\) must have dtype"),
    "q_sf_shape": (lambda a: a.update(q_sf=torch.zeros(8, 64, dtype=torch.int32)),
                   r"q\[1\] \(q scales\) must be \[B, next_n, H\] = \[4, 2, 64\]"),
    "cache_fp8_rows": (lambda a: a.update(kv_cache=torch.zeros(16, 64, 1, 132, dtype=torch.uint8)),
                       r"kv_cache must be \[num_blocks, block_kv, 1, D / 2 \+ 4\] .* D = 128"),
}


@pytest.mark.parametrize("case", sorted(PAGED_FP4_BAD_INPUTS))
def test_paged_bad_fp4_inputs_raise_value_error(case: str) -> None:
    a = paged_fp4_cpu_inputs()
    mutate, pattern = PAGED_FP4_BAD_INPUTS[case]
    mutate(a)
    with pytest.raises(ValueError, match=pattern):
        paged_call(a)


@pytest.mark.parametrize("d", [64, 128])
def test_paged_valid_fp4_inputs_reach_the_device_check(d: int) -> None:
    a = paged_fp4_cpu_inputs(d=d)
    with pytest.raises(ValueError, match=r"q must be on a CUDA device"):
        paged_call(a, clean_logits=True, logits_dtype=torch.bfloat16)


PAGED_FP4_COMPILE_CASES = [
    dict(next_n=1, num_heads=64, head_dim=128, block_kv=64, fp4_operands=1),  # three math warpgroups
    dict(next_n=4, num_heads=64, head_dim=128, block_kv=32, clean_logits=1, fp4_operands=1),  # two, N = 256
    dict(next_n=2, num_heads=16, head_dim=64, block_kv=32, clean_logits=1, is_2d_context_lens=1, fp4_operands=1),
]


@pytest.mark.parametrize("cfg", PAGED_FP4_COMPILE_CASES, ids=lambda c: f"t{c['next_n']}-h{c['num_heads']}-d{c['head_dim']}")
def test_paged_fp4_kernel_compiles_without_spills(cache_dir, cfg: dict) -> None:
    result = deep_gemm.compile_kernel("sm90_fp8_paged_mqa_logits", cfg, use_nvrtc=False)
    assert result["stack_frame_bytes"] == 0, result["ptxas_report"]
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]
    lines = dump_sass(result["cubin_path"]).splitlines()
    n = cfg["next_n"] * cfg["num_heads"]
    assert sum("QGMMA" in line and f"64x{n}x32" in line for line in lines) == cfg["head_dim"] // 32
    assert any("PRMT" in line for line in lines), "no e2m1 -> e4m3 byte permutes"
    assert any("FENCE.VIEW.ASYNC.S" in line for line in lines), "the converted tiles need the async-proxy fence"
    assert not any(op in line for line in lines for op in ("LDL", "STL")), "local memory in SASS"


def make_fp4_paged_inputs(batch, next_n, h, d, block_kv, avg_ctx, span=8, seed=0, two_d=False):
    """FP4 q and cache (the FP8 test's request lengths, block table and weights; random packed bytes and exponents),
    and the dequantized q [B, T, H, D] and keys [num_blocks, block_kv, D] in float64."""
    from test_mqa_logits import make_paged_inputs

    _, fp8_cache, weights, lens, table, width = make_paged_inputs(batch, next_n, h, d, block_kv, avg_ctx, seed=seed,
                                                                  two_d=two_d)  # fmt: skip
    num_blocks = fp8_cache.shape[0]
    g = torch.Generator().manual_seed(seed + 100)
    q, q_sf = random_fp4((batch, next_n, h), d, span, g)
    kv, kv_sf = random_fp4((num_blocks, block_kv), d, span, g)
    cache = torch.empty(num_blocks, block_kv * (d // 2 + 4), dtype=torch.uint8, device="cuda")
    cache[:, : block_kv * d // 2] = kv.view(torch.uint8).reshape(num_blocks, -1)
    cache[:, block_kv * d // 2 :] = kv_sf.view(torch.uint8).reshape(num_blocks, -1)
    cache = cache.view(num_blocks, block_kv, 1, d // 2 + 4)
    return q, q_sf, cache, weights, lens, table, width, dequantize(q, q_sf, d), dequantize(kv, kv_sf, d)


def run_fp4_paged_case(batch, next_n, h, d, block_kv, avg_ctx, clean=True, two_d=False, bf16=False, seed=0):
    from test_mqa_logits import paged_reference_of_keys

    q, q_sf, cache, weights, lens, table, width, q64, kv64 = make_fp4_paged_inputs(
        batch, next_n, h, d, block_kv, avg_ctx, seed=seed, two_d=two_d
    )
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens, block_kv, deep_gemm.get_num_sms())
    dtype = torch.bfloat16 if bf16 else torch.float32
    poison_allocator(batch * next_n * width, dtype)
    out = deep_gemm.fp8_fp4_paged_mqa_logits((q, q_sf), cache, weights, lens, table, meta, width, clean_logits=clean,
                                             logits_dtype=dtype)  # fmt: skip
    torch.cuda.synchronize()
    assert out.dtype == dtype and out.shape == (batch * next_n, width) and out.is_contiguous()
    ref = paged_reference_of_keys(q64, kv64, weights, lens, table, width)
    ours = out if clean else torch.where(torch.isfinite(ref), out.double(), ref)
    check_logits(ours, ref, clean, 2e-5 if bf16 else 5e-6, f"FP4 paged b{batch} t{next_n} h{h} d{d} bkv{block_kv}")


PAGED_FP4_GPU_CASES = [  # (batch, next_n, H, D, block_kv, context)
    (1, 1, 64, 128, 64, 20000),
    (64, 2, 64, 128, 64, 3000),
    (32, 4, 64, 128, 32, 2000),
    (16, 4, 32, 128, 64, 1500),
    (16, 1, 16, 64, 32, 3000),
    (16, 2, 32, 64, 64, 1000),
]


@gpu
@pytest.mark.parametrize(("batch", "next_n", "h", "d", "block_kv", "ctx"), PAGED_FP4_GPU_CASES,
                         ids=[f"b{c[0]}-t{c[1]}-h{c[2]}-d{c[3]}-bkv{c[4]}" for c in PAGED_FP4_GPU_CASES])  # fmt: skip
def test_paged_fp4_against_float64(batch: int, next_n: int, h: int, d: int, block_kv: int, ctx: int) -> None:
    run_fp4_paged_case(batch, next_n, h, d, block_kv, ctx)


@gpu
@pytest.mark.parametrize(("clean", "two_d", "bf16"), [(False, False, False), (True, True, False), (False, True, True)])
def test_paged_fp4_variants(clean: bool, two_d: bool, bf16: bool) -> None:
    run_fp4_paged_case(24, 2, 64, 128, 32, 1200, clean=clean, two_d=two_d, bf16=bf16, seed=3)
