"""CPU tier: the JIT renders and compiles every kernel family for sm_90a with NVCC and NVRTC, and
its disk cache is content-addressed, atomic, process-safe and self-healing."""

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
from jit_helpers import compile_in_subprocess, dump_sass, finish, run_python

import deep_gemm

LAYOUT_FAMILIES = ["smxx_transpose_sf", "smxx_pack_ue8m0"]
HELPER_KERNELS = [
    ("smxx_transpose_sf", {}),
    ("smxx_pack_ue8m0", {}),
    ("smxx_transpose_fp8", {"aligned": 1}),  # the tn k-grouped FP8 GEMM's pre-pass
    ("smxx_transpose_fp8", {"aligned": 0}),
    ("smxx_zero_padding_rows", {"psum_layout": 0}),  # ensure_zero_padding of the m-grouped contiguous GEMMs
    ("smxx_zero_padding_rows", {"psum_layout": 1}),
    ("smxx_zero_padding_rows", {"group_segments": 1}),
    ("smxx_fold_scales", {"fp4_in": 0}),  # FP8 x FP4 GEMMs' A with 1x32 scales, folded to 1x128
    ("smxx_fold_scales", {"fp4_in": 1}),
    ("smxx_paged_mqa_schedule", {}),  # get_paged_mqa_logits_metadata on CUDA tensors
    ("smxx_mqa_logits_pieces", {"num_heads": 64, "head_dim": 128}),  # fp8_mqa_logits' pre-pass (signed sums)
    ("smxx_mqa_logits_pieces", {"num_heads": 32, "head_dim": 64}),
    ("sm90_fp8_mqa_logits", {"num_heads": 64, "head_dim": 128}),  # SASS checks: tests/test_mqa_logits.py
    ("sm90_fp8_paged_mqa_logits", {"next_n": 2, "num_heads": 64, "head_dim": 128}),  # SASS: test_mqa_logits.py
]
GEMM_CONFIGS = [
    dict(shape_n=7168, shape_k=7168, block_m=128, block_n=160, num_stages=5),
    dict(shape_n=2112, shape_k=7168, block_m=128, block_n=128, num_stages=5),
    dict(shape_n=4096, shape_k=7168, block_m=64, block_n=144, num_stages=6),
    dict(shape_n=576, shape_k=7168, block_m=64, block_n=112, num_stages=7, use_tma_store=0),
    dict(shape_n=24576, shape_k=1536, block_m=256, block_n=64, num_stages=4),
    dict(block_m=128, block_n=128, num_stages=4),  # all dimensions at run time
    dict(shape_n=7168, shape_k=7168, block_m=128, block_n=160, num_stages=5, num_multicast=2),
    dict(shape_n=4096, shape_k=7168, block_m=128, block_n=144, num_stages=5, num_multicast=2, is_multicast_on_a=1),
    dict(shape_n=7168, shape_k=16384, block_m=64, block_n=64, num_stages=8, num_multicast=2, is_multicast_on_a=1),
    dict(shape_n=7168, shape_k=16384, block_m=192, block_n=128, num_stages=4, num_multicast=2),  # three math WGs
    # split-K (one cluster per tile: the partial sums exchanged in shared memory, D stored directly)
    dict(shape_n=2112, shape_k=7168, block_m=64, block_n=112, num_stages=8, num_splits=3),
    dict(shape_n=2112, shape_k=7168, block_m=128, block_n=48, num_stages=8, num_splits=2),
    dict(shape_n=576, shape_k=7168, block_m=64, block_n=64, num_stages=6, num_splits=8),  # the largest cluster
    dict(shape_n=2112, shape_k=7168, block_m=64, block_n=96, num_stages=6, per_row_sfb=1, num_splits=3),  # FP32 D
    # recipe (1, 1, 128): per-row sfb by TMA, FP32 output (+ C) stored directly
    dict(shape_n=7168, shape_k=7168, block_m=128, block_n=128, num_stages=5, per_row_sfb=1),
    dict(shape_n=2112, shape_k=7168, block_m=64, block_n=160, num_stages=6, per_row_sfb=1),
    # m-grouped contiguous: per-row group ids, and the psum layout
    dict(shape_n=4096, shape_k=7168, block_m=128, block_n=128, num_stages=5, gemm_type=1),
    dict(shape_n=7168, shape_k=2048, block_m=64, block_n=112, num_stages=6, gemm_type=2),
    dict(shape_n=4096, shape_k=7168, block_m=64, block_n=128, num_stages=6, gemm_type=3),  # masked
    dict(shape_n=7168, shape_k=7168, block_m=192, block_n=128, num_stages=4),  # three math warpgroups
    dict(shape_n=7168, shape_k=7168, block_m=128, block_n=192, num_stages=4),  # 96 + 96 accumulators (forced only)
    # stream-K: partial sums through a global workspace, a flag per tile
    dict(shape_n=7168, shape_k=16384, block_m=192, block_n=128, num_stages=4, stream_k=1),
    dict(shape_n=4096, shape_k=7168, block_m=128, block_n=128, num_stages=5, overlap_promotion=1, stream_k=1),
    dict(shape_n=7168, shape_k=7168, block_m=128, block_n=128, num_stages=5, per_row_sfb=1, stream_k=1),
    # k-grouped (weight gradients): per-group TMA maps in the parameters, recipe (1, 1, 128)
    dict(shape_m=4096, shape_n=7168, block_m=128, block_n=128, num_stages=5, per_row_sfb=1, gemm_type=4),
    dict(shape_m=4096, shape_n=7168, block_m=192, block_n=128, num_stages=4, per_row_sfb=1, gemm_type=4),
    dict(shape_n=7168, shape_k=7168, block_m=192, block_n=128, num_stages=4, per_row_sfb=1),
    dict(
        shape_m=7168, shape_n=2048, block_m=128, block_n=112, num_stages=5, per_row_sfb=1, gemm_type=4, max_k_groups=120
    ),
    # overlapped promotion (two partial buffers): decode split-K, two warpgroups, per-row sfb, masked, k-grouped
    dict(shape_n=4096, shape_k=7168, block_m=64, block_n=80, num_stages=8, num_splits=2, overlap_promotion=1),
    dict(shape_n=4096, shape_k=7168, block_m=128, block_n=128, num_stages=5, overlap_promotion=1),
    dict(block_m=64, block_n=96, num_stages=6, overlap_promotion=1),  # all dimensions at run time
    dict(shape_n=2112, shape_k=7168, block_m=128, block_n=128, num_stages=5, per_row_sfb=1, overlap_promotion=1),
    dict(shape_n=4096, shape_k=7168, block_m=128, block_n=128, num_stages=5, gemm_type=3, overlap_promotion=1),
    dict(
        shape_m=4096,
        shape_n=7168,
        block_m=256,
        block_n=64,
        num_stages=3,
        per_row_sfb=1,
        gemm_type=4,
        overlap_promotion=1,
    ),
]
# BF16 operands (no scales, no promotion): every layout, BF16 / FP32 D, C, grouped modes
BF16_GEMM_CONFIGS = [
    dict(bf16=1, shape_n=7168, shape_k=7168, block_m=128, block_n=256, num_stages=3),  # nt
    dict(bf16=1, mn_major_b=1, shape_n=7168, shape_k=2048, block_m=128, block_n=256, num_stages=3),  # nn
    dict(bf16=1, mn_major_a=1, mn_major_b=1, block_m=256, block_n=128, num_stages=3),  # tn
    dict(bf16=1, mn_major_a=1, block_m=64, block_n=128, num_stages=8),  # tt
    dict(bf16=1, fp32_out=1, has_c=1, shape_n=129280, shape_k=7168, block_m=128, block_n=256, num_stages=4),
    dict(bf16=1, has_c=1, shape_n=2112, shape_k=7168, block_m=128, block_n=112, num_stages=6),  # BF16 D + C
    dict(bf16=1, shape_n=2112, shape_k=7168, block_m=64, block_n=64, num_stages=8, num_splits=4),  # split-K
    dict(bf16=1, fp32_out=1, has_c=1, shape_n=2112, shape_k=7168, block_m=128, block_n=64, num_stages=7, num_splits=3),
    dict(bf16=1, shape_n=4096, shape_k=7168, block_m=128, block_n=128, num_stages=5, num_multicast=2),
    dict(bf16=1, fp32_out=1, has_c=1, shape_n=7168, shape_k=7168, block_m=128, block_n=256, num_stages=4, stream_k=1),
    dict(bf16=1, mn_major_b=1, shape_n=4096, shape_k=7168, block_m=128, block_n=192, num_stages=4, gemm_type=1),
    dict(bf16=1, shape_n=7168, shape_k=2048, block_m=64, block_n=256, num_stages=4, gemm_type=3),  # masked
    dict(
        bf16=1,
        mn_major_a=1,
        mn_major_b=1,
        fp32_out=1,
        shape_m=4096,
        shape_n=7168,
        block_m=128,
        block_n=128,
        num_stages=5,
        gemm_type=4,
        max_k_groups=16,
    ),  # k-grouped tn
]


def gemm_id(cfg: dict) -> str:
    return "-".join(f"{k.replace('shape_', '').replace('block_', 'b').replace('num_', '')}{v}" for k, v in cfg.items())


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(path))
    return path


def check_clean(result: dict) -> None:
    assert result["registers"] > 0, result["ptxas_report"]
    assert result["stack_frame_bytes"] == 0, result["ptxas_report"]
    assert result["spill_store_bytes"] == 0 and result["spill_load_bytes"] == 0, result["ptxas_report"]
    assert os.path.getsize(result["cubin_path"]) > 0


def check_stream_k_sass(cfg: dict, lines: list[str]) -> None:
    """Stream-K kernels publish a contribution with a GPU-scope reduction and wait with GPU-scope loads; others
    have neither."""
    published = any("REDG.E.ADD.STRONG.GPU" in line for line in lines)
    awaited = any("LDG.E.STRONG.GPU" in line for line in lines)
    assert published == awaited == bool(cfg.get("stream_k")), cfg


@pytest.mark.parametrize("use_nvrtc", [False, True], ids=["nvcc", "nvrtc"])
@pytest.mark.parametrize(("family", "params"), HELPER_KERNELS, ids=lambda x: x if isinstance(x, str) else "")
def test_helper_kernels_compile(cache_dir: Path, family: str, params: dict, use_nvrtc: bool) -> None:
    result = deep_gemm.compile_kernel(family, params, use_nvrtc=use_nvrtc)
    assert result["compiler"] == ("nvrtc" if use_nvrtc else "nvcc")
    assert not result["cache_hit"]
    # The cache entry is named after the family the registry knows it by: the name a launch renders it under, so a
    # cache deep_gemm.precompile builds serves the run
    assert Path(result["cubin_path"]).parent.name.startswith(f"{family}-"), result["cubin_path"]
    check_clean(result)


def check_no_r2ur_before_mma(lines: list[str], mma: str) -> None:
    """No wgmma (`mma`: QGMMA or HGMMA) of the SASS `lines` takes a descriptor (gdesc[URn]: the A and B descriptors
    in URn .. URn+3) whose last writer among the 40 instructions before it is an R2UR."""
    instructions = [m.group(1) for line in lines if (m := re.search(r"/\*[0-9a-f]{4}\*/\s+(.*?)\s*;", line))]
    for i, line in enumerate(instructions):
        if mma not in line or not (desc := re.search(r"gdesc\[UR(\d+)\]", line)):
            continue
        pending = set(range(int(desc.group(1)), int(desc.group(1)) + 4))
        for prev in reversed(instructions[max(0, i - 40) : i]):
            written = re.match(r"(?:@!?U?P\d+ )?(\S+) UR(\d+)\b", prev)
            if not written:
                continue
            first = int(written.group(2))
            regs = {first, first + 1} if ".64" in written.group(1) else {first}
            assert not (written.group(1).startswith("R2UR") and regs & pending), f"R2UR into a {mma} descriptor: {prev}"
            pending -= regs


@pytest.mark.parametrize("use_nvrtc", [False, True], ids=["nvcc", "nvrtc"])
@pytest.mark.parametrize("cfg", GEMM_CONFIGS, ids=gemm_id)
def test_fp8_gemm_compiles_with_qgmma(cache_dir: Path, cfg: dict, use_nvrtc: bool) -> None:
    result = deep_gemm.compile_kernel("sm90_gemm", cfg, use_nvrtc=use_nvrtc)
    check_clean(result)
    sass = dump_sass(result["cubin_path"])
    lines = sass.splitlines()
    # FP8 tensor-core MMAs, 4 per 64 rows per 128-deep K block (overlapped promotion: issued from three places,
    # the first block and each of the loop's two steps)
    # (stream-K: the whole tiles' loop and the shared tiles' loop each have their copy)
    num_qgmma = sum("QGMMA" in line for line in lines)
    rows_per_wg = cfg["block_m"] // {64: 1, 192: 3}.get(cfg["block_m"], 2)
    sites = (3 if cfg.get("overlap_promotion") else 1) * (2 if cfg.get("stream_k") else 1)
    assert num_qgmma == 4 * (rows_per_wg // 64) * sites, f"expected QGMMA per K block, found {num_qgmma}"
    # The wgmma descriptors are built in uniform registers, not moved there in the K loop (R2UR: a stream-K
    # kernel with 16 of them per K block ran 20 % slower on the H200). Checked where that was measured or fixed:
    # the three-warpgroup, stream-K and masked kernels (64 x 112 tiles do have R2URs there)
    if cfg.get("stream_k") or cfg["block_m"] == 192 or cfg.get("gemm_type") == 3:
        check_no_r2ur_before_mma(lines, "QGMMA")
    # No wgmma wait injected by ptxas (C7517) and no serialized wgmmas (C7514): the overlap would be lost
    assert "C7517" not in result["ptxas_report"] and "C7514" not in result["ptxas_report"], result["ptxas_report"]
    if cfg.get("overlap_promotion"):
        # the steady-state loop waits with one group in flight, twice per iteration
        copies = 2 if cfg.get("stream_k") else 1
        assert sum("WARPGROUP.DEPBAR.LE gsb0, 0x1" in line for line in lines) == 2 * copies, (
            "expected two waits leaving one group"
        )
    assert not any("HMMA" in line for line in lines), "FP8 path must not fall back to HMMA"
    check_stream_k_sass(cfg, lines)
    assert not any(op in line for line in lines for op in ("LDL", "STL")), "local memory in SASS"
    # Register reallocation between producer and math warpgroups
    assert sum("USETMAXREG" in line for line in lines) == 2
    # TMA loads; TMA stores unless disabled
    assert any("UTMALDG" in line for line in lines)
    # (FP32 D of recipe (1, 1, 128) too, in 32-column chunks)
    default_tma_store = cfg.get("num_splits", 1) == 1 and not (cfg.get("per_row_sfb", 0) and cfg["block_n"] % 32)
    assert any("UTMASTG" in line for line in lines) == bool(cfg.get("use_tma_store", default_tma_store))


@pytest.mark.parametrize("use_nvrtc", [False, True], ids=["nvcc", "nvrtc"])
@pytest.mark.parametrize("cfg", BF16_GEMM_CONFIGS, ids=gemm_id)
def test_bf16_gemm_compiles_with_hgmma(cache_dir: Path, cfg: dict, use_nvrtc: bool) -> None:
    result = deep_gemm.compile_kernel("sm90_gemm", cfg, use_nvrtc=use_nvrtc)
    check_clean(result)
    lines = dump_sass(result["cubin_path"]).splitlines()
    # BF16 tensor-core MMAs (4 k16 steps per 64 rows per 64-deep K block; the compiler may peel the loop)
    num_hgmma = sum("HGMMA" in line for line in lines)
    rows_per_wg = cfg["block_m"] // (1 if cfg["block_m"] == 64 else 2)
    assert num_hgmma > 0 and num_hgmma % (4 * (rows_per_wg // 64)) == 0, f"found {num_hgmma} HGMMA"
    assert not any("QGMMA" in line or " HMMA" in line for line in lines)
    check_stream_k_sass(cfg, lines)
    if cfg.get("gemm_type") == 3:  # (masked: the tile loop ends on the unit count, see test_fp8_gemm_compiles_with_qgmma)
        check_no_r2ur_before_mma(lines, "HGMMA")
    assert not any(op in line for line in lines for op in ("LDL", "STL")), "local memory in SASS"
    assert sum("USETMAXREG" in line for line in lines) == 2
    assert any("UTMALDG" in line for line in lines)
    # FP32 D goes through TMA (in place: a TMA reduce-add); BF16 D with a C, and split-K tiles, directly
    fp32 = cfg.get("fp32_out", 0)
    direct = cfg.get("num_splits", 1) > 1 or (cfg.get("has_c", 0) and not fp32) or (fp32 and cfg["block_n"] % 32)
    assert any("UTMASTG" in line for line in lines) == (not direct)
    assert any("UTMAREDG" in line for line in lines) == bool(fp32 and not direct)


@pytest.mark.nvcc
@pytest.mark.nvrtc
def test_nvcc_and_nvrtc_keep_separate_entries(cache_dir: Path) -> None:
    a = deep_gemm.compile_kernel("smxx_transpose_sf", {}, use_nvrtc=False)
    b = deep_gemm.compile_kernel("smxx_transpose_sf", {}, use_nvrtc=True)
    assert a["entry_dir"] != b["entry_dir"]
    assert a["source"] == b["source"]


@pytest.mark.nvcc
def test_second_compile_in_new_process_is_a_cache_hit(cache_dir: Path) -> None:
    first = finish(compile_in_subprocess(cache_dir, "smxx_transpose_sf", {}))
    second = finish(compile_in_subprocess(cache_dir, "smxx_transpose_sf", {}))
    assert not first["cache_hit"]
    assert second["cache_hit"]
    assert first["entry_dir"] == second["entry_dir"]


@pytest.mark.nvcc
def test_compile_from_recorded_source_and_prebuilt_cache(tmp_path: Path) -> None:
    # A run's cache -> its sources (tools/jit_cache_io.sh) -> rebuilt elsewhere (tools/prebuild_jit_cache.py) ->
    # unpacked into a third cache, where the kernel is a hit under the same entry name.
    repo = Path(__file__).resolve().parent.parent
    run_cache, target = tmp_path / "run", tmp_path / "target"
    recorded = Path(finish(compile_in_subprocess(run_cache, "smxx_transpose_sf", {}))["entry_dir"]).name
    sources, tarball = tmp_path / "jit-sources.tgz", tmp_path / "prebuilt" / "kernels.tar.gz"
    env = dict(os.environ, DG_JIT_CACHE_DIR=str(run_cache))
    subprocess.run(
        ["bash", "-c", f"source tools/jit_cache_io.sh && jit_cache_sources {sources}"], cwd=repo, env=env, check=True
    )
    tool_tmp = tmp_path / "tool-tmp"  # (the tool's scratch cache must not outlive it)
    tool_tmp.mkdir()
    tool = subprocess.run(
        [sys.executable, "tools/prebuild_jit_cache.py", str(sources), "--out", str(tarball), "--jobs", "1"],
        cwd=repo,
        capture_output=True,
        text=True,
        env=dict(os.environ, TMPDIR=str(tool_tmp)),
    )
    assert tool.returncode == 0, tool.stdout + tool.stderr
    assert not any(tool_tmp.iterdir()), list(tool_tmp.iterdir())
    assert "1 entries (1 of the 1 recorded sources with the recorded key)" in tool.stdout, tool.stdout
    (target / "kernels").mkdir(parents=True)
    with tarfile.open(tarball) as tar:
        assert {Path(name).parts[0] for name in tar.getnames()} == {recorded}
        tar.extractall(target / "kernels", filter="data")
    again = finish(compile_in_subprocess(target, "smxx_transpose_sf", {}))
    assert again["cache_hit"] and Path(again["entry_dir"]).name == recorded

    with pytest.raises(ValueError, match="either params or source"):
        deep_gemm.compile_kernel("smxx_transpose_sf", {"aligned": 1}, source="// nothing")


@pytest.mark.nvcc
def test_cache_key_has_no_absolute_path(tmp_path: Path) -> None:
    # The same kernel in two cache roots gets the same entry name: nothing of the location is hashed.
    names = []
    for root in ("one", "two"):
        proc = compile_in_subprocess(tmp_path / root, "smxx_pack_ue8m0", {})
        names.append(Path(finish(proc)["entry_dir"]).name)
    assert names[0] == names[1]


@pytest.mark.parametrize("use_nvrtc", [False, True], ids=["nvcc", "nvrtc"])
def test_concurrent_compiles_leave_one_entry(cache_dir: Path, use_nvrtc: bool) -> None:
    cfg = dict(shape_n=2112, shape_k=7168, block_m=128, block_n=112, num_stages=5)
    procs = [compile_in_subprocess(cache_dir, "sm90_gemm", cfg, use_nvrtc) for _ in range(4)]
    results = [finish(p) for p in procs]
    assert len({r["entry_dir"] for r in results}) == 1
    entries = [p for p in (cache_dir / "kernels").iterdir()]
    assert len(entries) == 1, entries
    tmp = cache_dir / "tmp"
    assert not tmp.exists() or not any(tmp.iterdir()), list(tmp.iterdir())
    assert sorted(p.name for p in entries[0].iterdir()) == ["kernel.cu", "kernel.cubin", "manifest", "ptxas.log"]


@pytest.mark.nvcc
@pytest.mark.parametrize("damage", ["truncate", "garble", "drop_manifest", "drop_cubin"])
def test_corrupt_entry_is_rebuilt(cache_dir: Path, damage: str) -> None:
    first = deep_gemm.compile_kernel("smxx_pack_ue8m0", {})
    cubin = Path(first["cubin_path"])
    good = cubin.read_bytes()
    if damage == "truncate":
        cubin.write_bytes(good[: len(good) // 2])
    elif damage == "garble":
        cubin.write_bytes(bytes(b ^ 0xFF for b in good))
    elif damage == "drop_manifest":
        (cubin.parent / "manifest").unlink()
    else:
        cubin.unlink()
    # A new process (the in-memory map of this one does not matter for the disk cache)
    again = finish(compile_in_subprocess(cache_dir, "smxx_pack_ue8m0", {}))
    assert not again["cache_hit"], "a damaged entry must be recompiled"
    assert Path(again["cubin_path"]).read_bytes() == good
    assert finish(compile_in_subprocess(cache_dir, "smxx_pack_ue8m0", {}))["cache_hit"]


@pytest.mark.parametrize("use_nvrtc", [False, True], ids=["nvcc", "nvrtc"])
def test_failed_compile_raises_with_log_and_leaves_no_entry(cache_dir: Path, use_nvrtc: bool) -> None:
    # BLOCK_N = 8 cannot use the TMA-store epilogue: a static_assert in the kernel fails
    with pytest.raises(RuntimeError, match="TMA store"):
        deep_gemm.compile_kernel("sm90_gemm", dict(block_m=128, block_n=8, store_chunk_n=16), use_nvrtc=use_nvrtc)
    kernels = cache_dir / "kernels"
    assert not kernels.exists() or not any(kernels.iterdir())
    tmp = cache_dir / "tmp"
    assert not tmp.exists() or not any(tmp.iterdir())


@pytest.mark.parametrize(
    ("params", "pattern"),
    [
        # (FP32 D through TMA: 128 columns are 4 chunks)
        (dict(bf16=1, fp32_out=1, has_c=1, block_n=128, fp32_buffers=5), r"fp32_buffers must be 1..BLOCK_N / 32 \(4\)"),
        (dict(bf16=1, fp32_out=1, block_n=128, fp32_buffers=0), r"fp32_buffers must be 1..BLOCK_N / 32 \(4\)"),
        # (BF16 D has no FP32 staging)
        (dict(block_m=128, block_n=128, fp32_buffers=2), r"0 otherwise; got 2"),
    ],
    ids=["too-many", "none", "bf16-d"],
)
def test_bad_fp32_buffers_raise_before_compiling(cache_dir: Path, params: dict, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.compile_kernel("sm90_gemm", params, use_nvrtc=False)
    kernels = cache_dir / "kernels"
    assert not kernels.exists() or not any(kernels.iterdir())


def test_unknown_family_raises(cache_dir: Path) -> None:
    with pytest.raises(ValueError, match="unknown kernel family 'nope'"):
        deep_gemm.compile_kernel("nope", {})
    assert set(LAYOUT_FAMILIES + ["sm90_gemm"]) <= set(deep_gemm.kernel_families())


@pytest.mark.parametrize(
    ("family", "params", "pattern"),
    [
        ("sm90_gemm", {"blok_m": 128}, r"unknown parameter 'blok_m' for kernel family 'sm90_gemm'; it takes shape_m, "),
        ("sm90_gemm", {"block_m": 128, "stages": 4}, r"unknown parameter 'stages' for kernel family 'sm90_gemm'"),
        ("smxx_transpose_sf", {"aligned": 1}, r"unknown parameter 'aligned' .*; it takes no parameters"),
        ("sm90_fp8_mqa_logits", {"heads": 64}, r"unknown parameter 'heads' .* it takes num_heads, head_dim, "),
        ("smxx_transpose_fp8", {"align": 1}, r"unknown parameter 'align' .* it takes aligned$"),
    ],
)
def test_unknown_parameter_raises_naming_it(cache_dir: Path, family: str, params: dict, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.compile_kernel(family, params, use_nvrtc=False)
    assert not (cache_dir / "kernels").exists()


@pytest.mark.parametrize(
    ("family", "params"),
    [
        ("sm90_gemm", dict(block_m=256, block_n=256, num_stages=8)),  # 64 KiB of A and B per stage
        ("sm90_gemm", dict(shape_n=7168, shape_k=7168, block_m=128, block_n=160, num_stages=9)),
        ("sm90_gemm", dict(bf16=1, block_m=128, block_n=256, num_stages=5)),
        ("sm90_fp8_mqa_logits", dict(num_heads=64, head_dim=128, num_stages=40)),
        ("sm90_fp8_paged_mqa_logits", dict(next_n=2, num_heads=64, head_dim=128, num_stages=40)),
    ],
)
def test_config_beyond_shared_memory_raises_before_compiling(cache_dir: Path, family: str, params: dict) -> None:
    with pytest.raises(ValueError, match=rf"{family}: this configuration needs (\d+) bytes of shared memory, an SM90 "
                       r"block can have at most 232448") as error:
        deep_gemm.compile_kernel(family, params, use_nvrtc=False)
    needed = int(str(error.value).split(" needs ")[1].split(" ")[0])
    assert needed > 232448
    assert not (cache_dir / "kernels").exists()


def test_compile_kernel_documents_every_parameter() -> None:
    doc = deep_gemm.compile_kernel.__doc__
    for family in deep_gemm.kernel_families():
        assert f"  {family}:" in doc, family
    for name in ("block_m", "num_stages", "num_multicast", "stream_k", "gemm_type", "next_n", "block_kv", "aligned"):
        assert f"    {name}: " in doc, name
    assert "more shared\nmemory than an SM90 block has" in doc


def test_bad_arch_raises(cache_dir: Path) -> None:
    with pytest.raises(ValueError, match="arch must look like"):
        deep_gemm.compile_kernel("smxx_transpose_sf", {}, arch="hopper")


def test_missing_nvcc_raises_clearly(cache_dir: Path) -> None:
    # The toolchain is resolved once per process: check in a fresh one
    env = dict(DG_JIT_NVCC_COMPILER="/nonexistent/nvcc", DG_JIT_CACHE_DIR=str(cache_dir))
    code = "import deep_gemm; deep_gemm.compile_kernel('smxx_transpose_sf', {}, use_nvrtc=False)"
    result = run_python(code, env, cache_dir.parent)
    assert result.returncode != 0
    assert "NVCC not found" in result.stderr and "/nonexistent/nvcc" in result.stderr


@pytest.mark.nvcc
def test_ptxas_verbose_and_check_flags(cache_dir: Path) -> None:
    env = dict(
        DG_JIT_CACHE_DIR=str(cache_dir),
        DG_JIT_PTXAS_VERBOSE="1",
        DG_JIT_PTXAS_CHECK="1",
        DG_JIT_PRINT_COMPILER_COMMAND="1",
    )
    code = "import deep_gemm; deep_gemm.compile_kernel('smxx_transpose_sf', {}, use_nvrtc=False)"
    result = run_python(code, env, cache_dir.parent)
    assert result.returncode == 0, result.stderr
    assert "ptxas report of smxx_transpose_sf" in result.stderr
    assert "nvcc" in result.stderr and "-gencode=arch=compute_90a,code=sm_90a" in result.stderr


@pytest.mark.nvcc
def test_dump_ptx_and_sass(cache_dir: Path) -> None:
    env = dict(DG_JIT_CACHE_DIR=str(cache_dir), DG_JIT_DUMP_PTX="1", DG_JIT_DUMP_SASS="1")
    code = (
        "import deep_gemm; r = deep_gemm.compile_kernel('sm90_gemm', "
        "dict(shape_n=2112, shape_k=7168, block_m=128, block_n=112), use_nvrtc=False); print(r['entry_dir'])"
    )
    result = run_python(code, env, cache_dir.parent)
    assert result.returncode == 0, result.stderr
    entry = Path(result.stdout.strip().splitlines()[-1])
    assert ".target sm_90a" in (entry / "kernel.ptx").read_text()
    sass = (entry / "kernel.sass").read_text()
    assert "QGMMA" in sass and "SASS of" in result.stderr


@pytest.mark.nvcc
def test_dump_asm_dumps_ptx_and_sass(cache_dir: Path) -> None:
    # DG_JIT_DUMP_ASM (the reference's name) is DG_JIT_DUMP_PTX and DG_JIT_DUMP_SASS together
    env = dict(DG_JIT_CACHE_DIR=str(cache_dir), DG_JIT_DUMP_ASM="1")
    code = (
        "import deep_gemm; r = deep_gemm.compile_kernel('smxx_transpose_fp8', {}, use_nvrtc=False); "
        "print(r['entry_dir'])"
    )
    result = run_python(code, env, cache_dir.parent)
    assert result.returncode == 0, result.stderr
    entry = Path(result.stdout.strip().splitlines()[-1])
    assert ".target sm_90a" in (entry / "kernel.ptx").read_text()
    assert (entry / "kernel.sass").read_text().strip() and "SASS of" in result.stderr


@pytest.mark.gpu
def test_print_load_time(cache_dir: Path) -> None:
    # DG_JIT_PRINT_LOAD_TIME: one line per kernel made ready, saying whether it was compiled or read from the cache
    code = """
import torch, deep_gemm
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8
a = per_token_cast_to_fp8(torch.randn(64, 512, device="cuda", dtype=torch.bfloat16), use_ue8m0=False)
b = per_block_cast_to_fp8(torch.randn(256, 512, device="cuda", dtype=torch.bfloat16), use_ue8m0=False)
d = torch.empty(64, 256, device="cuda", dtype=torch.bfloat16)
deep_gemm.fp8_gemm_nt(a, b, d)
torch.cuda.synchronize()
"""
    env = dict(DG_JIT_CACHE_DIR=str(cache_dir), DG_JIT_PRINT_LOAD_TIME="1")
    first = run_python(code, env, cache_dir.parent)
    assert first.returncode == 0, first.stderr
    assert re.search(r"\[deep_gemm JIT\] sm90_gemm ready in [0-9.]+ ms \(compiled\)", first.stderr), first.stderr
    second = run_python(code, env, cache_dir.parent)
    assert second.returncode == 0, second.stderr
    assert re.search(r"sm90_gemm ready in [0-9.]+ ms \(disk cache hit\)", second.stderr), second.stderr


@pytest.mark.nvcc
@pytest.mark.nvrtc
@pytest.mark.gpu
def test_nvcc_and_nvrtc_kernels_give_the_same_results(tmp_path: Path) -> None:
    # The same FP8 GEMM compiled both ways, run on the same inputs in two processes: bitwise equal
    code = """
import sys, torch, deep_gemm
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8
torch.manual_seed(0)
a, sfa = per_token_cast_to_fp8(torch.randn(300, 7168, device="cuda", dtype=torch.bfloat16))
b, sfb = per_block_cast_to_fp8(torch.randn(2112, 7168, device="cuda", dtype=torch.bfloat16))
d = torch.empty(300, 2112, device="cuda", dtype=torch.bfloat16)
deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
torch.save(d.cpu(), sys.argv[1])
"""
    outputs = []
    for use_nvrtc in ("0", "1"):
        path = tmp_path / f"d{use_nvrtc}.pt"
        env = dict(DG_JIT_CACHE_DIR=str(tmp_path / "cache"), DG_JIT_USE_NVRTC=use_nvrtc)
        result = run_python(code.replace("sys.argv[1]", repr(str(path))), env, tmp_path)
        assert result.returncode == 0, result.stderr
        outputs.append(torch.load(path))
    assert torch.equal(outputs[0].view(torch.int16), outputs[1].view(torch.int16))
    assert sorted(p.name.split("-")[1] for p in (tmp_path / "cache" / "kernels").glob("sm90_gemm-*")) == [
        "nvcc",
        "nvrtc",
    ]
