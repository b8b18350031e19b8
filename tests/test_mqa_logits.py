"""fp8_mqa_logits (the DeepSeek-V3.2 lightning indexer, prefill): input validation and compilation
everywhere; on a GPU, results against float64 and BF16 references.

Bounds: calc_diff over the valid positions against the float64 logits of the dequantized FP8 inputs
<= 5e-6 (FP32 output; 2e-5 for BF16 output, whose rounding alone is ~2^-9 relative), every element within
2^-7 |ref| + 2^-9 rms(ref); -inf exactly where the reference has it (clean_logits); <= 1e-3 against the
float64 logits of the unquantized BF16 inputs (what FP8 quantization costs); 10 runs bitwise equal."""

import os

import pytest
import torch
from jit_helpers import dump_sass, parameter_names, run_python

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.utils import per_token_cast_to_fp8

gpu = pytest.mark.gpu


# ----------------------------------------------------------------------------- validation (CPU tier)
def cpu_inputs(s: int = 8, h: int = 64, d: int = 128, s_kv: int = 256):
    q = torch.zeros(s, h, d, dtype=torch.float8_e4m3fn)
    kv = torch.zeros(s_kv, d, dtype=torch.float8_e4m3fn)
    scales = torch.ones(s_kv)
    weights = torch.ones(s, h)
    ks = torch.zeros(s, dtype=torch.int32)
    ke = torch.full((s,), s_kv, dtype=torch.int32)
    return q, kv, scales, weights, ks, ke


BAD_INPUTS = [
    ("q_dtype", r"q must have dtype torch.float8_e4m3fn"),
    ("q_rank", r"q must be 3-D"),
    ("q_heads", r"H \(heads\) in \{16, 32, 64\}"),
    ("q_head_dim", r"D \(head dim\) in \{32, 64, 128\}"),
    ("q_not_contiguous_d", r"q must be contiguous in its last dimension"),
    ("q_heads_not_stacked", r"q: the heads of a token must be stacked densely"),
    ("kv_dtype", r"kv\[0\] \(kv\) must have dtype torch.float8_e4m3fn"),
    ("kv_head_dim", r"kv\[0\] \(kv\) must be \[S_kv, D\] with D = 128"),
    ("kv_unaligned_rows", r"kv\[0\] \(kv\): stride 136 of dim 0 must be a multiple of 16 bytes"),
    ("scales_dtype", r"kv\[1\] \(kv scales\) must have dtype torch.float32"),
    ("scales_shape", r"kv\[1\] \(kv scales\) must be \[S_kv\] = \[256\]"),
    ("scales_strided", r"kv\[1\] \(kv scales\) must be contiguous"),
    ("weights_shape", r"weights must be \[S, H\] = \[8, 64\]"),
    ("weights_dtype", r"weights must have dtype torch.float32"),
    ("weights_strided", r"weights must be contiguous along H"),
    ("ks_dtype", r"cu_seq_len_k_start must have dtype torch.int32"),
    ("ke_shape", r"cu_seq_len_k_end must be \[S\] = \[8\]"),
    ("ks_gt_ke", r"cu_seq_len_k_start must be <= cu_seq_len_k_end for every query \(ks > ke\)"),
    ("ks_negative", r"cu_seq_len_k_start must be >= 0"),
    ("ke_past_kv", r"cu_seq_len_k_end must be <= S_kv = 256"),
    ("max_seqlen_negative", r"max_seqlen_k must be >= 0"),
    ("max_seqlen_short", r"max_seqlen_k = 100 must cover every query's ke - ks"),
    ("logits_dtype", r"logits_dtype must be torch.float32 or torch.bfloat16"),
    ("on_cpu", r"q must be on a CUDA device"),
]


# Value checks (they read ks/ke on the host): only with DG_DEBUG_CHECKS=1
VALUE_CASES = {"ks_gt_ke", "ks_negative", "ke_past_kv", "max_seqlen_short"}


@pytest.fixture
def debug_checks(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DG_DEBUG_CHECKS", "1")


@pytest.fixture
def no_debug_checks(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("DG_DEBUG_CHECKS", raising=False)


@pytest.mark.parametrize(("case", "pattern"), BAD_INPUTS, ids=[c for c, _ in BAD_INPUTS])
def test_bad_inputs_raise_value_error(case: str, pattern: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if case in VALUE_CASES:
        monkeypatch.setenv("DG_DEBUG_CHECKS", "1")
    q, kv, scales, weights, ks, ke, kwargs = bad_prefill_inputs(case)
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.fp8_mqa_logits(q, (kv, scales), weights, ks, ke, **kwargs)
    # The pair form raises the same (q = (values, None): FP8 q)
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.fp8_fp4_mqa_logits((q, None), (kv, scales), weights, ks, ke, **kwargs)


@pytest.mark.parametrize("case", sorted(VALUE_CASES))
def test_value_checks_are_off_by_default(case: str, no_debug_checks) -> None:
    # Without DG_DEBUG_CHECKS the ks/ke values are never read on the host: the first error is the device's
    q, kv, scales, weights, ks, ke, kwargs = bad_prefill_inputs(case)
    with pytest.raises(ValueError, match=r"q must be on a CUDA device"):
        deep_gemm.fp8_mqa_logits(q, (kv, scales), weights, ks, ke, **kwargs)


def bad_prefill_inputs(case: str):
    """cpu_inputs() with the one defect `case` names, and the call's keyword arguments."""
    q, kv, scales, weights, ks, ke = cpu_inputs()
    kwargs = {}
    if case == "q_dtype":
        q = q.to(torch.bfloat16)
    elif case == "q_rank":
        q = q[0]
    elif case == "q_heads":
        q, weights = torch.zeros(8, 8, 128, dtype=torch.float8_e4m3fn), torch.ones(8, 8)
    elif case == "q_head_dim":
        q = torch.zeros(8, 64, 96, dtype=torch.float8_e4m3fn)
    elif case == "q_not_contiguous_d":
        q = torch.zeros(8, 128, 64, dtype=torch.float8_e4m3fn).transpose(1, 2)
    elif case == "q_heads_not_stacked":
        q = torch.zeros(8, 128, 128, dtype=torch.float8_e4m3fn)[:, :64]
    elif case == "kv_dtype":
        kv = kv.view(torch.uint8)
    elif case == "kv_head_dim":
        kv = torch.zeros(256, 64, dtype=torch.float8_e4m3fn)
    elif case == "kv_unaligned_rows":
        kv = torch.zeros(256, 136, dtype=torch.float8_e4m3fn)[:, :128]
    elif case == "scales_dtype":
        scales = scales.double()
    elif case == "scales_shape":
        scales = scales[:, None]
    elif case == "scales_strided":
        scales = torch.ones(512)[::2]
    elif case == "weights_shape":
        weights = weights[:, :32]
    elif case == "weights_dtype":
        weights = weights.bfloat16()
    elif case == "weights_strided":
        weights = torch.ones(64, 8).t()
    elif case == "ks_dtype":
        ks = ks.long()
    elif case == "ke_shape":
        ke = ke[:4]
    elif case == "ks_gt_ke":
        ks = ks.clone()
        ks[3], ke = 200, ke.clone()
        ke[3] = 100
    elif case == "ks_negative":
        ks = ks - 1
    elif case == "ke_past_kv":
        ke = ke + 1
    elif case == "max_seqlen_negative":
        kwargs["max_seqlen_k"] = -1
    elif case == "max_seqlen_short":
        kwargs["max_seqlen_k"] = 100
    elif case == "logits_dtype":
        kwargs["logits_dtype"] = torch.float16
    return q, kv, scales, weights, ks, ke, kwargs


def signature_of(fn) -> list[str]:
    """The parameters of a pybind11 function as 'name' or 'name=default', from its docstring's first line."""
    return [e.split(":")[0] + ("=" + e.split("=", 1)[1].strip() if "=" in e else "") for e in parameter_names(fn)]


def test_signatures_as_the_reference() -> None:
    # Names, order and defaults of the reference's rows (fp8_mqa_logits: one trailing extra, logits_dtype;
    # fp8_paged_mqa_logits: logits_dtype after the reference's indices, so no positional meaning changes)
    prefill = ["q", "kv", "weights", "cu_seq_len_k_start", "cu_seq_len_k_end", "clean_logits=True", "max_seqlen_k=0"]
    dtype = "logits_dtype=torch.float32"
    assert signature_of(deep_gemm.fp8_fp4_mqa_logits) == prefill + [dtype]
    assert signature_of(deep_gemm.fp8_mqa_logits) == prefill + [dtype]
    paged = ["q", "kv_cache", "weights", "context_lens", "block_table", "schedule_meta", "max_context_len",
             "clean_logits=False"]  # fmt: skip
    assert signature_of(deep_gemm.fp8_fp4_paged_mqa_logits) == paged + [dtype, "indices=None"]
    assert signature_of(deep_gemm.fp8_paged_mqa_logits) == paged + ["indices=None", dtype]
    assert signature_of(deep_gemm.get_paged_mqa_logits_metadata) == [
        "context_lens", "block_kv", "num_sms", "indices=None"]  # fmt: skip
    # The pair form's q is a (Tensor, Tensor or None) tuple, the plain form's a Tensor
    pair_forms = ("q: tuple[torch.Tensor, Optional[torch.Tensor]]", "q: tuple[torch.Tensor, torch.Tensor | None]")
    for fn in (deep_gemm.fp8_fp4_mqa_logits, deep_gemm.fp8_fp4_paged_mqa_logits):
        assert any(form in fn.__doc__.splitlines()[0] for form in pair_forms), fn.__doc__.splitlines()[0]
    for fn in (deep_gemm.fp8_mqa_logits, deep_gemm.fp8_paged_mqa_logits):
        assert "(q: torch.Tensor," in fn.__doc__.splitlines()[0], fn.__doc__.splitlines()[0]


def test_q_pair_forms(no_debug_checks) -> None:
    q, kv, scales, weights, ks, ke = cpu_inputs()
    # Positional and keyword calls the reference's way reach the device check (every argument parsed)
    for call in (
        lambda: deep_gemm.fp8_fp4_mqa_logits((q, None), (kv, scales), weights, ks, ke, True, 0, torch.bfloat16),
        lambda: deep_gemm.fp8_fp4_mqa_logits(q=(q, None), kv=(kv, scales), weights=weights, cu_seq_len_k_start=ks,
                                             cu_seq_len_k_end=ke, clean_logits=False, max_seqlen_k=16,
                                             logits_dtype=torch.float32),  # fmt: skip
        lambda: deep_gemm.fp8_fp4_mqa_logits([q, None], (kv, scales), weights, ks, ke),
        lambda: deep_gemm.fp8_mqa_logits(q, (kv, scales), weights, ks, ke, True, 0),
    ):
        with pytest.raises(ValueError, match=r"q must be on a CUDA device"):
            call()
    # Scales given: FP4 q and kv (tests/test_fp4_mqa_logits.py), so FP8 values with scales are a packing error
    sf = torch.ones(8, 64, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"q\[0\] \(q\) must be packed FP4"):
        deep_gemm.fp8_fp4_mqa_logits((q, sf), (kv, scales), weights, ks, ke)
    # A bare tensor (or a 3-tuple) is not the pair form
    with pytest.raises(TypeError):
        deep_gemm.fp8_fp4_mqa_logits(q, (kv, scales), weights, ks, ke)
    with pytest.raises(TypeError):
        deep_gemm.fp8_fp4_mqa_logits((q, None, None), (kv, scales), weights, ks, ke)
    with pytest.raises(TypeError):
        deep_gemm.fp8_mqa_logits((q, None), (kv, scales), weights, ks, ke)


def test_docstrings() -> None:
    doc = deep_gemm.fp8_mqa_logits.__doc__
    for word in ("relu", "[S, H, D]", "max_seqlen_k", "clean_logits", "ValueError", "DG_DEBUG_CHECKS", "{32, 64, 128}"):
        assert word in doc, word
    assert "SKIP_RANGE_CHECK" not in doc
    assert "UE8M0" in deep_gemm.fp8_fp4_mqa_logits.__doc__


# ----------------------------------------------------------------------------- compilation (CPU tier)
COMPILE_CASES = [dict(num_heads=h, head_dim=d) for h in (16, 32, 64) for d in (64, 128)] + [
    dict(num_heads=64, head_dim=128, is_compressed=1),
    dict(num_heads=64, head_dim=128, clean_logits=0, out_bf16=1),
    dict(num_heads=32, head_dim=64, is_compressed=1, clean_logits=0, out_bf16=1),
    dict(num_heads=64, head_dim=128, relu_by_abs=1),
    dict(num_heads=16, head_dim=64, relu_by_abs=1),
    dict(num_heads=64, head_dim=128, relu_by_abs=1, signed_sum_wgmma=1),
    dict(num_heads=32, head_dim=64, relu_by_abs=1, signed_sum_wgmma=1, is_compressed=1, out_bf16=1),
    dict(num_heads=64, head_dim=128, split_halves=1),
    dict(num_heads=32, head_dim=64, split_halves=1, is_compressed=1),
    dict(num_heads=64, head_dim=128, relu_by_abs=1, signed_sum_wgmma=1, split_halves=1),
    # D = 32: one k32 step, 32-byte swizzle
    dict(num_heads=16, head_dim=32),
    dict(num_heads=32, head_dim=32, relu_by_abs=1),
    dict(num_heads=64, head_dim=32),
    dict(num_heads=64, head_dim=32, is_compressed=1, clean_logits=0, out_bf16=1),
]


def case_id(cfg: dict) -> str:
    names = dict(
        num_heads="h",
        head_dim="d",
        is_compressed="compressed",
        clean_logits="clean",
        out_bf16="bf16",
        relu_by_abs="abs",
        signed_sum_wgmma="pieces",
        split_halves="split",
    )
    return "-".join(f"{names[k]}{v}" for k, v in cfg.items())


@pytest.fixture
def cache_dir(tmp_path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(path))
    return path


@pytest.mark.parametrize("use_nvrtc", [False, True], ids=["nvcc", "nvrtc"])
@pytest.mark.parametrize("cfg", COMPILE_CASES, ids=case_id)
def test_kernel_compiles_with_qgmma_and_no_local_memory(cache_dir, cfg: dict, use_nvrtc: bool) -> None:
    result = deep_gemm.compile_kernel("sm90_fp8_mqa_logits", cfg, use_nvrtc=use_nvrtc)
    assert result["registers"] > 0, result["ptxas_report"]
    assert result["stack_frame_bytes"] == 0, result["ptxas_report"]
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]
    assert os.path.getsize(result["cubin_path"]) > 0
    lines = dump_sass(result["cubin_path"]).splitlines()
    # One m64n256k32 FP8 wgmma per 32 of D per 64-key tile (the split tile: two m64n128k32, waited for one group
    # at a time); with the signed sums' pieces (4 rows per query) one m64n(4 x queries)k32 more
    pieces = cfg.get("signed_sum_wgmma", 0) != 0
    split = cfg.get("split_halves", 0) != 0
    queries = 256 // cfg["num_heads"]
    k_steps = cfg["head_dim"] // 32
    qgmma = [line for line in lines if "QGMMA" in line]
    assert len(qgmma) == k_steps * (1 + split + pieces), f"found {len(qgmma)} QGMMA"
    if split:
        assert sum("64x128x32" in line for line in qgmma) == 2 * k_steps, qgmma
    else:
        assert sum("64x256x32" in line for line in qgmma) == k_steps, qgmma
    if pieces:
        assert sum(f"64x{4 * queries}x32" in line for line in qgmma) == k_steps, qgmma
    assert sum("WARPGROUP.DEPBAR" in line for line in lines) == 1 + split
    assert not any("HMMA" in line for line in lines), "FP8 path must not fall back to HMMA"
    # Nor a dummy F16 HGMMA, which ptxas puts where a commit group may be empty (measured 15 % slower)
    assert not any("HGMMA" in line for line in lines), "a dummy HGMMA: a commit group that may be empty"
    assert not any(op in line for line in lines for op in ("LDL", "STL")), "local memory in SASS"
    assert sum("USETMAXREG" in line for line in lines) == 2
    assert any("UTMALDG" in line for line in lines)
    # The quad reduce-scatter over the heads: 2 rounds, (256 / H) / 2 + (256 / H) / 4 shuffles per key row
    assert sum("SHFL.BFLY" in line for line in lines) == 2 * (queries // 2 + queries // 4)
    # Ping-pong: the turn barriers, one wait and at least one pass per tile. The pieces come from the pre-pass
    # (smxx_mqa_logits_pieces) by TMA with the Q tile: no barrier, no split (FMNMX) in this kernel
    assert any("BAR.ARV" in line for line in lines)
    assert sum("BAR.SYNC" in line for line in lines) == 2, [x for x in lines if "BAR." in x]
    check_relu_form(lines, num_accum=128, by_abs=cfg.get("relu_by_abs", 0) != 0)


def check_relu_form(
    lines: list[str], num_accum: int, by_abs: bool, signed_by_wgmma: bool = False, split_fmnmx: int = 0
) -> None:
    """The head reduction's form in SASS: one |x| FFMA per accumulator, or an FMNMX per accumulator in each of
    the two loop bodies (kv scales folded out of the relu, or applied inside). With the signed sums by wgmma the
    |x| FFMAs only (in the prefill kernel the pieces' split runs in the pre-pass; in the paged kernel its
    ``split_fmnmx`` FMNMX are in the kernel). Without, the abs form has as many FFMAs without |x| (x w), which
    this does not count."""
    fmnmx = sum("FMNMX" in line for line in lines)
    abs_ffma = sum("FFMA" in line and "|R" in line for line in lines)
    expected = (split_fmnmx, num_accum) if by_abs or signed_by_wgmma else (2 * num_accum, 0)
    assert (fmnmx, abs_ffma) == expected, (fmnmx, abs_ffma)


def test_bench_shapes_and_torch_version_on_cpu() -> None:
    from deep_gemm.bench.mqa import MQA_SHAPES, make_key_ranges, parse_mqa_shape, torch_mqa_chunks, torch_mqa_logits

    assert parse_mqa_shape("2048x8192") == (2048, 8192, 64, 128, "causal")
    assert parse_mqa_shape("2048x65536x32x64-cp") == (2048, 65536, 32, 64, "cp")
    assert parse_mqa_shape("paged:64x2x65536") == (64, 2, 65536)  # one paged-decode row
    for bad in ("2048", "2048x8192x48", "2048x8192x64x96", "2048x8192-nope", "0x8192", "paged:64x2", "paged:0x1x8"):
        with pytest.raises(ValueError):
            parse_mqa_shape(bad)
    assert {(s, s_kv) for s, s_kv, h, d, _ in MQA_SHAPES if (h, d) == (64, 128)} == {
        (s, s_kv) for s in (2048, 8192) for s_kv in (8192, 65536)
    }
    # The chunked PyTorch version (BF16 fallback on the CPU) against the float64 reference
    torch.manual_seed(0)
    s, s_kv, h, d = 37, 700, 16, 64
    q = torch.randn(s, h, d, dtype=torch.bfloat16).to(torch.float8_e4m3fn)
    kv, scales = per_token_cast_to_fp8(torch.randn(s_kv, d, dtype=torch.bfloat16))
    scales, weights = scales[:, 0].contiguous(), torch.randn(s, h)
    # cp: the zig-zag split, rank 1 of 4 holds chunks 1 and 6 of 1024 tokens; with S = S_kv it is causal
    ks, ke = make_key_ranges(2048, 8192, "cp")
    assert int(ks.abs().max()) == 0 and ke[[0, 1023, 1024, 2047]].tolist() == [1025, 2048, 6145, 7168]
    assert torch.equal(torch.stack(make_key_ranges(512, 512, "cp")), torch.stack(make_key_ranges(512, 512, "causal")))
    # The chunks: every query once, in order; each chunk's keys hold its rows' ranges, within the element bound
    # (or one query); a causal chunk stops at its last query's end. Rows with no key (ks >= ke) add none.
    ks, ke = make_key_ranges(2048, 8192, "causal")
    ks[5:9], ke[5:9] = 100, 50
    chunks = torch_mqa_chunks(ks, ke, 64, chunk_elements=1 << 22)
    assert [c[0] for c in chunks] == [0] + [c[1] for c in chunks[:-1]] and chunks[-1][1] == 2048
    for c0, c1, k0, k1 in chunks:
        rows = [i for i in range(c0, c1) if ks[i] < ke[i]]
        assert (k0, k1) == (min(int(ks[i]) for i in rows), max(int(ke[i]) for i in rows)), (c0, c1)
        assert c1 - c0 == 1 or (c1 - c0) * 64 * (k1 - k0) <= 1 << 22
    assert chunks[0][3] < 8192 - 2048 + 64  # the first chunk: only the keys its queries see
    assert torch_mqa_chunks(torch.full((5,), 7), torch.full((5,), 3), 64) == [(0, 5, 0, 0)]
    for pattern in ("causal", "cp", "window", "empty rows"):
        ks, ke = make_key_ranges(s, s_kv, pattern.replace("empty rows", "causal"))
        if pattern == "empty rows":
            ke[3:9] = ks[3:9]
        assert bool((ks >= 0).all() and (ks <= ke).all() and (ke <= s_kv).all())
        out = torch_mqa_logits(q, (kv, scales), weights, ks, ke, chunk_elements=50_000)
        ref = reference(q, kv, scales, weights, ks, ke)
        valid = torch.isfinite(ref)
        assert torch.equal(torch.isneginf(out), ~valid)
        assert calc_diff(out[valid], ref[valid]) < 1e-4


def test_kernel_family_is_registered() -> None:
    assert "sm90_fp8_mqa_logits" in deep_gemm.kernel_families()


@pytest.mark.nvcc
def test_bad_static_config_fails_to_compile(cache_dir) -> None:
    with pytest.raises(RuntimeError, match="H must be 16, 32 or 64"):
        deep_gemm.compile_kernel("sm90_fp8_mqa_logits", dict(num_heads=8, head_dim=128))
    # The signed sums' pieces complete the |x| form, at H = 32 or 64 only; the split tile fits at H = 64, and at
    # H = 32 without the pieces (raised before compiling)
    for cfg in (dict(signed_sum_wgmma=1), dict(num_heads=16, relu_by_abs=1, signed_sum_wgmma=1)):
        with pytest.raises(ValueError, match="signed_sum_wgmma needs relu_by_abs=1, num_heads 32 or 64"):
            deep_gemm.compile_kernel("sm90_fp8_mqa_logits", cfg)
    for cfg in (
        dict(num_heads=16, split_halves=1),
        dict(num_heads=32, relu_by_abs=1, signed_sum_wgmma=1, split_halves=1),
    ):
        with pytest.raises(ValueError, match="split_halves needs num_heads 64, or 32 without signed_sum_wgmma"):
            deep_gemm.compile_kernel("sm90_fp8_mqa_logits", cfg)


# ----------------------------------------------------------------------------- GPU tier
def make_inputs(s: int, s_kv: int, h: int, d: int, seed: int = 0, negative_scales: bool = False):
    """FP8 q (cast directly) and kv (one FP32 scale per key), FP32 weights; also the BF16 originals."""
    torch.manual_seed(seed)
    q_bf16 = torch.randn(s, h, d, device="cuda", dtype=torch.bfloat16)
    kv_bf16 = torch.randn(s_kv, d, device="cuda", dtype=torch.bfloat16)
    weights = torch.randn(s, h, device="cuda", dtype=torch.float32)
    q = q_bf16.to(torch.float8_e4m3fn)
    kv, scales = per_token_cast_to_fp8(kv_bf16)
    scales = scales[:, 0].contiguous()
    if negative_scales:
        # Flip the sign of a quarter of the keys (the kv values too, so the BF16 reference is unchanged)
        flip = torch.rand(s_kv, device="cuda") < 0.25
        scales = torch.where(flip, -scales, scales)
        kv = torch.where(flip[:, None], -kv.float(), kv.float()).to(torch.float8_e4m3fn)
    return q, kv, scales, weights, q_bf16, kv_bf16


def key_ranges(s: int, s_kv: int, pattern: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """ks, ke int32 [S] on the GPU: the bench's patterns ('causal', 'cp', 'window': make_key_ranges), 'random',
    'halves' (pairs of queries alternate between two disjoint key ranges, every 5th query empty: a CTA's union of
    ranges has a gap, and its two math warpgroups' queries share few key tiles) or 'empty' rows mixed in."""
    from deep_gemm.bench.mqa import make_key_ranges

    if pattern in ("causal", "cp", "window"):
        return tuple(t.cuda() for t in make_key_ranges(s, s_kv, pattern, seed))
    g = torch.Generator().manual_seed(seed)
    i = torch.arange(s, dtype=torch.int64)
    if pattern == "halves":
        first_pair = (i // 2) % 2 == 0
        ks = torch.where(first_pair, s_kv // 7 + i % 3, s_kv // 2 + 5 + i % 5)
        ke = torch.where(first_pair, s_kv // 3 + i % 11, s_kv - 3 - i % 7)
        ks = torch.where(i % 5 == 4, ke, ks)
    elif pattern == "random":
        a = torch.randint(0, s_kv + 1, (s,), generator=g)
        b = torch.randint(0, s_kv + 1, (s,), generator=g)
        ks, ke = torch.minimum(a, b), torch.maximum(a, b)
    else:
        ke = torch.randint(0, s_kv + 1, (s,), generator=g)
        ks = torch.where(torch.rand(s, generator=g) < 0.3, ke, torch.zeros_like(ke))
    return ks.int().cuda(), ke.int().cuda()


def reference(q, kv, scales, weights, ks, ke, rows=None, dtype=torch.float64):
    """logits [len(rows), S_kv] in `dtype` (-inf outside [ks, ke)), chunked over queries."""
    rows = torch.arange(q.shape[0], device=q.device) if rows is None else rows
    s_kv, h = kv.shape[0], q.shape[1]
    kv_t = (kv.to(dtype) * scales.to(dtype)[:, None]).t()
    chunk = max(1, (1 << 27) // (h * max(s_kv, 1)))
    out = torch.empty(len(rows), s_kv, device=q.device, dtype=dtype)
    for c in range(0, len(rows), chunk):
        r = rows[c : c + chunk]
        x = (q[r].to(dtype) @ kv_t).relu_()  # [c, H, S_kv]
        out[c : c + chunk] = (x * weights[r].to(dtype)[:, :, None]).sum(1)
    j = torch.arange(s_kv, device=q.device)
    invalid = (j[None, :] < ks[rows].long()[:, None]) | (j[None, :] >= ke[rows].long()[:, None])
    return out.masked_fill_(invalid, float("-inf"))


def compress(full: torch.Tensor, ks: torch.Tensor, ke: torch.Tensor, rows: torch.Tensor, width: int) -> torch.Tensor:
    """Rows of `full` [len(rows), S_kv] shifted left by ks, `width` columns, -inf past ke - ks."""
    col = torch.arange(width, device=full.device)
    key = ks[rows].long()[:, None] + col[None, :]
    valid = key < ke[rows].long()[:, None]
    out = full.gather(1, key.clamp(max=full.shape[1] - 1))
    return out.masked_fill_(~valid, float("-inf"))


def poison_allocator(numel: int, dtype: torch.dtype) -> None:
    """Leave NaN in the caching allocator's next block of this size (the API allocates its output)."""
    torch.empty(numel, device="cuda", dtype=dtype).fill_(float("nan"))
    torch.cuda.synchronize()


def check_logits(
    out: torch.Tensor,
    ref: torch.Tensor,
    clean: bool,
    bound: float,
    what: str,
    elementwise: bool = True,
    extra_tol: torch.Tensor | None = None,
) -> None:
    assert out.shape == ref.shape, (what, out.shape, ref.shape)
    out = out.double()
    valid = torch.isfinite(ref)
    if clean:
        assert torch.equal(torch.isneginf(out), ~valid), f"{what}: -inf positions differ"
    assert torch.isfinite(out[valid]).all(), f"{what}: non-finite value at a valid position"
    if not valid.any():
        return
    diff = calc_diff(out[valid], ref[valid])
    assert diff <= bound, f"{what}: calc_diff {diff:.3g} > {bound}"
    if not elementwise:
        return
    rms = ref[valid].pow(2).mean().sqrt()
    err = (out[valid] - ref[valid]).abs()
    tol = ref[valid].abs() * 2**-7 + rms * 2**-9
    if extra_tol is not None:
        tol = tol + extra_tol[valid]
    worst = int((err - tol).argmax())
    assert bool((err <= tol).all()), (
        f"{what}: element off by {err[worst]:.4g} (ref {ref[valid][worst]:.4g}, tol {tol[worst]:.3g})"
    )


def run_case(s, s_kv, h, d, pattern, clean=True, compressed=False, bf16=False, rows=None, negative_scales=False):
    q, kv, scales, weights, q_bf16, kv_bf16 = make_inputs(s, s_kv, h, d, negative_scales=negative_scales)
    ks, ke = key_ranges(s, s_kv, pattern)
    width = int((ke - ks).max()) if compressed else s_kv
    width = max(width, 1) if compressed else width
    dtype = torch.bfloat16 if bf16 else torch.float32
    poison_allocator(s * width, dtype)
    out = deep_gemm.fp8_mqa_logits(
        q,
        (kv, scales),
        weights,
        ks,
        ke,
        clean_logits=clean,
        max_seqlen_k=width if compressed else 0,
        logits_dtype=dtype,
    )
    torch.cuda.synchronize()
    assert out.dtype == dtype and out.shape == (s, width) and out.is_contiguous()
    rows = torch.arange(s, device="cuda") if rows is None else rows
    ref = reference(q, kv, scales, weights, ks, ke, rows)
    ref_bf16 = reference(q_bf16, kv_bf16, torch.ones_like(scales), weights, ks, ke, rows)
    if compressed:
        ref, ref_bf16 = compress(ref, ks, ke, rows, width), compress(ref_bf16, ks, ke, rows, width)
    ours = out[rows]
    if not clean:
        # Positions outside [ks, ke) are unspecified: compare the valid ones only
        ours = torch.where(torch.isfinite(ref), ours.double(), ref)
    check_logits(ours, ref, clean, 2e-5 if bf16 else 5e-6, "vs float64 of the FP8 inputs")
    check_logits(ours, ref_bf16, clean, 1e-3, "vs float64 of the BF16 inputs", elementwise=False)
    return q, kv, scales, weights, ks, ke, out


@gpu
@pytest.mark.parametrize("d", [32, 64, 128])
@pytest.mark.parametrize("h", [16, 32, 64])
@pytest.mark.parametrize("pattern", ["causal", "random", "halves", "empty"])
def test_small_shapes_against_references(h: int, d: int, pattern: str) -> None:
    # Unaligned S and S_kv: partial query blocks and kv tiles
    run_case(301, 1000, h, d, pattern)


@gpu
@pytest.mark.parametrize(
    ("clean", "compressed", "bf16"),
    [(True, True, False), (False, False, False), (False, True, False), (True, False, True), (True, True, True)],
    ids=["compressed", "unclean", "unclean-compressed", "bf16", "bf16-compressed"],
)
@pytest.mark.parametrize("h", [32, 64])
def test_variants(h: int, clean: bool, compressed: bool, bf16: bool) -> None:
    run_case(517, 3000, h, 128, "window", clean=clean, compressed=compressed, bf16=bf16)


@gpu
@pytest.mark.parametrize(
    ("clean", "compressed", "bf16"), [(True, True, True), (False, False, True), (True, False, False)]
)
@pytest.mark.parametrize("h", [16, 64])
def test_head_dim_32_variants(h: int, clean: bool, compressed: bool, bf16: bool) -> None:
    # D = 32: one k32 step per tile, 32-byte swizzled Q and kv tiles
    run_case(517, 3000, h, 32, "window", clean=clean, compressed=compressed, bf16=bf16)


@gpu
@pytest.mark.parametrize("h", [16, 64])
def test_negative_kv_scales(h: int) -> None:
    # relu(x * s) != s * relu(x) for s < 0: the kernel must apply such scales inside the relu
    run_case(257, 2048, h, 128, "random", negative_scales=True)


# (H, D) at which the prefill takes the signed head sums from e4m3 pieces on the tensor core by default (the
# heuristic's signed_sum_wgmma; test_one_sign_and_mostly_negative_scores checks this against what runs)
PIECES_BY_DEFAULT: tuple[tuple[int, int], ...] = ((32, 128), (64, 128))


def prefill_form(h: int, d: int = 128) -> str:
    """The head-reduction form fp8_mqa_logits takes at H = h, D = d: "pieces" (|x| FFMA, signed sums from e4m3
    pieces on the tensor core) or "max" (FMNMX + FFMA)."""
    return "pieces" if (h, d) in PIECES_BY_DEFAULT else "max"


def pieces_expected(h: int, d: int = 128) -> bool:
    """Whether fp8_mqa_logits at H = h, D = d takes the pieces, in this process's environment."""
    return prefill_form(h, d) == "pieces"


def prefill_uses_pieces(capfd: pytest.CaptureFixture | None, call) -> bool | None:
    """Run `call` (one fp8_mqa_logits) and say whether its kernel took the signed sums from e4m3 pieces: from the
    config line it prints under DG_PRINT_CONFIGS (capfd), or, without capfd, as pieces_expected says."""
    if capfd is None:
        call()
        return None
    capfd.readouterr()
    os.environ["DG_PRINT_CONFIGS"] = "1"
    try:
        call()
    finally:
        del os.environ["DG_PRINT_CONFIGS"]
    err = capfd.readouterr().err
    assert "fp8_mqa_logits" in err, err[-2000:]
    return "signed_sum_wgmma=true" in err


@gpu
@pytest.mark.parametrize(("h", "d"), [(64, 128), (32, 64)])
def test_weights_of_wide_range(h: int, d: int) -> None:
    # The signed sums' e4m3 pieces (H = 32, 64) scale each query's weighted Q to its own maximum: weights spread
    # over 2^-20..2^20 per head and query (each piece holds 4 bits of what the pieces before it left), a query
    # with all weights zero (no piece at all: exactly 0), and tiny weights (residuals below the pieces' range)
    s, s_kv = 97, 700
    q, kv, scales, weights, _, _ = make_inputs(s, s_kv, h, d, seed=3)
    g = torch.Generator(device="cuda").manual_seed(5)
    weights = weights * torch.exp2(torch.randint(-20, 21, (s, h), device="cuda", generator=g).float())
    weights[5] = 0.0
    weights[6] *= 2.0**-100
    ks, ke = key_ranges(s, s_kv, "random")
    out = deep_gemm.fp8_mqa_logits(q, (kv, scales), weights, ks, ke)
    torch.cuda.synchronize()
    ref = reference(q, kv, scales, weights, ks, ke)
    for r in range(s):  # row by row: the rows' magnitudes differ by up to 2^40
        check_logits(out[r : r + 1], ref[r : r + 1], True, 5e-6, f"row {r} vs float64 of the FP8 inputs")
    assert bool((out[5][torch.isfinite(ref[5])] == 0).all()), "zero weights must give exactly 0"


@gpu
@pytest.mark.parametrize("h", [16, 64])
def test_one_sign_and_mostly_negative_scores(h: int, capfd: pytest.CaptureFixture) -> None:
    one_sign_and_mostly_negative_scores(h, capfd)


def one_sign_and_mostly_negative_scores(h: int, capfd: pytest.CaptureFixture | None) -> None:
    # In both forms of the prefill's head reduction (the pieces at H = 64, FMNMX + FFMA at H = 16), keys where most
    # heads score negative (where the |x| forms' two sums cancel) must stay within the float64 bounds, and, in the
    # forms whose two sums come from the same
    # FFMAs (FMNMX + FFMA, two FFMAs), keys whose every score has one sign must come out as with relu: exactly 0
    # where all x s < 0. The signed sums from e4m3 pieces on the tensor core carry its FP8 accumulation error instead,
    # which scales with the terms' magnitude |s| sum_h |x_h w_h| (about 2^-13 of it per k32 step: bound 2^-10).
    s, s_kv, d = 203, 1500, 128
    torch.manual_seed(7)
    q = torch.randn(s, h, d, device="cuda").abs().to(torch.float8_e4m3fn)  # every q >= 0
    kind = torch.randint(0, 3, (s_kv,), device="cuda")  # 0: kv >= 0, 1: kv <= 0, 2: mostly negative
    kv = torch.randn(s_kv, d, device="cuda").abs()
    kv = torch.where((kind == 1)[:, None], -kv, kv)
    kv = torch.where((kind == 2)[:, None], kv - 1.2, kv).to(torch.float8_e4m3fn)
    scales = torch.rand(s_kv, device="cuda") + 0.1
    scales = torch.where(torch.rand(s_kv, device="cuda") < 0.3, -scales, scales)  # relu(x s) > 0 for x < 0, s < 0
    weights = torch.randn(s, h, device="cuda")
    ks, ke = key_ranges(s, s_kv, "random")
    result = []
    pieces = prefill_uses_pieces(
        capfd, lambda: result.append(deep_gemm.fp8_mqa_logits(q, (kv, scales), weights, ks, ke))
    )
    assert pieces in (None, pieces_expected(h)), f"the kernel took pieces={pieces}, pieces_expected says otherwise"
    pieces = pieces_expected(h)
    out = result[0]
    torch.cuda.synchronize()
    ref = reference(q, kv, scales, weights, ks, ke, torch.arange(s, device="cuda"))
    magnitude = None
    if pieces:  # |s| sum_h |x_h| |w_h| in float64
        x = torch.einsum("shd,jd->shj", q.double(), kv.double()).abs()
        magnitude = (x * weights.double().abs()[:, :, None]).sum(1) * scales.double().abs()[None, :]
    check_logits(
        out,
        ref,
        True,
        5e-6,
        "vs float64 of the FP8 inputs",
        extra_tol=None if magnitude is None else magnitude * 2**-10,
    )
    zero = (ref == 0) & ((kind == 1) & (scales > 0) | (kind == 0) & (scales < 0))[None, :]
    assert zero.sum() > 1000, "the test must hold exact zeros"
    if not pieces:
        assert bool((out[zero] == 0).all()), "a key whose every score is negative must give exactly 0"


@gpu
@pytest.mark.parametrize("compressed", [False, True], ids=["full", "compressed"])
@pytest.mark.parametrize("pattern", ["causal", "cp", "window"])
@pytest.mark.parametrize(("s", "s_kv"), [(2048, 8192), (2048, 65536), (8192, 8192), (8192, 65536)])
def test_issue_shapes(s: int, s_kv: int, pattern: str, compressed: bool) -> None:
    # H = 64, D = 128 (V3.2); S_kv = 8192 checked in full, the larger shapes on 192 random rows plus the ends
    rows = None
    if s * s_kv > 2048 * 8192:
        g = torch.Generator().manual_seed(1)
        picked = torch.randperm(s, generator=g)[:192].tolist() + [0, 1, s - 2, s - 1]
        rows = torch.tensor(sorted(set(picked)), device="cuda")
    run_case(s, s_kv, 64, 128, pattern, compressed=compressed, rows=rows)


@gpu
@pytest.mark.parametrize("compressed", [False, True], ids=["full", "compressed"])
def test_bitwise_repeatable(compressed: bool) -> None:
    q, kv, scales, weights, ks, ke, first = run_case(1024, 8192, 64, 128, "window", compressed=compressed)
    width = first.shape[1] if compressed else 0
    for _ in range(10):
        again = deep_gemm.fp8_mqa_logits(q, (kv, scales), weights, ks, ke, max_seqlen_k=width)
        assert torch.equal(again.view(torch.int32), first.view(torch.int32))


@gpu
def test_cuda_graph_capture() -> None:
    q, kv, scales, weights, q_bf16, kv_bf16 = make_inputs(300, 2000, 64, 128)
    ks, ke = key_ranges(300, 2000, "window")
    expected = deep_gemm.fp8_mqa_logits(q, (kv, scales), weights, ks, ke)  # warm-up: compiles
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = deep_gemm.fp8_mqa_logits(q, (kv, scales), weights, ks, ke)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.int32), expected.view(torch.int32))


@gpu
def test_debug_checks_skip_while_capturing(debug_checks) -> None:
    # DG_DEBUG_CHECKS=1 synchronizes on eager calls only: a capture (where a synchronization is not allowed) records
    # the kernels alone, for both APIs
    q, kv, scales, weights, *_ = make_inputs(300, 2000, 64, 128)
    ks, ke = key_ranges(300, 2000, "window")
    expected = deep_gemm.fp8_mqa_logits(q, (kv, scales), weights, ks, ke)
    pq, cache, pw, lens, table, width = make_paged_inputs(16, 2, 64, 128, 64, 1000)
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens, 64, deep_gemm.get_num_sms())
    paged_expected = deep_gemm.fp8_paged_mqa_logits(pq, cache, pw, lens, table, meta, width, True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = deep_gemm.fp8_mqa_logits(q, (kv, scales), weights, ks, ke)
        paged_out = deep_gemm.fp8_paged_mqa_logits(pq, cache, pw, lens, table, meta, width, True)
    out.fill_(float("nan"))
    paged_out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.int32), expected.view(torch.int32))
    assert torch.equal(paged_out.view(torch.int32), paged_expected.view(torch.int32))


@gpu
def test_bad_ranges_on_the_device_raise(debug_checks) -> None:
    q, kv, scales, weights, *_ = make_inputs(16, 512, 64, 128)
    ks, ke = key_ranges(16, 512, "random")
    assert bool((ks < ke).any())
    with pytest.raises(ValueError, match=r"ks > ke"):
        deep_gemm.fp8_mqa_logits(q, (kv, scales), weights, ke, ks)
    with pytest.raises(ValueError, match=r"cu_seq_len_k_end must be <= S_kv"):
        deep_gemm.fp8_mqa_logits(q, (kv, scales), weights, ks, ke + 600)


@gpu
@pytest.mark.parametrize("compressed", [False, True], ids=["full", "compressed"])
@pytest.mark.parametrize("d", [32, 128])
def test_unchecked_bad_ranges_are_clamped(no_debug_checks, d: int, compressed: bool) -> None:
    # The default path reads no value on the host: ks < 0, ke > S_kv, ks > ke and (compressed) ranges longer than
    # the width are clamped on the device (ks into [0, S_kv], ke into [ks, S_kv], the range to the width): defined
    # output, every position of every row written (clean); an access out of bounds would fault at the synchronize
    s, s_kv, width = 200, 1000, 300
    q, kv, scales, weights, *_ = make_inputs(s, s_kv, 64, d)
    g = torch.Generator().manual_seed(d)
    ks = torch.randint(-500, 1500, (s,), generator=g, dtype=torch.int32)
    ke = torch.randint(-500, 1500, (s,), generator=g, dtype=torch.int32)
    ks[:4], ke[:4] = torch.tensor([-7, 10, 990, 600]), torch.tensor([5000, 3, 5000, 100])  # ends of every kind
    ks, ke = ks.cuda(), ke.cuda()
    poison_allocator(s * (width if compressed else s_kv), torch.float32)
    out = deep_gemm.fp8_mqa_logits(q, (kv, scales), weights, ks, ke, max_seqlen_k=width if compressed else 0)
    torch.cuda.synchronize()
    begin = ks.clamp(0, s_kv)
    end = torch.maximum(ke, begin).clamp(max=s_kv)
    if compressed:
        end = torch.minimum(end, begin + width)
    rows = torch.arange(s, device="cuda")
    ref = reference(q, kv, scales, weights, begin, end)
    if compressed:
        ref = compress(ref, begin, end, rows, width)
    check_logits(out, ref, True, 5e-6, "clamped ranges")


# ============================================================================= paged decode
# get_paged_mqa_logits_metadata and fp8_paged_mqa_logits (the indexer at decode, over a paged kv cache).
# CPU tier: the schedule (exact values, and a simulation of the kernel's walk: every kv block of every request
# exactly once, shares within one block of each other), input validation, compilation and SASS. GPU tier:
# against a float64 reference from the dequantized cache, -inf positions exactly equal.


def simulate_schedule(meta: torch.Tensor, lens: torch.Tensor, block_kv: int) -> list[list[tuple[int, int]]]:
    """The (request, block) units each SM's CTA stores, walking as the kernel does (with one-block steps)."""
    longest = lens.long().max(1).values if lens.dim() == 2 else lens.long()
    blocks = [(max(int(n), 0) + block_kv - 1) // block_kv for n in longest]
    out = []
    for i in range(meta.shape[0] - 1):
        (b, k), (eb, ek) = meta[i].tolist(), meta[i + 1].tolist()
        units = []
        while b < len(blocks) and (b < eb or (b == eb and k < ek)):
            if k >= blocks[b]:
                b, k = b + 1, 0
                continue
            units.append((b, k))
            k += 1
        out.append(units)
    return out


def test_paged_metadata_exact_values() -> None:
    lens = torch.tensor([100, 0, 64, 1, 300], dtype=torch.int32)  # 2, 0, 1, 1, 5 blocks of 64: 9 in all
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens, 64, 4)
    assert meta.dtype == torch.int32 and meta.shape == (5, 2)
    assert meta.tolist() == [[0, 0], [3, 0], [4, 1], [4, 3], [5, 0]]
    empty = deep_gemm.get_paged_mqa_logits_metadata(torch.zeros(3, 2, dtype=torch.int32), 32, 3)
    assert empty.tolist() == [[3, 0]] * 4


@pytest.mark.parametrize("two_d", [False, True], ids=["lens1d", "lens2d"])
@pytest.mark.parametrize("block_kv", [32, 64], ids=["bkv32", "bkv64"])
@pytest.mark.parametrize("num_sms", [1, 7, 132])
def test_paged_metadata_covers_every_block_once(num_sms: int, block_kv: int, two_d: bool) -> None:
    g = torch.Generator().manual_seed(num_sms + block_kv)
    lens = torch.randint(-5, 3000, (37, 2) if two_d else (37,), generator=g, dtype=torch.int32)
    lens[3] = 0
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens, block_kv, num_sms)
    assert meta.shape == (num_sms + 1, 2) and meta[-1].tolist() == [37, 0]
    shares = simulate_schedule(meta, lens, block_kv)
    units = [u for share in shares for u in share]
    longest = lens.long().max(1).values if two_d else lens.long()
    expected = [(b, k) for b, n in enumerate(longest.tolist()) for k in range((max(n, 0) + block_kv - 1) // block_kv)]
    assert units == expected
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1, sizes


PAGED_META_BAD = [
    ("lens_dtype", dict(context_lens=torch.ones(4, dtype=torch.int64)), r"context_lens must have dtype torch.int32"),
    ("lens_rank", dict(context_lens=torch.ones(2, 2, 2, dtype=torch.int32)), r"context_lens must be \[B\] or"),
    ("block_kv", dict(block_kv=16), r"block_kv must be 32 or 64"),
    ("num_sms", dict(num_sms=0), r"num_sms must be in \[1, 65536\]"),
]


@pytest.mark.parametrize(("case", "kwargs", "pattern"), PAGED_META_BAD, ids=[c[0] for c in PAGED_META_BAD])
def test_paged_metadata_bad_inputs(case: str, kwargs: dict, pattern: str) -> None:
    args = dict(context_lens=torch.ones(4, dtype=torch.int32), block_kv=64, num_sms=8) | kwargs
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.get_paged_mqa_logits_metadata(**args)


def test_paged_docstrings() -> None:
    doc = deep_gemm.fp8_paged_mqa_logits.__doc__
    words = ("relu", "[B, next_n, H, D]", "block_table", "schedule_meta", "clean_logits", "ValueError", "indices[t]",
             "block_tables[::next_n]", "logits_dtype", "DG_DEBUG_CHECKS", "{32, 64, 128}")  # fmt: skip
    for word in words:
        assert word in doc, word
    assert "SKIP_RANGE_CHECK" not in doc
    assert "D / 2 + 4" in deep_gemm.fp8_fp4_paged_mqa_logits.__doc__
    assert "indices" in deep_gemm.get_paged_mqa_logits_metadata.__doc__
    assert "[num_sms + 1, 2]" in deep_gemm.get_paged_mqa_logits_metadata.__doc__


def paged_cpu_inputs(b: int = 4, t: int = 2, h: int = 64, d: int = 128, block_kv: int = 64, num_blocks: int = 16):
    q = torch.zeros(b, t, h, d, dtype=torch.float8_e4m3fn)
    kv_cache = torch.zeros(num_blocks, block_kv, 1, d + 4, dtype=torch.uint8)
    weights = torch.ones(b * t, h)
    lens = torch.full((b,), 100, dtype=torch.int32)
    table = torch.arange(b * 4, dtype=torch.int32).view(b, 4) % num_blocks
    meta = torch.zeros(9, 2, dtype=torch.int32)
    return dict(q=q, kv_cache=kv_cache, weights=weights, context_lens=lens, block_table=table, schedule_meta=meta,
                max_context_len=256)  # fmt: skip


PAGED_BAD = [
    ("q_dtype", r"q must have dtype torch.float8_e4m3fn"),
    ("q_rank", r"q must be 4-D"),
    ("q_next_n", r"next_n in \{1, 2, 4\}"),
    ("q_heads", r"H \(heads\) in \{16, 32, 64\}"),
    ("q_head_dim", r"D \(head dim\) in \{32, 64, 128\}"),
    ("q_strided", r"q must be contiguous"),
    ("kv_dtype", r"kv_cache must have dtype torch.uint8"),
    ("kv_block_kv", r"kv_cache must be \[num_blocks, block_kv, 1, D \+ 4\]"),
    ("kv_row_bytes", r"kv_cache must be \[num_blocks, block_kv, 1, D \+ 4\] .* D = 128"),
    ("kv_empty", r"kv_cache must hold at least one block"),
    ("weights_shape", r"weights must be \[B \* next_n, H\] = \[8, 64\]"),
    ("weights_dtype", r"weights must have dtype torch.float32"),
    ("lens_dtype", r"context_lens must have dtype torch.int32"),
    ("lens_shape", r"context_lens must be \[B\] = \[4\] or \[B, next_n\] = \[4, 2\]"),
    ("table_dtype", r"block_table must have dtype torch.int32"),
    ("table_shape", r"block_table must be \[B, max_blocks\] with B = 4"),
    ("meta_shape", r"schedule_meta must be \[num_sms \+ 1, 2\]"),
    ("max_context_negative", r"max_context_len must be in"),
    ("context_too_long", r"context longer than max_context_len"),
    ("context_negative", r"context_lens must be >= 0"),
    ("table_too_narrow", r"block_table must have a column per kv block"),
    ("block_id_out_of_range", r"block ids out of range"),
    ("block_id_negative", r"block ids out of range"),
    ("kv_inner_strides", r"kv_cache must have its inner dims packed \(stride 3 = 1, stride 1 = D \+ 4 = 132\)"),
    ("kv_row_bytes_strided", r"kv_cache must have its inner dims packed"),
    ("kv_blocks_unaligned", r"kv_cache must have .* blocks a multiple of 16 bytes apart"),
    ("kv_blocks_overlap", r"kv_cache must have .* at least block_kv \* \(D \+ 4\) = 8448"),
    ("table_columns_strided", r"block_table must be contiguous along max_blocks"),
    ("logits_dtype", r"logits_dtype must be torch.float32 or torch.bfloat16, got torch.float16"),
    ("indices_dtype", r"indices must have dtype torch.int32"),
    ("indices_next_n", r"indices: q must be \[N, 1, H, D\] \(one token per row, next_n = 1\)"),
    ("indices_shape", r"indices must be \[N\] = \[4\]"),
    ("indices_strided", r"indices must be contiguous"),
    ("indices_empty_table", r"block_table must be \[R, max_blocks\] with R >= 1 requests"),
    ("indices_out_of_range", r"indices must be in \[0, 2\) \(block_table rows\).*request indices out of range"),
    ("indices_negative", r"request indices out of range"),
    ("on_cpu", r"q must be on a CUDA device"),
]
# Value checks (they read lengths, block ids and indices on the host): only with DG_DEBUG_CHECKS=1
PAGED_VALUE_CASES = {"context_too_long", "context_negative", "table_too_narrow", "block_id_out_of_range",
                     "block_id_negative", "indices_out_of_range", "indices_negative"}  # fmt: skip


@pytest.mark.parametrize(("case", "pattern"), PAGED_BAD, ids=[c for c, _ in PAGED_BAD])
def test_paged_bad_inputs_raise_value_error(case: str, pattern: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if case in PAGED_VALUE_CASES:
        monkeypatch.setenv("DG_DEBUG_CHECKS", "1")
    a = bad_paged_inputs(case)
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.fp8_paged_mqa_logits(**a)
    # The pair form raises the same (q = (values, None): FP8 q)
    a["q"] = (a["q"], None)
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.fp8_fp4_paged_mqa_logits(**a)


@pytest.mark.parametrize("case", sorted(PAGED_VALUE_CASES))
def test_paged_value_checks_are_off_by_default(case: str, no_debug_checks) -> None:
    # Without DG_DEBUG_CHECKS no value is read on the host: the first error is the device's
    with pytest.raises(ValueError, match=r"q must be on a CUDA device"):
        deep_gemm.fp8_paged_mqa_logits(**bad_paged_inputs(case))


def bad_paged_inputs(case: str) -> dict:
    """paged_cpu_inputs() with the one defect `case` names (indices cases: next_n = 1, 4 tokens of 2 requests)."""
    a = paged_cpu_inputs(t=1) if case.startswith("indices") and case != "indices_next_n" else paged_cpu_inputs()
    if case.startswith("indices"):
        a["indices"] = torch.tensor([0, 0, 1, 1], dtype=torch.int32)
        a["block_table"] = a["block_table"][:2]
    if case == "q_dtype":
        a["q"] = a["q"].to(torch.bfloat16)
    elif case == "q_rank":
        a["q"] = a["q"][0]
    elif case == "q_next_n":
        a["q"], a["weights"] = torch.zeros(4, 3, 64, 128, dtype=torch.float8_e4m3fn), torch.ones(12, 64)
    elif case == "q_heads":
        a["q"], a["weights"] = torch.zeros(4, 2, 8, 128, dtype=torch.float8_e4m3fn), torch.ones(8, 8)
    elif case == "q_head_dim":
        a["q"] = torch.zeros(4, 2, 64, 96, dtype=torch.float8_e4m3fn)
    elif case == "q_strided":
        a["q"] = torch.zeros(4, 2, 128, 128, dtype=torch.float8_e4m3fn)[:, :, :64]
    elif case == "kv_dtype":
        a["kv_cache"] = a["kv_cache"].view(torch.float8_e4m3fn)
    elif case == "kv_block_kv":
        a["kv_cache"] = torch.zeros(16, 16, 1, 132, dtype=torch.uint8)
    elif case == "kv_row_bytes":
        a["kv_cache"] = torch.zeros(16, 64, 1, 128, dtype=torch.uint8)
    elif case == "kv_empty":
        a["kv_cache"] = torch.zeros(0, 64, 1, 132, dtype=torch.uint8)
    elif case == "weights_shape":
        a["weights"] = a["weights"][:4]
    elif case == "weights_dtype":
        a["weights"] = a["weights"].bfloat16()
    elif case == "lens_dtype":
        a["context_lens"] = a["context_lens"].long()
    elif case == "lens_shape":
        a["context_lens"] = torch.ones(4, 3, dtype=torch.int32)
    elif case == "table_dtype":
        a["block_table"] = a["block_table"].long()
    elif case == "table_shape":
        a["block_table"] = a["block_table"][:2]
    elif case == "meta_shape":
        a["schedule_meta"] = torch.zeros(9, 3, dtype=torch.int32)
    elif case == "max_context_negative":
        a["max_context_len"] = -1
    elif case == "context_too_long":
        a["context_lens"] = torch.tensor([100, 257, 3, 4], dtype=torch.int32)
    elif case == "context_negative":
        a["context_lens"] = torch.tensor([100, -1, 3, 4], dtype=torch.int32)
    elif case == "table_too_narrow":
        a["block_table"] = a["block_table"][:, :1].contiguous()
    elif case == "block_id_out_of_range":
        a["block_table"][2, 1] = 16
    elif case == "block_id_negative":
        a["block_table"][0, 0] = -1
    elif case == "kv_inner_strides":
        a["kv_cache"] = torch.zeros(16, 64, 2, 132, dtype=torch.uint8)[:, :, :1]
    elif case == "kv_row_bytes_strided":
        a["kv_cache"] = torch.zeros(16, 64, 1, 264, dtype=torch.uint8)[..., ::2]
    elif case == "kv_blocks_unaligned":
        a["kv_cache"] = torch.zeros(16, 64 * 132 + 8, dtype=torch.uint8)[:, : 64 * 132].view(16, 64, 1, 132)
    elif case == "kv_blocks_overlap":
        a["kv_cache"] = torch.zeros(1 << 15, dtype=torch.uint8).as_strided((16, 64, 1, 132), (1024, 132, 132, 1))
    elif case == "table_columns_strided":
        a["block_table"] = torch.zeros(4, 8, dtype=torch.int32)[:, ::2]
    elif case == "logits_dtype":
        a["logits_dtype"] = torch.float16
    elif case == "indices_dtype":
        a["indices"] = a["indices"].long()
    elif case == "indices_next_n":
        a["indices"] = torch.zeros(4, dtype=torch.int32)
    elif case == "indices_shape":
        a["indices"] = a["indices"][:3]
    elif case == "indices_empty_table":
        a["block_table"] = a["block_table"][:0]
    elif case == "indices_strided":
        a["indices"] = torch.zeros(8, dtype=torch.int32)[::2]
    elif case == "indices_out_of_range":
        a["indices"][3] = 2
    elif case == "indices_negative":
        a["indices"][0] = -1
    return a


def test_paged_strided_table_and_cache_views_are_accepted(debug_checks) -> None:
    # block_tables[::next_n] (rows strided, columns contiguous) and a kv cache whose blocks sit in a larger pool
    # (only the inner strides packed): accepted as they are, so the first error is the device's (with the value
    # checks on, which read these views too)
    a = paged_cpu_inputs()
    a["block_table"] = a["block_table"].repeat_interleave(2, 0)[::2]
    assert a["block_table"].stride() == (8, 1)
    a["kv_cache"] = torch.zeros(16, 64 * 132 + 64, dtype=torch.uint8)[:, : 64 * 132].view(16, 64, 1, 132)
    assert a["kv_cache"].stride(0) == 64 * 132 + 64
    with pytest.raises(ValueError, match=r"q must be on a CUDA device"):
        deep_gemm.fp8_paged_mqa_logits(**a)
    # One block: any stride 0 (PyTorch gives size-1 dims arbitrary strides)
    a["kv_cache"] = torch.zeros(1, 64, 1, 132, dtype=torch.uint8).as_strided((1, 64, 1, 132), (3, 132, 132, 1))
    a["block_table"] = torch.zeros(4, 4, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"q must be on a CUDA device"):
        deep_gemm.fp8_paged_mqa_logits(**a)


def test_paged_q_pair_forms_and_keywords(no_debug_checks) -> None:
    a = paged_cpu_inputs()
    names = ("q", "kv_cache", "weights", "context_lens", "block_table", "schedule_meta", "max_context_len")
    args = [a[k] for k in names]
    pair = [(args[0], None)] + args[1:]
    # The reference's positional orders: (..., clean_logits, logits_dtype, indices) for the pair form,
    # (..., clean_logits, indices) for the plain one; keywords as the engines pass them
    for call in (
        lambda: deep_gemm.fp8_fp4_paged_mqa_logits(*pair, False, torch.bfloat16, None),
        lambda: deep_gemm.fp8_fp4_paged_mqa_logits(*pair, clean_logits=False, logits_dtype=torch.bfloat16,
                                                   indices=None),  # fmt: skip
        lambda: deep_gemm.fp8_paged_mqa_logits(*args, True, None),
        lambda: deep_gemm.fp8_paged_mqa_logits(*args, clean_logits=False, indices=None, logits_dtype=torch.bfloat16),
    ):
        with pytest.raises(ValueError, match=r"q must be on a CUDA device"):
            call()
    # Scales given: FP4 q and cache (tests/test_fp4_mqa_logits.py), so FP8 values with scales are a packing error
    with pytest.raises(ValueError, match=r"q\[0\] \(q\) must be packed FP4"):
        deep_gemm.fp8_fp4_paged_mqa_logits((args[0], torch.ones(4, 2, 64, dtype=torch.int32)), *args[1:])
    with pytest.raises(TypeError):
        deep_gemm.fp8_fp4_paged_mqa_logits(*args)
    # The plain form's 9th positional is indices: a dtype there is a TypeError, not a silent logits_dtype
    with pytest.raises(TypeError):
        deep_gemm.fp8_paged_mqa_logits(*args, False, torch.bfloat16)


def test_paged_metadata_with_indices() -> None:
    # Each token its own unit: the schedule of the tokens' lengths, with or without indices
    lens = torch.tensor([100, 0, 64, 1, 300], dtype=torch.int32)
    indices = torch.tensor([0, 0, 1, 2, 2], dtype=torch.int32)
    plain = deep_gemm.get_paged_mqa_logits_metadata(lens, 64, 4)
    assert torch.equal(deep_gemm.get_paged_mqa_logits_metadata(lens, 64, 4, indices), plain)
    assert torch.equal(deep_gemm.get_paged_mqa_logits_metadata(lens[:, None], 64, 4, indices=indices), plain)
    with pytest.raises(ValueError, match=r"indices must have dtype torch.int32"):
        deep_gemm.get_paged_mqa_logits_metadata(lens, 64, 4, indices.long())
    with pytest.raises(ValueError, match=r"indices must be \[N\] = \[5\]"):
        deep_gemm.get_paged_mqa_logits_metadata(lens, 64, 4, indices[:4])
    with pytest.raises(ValueError, match=r"context_lens must be \[N\] or \[N, 1\] \(one length per token\)"):
        deep_gemm.get_paged_mqa_logits_metadata(lens.view(5, 1).repeat(1, 2), 64, 4, indices)


def test_paged_unused_block_ids_are_not_checked() -> None:
    # Columns past a request's last block may hold anything (here -1 and huge ids): only the device check remains
    a = paged_cpu_inputs()
    a["block_table"][:, 2:] = torch.tensor([-1, 1 << 30], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"q must be on a CUDA device"):
        deep_gemm.fp8_paged_mqa_logits(**a)


PAGED_COMPILE_CASES = [
    dict(next_n=1, num_heads=64, head_dim=128, block_kv=64),
    dict(next_n=2, num_heads=64, head_dim=128, block_kv=64, clean_logits=1),
    dict(next_n=4, num_heads=64, head_dim=128, block_kv=32, clean_logits=1, is_2d_context_lens=1),
    dict(next_n=4, num_heads=32, head_dim=128, block_kv=64),
    dict(next_n=1, num_heads=16, head_dim=64, block_kv=32, clean_logits=1),
    dict(next_n=2, num_heads=32, head_dim=64, block_kv=64),
    dict(next_n=4, num_heads=16, head_dim=64, block_kv=32, is_2d_context_lens=1),
    dict(next_n=2, num_heads=64, head_dim=128, block_kv=64, num_math_wgs=2),
    dict(next_n=1, num_heads=64, head_dim=128, block_kv=64, relu_by_abs=0),
    dict(next_n=2, num_heads=32, head_dim=128, block_kv=64, relu_by_abs=1),
    dict(next_n=2, num_heads=64, head_dim=128, block_kv=64, relu_by_abs=1, signed_sum_wgmma=1),
    dict(next_n=1, num_heads=64, head_dim=128, block_kv=64, clean_logits=1, relu_by_abs=1, signed_sum_wgmma=1),
    dict(next_n=4, num_heads=64, head_dim=128, block_kv=32, is_2d_context_lens=1, relu_by_abs=1, signed_sum_wgmma=1),
    dict(next_n=4, num_heads=16, head_dim=64, block_kv=32, relu_by_abs=1, signed_sum_wgmma=1),
    # BF16 logits, indices (the block-table row of each token), D = 32 (one k32 step, 32-byte swizzle)
    dict(next_n=2, num_heads=64, head_dim=128, block_kv=64, clean_logits=1, out_bf16=1),
    dict(next_n=2, num_heads=64, head_dim=128, block_kv=64, clean_logits=1, relu_by_abs=1, signed_sum_wgmma=1,
         out_bf16=1),  # fmt: skip
    dict(next_n=1, num_heads=64, head_dim=128, block_kv=64, has_indices=1),
    dict(next_n=1, num_heads=16, head_dim=64, block_kv=32, clean_logits=1, out_bf16=1, has_indices=1),
    dict(next_n=1, num_heads=64, head_dim=32, block_kv=64),
    dict(next_n=2, num_heads=32, head_dim=32, block_kv=32, clean_logits=1, out_bf16=1),
    dict(next_n=4, num_heads=16, head_dim=32, block_kv=64, is_2d_context_lens=1),
    dict(next_n=1, num_heads=32, head_dim=32, block_kv=64, has_indices=1, clean_logits=1),
]


def paged_case_id(cfg: dict) -> str:
    names = dict(next_n="t", num_heads="h", head_dim="d", block_kv="bkv", clean_logits="clean",
                 is_2d_context_lens="lens2d", num_math_wgs="wgs", relu_by_abs="abs", signed_sum_wgmma="pieces",
                 out_bf16="bf16", has_indices="indices")  # fmt: skip
    return "-".join(f"{names[k]}{v}" for k, v in cfg.items())


@pytest.mark.parametrize("use_nvrtc", [False, True], ids=["nvcc", "nvrtc"])
@pytest.mark.parametrize("cfg", PAGED_COMPILE_CASES, ids=paged_case_id)
def test_paged_kernel_compiles_with_qgmma_and_no_local_memory(cache_dir, cfg: dict, use_nvrtc: bool) -> None:
    result = deep_gemm.compile_kernel("sm90_fp8_paged_mqa_logits", cfg, use_nvrtc=use_nvrtc)
    assert result["registers"] > 0, result["ptxas_report"]
    assert result["stack_frame_bytes"] == 0, result["ptxas_report"]
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]
    lines = dump_sass(result["cubin_path"]).splitlines()
    n = cfg["next_n"] * cfg["num_heads"]
    # Per 32 of D: one m64n(T H)k32 wgmma, and with the pieces (16 B rows: 4 pieces of up to 4 queries) an m64n16k32
    pieces = cfg.get("signed_sum_wgmma", 0) != 0
    k_steps = cfg["head_dim"] // 32
    qgmma = [line for line in lines if "QGMMA" in line]
    assert len(qgmma) == k_steps * (1 + pieces), f"expected {k_steps * (1 + pieces)} QGMMA, found {len(qgmma)}"
    assert sum(f"64x{n}x32" in line for line in qgmma) == k_steps, qgmma
    assert sum("64x16x32" in line for line in qgmma) == (k_steps if pieces else 0) + (k_steps if n == 16 else 0), qgmma
    assert not any("HMMA" in line for line in lines)
    assert not any(op in line for line in lines for op in ("LDL", "STL")), "local memory in SASS"
    assert sum("USETMAXREG" in line for line in lines) == 2
    # Three math warpgroups at 152 registers when next_n x H <= 128, else two at 232
    wgs = cfg.get("num_math_wgs", 3 if n <= 128 else 2)
    assert any("USETMAXREG.TRY_ALLOC" in line and ("0x98" if wgs == 3 else "0xe8") in line for line in lines)
    assert any("UTMALDG" in line for line in lines)
    # The quad reduction: per key row, a reduce-scatter while two or more queries remain, else an all-reduce; it
    # runs a tile late (under the next own tile's wgmmas), so its code appears twice: in the loop and once more
    # for the last tile
    t = cfg["next_n"]
    assert sum("SHFL.BFLY" in line for line in lines) == 2 * 2 * (max(t // 2, 1) + max(t // 4, 1))
    # Two FFMAs per accumulator by default at next_n = 1 only (6 % faster there, 3-4 % slower at next_n = 2); with the pieces one, the |x| one (and the
    # pieces warps' split: one FMNMX per value of u a lane holds, D / 32, per piece)
    check_relu_form(lines, num_accum=n // 2, by_abs=cfg.get("relu_by_abs", int(t == 1)) != 0,
                    signed_by_wgmma=pieces, split_fmnmx=4 * k_steps if pieces else 0)  # fmt: skip


def test_paged_kernel_family_is_registered() -> None:
    assert "sm90_fp8_paged_mqa_logits" in deep_gemm.kernel_families()
    assert "smxx_paged_mqa_schedule" in deep_gemm.kernel_families()


@pytest.mark.parametrize("batch", [64, 4096], ids=["small-cta", "large-cta"])
@pytest.mark.parametrize("use_nvrtc", [False, True], ids=["nvcc", "nvrtc"])
def test_paged_schedule_kernel_compiles_without_local_memory(cache_dir, use_nvrtc: bool, batch: int) -> None:
    # get_paged_mqa_logits_metadata's kernel on CUDA tensors (both CTA shapes: 128 threads x 2 requests up to B = 256,
    # else 512 x 8): unit counts in registers, per tile a scan barrier and (pass 1) one before the rows' binary
    # searches of the prefixes
    result = deep_gemm.compile_kernel("smxx_paged_mqa_schedule", {"batch": batch}, use_nvrtc=use_nvrtc)
    assert f"paged_mqa_schedule_kernel<{128 if batch <= 256 else 512}, " in result["source"], result["source"]
    assert result["stack_frame_bytes"] == 0, result["ptxas_report"]
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]
    lines = dump_sass(result["cubin_path"]).splitlines()
    assert not any(op in line for line in lines for op in ("LDL", "STL")), "local memory in SASS"
    assert sum("BAR.SYNC" in line for line in lines) == 2
    # No division per request or per row (ncu: the first version's ~1000 instructions per warp, most of them
    # 32-bit divisions, were its time; it held 44 MUFU.RCP): the only divisions are U / num_sms (32 or 64 bits, in
    # two places) and, for a block_kv not a power of two, one per length
    assert sum("MUFU.RCP" in line for line in lines) <= 8, [x for x in lines if "MUFU" in x]


@pytest.mark.nvcc
def test_paged_bad_static_config_fails_to_compile(cache_dir) -> None:
    with pytest.raises(RuntimeError, match="next_n must be 1, 2 or 4"):
        deep_gemm.compile_kernel("sm90_fp8_paged_mqa_logits", dict(next_n=3))
    with pytest.raises(RuntimeError, match="stage count must be a multiple of the math warpgroups"):
        deep_gemm.compile_kernel("sm90_fp8_paged_mqa_logits", dict(next_n=1, num_heads=64, num_stages=4))
    with pytest.raises(RuntimeError, match="and of the producer warps"):  # 9 stages: 3 math warpgroups, 2 producers
        deep_gemm.compile_kernel("sm90_fp8_paged_mqa_logits", dict(next_n=1, num_heads=64, num_stages=9))
    with pytest.raises(RuntimeError, match="3 when next_n x H <= 128"):
        deep_gemm.compile_kernel("sm90_fp8_paged_mqa_logits", dict(next_n=4, num_heads=64, num_math_wgs=3))
    with pytest.raises(RuntimeError, match="with indices every q row is one token"):
        deep_gemm.compile_kernel("sm90_fp8_paged_mqa_logits", dict(next_n=2, has_indices=1))
    with pytest.raises(ValueError, match="signed_sum_wgmma needs head_dim 64 or 128"):
        deep_gemm.compile_kernel("sm90_fp8_paged_mqa_logits", dict(next_n=2, head_dim=32, relu_by_abs=1,
                                                                   signed_sum_wgmma=1))  # fmt: skip


# ----------------------------------------------------------------------------- paged decode, GPU tier
def make_paged_inputs(batch, next_n, h, d, block_kv, avg_ctx, seed=0, two_d=False, negative_scales=False,
                      table_row_stride=1, block_pad=0):
    """FP8 q, a paged cache (random block order, spare blocks of junk, junk ids past each request's blocks),
    FP32 weights, context lengths U(0.7, 1.3) x avg_ctx (request 0 empty when batch > 1). table_row_stride > 1:
    the block table is a row-strided view (rows that far apart, junk between, as block_tables[::next_n]);
    block_pad > 0: the cache's blocks sit block_pad junk bytes apart in a larger pool (only inner strides packed)."""
    g = torch.Generator().manual_seed(seed)
    lens = (avg_ctx * (0.7 + 0.6 * torch.rand(batch, generator=g))).long().clamp(min=1)
    if batch > 1:
        lens[0] = 0
    blocks = (lens + block_kv - 1) // block_kv
    max_blocks = int(blocks.max()) + 1
    num_blocks = int(blocks.sum()) + 7
    perm = torch.randperm(num_blocks, generator=g)
    table = torch.full((batch, max_blocks), -1, dtype=torch.int32)
    table[:, -1] = 1 << 30  # junk past every request's blocks: never read
    used = 0
    for i, n in enumerate(blocks.tolist()):
        table[i, :n] = perm[used : used + n].int()
        used += n
    torch.manual_seed(seed)
    kv, scales = per_token_cast_to_fp8(torch.randn(num_blocks * block_kv, d, device="cuda", dtype=torch.bfloat16))
    scales = scales[:, 0].contiguous()
    if negative_scales:
        scales = torch.where(torch.rand_like(scales) < 0.25, -scales, scales)
    pool = torch.randint(0, 256, (num_blocks, block_kv * (d + 4) + block_pad), dtype=torch.uint8, device="cuda")
    cache = pool[:, : block_kv * (d + 4)]
    cache[:, : block_kv * d] = kv.view(torch.uint8).view(num_blocks, block_kv * d)
    cache[:, block_kv * d :] = scales.view(torch.uint8).view(num_blocks, block_kv * 4)
    q = torch.randn(batch, next_n, h, d, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
    weights = torch.randn(batch * next_n, h, device="cuda", dtype=torch.float32)
    if two_d:
        # Token t's own length: at most the request's, some shorter than the 1-D rule gives
        step = torch.randint(0, 3, (batch, next_n), generator=g).cumsum(1).flip(1)
        context_lens = (lens[:, None] - step).clamp(min=0).int()
    else:
        context_lens = lens.int()
    max_context_len = int(lens.max()) + 5
    if table_row_stride > 1:
        spread = torch.randint(-(1 << 30), 1 << 30, (batch * table_row_stride, max_blocks), generator=g).int()
        spread[::table_row_stride] = table
        table = spread.cuda()[::table_row_stride]
    cache = cache.view(num_blocks, block_kv, 1, d + 4)
    assert cache.stride(0) == block_kv * (d + 4) + block_pad
    return q, cache, weights, context_lens.cuda(), table.cuda(), max_context_len


def paged_reference(q, kv_cache, weights, context_lens, block_table, max_context_len, dtype=torch.float64,
                    indices=None):
    """[B * next_n, max_context_len] in `dtype`, -inf where token t of request b sees no key. With the kernel's
    clamps (the identity on valid inputs): a request's blocks min(ceil(max(longest length, 0) / block_kv),
    max_blocks), each token's end clamped to [0, W] and to those blocks' keys, block ids clamped into the cache;
    indices (next_n = 1): q row i reads block-table row indices[i] clamped to the table's rows."""
    d = q.shape[3]
    num_blocks, block_kv = kv_cache.shape[:2]
    flat = kv_cache.reshape(num_blocks, block_kv * (d + 4))
    values = flat[:, : block_kv * d].contiguous().view(torch.float8_e4m3fn).view(num_blocks, block_kv, d)
    scales = flat[:, block_kv * d :].contiguous().view(torch.float32).view(num_blocks, block_kv)
    kv = values.to(dtype) * scales.to(dtype)[..., None]
    return paged_reference_of_keys(q.to(dtype), kv, weights, context_lens, block_table, max_context_len, indices)


def paged_reference_of_keys(q, kv, weights, context_lens, block_table, max_context_len, indices=None):
    """paged_reference from the dequantized keys: kv [num_blocks, block_kv, D] (and q) in the reference's dtype."""
    b, t, h, d = q.shape
    num_blocks, block_kv = kv.shape[:2]
    dtype = kv.dtype
    table = block_table if indices is None else block_table[indices.long().clamp(0, block_table.shape[0] - 1)]
    max_blocks = table.shape[1]
    lens = context_lens.long()
    longest = (lens.max(1).values if lens.dim() == 2 else lens).clamp(min=0)
    blocks_used = ((longest + block_kv - 1) // block_kv).clamp(max=max_blocks)
    ends = lens if lens.dim() == 2 else lens[:, None] - t + 1 + torch.arange(t, device=q.device)[None, :]
    ends = torch.minimum(ends.clamp(0, max_context_len), blocks_used[:, None] * block_kv)
    out = torch.full((b * t, max_context_len), float("-inf"), dtype=dtype, device=q.device)
    j = torch.arange(max_context_len, device=q.device)
    for i in range(b):
        n = int(ends[i].max())
        if n == 0:
            continue
        ids = table[i, : (n + block_kv - 1) // block_kv].long().clamp(0, num_blocks - 1)
        keys = kv[ids].reshape(-1, d)[:n]
        x = torch.einsum("thd,jd->thj", q[i].to(dtype), keys).relu_()
        logits = (x * weights[i * t : (i + 1) * t, :, None].to(dtype)).sum(1)
        valid = j[None, :n] < ends[i][:, None]
        out[i * t : (i + 1) * t, :n] = logits.masked_fill_(~valid, float("-inf"))
    return out


def run_paged_case(batch, next_n, h, d, block_kv, avg_ctx, clean=True, two_d=False, negative_scales=False,
                   logits_dtype=torch.float32, table_row_stride=1, block_pad=0):
    q, cache, weights, lens, table, width = make_paged_inputs(
        batch, next_n, h, d, block_kv, avg_ctx, two_d=two_d, negative_scales=negative_scales,
        table_row_stride=table_row_stride, block_pad=block_pad,
    )
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens, block_kv, deep_gemm.get_num_sms())
    poison_allocator(batch * next_n * width, logits_dtype)
    out = deep_gemm.fp8_paged_mqa_logits(q, cache, weights, lens, table, meta, width, clean_logits=clean,
                                         logits_dtype=logits_dtype)  # fmt: skip
    torch.cuda.synchronize()
    assert out.dtype == logits_dtype and out.shape == (batch * next_n, width) and out.is_contiguous()
    ref = paged_reference(q, cache, weights, lens, table, width)
    bound = 2e-5 if logits_dtype == torch.bfloat16 else 5e-6
    check_logits(out, ref, clean, bound, f"paged b{batch} t{next_n} h{h} d{d} bkv{block_kv} {logits_dtype}")
    return q, cache, weights, lens, table, meta, width, out


PAGED_GPU_CASES = [  # (batch, next_n, H, D, block_kv, context): every H, D, block_kv, next_n at least once
    (1, 1, 64, 128, 64, 65536),
    (64, 2, 64, 128, 64, 4096),
    (256, 1, 64, 128, 64, 1024),
    (64, 4, 64, 128, 32, 2048),
    (16, 4, 32, 128, 64, 3000),
    (16, 1, 16, 64, 32, 3000),
    (16, 2, 32, 64, 64, 3000),
    (16, 2, 16, 128, 32, 3000),
    (16, 2, 64, 32, 64, 3000),
    (8, 1, 32, 32, 32, 2000),
    (8, 4, 16, 32, 64, 1000),
]


@gpu
@pytest.mark.parametrize(("batch", "next_n", "h", "d", "block_kv", "ctx"), PAGED_GPU_CASES,
                         ids=[f"b{c[0]}-t{c[1]}-h{c[2]}-d{c[3]}-bkv{c[4]}-ctx{c[5]}" for c in PAGED_GPU_CASES])  # fmt: skip
def test_paged_against_float64(batch: int, next_n: int, h: int, d: int, block_kv: int, ctx: int) -> None:
    run_paged_case(batch, next_n, h, d, block_kv, ctx)


@gpu
@pytest.mark.parametrize(
    ("batch", "next_n", "h", "d", "block_kv", "ctx", "clean", "two_d", "negative_scales"),
    [(32, 2, 64, 128, 32, 2000, True, True, False), (24, 2, 32, 64, 64, 900, False, False, True)],
    ids=["t2-bkv32-2d", "t2-h32-d64-unclean-negative"],
)
def test_paged_more_cases(batch, next_n, h, d, block_kv, ctx, clean, two_d, negative_scales) -> None:
    run_paged_case(batch, next_n, h, d, block_kv, ctx, clean=clean, two_d=two_d, negative_scales=negative_scales)


@gpu
@pytest.mark.parametrize(("batch", "next_n", "h", "d", "block_kv", "ctx", "clean"), [
    (32, 2, 64, 128, 64, 20000, True),  # the pieces' form by default (next_n 2, H 64, D 128, W >= 16384)
    (32, 2, 64, 128, 64, 4000, False),  # without them
    (16, 1, 64, 128, 64, 3000, True),
    (16, 4, 16, 64, 32, 3000, True),
    (16, 2, 32, 32, 64, 3000, False),
])  # fmt: skip
def test_paged_bf16_logits_against_float64(batch, next_n, h, d, block_kv, ctx, clean) -> None:
    # BF16 written by the kernel (rounded from the FP32 sums), -inf as BF16 -inf; the first two rows take the two
    # head-sum forms (the signed sums from e4m3 pieces from 16384 columns on, FMNMX + FFMA below)
    run_paged_case(batch, next_n, h, d, block_kv, ctx, clean=clean, logits_dtype=torch.bfloat16)


@gpu
@pytest.mark.parametrize(("next_n", "d", "block_kv"), [(2, 128, 64), (1, 64, 32), (4, 32, 64)])
def test_paged_strided_table_and_pooled_cache(next_n: int, d: int, block_kv: int) -> None:
    # block_tables[::next_n]-style row-strided tables (junk between the rows) and a cache whose blocks are 48 junk
    # bytes apart in a larger pool: read in place, against the float64 reference of the same views
    run_paged_case(24, next_n, 64, d, block_kv, 2000, table_row_stride=next_n + 1, block_pad=48)


def make_token_inputs(num_requests, h, d, block_kv, avg_ctx, seed=0, table_row_stride=1):
    """Variable next_n through indices: the requests of make_paged_inputs (next_n = 1), then 1 to 4 tokens per
    request (request order shuffled, so one request's tokens are not always adjacent), each token with its own
    length (its request's, minus its distance from the request's last token), q [N, 1, H, D], weights [N, H]."""
    _, cache, _, lens, table, width = make_paged_inputs(num_requests, 1, h, d, block_kv, avg_ctx, seed=seed,
                                                        table_row_stride=table_row_stride)  # fmt: skip
    g = torch.Generator().manual_seed(seed + 1)
    counts = torch.randint(1, 5, (num_requests,), generator=g)
    request = torch.repeat_interleave(torch.arange(num_requests), counts)
    back = torch.cat([torch.arange(int(c) - 1, -1, -1) for c in counts])
    order = torch.randperm(len(request), generator=g) if num_requests > 2 else torch.arange(len(request))
    request, back = request[order], back[order]
    token_lens = (lens.cpu().long()[request] - back).clamp(min=0).int().cuda()
    indices = request.int().cuda()
    n = len(request)
    torch.manual_seed(seed + 2)
    q = torch.randn(n, 1, h, d, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
    weights = torch.randn(n, h, device="cuda", dtype=torch.float32)
    return q, cache, weights, token_lens, table, indices, width


@gpu
@pytest.mark.parametrize(("h", "d", "block_kv", "dtype", "row_stride"), [
    (64, 128, 64, torch.float32, 1),
    (32, 64, 32, torch.bfloat16, 2),
    (16, 32, 64, torch.float32, 3),
])  # fmt: skip
def test_paged_indices_against_float64(h: int, d: int, block_kv: int, dtype: torch.dtype, row_stride: int) -> None:
    q, cache, weights, lens, table, indices, width = make_token_inputs(40, h, d, block_kv, 1500,
                                                                       table_row_stride=row_stride)  # fmt: skip
    ref = paged_reference(q, cache, weights, lens, table, width, indices=indices)
    for num_sms in (7, deep_gemm.get_num_sms()):
        meta = deep_gemm.get_paged_mqa_logits_metadata(lens, block_kv, num_sms, indices)
        poison_allocator(q.shape[0] * width, dtype)
        out = deep_gemm.fp8_fp4_paged_mqa_logits((q, None), cache, weights, lens, table, meta, width, True, dtype,
                                                 indices)  # fmt: skip
        torch.cuda.synchronize()
        assert out.dtype == dtype and out.shape == (q.shape[0], width)
        check_logits(out, ref, True, 2e-5 if dtype == torch.bfloat16 else 5e-6, f"indices, {num_sms} CTAs")
    # The same tokens as requests of their own (each token's table row copied; the same schedule): the same bits
    own = table[indices.long()].contiguous()
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens, block_kv, deep_gemm.get_num_sms())
    plain = deep_gemm.fp8_paged_mqa_logits(q, cache, weights, lens, own, meta, width, True, logits_dtype=dtype)
    assert torch.equal(plain.view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
                       out.view(torch.int16 if dtype == torch.bfloat16 else torch.int32))  # fmt: skip


@gpu
@pytest.mark.parametrize(
    ("ctx", "block_kv", "pieces"),
    [(24000, 64, True), (24000, 32, True), (4000, 64, False)],
    ids=["long-pieces", "long-pieces-bkv32", "short-no-pieces"],
)
@pytest.mark.parametrize("two_d", [False, True], ids=["1d", "2d"])
def test_paged_head_sum_forms_against_float64(ctx: int, block_kv: int, pieces: bool, two_d: bool, capfd) -> None:
    # Both forms of the paged kernel's head reduction at next_n = 2, H = 64, D = 128, where the heuristic picks them
    # by the logits' row length: the signed sums from the pieces warps' e4m3 pieces on the tensor core from 16384
    # columns on, FMNMX + FFMA below; the printed config says which one ran
    capfd.readouterr()
    os.environ["DG_PRINT_CONFIGS"] = "1"
    try:
        run_paged_case(3, 2, 64, 128, block_kv, ctx, two_d=two_d, negative_scales=True)
    finally:
        del os.environ["DG_PRINT_CONFIGS"]
    err = capfd.readouterr().err
    assert "fp8_paged_mqa_logits" in err, err[-2000:]
    assert f"signed_sum_wgmma={'true' if pieces else 'false'}" in err, err[-2000:]


@gpu
def test_paged_unclean_2d_lens_negative_scales() -> None:
    run_paged_case(32, 4, 64, 128, 64, 2000, clean=False, two_d=True, negative_scales=True)


@gpu
def test_paged_negative_scales_next_n_1() -> None:
    # next_n = 1 takes the other form of the head reduction by default (two FFMAs): any sign of the kv scale
    run_paged_case(16, 1, 64, 128, 64, 1500, negative_scales=True)


TUNE_SCRIPT = """
import sys, torch
sys.path.insert(0, {tests!r})
import test_mqa_logits as t
out = t.run_case(301, 1000, 64, 128, "causal")[-1]
t.run_paged_case(8, 1, 64, 128, 64, 700)
t.run_paged_case(8, 2, 64, 128, 64, 700, negative_scales=True)
t.test_negative_kv_scales(16)
t.one_sign_and_mostly_negative_scores(64, None)
torch.save(out.cpu(), {path!r})
"""


@gpu
@pytest.mark.parametrize(
    ("tune", "error"),
    [
        ("paged_mqa_logits:math_wgs=2", None),
        ("paged_mqa_logits:stages=6", None),
        ("paged_mqa_logits:math_wgs=2,stages=4", None),
        ("mqa_logits:kv_split=192", None),
        ("fp8_gemm:block_m=128;bf16_gemm:split_k=2", None),
        ("mqa_logits:kv_split=100", "DG_TUNE: mqa_logits:kv_split=100 must be a multiple of 64 in [64, 1048576]"),
        ("mqa_logits:kv_split=0", "DG_TUNE: mqa_logits:kv_split=0 must be a multiple of 64 in [64, 1048576]"),
        ("paged_mqa_logits:math_wgs=4", "DG_TUNE: paged_mqa_logits:math_wgs=4 must be 2 or 3"),
        ("paged_mqa_logits:stages=7", "DG_TUNE: paged_mqa_logits:stages=7 must be a multiple of 2 in [2, 32]"),
        # (next_n = 1, H = 64: three math warpgroups, so the ring's depth must be a multiple of 6)
        (
            "paged_mqa_logits:stages=4",
            "DG_TUNE: paged_mqa_logits:stages=4 must be a multiple of 2 (producer warps) "
            "and of the kernel's 3 math warpgroups",
        ),
        ("paged_mqa_logits:ping_pong=0", "DG_TUNE: paged_mqa_logits has no key 'ping_pong'"),
    ],
    ids=[
        "math-wgs-2",
        "stages-6",
        "math-wgs-2-stages-4",
        "kv-split-192",
        "gemm-families-only",
        "kv-split-100",
        "kv-split-0",
        "bad-math-wgs",
        "odd-stages",
        "stages-not-multiple-of-wgs",
        "unknown-key",
    ],  # fmt: skip
)
def test_tune_overrides(tmp_path, tune: str, error: str | None) -> None:
    # Forced configs (DG_TUNE, a fresh process each) pass against float64, and leave the prefill's bits as they
    # are (any key chunk gives the same bits: each output sums one 64-key tile; paged and GEMM sections do not
    # apply to the prefill); bad values raise naming the family, key and value
    path = tmp_path / "out.pt"
    code = TUNE_SCRIPT.format(tests=os.path.dirname(__file__), path=str(path))
    result = run_python(code, {"DG_TUNE": tune}, tmp_path)
    if error is not None:
        assert result.returncode != 0 and error in result.stderr, result.stderr[-2000:]
        return
    assert result.returncode == 0, result.stderr[-2000:]
    out = run_case(301, 1000, 64, 128, "causal")[-1]
    assert torch.equal(torch.load(path).cuda(), out), f"DG_TUNE={tune} must not change a bit of the prefill output"


@gpu
def test_paged_clean_2d_lens() -> None:
    run_paged_case(32, 2, 64, 128, 32, 2000, two_d=True)


@gpu
@pytest.mark.parametrize("num_sms", [1, 5, 300])
def test_paged_any_schedule_size(num_sms: int) -> None:
    q, cache, weights, lens, table, width = make_paged_inputs(20, 2, 64, 128, 64, 1500)
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens, 64, num_sms)
    out = deep_gemm.fp8_paged_mqa_logits(q, cache, weights, lens, table, meta, width, clean_logits=True)
    check_logits(out, paged_reference(q, cache, weights, lens, table, width), True, 5e-6, f"{num_sms} CTAs")


def random_context_lens(batch: int, layout: str, kind: str, g: torch.Generator) -> torch.Tensor:
    """int32 context lengths on the CPU in `layout` (1-D, [B, T], or a non-contiguous view) drawn from `kind`."""
    t = {"1d": 1, "1d_strided": 1, "t0": 0, "t1": 1, "t2": 2, "t4": 4, "t2_sliced": 4, "t2_transposed": 2}[layout]
    numel = batch * (3 if layout == "1d_strided" else t)
    if kind == "mixed":  # zeros, negatives, tiny, typical and a few near 2^31
        x = torch.randint(-100, 20000, (numel,), generator=g, dtype=torch.int32)
        x[torch.rand(numel, generator=g) < 0.1] = 0
        tiny = torch.randint(0, 70, (numel,), generator=g, dtype=torch.int32)
        x = torch.where(torch.rand(numel, generator=g) < 0.1, tiny, x)
        x[torch.rand(numel, generator=g) < 0.01] = 2**31 - 1
    elif kind == "empty":  # no unit at all: every row (B, 0)
        x = torch.randint(-5, 1, (numel,), generator=g, dtype=torch.int32)
    elif kind == "tiny":  # often fewer units than SMs
        x = torch.randint(-3, 100, (numel,), generator=g, dtype=torch.int32)
    else:  # huge: a total far past 2^32 units
        x = torch.randint(2**30, 2**31 - 1, (numel,), generator=g, dtype=torch.int32)
    if layout == "1d":
        return x
    if layout == "1d_strided":
        return x[::3]
    if layout == "t2_sliced":  # [B, 2] with strides (4, 2)
        return x.view(batch, 4)[:, ::2]
    if layout == "t2_transposed":  # [B, 2] with strides (1, B)
        return x.view(2, batch).t()
    return x.view(batch, t)


PAGED_META_LAYOUTS = ["1d", "1d_strided", "t0", "t1", "t2", "t4", "t2_sliced", "t2_transposed"]


@gpu
@pytest.mark.parametrize("layout", PAGED_META_LAYOUTS)
@pytest.mark.parametrize("batch", [0, 1, 3, 64, 256, 257, 1000, 5000])
def test_paged_metadata_cuda_kernel_matches_cpu(batch: int, layout: str) -> None:
    # The CUDA path (one JIT kernel) against the CPU path (tensor ops, checked above), bit for bit
    g = torch.Generator().manual_seed(batch * 31 + PAGED_META_LAYOUTS.index(layout))
    for kind in ("mixed", "empty", "tiny", "huge"):
        lens = random_context_lens(batch, layout, kind, g)
        # (the same strides on the GPU: non-contiguous views stay non-contiguous)
        lens_cuda = torch.empty_strided(lens.shape, lens.stride(), dtype=lens.dtype, device="cuda").copy_(lens)
        for num_sms in (1, 7, 132, 133, 1000):
            for block_kv in (32, 64):
                expected = deep_gemm.get_paged_mqa_logits_metadata(lens, block_kv, num_sms)
                got = deep_gemm.get_paged_mqa_logits_metadata(lens_cuda, block_kv, num_sms)
                assert got.is_cuda and got.dtype == torch.int32 and got.shape == (num_sms + 1, 2)
                assert got.is_contiguous()
                what = f"B {batch}, {layout}, {kind}, {num_sms} SMs, block_kv {block_kv}"
                assert torch.equal(got.cpu(), expected), what


@gpu
def test_paged_metadata_cuda_kernel_graph_replay() -> None:
    # Captured once (after a warm-up call compiles or loads the kernel), each replay reads the lengths anew
    lens = torch.randint(0, 5000, (100, 2), dtype=torch.int32, device="cuda")
    deep_gemm.get_paged_mqa_logits_metadata(lens, 64, 132)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        meta = deep_gemm.get_paged_mqa_logits_metadata(lens, 64, 132)
    for seed in range(3):
        lens.copy_(torch.randint(-10, 50000, lens.shape, generator=torch.Generator().manual_seed(seed)))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(meta.cpu(), deep_gemm.get_paged_mqa_logits_metadata(lens.cpu(), 64, 132))


@gpu
def test_paged_bitwise_repeatable_and_graph_capture() -> None:
    q, cache, weights, lens, table, meta, width, first = run_paged_case(64, 2, 64, 128, 64, 3000)
    for _ in range(10):
        again = deep_gemm.fp8_paged_mqa_logits(q, cache, weights, lens, table, meta, width, clean_logits=True)
        assert torch.equal(again.view(torch.int32), first.view(torch.int32))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_meta = deep_gemm.get_paged_mqa_logits_metadata(lens, 64, deep_gemm.get_num_sms())
        out = deep_gemm.fp8_paged_mqa_logits(q, cache, weights, lens, table, graph_meta, width, clean_logits=True)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.int32), first.view(torch.int32))


@gpu
@pytest.mark.parametrize("two_d", [False, True], ids=["lens1d", "lens2d"])
def test_paged_unchecked_bad_values_are_clamped(no_debug_checks, two_d: bool) -> None:
    # The default path reads no value on the host: block ids out of the cache, negative lengths, lengths past the
    # table's columns and past the width are clamped on the device (ids into the cache, a request's keys to its
    # table's blocks, ends to [0, W]): defined output equal to the reference of the clamped inputs, -inf exactly
    # where no key is seen
    q, cache, weights, lens, table, width = make_paged_inputs(8, 2, 64, 128, 64, 500, two_d=two_d)
    table[:, 0] = 1 << 30
    table[:, 1] = -7
    bad = lens.clone()
    bad[1] = -5
    bad[2] = 100_000  # past the table's columns (and the width)
    bad[3] = width + 40  # past the width, within the table
    meta = deep_gemm.get_paged_mqa_logits_metadata(bad, 64, 16)
    poison_allocator(16 * width, torch.float32)
    out = deep_gemm.fp8_paged_mqa_logits(q, cache, weights, bad, table, meta, width, clean_logits=True)
    torch.cuda.synchronize()  # an out-of-bounds access would fault here (run under compute-sanitizer to be sure)
    check_logits(out, paged_reference(q, cache, weights, bad, table, width), True, 5e-6, "clamped values")


@gpu
def test_paged_unchecked_bad_indices_are_clamped(no_debug_checks) -> None:
    q, cache, weights, lens, table, indices, width = make_token_inputs(6, 64, 128, 64, 700)
    indices[0], indices[-1] = -3, 1000  # clamped to the first and last table rows
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens, 64, 16, indices)
    out = deep_gemm.fp8_paged_mqa_logits(q, cache, weights, lens, table, meta, width, True, indices)
    torch.cuda.synchronize()
    check_logits(out, paged_reference(q, cache, weights, lens, table, width, indices=indices), True, 5e-6, "indices")


@gpu
def test_paged_debug_checks_raise_on_device_values(debug_checks) -> None:
    q, cache, weights, lens, table, indices, width = make_token_inputs(6, 64, 128, 64, 700)
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens, 64, 16, indices)
    bad = indices.clone()
    bad[2] = 6
    with pytest.raises(ValueError, match=r"request indices out of range"):
        deep_gemm.fp8_paged_mqa_logits(q, cache, weights, lens, table, meta, width, True, bad)
    bad_table = table.clone()
    bad_table[:, 0] = cache.shape[0]
    with pytest.raises(ValueError, match=r"block ids out of range"):
        deep_gemm.fp8_paged_mqa_logits(q, cache, weights, lens, bad_table, meta, width, True, indices)
    with pytest.raises(ValueError, match=r"context longer than max_context_len"):
        deep_gemm.fp8_paged_mqa_logits(q, cache, weights, lens, table, meta, 10, True, indices)
