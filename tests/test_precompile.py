"""Ahead-of-time builds (deep_gemm.precompile): the kernels it plans are the ones a launch renders, a precompiled
cache serves a fresh process with zero compiles, its progress / summary / failure reporting, model and shape parsing.

CPU tier: planning is checked against the heuristic's own binding (`_C.get_gemm_config` rendered through the
compile-only registry, an independent path to the same source); the zero-compile check counts the cache's entries
before and after a fresh process looks every planned kernel up and loads it through compile_kernel (which reports
cache hits). GPU tier: a fresh process runs the shapes after a precompile and adds no entry to the cache.
"""

import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import types
from pathlib import Path

import pytest
import torch

import deep_gemm
from deep_gemm import _C
from deep_gemm.precompile import GemmShape, MqaLogitsShape, PagedMqaLogitsShape, RenderedKernel, model_shapes_for
from deep_gemm.precompile.models import load_model
from deep_gemm.precompile.shapes import parse_shape_text, plan_kernels
from deep_gemm.testing import H200_CLUSTER_CTAS

ROOT = Path(__file__).resolve().parents[1]
# Child interpreters run outside the repository: from its root, Python would import the source folder (whose
# extension is built only by ./develop.sh) instead of the installed package the tests run against
OUTSIDE = Path(tempfile.gettempdir())
# The registry parameters of a get_gemm_config result (the names the two share)
CONFIG_PARAMS = ["block_m", "block_n", "num_stages", "num_math_warpgroups", "num_group_n", "num_multicast",
                 "is_multicast_on_a", "num_splits", "stream_k", "overlap_promotion", "per_row_sfb", "bf16",
                 "gemm_type", "use_tma_store", "store_chunk_n", "fp32_buffers"]  # fmt: skip


@pytest.fixture(autouse=True)
def _no_tune(monkeypatch):
    # (the planners read DG_TUNE as a launch does; these tests plan the heuristic's own picks)
    if os.environ.get("DG_TUNE"):
        pytest.skip("DG_TUNE is set: the planned kernels follow it")


def registry_source(cfg: dict, **shape) -> str:
    """The source compile_kernel renders for a get_gemm_config result with the given compiled shape."""
    params = {name: int(cfg[name]) for name in CONFIG_PARAMS}
    return _C.render_kernel("sm90_gemm", {**params, **shape})


# (m, n, k): decode (split-K), middle (stream-K or not), prefill (three warpgroups), one-K-block shapes
DENSE = [(1, 2112, 7168), (64, 2112, 7168), (128, 7168, 16384), (700, 4096, 7168), (4096, 7168, 2048), (3, 576, 128)]


@pytest.mark.parametrize(("m", "n", "k"), DENSE, ids=[f"m{m}-n{n}-k{k}" for m, n, k in DENSE])
@pytest.mark.parametrize("fp32_out", [False, True], ids=["bf16-d", "fp32-d"])
def test_dense_plan_is_the_heuristics_pick(m: int, n: int, k: int, fp32_out: bool) -> None:
    kernels = _C.render_gemm_kernels([m], n, k, cluster_ctas=H200_CLUSTER_CTAS, per_row_sfb=fp32_out)
    measured = _C.get_gemm_config(m, n, k, cluster_ctas=H200_CLUSTER_CTAS, per_row_sfb=fp32_out)
    first = _C.get_gemm_config(m, n, k, per_row_sfb=fp32_out)  # (the first plan of a process: estimated clusters)
    assert kernels[0]["source"] == registry_source(measured, shape_n=n, shape_k=k)
    assert not kernels[0]["first_plan_only"]
    sources = {kernel["source"] for kernel in kernels}
    assert sources == {registry_source(measured, shape_n=n, shape_k=k), registry_source(first, shape_n=n, shape_k=k)}
    assert all(kernel["values"] == [m] for kernel in kernels)


def test_first_plan_kernel_is_listed_when_it_differs() -> None:
    # 33 tiles x 4 splits: whole clusters of 132 SMs would take it, the H200's 120 CTAs of 4-clusters do not
    # (tests/test_fp8_gemm.py), so the first GEMM of a process renders another kernel than later ones
    kernels = _C.render_gemm_kernels([64], 2112, 7168, cluster_ctas=H200_CLUSTER_CTAS)
    assert len(kernels) == 2
    assert [kernel["first_plan_only"] for kernel in kernels] == [False, True]
    estimated = _C.render_gemm_kernels([64], 2112, 7168)
    assert [kernel["source"] for kernel in estimated] == [kernels[1]["source"]]


@pytest.mark.parametrize("expected_m", [1, 20, 64, 100, 256])
def test_masked_plan_is_planned_for_groups_times_expected_m(expected_m: int) -> None:
    groups, max_m, n, k = 8, 256, 4096, 7168
    (kernel,) = [x for x in _C.render_gemm_kernels([expected_m], n, k, gemm_type=3, num_groups=groups, max_m=max_m)]
    cfg = _C.get_gemm_config(groups * min(expected_m, max_m), n, k, gemm_type=3, grouped_alignment=128,
                             num_groups=groups)
    assert kernel["source"] == registry_source(cfg, shape_n=n, shape_k=k)


def test_masked_alignment_follows_max_m() -> None:
    # (max_m = 192 rows per group: BLOCK_M must divide it, so 64-row blocks only)
    (kernel,) = _C.render_gemm_kernels([150], 4096, 7168, gemm_type=3, num_groups=4, max_m=192)
    cfg = _C.get_gemm_config(4 * 150, 4096, 7168, gemm_type=3, grouped_alignment=64, num_groups=4)
    assert cfg["block_m"] == 64
    assert kernel["source"] == registry_source(cfg, shape_n=4096, shape_k=7168)


def test_contiguous_and_k_grouped_and_bf16_plans() -> None:
    m, n, k = 4096, 4096, 7168
    (kernel,) = _C.render_gemm_kernels([m], n, k, gemm_type=1, num_groups=32)
    assert kernel["source"] == registry_source(_C.get_gemm_config(m, n, k, gemm_type=1), shape_n=n, shape_k=k)
    # k-grouped FP8 (compiled dims 'mn'): planned for groups x M rows and K = 4096 per group, 8 map slots for 6 groups
    (kernel,) = _C.render_gemm_kernels([512], 7168, 0, per_row_sfb=True, gemm_type=4, num_groups=6,
                                       compiled_dims="mn")
    cfg = _C.get_gemm_config(6 * 512, 7168, 4096, per_row_sfb=True, gemm_type=4, grouped_alignment=0)
    assert kernel["source"] == registry_source(cfg, shape_m=512, shape_n=7168, max_k_groups=8)
    # BF16 nn (B MN-major) with an FP32 D and C
    (kernel,) = _C.render_gemm_kernels([300], 1024, 4096, bf16=True, mn_major_b=True, fp32_out=True, has_c=True)
    cfg = _C.get_gemm_config(300, 1024, 4096, bf16=True, mn_major_b=True, fp32_out=True, has_c=True)
    assert kernel["source"] == registry_source(cfg, shape_n=1024, shape_k=4096, mn_major_b=1, fp32_out=1, has_c=1)


def test_contiguous_plans_the_padding_kernel_the_call_launches() -> None:
    # ensure_zero_padding: every padding row (per-row ids or psum ends); without it, per-row: the group segments'
    # padding rows; psum: no kernel
    def zero_kernels(psum: bool, ensure: bool) -> set[str]:
        shape = GemmShape("m_grouped_fp8_gemm_nt_contiguous", 4096, 7168, num_groups=8, use_psum_layout=psum,
                          ensure_zero_padding=ensure, m_values=(4096,))  # fmt: skip
        return {p.source for p in plan_kernels([shape], 64, 132, []) if p.family == "smxx_zero_padding_rows"}

    def render(**params) -> set[str]:
        return {_C.render_kernel("smxx_zero_padding_rows", params)}

    assert zero_kernels(False, True) == render(psum_layout=0)
    assert zero_kernels(True, True) == render(psum_layout=1)
    assert zero_kernels(False, False) == render(group_segments=1)
    assert zero_kernels(True, False) == set()


def test_fp4_plans_and_their_helpers() -> None:
    # FP8 x FP4 (fp4_b): the FP4 mode the launch plans, dense and m-grouped; the scale packing and, for A with 1x32
    # scales or in FP4, the fold pre-pass among the helpers
    m, n, k = 64, 2112, 7168
    (kernel,) = _C.render_gemm_kernels([m], n, k, fp4_b=True)
    cfg = _C.get_gemm_config(m, n, k, fp4_b=True)
    assert kernel["source"] == registry_source(cfg, shape_n=n, shape_k=k, fp4_b=1)
    (kernel,) = _C.render_gemm_kernels([4096], 4096, 7168, gemm_type=2, num_groups=32, fp4_b=True)
    cfg = _C.get_gemm_config(4096, 4096, 7168, gemm_type=2, fp4_b=True)
    assert kernel["source"] == registry_source(cfg, shape_n=4096, shape_k=7168, fp4_b=1)
    shapes = [GemmShape("fp8_fp4_gemm_nt", n, k, fp4_b=True, m_values=(m,)),
              GemmShape("m_grouped_fp8_fp4_gemm_nt_contiguous", 4096, 7168, num_groups=32, use_psum_layout=True,
                        fp4_b=True, fp4_a=True, m_values=(4096,)),
              GemmShape("fp8_gemm_nt", n, k, fp4_b=True, a_1x32=True, m_values=(m,))]  # fmt: skip
    planned = plan_kernels(shapes, 64, 132, [])
    families = [p.family for p in planned]
    assert families.count("sm90_gemm") == 2 and "smxx_pack_ue8m0" in families
    folds = {p.source for p in planned if p.family == "smxx_fold_scales"}
    assert folds == {_C.render_kernel("smxx_fold_scales", {"fp4_in": v}) for v in (0, 1)}
    for bad, pattern in (
        (GemmShape("bf16_gemm_nt", n, k, fp4_b=True), "fp4_b .* needs an FP8 dense or m-grouped API"),
        (GemmShape("fp8_gemm_nt", n, 7184, fp4_b=True), "k a multiple of 32"),
        (GemmShape("fp8_gemm_nt", n, k, a_1x32=True), "set fp4_b too"),
    ):
        with pytest.raises(ValueError, match=pattern):
            plan_kernels([bad], 64, 132, [])
    with pytest.raises(ValueError, match="fp4_b .* is an FP8 GEMM with BF16 D"):
        _C.render_gemm_kernels([m], n, k, per_row_sfb=True, fp4_b=True)


def test_compiled_dims_and_settings_are_read_as_at_launch() -> None:
    cfg = _C.get_gemm_config(5, 2048, 1024)
    (kernel,) = _C.render_gemm_kernels([5], 2048, 1024, compiled_dims="mnk")
    assert kernel["source"] == registry_source(cfg, shape_m=5, shape_n=2048, shape_k=1024)
    try:
        deep_gemm.set_ignore_compile_dims(True)
        (kernel,) = _C.render_gemm_kernels([5], 2048, 1024, compiled_dims="mnk")
        assert kernel["source"] == registry_source(cfg)  # (every dimension at run time)
    finally:
        deep_gemm.set_ignore_compile_dims(False)
    with pytest.raises(ValueError, match="compiled_dims"):
        _C.render_gemm_kernels([5], 2048, 1024, compiled_dims="x")
    with pytest.raises(ValueError, match="multiple of get_mk_alignment"):
        _C.render_gemm_kernels([100], 2048, 1024, gemm_type=1, num_groups=4)
    with pytest.raises(ValueError, match="max_m"):
        _C.render_gemm_kernels([10], 2048, 1024, gemm_type=3, num_groups=4, max_m=100)
    with pytest.raises(ValueError, match="cluster_ctas"):
        _C.render_gemm_kernels([10], 2048, 1024, cluster_ctas=[132, 132])


def test_m_range_is_deduplicated_and_covered() -> None:
    shapes = [GemmShape("fp8_gemm_nt", 7168, 2048), GemmShape("fp8_gemm_nt", 7168, 2048)]
    kernels = plan_kernels(shapes, 4096, 132, list(H200_CLUSTER_CTAS))
    gemms = [kernel for kernel in kernels if kernel.family == "sm90_gemm"]
    assert 2 <= len(gemms) <= 40
    assert len({kernel.source for kernel in kernels}) == len(kernels)
    # every M of 1 .. 4096 renders one of them (the dense range, by the planner's own enumeration)
    covered = _C.render_gemm_kernels(list(range(1, 4097)), 7168, 2048, cluster_ctas=H200_CLUSTER_CTAS)
    assert sorted(v for kernel in covered for v in kernel["values"] if not kernel["first_plan_only"]) == list(
        range(1, 4097))
    assert {kernel["source"] for kernel in covered} == {kernel.source for kernel in gemms}
    assert [kernel.family for kernel in kernels if kernel.family != "sm90_gemm"] == ["smxx_transpose_sf"]


def test_mqa_plans() -> None:
    kernels = _C.render_mqa_logits_kernels(64, 128)
    assert [k["family"] for k in kernels] == ["sm90_fp8_mqa_logits", "smxx_mqa_logits_pieces"]
    assert kernels[1]["source"] == _C.render_kernel("smxx_mqa_logits_pieces", {"num_heads": 64, "head_dim": 128})
    assert [k["family"] for k in _C.render_mqa_logits_kernels(16, 64)] == ["sm90_fp8_mqa_logits"]
    # paged, next_n = 2 at H = 64, D = 128: the config changes with the logits width (the signed sums from a
    # long context on), and the schedule's CTA shape with the batch
    paged = _C.render_paged_mqa_logits_kernels(2, 64, 128, max_context_lens=[1, 1024, 65536], max_batch=1000)
    families = [k["family"] for k in paged]
    assert families.count("sm90_fp8_paged_mqa_logits") == 2 and families.count("smxx_paged_mqa_schedule") == 2
    assert paged[0]["values"] == [1, 1024] and paged[1]["values"] == [65536]
    for batch in (1, 1000):
        assert _C.render_kernel("smxx_paged_mqa_schedule", {"batch": batch}) in {k["source"] for k in paged}
    with pytest.raises(ValueError, match="next_n"):
        _C.render_paged_mqa_logits_kernels(3, 64, 128)
    with pytest.raises(ValueError, match="num_heads"):
        _C.render_mqa_logits_kernels(48, 128)


def test_model_presets() -> None:
    shapes = model_shapes_for("deepseek-v3", tp=8, ep=8, max_tokens=256)
    dense = [(s.n, s.k) for s in shapes if isinstance(s, GemmShape) and s.api == "fp8_gemm_nt"]
    # q_a + kv_a, q_b, kv_b, o_proj, dense MLP gate_up / down, shared expert gate_up / down (tp = 8)
    assert dense == [(2112, 7168), (3072, 1536), (4096, 512), (7168, 2048), (4608, 7168), (7168, 2304),
                     (512, 7168), (7168, 256)]  # fmt: skip
    grouped = [(s.api, s.n, s.k, s.num_groups) for s in shapes if s.api.startswith("m_grouped")]
    assert grouped == [
        ("m_grouped_fp8_gemm_nt_contiguous", 4096, 7168, 32), ("m_grouped_fp8_gemm_nt_masked", 4096, 7168, 32),
        ("m_grouped_fp8_gemm_nt_contiguous", 7168, 2048, 32), ("m_grouped_fp8_gemm_nt_masked", 7168, 2048, 32),
    ]  # fmt: skip
    assert not any(isinstance(s, (MqaLogitsShape, PagedMqaLogitsShape)) for s in shapes)
    v32 = model_shapes_for("deepseek-v3.2", tp=8, ep=8, max_tokens=256)
    assert [(s.n, s.k) for s in v32 if isinstance(s, GemmShape) and s.api == "fp8_gemm_nt"][-2:] == [
        (8192, 1536), (128, 7168)]
    assert sum(isinstance(s, MqaLogitsShape) for s in v32) == 2 and sum(isinstance(s, PagedMqaLogitsShape)
                                                                         for s in v32) == 2
    # ep < tp: each expert's intermediate split over tp / ep ranks
    split = model_shapes_for("deepseek-v3", tp=8, ep=2, max_tokens=64, moe_layouts=("masked",))
    assert [(s.n, s.k, s.num_groups) for s in split if s.api.startswith("m_grouped")] == [(1024, 7168, 128),
                                                                                         (7168, 512, 128)]
    with pytest.raises(ValueError, match="num_attention_heads.*tp = 3"):
        model_shapes_for("deepseek-v3", tp=3, ep=1)
    # the whole v3.2 plan (every family) on the CPU, nothing compiled
    result = deep_gemm.precompile(v32, max_tokens=256, dry_run=True, stream=io.StringIO(), cache_dir="/nonexistent")
    families = {b.family for b in result.builds}
    assert families == {"sm90_gemm", "smxx_transpose_sf", "smxx_zero_padding_rows", "sm90_fp8_mqa_logits",
                        "smxx_mqa_logits_pieces", "sm90_fp8_paged_mqa_logits", "smxx_paged_mqa_schedule"}
    assert all(b.status == "pending" for b in result.builds)


def write_json(tmp_path: Path, data) -> str:
    path = tmp_path / "model.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_model_json_errors_name_the_field(tmp_path: Path) -> None:
    from deep_gemm.precompile.models import DEEPSEEK_V3

    good = dict(DEEPSEEK_V3, tp=4, ep=4, shapes=["fp8_gemm_nt:n=256,k=512", {"api": "bf16_gemm_nt", "n": 64,
                                                                                "k": 128, "out_dtype": "fp32"}])
    config, extra = load_model(write_json(tmp_path, good))
    assert config["tp"] == 4 and extra == [GemmShape("fp8_gemm_nt", 256, 512),
                                           GemmShape("bf16_gemm_nt", 64, 128, out_dtype="fp32")]
    missing = {key: value for key, value in DEEPSEEK_V3.items() if key != "hidden_size"}
    cases = [
        (missing, "field 'hidden_size' is missing"),
        (dict(DEEPSEEK_V3, hidden_size="7168"), "field 'hidden_size' must be a positive integer, got '7168'"),
        (dict(DEEPSEEK_V3, n_routed_experts=-1), "field 'n_routed_experts' must be a non-negative integer"),
        (dict(DEEPSEEK_V3, q_lora_rank=0), "field 'q_lora_rank' must be a positive integer"),
        (dict(DEEPSEEK_V3, shapes={"api": "x"}), "field 'shapes' must be a list"),
        (dict(DEEPSEEK_V3, shapes=[{"api": "fp8_gemm_nt", "n": 7168}]), r"shapes\[0\]: field 'k' is missing"),
        (dict(DEEPSEEK_V3, shapes=[{"n": 1}]), r"shapes\[0\]: expected an object with an 'api' string"),
        (dict(DEEPSEEK_V3, shapes=[{"api": "fp8_gemm_nt", "n": 1, "k": "x"}]), r"shapes\[0\]\.k must be"),
        (dict(DEEPSEEK_V3, shapes=[{"api": "fp8_gemm_nt", "n": 1, "k": 1, "colour": 1}]), "unknown field 'colour'"),
        ([1, 2], "expected a JSON object"),
    ]
    for data, message in cases:
        with pytest.raises(ValueError, match=message):
            load_model(write_json(tmp_path, data))
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_model(str(tmp_path / "broken.json"))
    # the command line: exit status 2 and the field named
    out = run_cli("--model", write_json(tmp_path, dict(DEEPSEEK_V3, kv_lora_rank=None)), "--dry-run")
    assert out.returncode == 2 and "field 'kv_lora_rank' must be a positive integer" in out.stderr, out.stderr


def test_shape_text_errors() -> None:
    assert parse_shape_text("m_grouped_fp8_gemm_nt_masked:n=4096,k=7168,num_groups=8,max_m=256,m_values=1/2") == (
        GemmShape("m_grouped_fp8_gemm_nt_masked", 4096, 7168, num_groups=8, max_m=256, m_values=(1, 2)))
    assert parse_shape_text("fp8_paged_mqa_logits:next_n=2,num_heads=64,head_dim=128,clean_logits=1") == (
        PagedMqaLogitsShape(2, 64, 128, clean_logits=True))
    for text, message in [("fp8_gemm_nt:n=1", "field 'k' is missing"), ("nope:n=1,k=1", "unknown api 'nope'"),
                          ("fp8_gemm_nt:n=1,k", "expected field=value"), ("fp8_gemm_nt:n=-1,k=1", r"\.n must be"),
                          ("fp8_gemm_nt:n=1,k=1,has_c=maybe", r"\.has_c must be a boolean")]:
        with pytest.raises(ValueError, match=message):
            parse_shape_text(text)
    shapes_errors = [
        (GemmShape("fp8_gemm_nt", 0, 128), "n must be a positive integer"),
        (GemmShape("fp8_gemm_nt", 128, 128, out_dtype="fp16"), "out_dtype must be one of"),
        (GemmShape("fp8_gemm_nt", 128, 128, has_c=True), "has_c needs out_dtype 'fp32'"),
        (GemmShape("m_grouped_fp8_gemm_nt_masked", 128, 128, num_groups=2), "max_m"),
        (GemmShape("k_grouped_fp8_gemm_nt_contiguous", 128, 0, num_groups=2), "need m_values"),
        (GemmShape("fp8_gemm_nt", 128, 128, compiled_dims="mnk"), "one kernel per M"),
    ]
    for shape, message in shapes_errors:
        with pytest.raises(ValueError, match=message):
            plan_kernels([shape], 16, 132, [])


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deep_gemm.precompile", *args], cwd=OUTSIDE, capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=600)


def test_failed_compile_reports_the_compilers_message(tmp_path: Path) -> None:
    # A stand-in compiler that answers --version and fails every compile with its own message: no kernel compiles
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'Cuda compilation tools, release 0.0'; exit 0; "
                    "fi\necho 'fake-nvcc: error: precompile test failure' >&2\nexit 3\n")
    fake.chmod(0o755)
    out = run_cli("--shapes", "fp8_gemm_nt:n=256,k=256,m_values=1", "--cache-dir", str(tmp_path / "cache"),
                  "--jobs", "1", env={"DG_JIT_NVCC_COMPILER": str(fake), "DG_JIT_USE_NVRTC": "0"})
    assert out.returncode == 1, out.stderr
    assert "0 built, 0 already cached, 2 failed" in out.stderr, out.stderr
    assert "fake-nvcc: error: precompile test failure" in out.stderr
    assert "needed by fp8_gemm_nt n=256 k=256, M 1" in out.stderr
    assert "[2/2] failed sm90_gemm-nvcc-" in out.stderr or "[2/2] failed smxx_transpose_sf-nvcc-" in out.stderr
    assert not list(tmp_path.glob("cache/kernels/*"))  # (no entry for a failed compile)


SMALL_SHAPES = ["fp8_gemm_nt:n=256,k=256,m_values=1"]


@pytest.fixture(scope="module")
def precompiled(tmp_path_factory):
    """A cache filled by precompile (two jobs, the plain progress counter) for SMALL_SHAPES: (its folder, result,
    output)."""
    cache = tmp_path_factory.mktemp("precompiled")
    stream = io.StringIO()
    saved = sys.modules.get("tqdm")
    sys.modules["tqdm"] = None  # (import tqdm raises ImportError: the plain counter)
    try:
        result = deep_gemm.precompile([parse_shape_text(text) for text in SMALL_SHAPES], jobs=2, cache_dir=str(cache),
                                      stream=stream)
    finally:
        sys.modules.pop("tqdm")
        if saved is not None:
            sys.modules["tqdm"] = saved
    return cache, result, stream.getvalue()


@pytest.mark.nvcc
def test_precompile_builds_and_reports(precompiled) -> None:
    cache, result, output = precompiled
    assert result.ok, result.summary
    families = sorted(b.family for b in result.builds)
    assert families.count("sm90_gemm") in (1, 2) and families.count("smxx_transpose_sf") == 1
    assert all(b.status == "built" for b in result.builds)
    n = len(result.builds)
    for i in range(1, n + 1):
        assert f"[{i}/{n}] built " in output
    assert f"{n} kernels for sm_90a in {cache}: {n} built, 0 already cached, 0 failed" in output
    entries = sorted(p.name for p in (cache / "kernels").iterdir())
    assert entries == sorted(b.key for b in result.builds)
    assert os.environ.get("DG_JIT_CACHE_DIR") != str(cache)  # (restored after the run)


@pytest.mark.nvcc
def test_fresh_process_finds_every_kernel_cached(precompiled) -> None:
    cache, result, _ = precompiled
    before = sorted(p.name for p in (cache / "kernels").iterdir())
    # A fresh process with the cache: the kernels a launch of these shapes renders (the launcher's planning), looked
    # up and loaded through the JIT's compile path, which reports whether it compiled
    script = textwrap.dedent("""
        import json, deep_gemm
        from deep_gemm import _C
        from deep_gemm.testing import H200_CLUSTER_CTAS
        kernels = _C.render_gemm_kernels([1], 256, 256, cluster_ctas=H200_CLUSTER_CTAS)
        kernels.append(dict(family="smxx_transpose_sf", source=_C.render_kernel("smxx_transpose_sf")))
        out = []
        for k in kernels:
            entry = _C.kernel_cache_entry(k["family"], k["source"])
            built = deep_gemm.compile_kernel(k["family"], source=k["source"])
            out.append([entry["key"], entry["cached"], built["cache_hit"]])
        print(json.dumps(out))
    """)
    run = subprocess.run([sys.executable, "-c", script], cwd=OUTSIDE, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "DG_JIT_CACHE_DIR": str(cache)})
    assert run.returncode == 0, run.stderr
    looked_up = json.loads(run.stdout)
    assert sorted(key for key, _, _ in looked_up) == sorted(b.key for b in result.builds)
    assert all(cached and hit for _, cached, hit in looked_up), looked_up
    assert sorted(p.name for p in (cache / "kernels").iterdir()) == before  # zero compiles


@pytest.mark.nvcc
def test_second_run_reports_already_cached(precompiled) -> None:
    cache, result, _ = precompiled
    out = run_cli("--shapes", *SMALL_SHAPES, "--cache-dir", str(cache), "--jobs", "2")
    assert out.returncode == 0, out.stderr
    n = len(result.builds)
    assert f"{n} kernels for sm_90a in {cache}: 0 built, {n} already cached, 0 failed" in out.stderr
    assert f"[{n}/{n}] cached " in out.stderr
    # tqdm's bar, when installed, gets the total and one update per kernel
    events = []

    class FakeBar:
        def __init__(self, total, **kwargs):
            events.append(("total", total))

        def set_postfix_str(self, text, refresh):
            events.append(("postfix", text))

        def update(self, count):
            events.append(("update", count))

        def close(self):
            events.append(("close",))

    saved = sys.modules.get("tqdm")
    sys.modules["tqdm"] = types.SimpleNamespace(tqdm=FakeBar)
    try:
        again = deep_gemm.precompile([parse_shape_text(t) for t in SMALL_SHAPES], cache_dir=str(cache),
                                     stream=io.StringIO())
    finally:
        sys.modules.pop("tqdm")
        if saved is not None:
            sys.modules["tqdm"] = saved
    assert len(again.cached) == n
    assert events[0] == ("total", n) and events.count(("update", 1)) == n and events[-1] == ("close",)


@pytest.mark.nvcc
def test_failed_source_through_the_python_api(tmp_path: Path) -> None:
    stream = io.StringIO()
    broken = RenderedKernel("smxx_transpose_sf", '#error "precompile test: this source does not compile"\n')
    result = deep_gemm.precompile([broken], jobs=1, cache_dir=str(tmp_path), stream=stream)
    assert not result.ok and len(result.failed) == 1
    assert "precompile test: this source does not compile" in result.failed[0].error
    assert "1 kernels for sm_90a" in result.summary and "0 built, 0 already cached, 1 failed" in result.summary
    assert "precompile test: this source does not compile" in stream.getvalue()


# ---------------------------------------------------------------------------------------------- GPU tier
GPU_CALLS = """
import sys, torch, deep_gemm
from deep_gemm.utils import per_token_cast_to_fp8, per_block_cast_to_fp8
torch.manual_seed(0)
def fp8_gemm(m, n, k):
    a = per_token_cast_to_fp8(torch.randn(m, k, device="cuda"), use_ue8m0=False)
    b = per_block_cast_to_fp8(torch.randn(n, k, device="cuda"), use_ue8m0=False)
    deep_gemm.fp8_gemm_nt(a, b, torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
def masked(g, max_m, expected_m, n, k):
    a = per_token_cast_to_fp8(torch.randn(g * max_m, k, device="cuda"), use_ue8m0=False)
    b = per_block_cast_to_fp8(torch.randn(g * n, k, device="cuda"), use_ue8m0=False)
    a = (a[0].view(g, max_m, k), a[1].view(g, max_m, -1))
    b = (b[0].view(g, n, k), b[1].view(g, -1, b[1].size(-1)))
    d = torch.empty(g, max_m, n, device="cuda", dtype=torch.bfloat16)
    masked_m = torch.full((g,), expected_m, device="cuda", dtype=torch.int32)
    deep_gemm.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m)
def contiguous(g, rows, n, k):
    a = per_token_cast_to_fp8(torch.randn(g * rows, k, device="cuda"), use_ue8m0=False)
    b = per_block_cast_to_fp8(torch.randn(g * n, k, device="cuda"), use_ue8m0=False)
    b = (b[0].view(g, n, k), b[1].view(g, -1, b[1].size(-1)))
    layout = torch.arange(g, device="cuda", dtype=torch.int32).repeat_interleave(rows)
    d = torch.empty(g * rows, n, device="cuda", dtype=torch.bfloat16)
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous(a, b, d, layout)
def mqa_logits(s, s_kv, heads, dim):
    q = torch.randn(s, heads, dim, device="cuda").to(torch.float8_e4m3fn)
    kv = torch.randn(s_kv, dim, device="cuda").to(torch.float8_e4m3fn)
    scales = torch.rand(s_kv, device="cuda")
    weights = torch.randn(s, heads, device="cuda")
    ks = torch.zeros(s, device="cuda", dtype=torch.int32)
    ke = torch.full((s,), s_kv, device="cuda", dtype=torch.int32)
    deep_gemm.fp8_mqa_logits(q, (kv, scales), weights, ks, ke)
for m in (1, 64, 200, 4096):
    fp8_gemm(m, 2112, 7168)
    fp8_gemm(m, 7168, 2048)
for expected_m in (8, 100):
    masked(4, 128, expected_m, 4096, 7168)
contiguous(4, 128, 4096, 7168)
mqa_logits(300, 1000, 64, 128)
torch.cuda.synchronize()
"""


@pytest.mark.gpu
def test_gpu_precompiled_cache_gives_zero_compiles(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    # The device's cluster capacity, as the launcher measures and prints it at its first GEMM (in a throwaway cache)
    probe = subprocess.run([sys.executable, "-c", GPU_CALLS.split("for m in")[0] + "fp8_gemm(128, 256, 256)"],
                           cwd=OUTSIDE, capture_output=True, text=True, timeout=600,
                           env={**os.environ, "DG_PRINT_CONFIGS": "1", "DG_JIT_CACHE_DIR": str(tmp_path / "probe")})
    assert probe.returncode == 0, probe.stderr
    line = next(x for x in probe.stderr.splitlines() if "whole clusters of each size fill" in x)
    sizes = dict(item.split(":") for item in line.split("(size:CTAs)")[1].split())
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    cluster_ctas = [num_sms] + [int(sizes[str(size)]) for size in range(2, 9)]

    cache = tmp_path / "cache"
    shapes = [GemmShape("fp8_gemm_nt", 2112, 7168), GemmShape("fp8_gemm_nt", 7168, 2048),
              GemmShape("m_grouped_fp8_gemm_nt_masked", 4096, 7168, num_groups=4, max_m=128),
              GemmShape("m_grouped_fp8_gemm_nt_contiguous", 4096, 7168, num_groups=4, m_values=(512,)),
              MqaLogitsShape(64, 128)]
    result = deep_gemm.precompile(shapes, max_tokens=4096, num_sms=num_sms, cluster_ctas=cluster_ctas,
                                  cache_dir=str(cache), stream=io.StringIO())
    assert result.ok, result.summary
    before = sorted(p.name for p in (cache / "kernels").iterdir())
    run = subprocess.run([sys.executable, "-c", GPU_CALLS], cwd=OUTSIDE, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "DG_JIT_CACHE_DIR": str(cache)})
    assert run.returncode == 0, run.stderr
    after = sorted(p.name for p in (cache / "kernels").iterdir())
    assert after == before, f"compiled at run time: {sorted(set(after) - set(before))}"
