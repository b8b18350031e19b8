"""CPU tier: the ``python -m deep_gemm.bench`` driver (registry, shape parsing, tables, exit codes)."""

import json

import pytest

import deep_gemm
from deep_gemm.bench import BenchOptions, Suite, SuiteReport, get_suite, register_suite, suite_names
from deep_gemm.bench.__main__ import main
from deep_gemm.bench.fp8_gemm import DENSE_SHAPES, parse_mnk
from deep_gemm.bench.grouped import CONTIGUOUS_SHAPES, MASKED_SHAPES, parse_gmnk
from deep_gemm.bench.report import Column, Table, geomean


def test_dense_suite_is_registered() -> None:
    assert "dense" in suite_names()
    suite = get_suite("dense")
    assert suite.parse_shape("4096x7168x2048") == (4096, 7168, 2048)
    with pytest.raises(KeyError, match="dense"):
        get_suite("nope")


def test_register_suite_rejects_duplicates() -> None:
    dup = Suite("dense", "dup", "", parse_mnk, lambda options: SuiteReport({}, True))
    with pytest.raises(ValueError, match="already registered"):
        register_suite(dup)


def test_dense_shapes() -> None:
    assert len(DENSE_SHAPES) == len(set(DENSE_SHAPES))
    assert (8192, 8192, 8192) in DENSE_SHAPES
    assert (1, 2112, 7168) in DENSE_SHAPES and (4096, 129280, 7168) in DENSE_SHAPES
    assert {m for m, _, _ in DENSE_SHAPES} == {1, 16, 32, 64, 128, 4096, 8192}


@pytest.mark.parametrize("text", ["4096x7168", "4096x7168x0", "ax1x1", "", "1x2x3x4"], ids=lambda t: t or "empty")
def test_parse_mnk_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="MxNxK"):
        parse_mnk(text)


def test_geomean_and_table() -> None:
    assert geomean([2.0, 8.0, None]) == pytest.approx(4.0)
    assert geomean([None]) is None
    table = Table([Column("M", 5), Column("speedup")])
    assert table.row(["1", "1.25"]) == "    1     1.25"
    assert table.header().splitlines()[0] == "    M  speedup"
    with pytest.raises(ValueError, match="cells"):
        table.row(["1"])


def test_main_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"]) == 0
    assert "dense" in capsys.readouterr().out


def test_main_rejects_bad_shape() -> None:
    with pytest.raises(SystemExit) as info:
        main(["--shapes", "4096x7168"])
    assert info.value.code == 2


def test_main_without_fp8_gemm_exits_non_zero(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.delattr(deep_gemm, "fp8_gemm_nt", raising=False)
    out = tmp_path / "out.json"
    assert main(["--shapes", "128x256x512", "--json", str(out)]) == 2
    assert "fp8_gemm_nt is missing" in capsys.readouterr().out
    assert "error" in json.loads(out.read_text())


def test_bench_options_defaults() -> None:
    options = BenchOptions()
    assert options.shapes is None and options.num_tests > 0 and options.flush_l2


def test_grouped_suites_are_registered() -> None:
    assert {"grouped", "masked"} <= set(suite_names())
    assert get_suite("grouped").parse_shape("8x4096x7168x2048") == (8, 4096, 7168, 2048)
    # The shape sets
    assert len(CONTIGUOUS_SHAPES) == 16 and (256, 64, 7168, 3072) in CONTIGUOUS_SHAPES
    assert (32, 20, 4096, 7168) in MASKED_SHAPES and (1, 1024, 7168, 2048) in MASKED_SHAPES


@pytest.mark.parametrize("text", ["8x4096x7168", "0x1x1x1", "ax1x1x1", "", "1x2x3x4x5"], ids=lambda t: t or "empty")
def test_parse_gmnk_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="GxMxNxK"):
        parse_gmnk(text)


def test_grouped_suite_without_gpu_reports_error(capsys) -> None:
    if __import__("torch").cuda.is_available():
        pytest.skip("checks the CPU-only behaviour")
    assert main(["--suite", "masked", "--shapes", "2x64x256x512"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().out


def test_bf16_suites_are_registered() -> None:
    from deep_gemm.bench.bf16_gemm import BF16_SHAPES, VARIANTS, parse_bf16_mnk
    from deep_gemm.bench.bf16_grouped import BF16_CONTIGUOUS_SHAPES, BF16_MASKED_SHAPES

    assert {"bf16", "bf16_grouped", "bf16_masked"} <= set(suite_names())
    assert get_suite("bf16").parse_shape("4096x7168x2048") == (4096, 7168, 2048)
    assert get_suite("bf16_grouped").parse_shape("8x4096x7168x2048") == (8, 4096, 7168, 2048)
    assert get_suite("bf16_masked").parse_shape("32x192x4096x7168") == (32, 192, 4096, 7168)
    # The shapes: M in {128, 4096} x the DeepSeek (N, K) pairs; every layout plus FP32 D with C
    assert len(BF16_SHAPES) == len(set(BF16_SHAPES)) == 10
    assert {(n, k) for _, n, k in BF16_SHAPES} == {
        (2112, 7168),
        (24576, 1536),
        (7168, 16384),
        (4096, 7168),
        (7168, 2048),
    }
    assert {m for m, _, _ in BF16_SHAPES} == {128, 4096}
    assert set(VARIANTS) == {"nt", "nn", "tn", "tt", "nt+c", "nt+c=d"}
    assert (256, 64, 7168, 3072) in BF16_CONTIGUOUS_SHAPES and (32, 20, 4096, 7168) in BF16_MASKED_SHAPES
    with pytest.raises(ValueError, match="MxNxK"):
        parse_bf16_mnk("4096x7168")
    # One variant only (config sweeps): "@variant"
    assert parse_bf16_mnk("128x2112x7168@nt+c") == (128, 2112, 7168, "nt+c")
    with pytest.raises(ValueError, match="unknown variant 'nx'"):
        parse_bf16_mnk("128x2112x7168@nx")


@pytest.mark.parametrize("suite", ["bf16", "bf16_grouped", "bf16_masked"])
def test_bf16_suites_report_missing_function_or_gpu(suite: str, monkeypatch, tmp_path, capsys) -> None:
    required = {"bf16": "bf16_gemm_nt", "bf16_grouped": "m_grouped_bf16_gemm_nt_contiguous"}
    required["bf16_masked"] = "m_grouped_bf16_gemm_nt_masked"
    shape = "128x256x512" if suite == "bf16" else "2x64x256x512"
    out = tmp_path / "out.json"
    monkeypatch.delattr(deep_gemm, required[suite], raising=False)
    assert main(["--suite", suite, "--shapes", shape, "--json", str(out)]) == 2
    assert f"{required[suite]} is missing" in capsys.readouterr().out
    assert "error" in json.loads(out.read_text())
    if __import__("torch").cuda.is_available():
        return
    monkeypatch.setattr(deep_gemm, required[suite], lambda *args, **kwargs: None, raising=False)
    assert main(["--suite", suite, "--shapes", shape]) == 2
    assert "no CUDA GPU" in capsys.readouterr().out


def test_dense_row_format_with_and_without_device_time() -> None:
    # A row of the dense table: every column filled, and the memory-bound rows' device-time column blank elsewhere
    from deep_gemm.bench.fp8_gemm import _TABLE, _format_row

    timing = {"median_us": 12.4, "min_us": 12.0, "samples_us": [12.4]}
    row = dict(m=64, n=2112, k=7168, ours=timing, blockwise=timing, fast_accum=timing, ours_error=None,
               ours_diff=6.9e-4, ours_accurate=True, tflops=157.0, gbps=1286.0, pct_copy_bandwidth=30.1,
               pct_copy_bandwidth_device=41.5, speedup_vs_blockwise=2.09, speedup_vs_fast_accum=0.97,
               sm_clock_mhz=1980)  # fmt: skip
    assert "%copy dev" in _TABLE.header()
    line = _format_row(row)
    assert "42" in line.split() and "30" in line.split()
    assert "-" in _format_row(dict(row, pct_copy_bandwidth_device=None)).split()


def test_pct_of_copy_bandwidth() -> None:
    from deep_gemm.bench.common import pct_of_copy_bandwidth

    assert pct_of_copy_bandwidth(2_000_000, 1000.0, 4e9) == pytest.approx(50.0)  # 2 MB in 1 ms at 4 GB/s
    assert pct_of_copy_bandwidth(2_000_000, None, 4e9) is None
    assert pct_of_copy_bandwidth(2_000_000, 1000.0, None) is None


def test_copy_bandwidth_text() -> None:
    from deep_gemm.bench.common import copy_bandwidth_text

    assert copy_bandwidth_text(4.288e12, 4.24e12) == (
        "device-to-device copy: 4288 GB/s by events, 4240 GB/s on the device alone"
    )
    assert "by events, - GB/s on the device alone" in copy_bandwidth_text(4.288e12, None)
