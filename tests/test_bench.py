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


def _timing(median_us: float) -> dict:
    return {"median_us": median_us, "min_us": median_us - 0.5, "samples_us": [median_us]}


def _dense_report(**extra) -> dict:
    rows = [
        dict(m=64, n=2112, k=7168, ours=_timing(12.44), blockwise=None, fast_accum=_timing(11.0), tflops=157.2,
             gbps=1286.4, pct_copy_bandwidth=30.1, speedup_vs_blockwise=None, speedup_vs_fast_accum=0.884,
             ours_error=None, ours_accurate=True),
        dict(m=4096, n=7168, k=2048, ours=_timing(101.26), blockwise=_timing(120.0), fast_accum=_timing(99.0),
             tflops=1187.0, gbps=900.0, pct_copy_bandwidth=21.0, speedup_vs_blockwise=1.185,
             speedup_vs_fast_accum=0.978, ours_error=None, ours_accurate=True),
    ]  # fmt: skip
    report = {
        "suite": "dense",
        "timestamp": "2026-12-04T13:52:20.232069+00:00",
        "device": "NVIDIA H200",
        "torch": "2.11.0+cu130",
        "cuda": "13.0",
        "deep_gemm_version": "0.1.0",
        "options": {"shapes": None, "num_warmups": 5, "num_tests": 30, "idle_s": 0.3, "flush_l2": True,
                    "l2_flush_mode": "read", "baselines": True},  # fmt: skip
        "copy_bandwidth_gbps": 4267.45,
        "geomean_speedup": {"blockwise": 1.185, "fast_accum": 0.93},
        "rows": rows,
    }
    report.update(extra)
    return report


def _table_lines(text: str) -> list[list[str]]:
    """The cells of each Markdown table line of ``text`` (split on unescaped ``|``)."""
    import re

    lines = [line.strip()[1:-1] for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)] for line in lines]


def test_markdown_command_leaves_out_output_paths() -> None:
    # Where a run wrote its JSON or markdown is no part of reproducing it; every other argument stays
    from deep_gemm.bench.markdown import render_report

    command = "python -m deep_gemm.bench --suite dense --json /root/out/dense.json --num-tests 7 --markdown=x.md"
    lines = render_report(_dense_report(driver="x", command=command)).splitlines()
    assert "- command: `python -m deep_gemm.bench --suite dense --num-tests 7`" in lines


def test_markdown_table_of_a_dense_report() -> None:
    from deep_gemm.bench.markdown import render_report

    text = render_report(_dense_report(driver="580.159.04", command="python -m deep_gemm.bench --suite dense"))
    lines = text.splitlines()
    assert lines[0] == "## dense on NVIDIA H200"
    for expected in ("- date: 2026-12-04 13:52 UTC", "- GPU: NVIDIA H200", "- driver: 580.159.04",
                     "- CUDA (PyTorch build): 13.0", "- PyTorch: 2.11.0+cu130",
                     "- command: `python -m deep_gemm.bench --suite dense`"):  # fmt: skip
        assert expected in lines
    table = _table_lines(text)
    assert table[0] == ["m", "n", "k", "ours µs", "blockwise µs", "fast_accum µs", "TFLOPS", "GB/s", "% copy BW",
                        "vs blockwise", "vs fast_accum"]  # fmt: skip
    assert set(table[1]) == {"---:"}
    # Numbers rounded per column, a baseline that did not run is "-", the samples are not shown
    assert table[2] == ["64", "2112", "7168", "12.4", "-", "11.0", "157", "1286", "30", "-", "0.88"]
    assert table[3] == ["4096", "7168", "2048", "101.3", "120.0", "99.0", "1187", "900", "21", "1.19", "0.98"]
    assert len(table) == 4
    assert "Geomeans over the rows: blockwise 1.185, fast_accum 0.930" in text


def test_markdown_of_an_old_report_marks_missing_fields() -> None:
    # Reports written before the driver and the command were recorded: "not recorded", and the command rebuilt
    # from the recorded options (only what differs from the defaults)
    from deep_gemm.bench.markdown import render_report

    report = _dense_report()
    report["options"] = dict(report["options"], num_tests=10, baselines=False, shapes=["1x2112x7168"])
    del report["torch"]
    text = render_report(report)
    assert "- driver: not recorded" in text and "- PyTorch: not recorded" in text
    assert ("- command: `python -m deep_gemm.bench --suite dense --shapes 1x2112x7168 --num-tests 10 "
            "--no-baselines` (rebuilt from the recorded options)") in text  # fmt: skip
    assert "median of 10 calls after 5 warm-ups, L2 flushed (read) before each call" in text


def test_markdown_errors_and_second_row_list() -> None:
    from deep_gemm.bench.markdown import render_report, render_table

    report = _dense_report(driver="x", command="c")
    report["rows"][1] = dict(report["rows"][1], ours=None, ours_error="RuntimeError: boom | here", tflops=None,
                             ours_accurate=None)  # fmt: skip
    report["paged_rows"] = [dict(batch=64, next_n=1, ctx=8192, ours=_timing(26.69), metadata=_timing(5.5))]
    text = render_report(report)
    table = _table_lines(text.split("### dense (paged)")[0])
    assert table[0][-1] == "error" and table[3][-1] == "RuntimeError: boom \\| here" and table[2][-1] == "-"
    paged = _table_lines(text.split("### dense (paged)")[1])
    assert paged[0] == ["batch", "next_n", "ctx", "ours µs", "metadata µs"]
    assert paged[2] == ["64", "1", "8192", "26.7", "5.5"]
    assert "The suite did not run: no CUDA GPU" in render_report({"suite": "mqa", "error": "no CUDA GPU"})
    with pytest.raises(ValueError, match="no rows"):
        render_table([])
    with pytest.raises(ValueError, match="suite"):
        render_report({"rows": []})


def test_main_renders_json_files_as_markdown(tmp_path, capsys) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps(_dense_report(driver="580.159.04", command="python -m deep_gemm.bench")))
    second.write_text(json.dumps(_dense_report(device="NVIDIA H100 80GB HBM3")))
    out = tmp_path / "perf.md"
    assert main(["--from-json", str(first), str(second), "--markdown", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# deep_gemm benchmarks\n")
    assert text.index("## dense on NVIDIA H200") < text.index("## dense on NVIDIA H100 80GB HBM3")
    assert text.count("| 4096 | 7168 | 2048 | 101.3 |") == 2
    # Without a path: stdout
    assert main(["--from-json", str(first), "--markdown"]) == 0
    assert "## dense on NVIDIA H200" in capsys.readouterr().out
    # --from-json needs --markdown, and a report
    with pytest.raises(SystemExit):
        main(["--from-json", str(first)])
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(SystemExit):
        main(["--from-json", str(tmp_path / "bad.json"), "--markdown"])
    with pytest.raises(SystemExit):
        main(["--from-json", str(tmp_path / "missing.json"), "--markdown"])


def test_main_records_the_command_and_writes_markdown(monkeypatch, tmp_path) -> None:
    # A suite's report gets the command line; --markdown writes it with that command, less its output paths
    def run(options: BenchOptions) -> SuiteReport:
        return SuiteReport({**_dense_report(driver="d"), "suite": "fake_md"}, True)

    from deep_gemm.bench import registry

    monkeypatch.setitem(registry._SUITES, "fake_md", Suite("fake_md", "fake", "MxNxK", parse_mnk, run))
    out_json, out_md = tmp_path / "r.json", tmp_path / "r.md"
    argv = ["--suite", "fake_md", "--num-tests", "7", "--json", str(out_json), "--markdown", str(out_md)]
    assert main(argv) == 0
    command = json.loads(out_json.read_text())["command"]
    assert command.startswith("python -m deep_gemm.bench --suite fake_md --num-tests 7 --json ")
    # (the JSON keeps the whole command; the markdown leaves out where the files went)
    assert "- command: `python -m deep_gemm.bench --suite fake_md --num-tests 7`" in out_md.read_text()


def test_report_header_records_the_driver(monkeypatch) -> None:
    from deep_gemm.bench import common

    monkeypatch.setattr(common.shutil, "which", lambda name: None)
    monkeypatch.setattr(common.ctypes, "CDLL", lambda name: (_ for _ in ()).throw(OSError("no libcuda")))
    assert common.driver_version() is None
    monkeypatch.setattr(common.torch.cuda, "get_device_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(common, "driver_version", lambda: "580.159.04")
    header = common.report_header("dense", BenchOptions(), 1e-3, 4.2e12)
    assert header["driver"] == "580.159.04" and header["device"] == "NVIDIA H200"
    assert {"timestamp", "torch", "cuda", "options"} <= set(header)


def test_einsum_suite_is_registered() -> None:
    from deep_gemm.bench.einsum import EINSUM_SHAPES, parse_einsum_shape

    suite = get_suite("einsum")
    assert suite.parse_shape("bhd:4096x128x128x512") == ("bhd", 4096, 128, 128, 512)
    assert parse_einsum_shape("skip:128x1536x128x128x64x0") == ("skip", 128, 1536, 128, 128, 64, 0)
    for bad, pattern in [
        ("bhq:1x2x3x4", "CASE one of"),
        ("4096x128x128x512", "CASE one of"),
        ("mn:8x4096x4096", "of 4 integers"),
        ("fp8:0x128x128x512", "of 4 integers"),
        ("skip:128x1536x128x0x64x0", "LEFT \\+ RIGHT > 0"),
    ]:
        with pytest.raises(ValueError, match=pattern):
            parse_einsum_shape(bad)
    # Issue 43's shapes: b in {64, 512, 4096} x h = 128, r = 512, d = 128 for both per-head expressions and FP8;
    # b = 8, m = n in {4096, 7168}, k = 4096 for the batch reduction; and the skip-head-mid rows
    per_head = {(b, 128, 128, 512) for b in (64, 512, 4096)}
    for case in ("bhd", "bhr", "fp8"):
        assert {tuple(s[1:]) for s in EINSUM_SHAPES if s[0] == case} == per_head
    assert {tuple(s[1:]) for s in EINSUM_SHAPES if s[0] == "mn"} == {(8, 4096, 4096, 4096), (8, 7168, 7168, 4096)}
    assert any(s[0] == "skip" for s in EINSUM_SHAPES)
    assert all(parse_einsum_shape(f"{s[0]}:{'x'.join(map(str, s[1:]))}") == s for s in EINSUM_SHAPES)


def test_run_rows_drives_a_suite_without_a_gpu(monkeypatch, capsys) -> None:
    # The row loop the quant, hc and einsum suites share, with the GPU parts stubbed: throughput, cells, geomeans per
    # group, notes, and a failed row making the report not ok
    import torch

    from deep_gemm.bench import common
    from deep_gemm.bench.registry import BenchOptions
    from deep_gemm.bench.report import Column, Table

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "stub GPU")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(common, "d2d_copy_bandwidth", lambda: 2e12)
    monkeypatch.setattr(common, "gpu_idle", lambda seconds: None)
    monkeypatch.setattr(common, "report_header", lambda name, options, max_diff, bw: {"suite": name})

    def bench(item, options):
        group, us, accurate = item
        return {"group": group, "flops": 1e9, "bytes": 1e6, "ours": {"median_us": us}, "ours_error": None,
                "ours_diff": 0.0, "ours_accurate": accurate, "torch": {"median_us": 4 * us}, "torch_error": None}  # fmt: skip

    table = Table([Column("group", 6), Column("us", 6), Column("diff", 6)])
    cells = lambda row: [row["group"], f"{row['ours']['median_us']:.0f}", common.diff_cell(row, ".0f")]  # noqa: E731
    items = [("a", 10.0, True), ("a", 20.0, True), ("b", 5.0, False)]
    report = common.run_rows("stub", BenchOptions(), items, bench, table, cells, 1e-3, group_of=lambda r: r["group"])
    out = capsys.readouterr().out
    assert not report.ok  # (row b is inaccurate)
    assert report.data["geomean_speedup"] == {"a": pytest.approx(4.0), "b": pytest.approx(4.0)}
    assert report.data["rows"][0]["gbps"] == pytest.approx(1e6 / 10e-6 * 1e-9)
    assert "0!" in out and "geomean speedup vs torch (a): 4.000" in out and "stub GPU" in out
