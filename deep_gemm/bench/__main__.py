"""Command line: ``python -m deep_gemm.bench [--suite dense] [--shapes ...] [--json out.json] [--markdown [out.md]]``.

``--markdown`` writes the run's report as Markdown tables (to a file, or to stdout without one);
``--from-json FILE ... --markdown [out.md]`` renders reports written earlier by ``--json`` and runs nothing.

Exit status: 0 when every shape ran and was accurate, 1 when some shape raised or failed
its accuracy bound (the table and JSON are still written), 2 when the suite could not run
at all (e.g. ``deep_gemm.fp8_gemm_nt`` is missing or there is no GPU).
"""

import argparse
import json
import math
import shlex
import sys
from typing import Any

from deep_gemm.bench import BenchOptions, get_suite, suite_names
from deep_gemm.bench.markdown import render_document
from deep_gemm.testing.timing import L2_FLUSH_MODES

# The title of a --markdown document
MARKDOWN_TITLE = "deep_gemm benchmarks"


def _json_safe(value: Any) -> Any:
    """Replace NaN and inf (not valid JSON) with None, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m deep_gemm.bench",
        description="Time deep_gemm kernels against cuBLASLt and print a table (--list shows the suites).",
        epilog="exit status: 0 all shapes ran and were accurate, 1 some shape raised or was inaccurate, "
        "2 the suite could not run (no GPU, or deep_gemm.fp8_gemm_nt missing)",
    )
    parser.add_argument("--suite", default="dense", choices=suite_names(), help="which suite to run (default: dense)")
    parser.add_argument("--shapes", nargs="+", metavar="SHAPE", help="shapes to run instead of the suite's list")
    parser.add_argument("--json", metavar="PATH", help="write every number to this JSON file")
    parser.add_argument("--num-warmups", type=int, default=5, help="untimed calls per kernel (default: 5)")
    parser.add_argument("--num-tests", type=int, default=30, help="timed calls per kernel (default: 30)")
    parser.add_argument("--idle", type=float, default=0.3, help="seconds to idle the GPU before each shape")
    parser.add_argument("--no-flush-l2", action="store_true", help="do not flush L2 before each timed call")
    parser.add_argument(
        "--l2-flush",
        choices=L2_FLUSH_MODES,
        default="read",
        help="how the flush evicts L2: read a 256 MB buffer (default: L2 left clean) or write it (L2 left dirty, "
        "its write-back then timed inside the next call)",
    )
    parser.add_argument("--no-baselines", action="store_true", help="time only deep_gemm (e.g. for config sweeps)")
    parser.add_argument("--list", action="store_true", help="list the suites and exit")
    parser.add_argument(
        "--markdown",
        nargs="?",
        const="-",
        metavar="PATH",
        help="write the report as Markdown tables headed by date, GPU, driver, CUDA, PyTorch and the command "
        "(to PATH, or to stdout without one)",
    )
    parser.add_argument(
        "--from-json",
        nargs="+",
        metavar="FILE",
        help="render these --json reports (with --markdown) instead of running a suite",
    )
    return parser


def _command_line(argv: list[str]) -> str:
    """The command as typed, for the report: ``python -m deep_gemm.bench`` and the arguments, shell-quoted."""
    return " ".join(["python -m deep_gemm.bench", *(shlex.quote(arg) for arg in argv)])


def _write_markdown(reports: list[dict[str, Any]], path: str) -> None:
    """Write ``reports`` as one Markdown document to ``path`` (``-``: stdout)."""
    text = render_document(reports, title=MARKDOWN_TITLE)
    if path == "-":
        sys.stdout.write(text)
        return
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path}")


def _render_json_files(paths: list[str], markdown: str, parser: argparse.ArgumentParser) -> int:
    """``--from-json``: load each report and write them as Markdown; exit status 0."""
    reports = []
    for path in paths:
        try:
            with open(path) as f:
                report = json.load(f)
        except (OSError, json.JSONDecodeError) as exc:
            parser.error(f"--from-json {path}: cannot read a JSON report ({exc})")
        if not isinstance(report, dict) or "suite" not in report:
            parser.error(f"--from-json {path}: not a report of python -m deep_gemm.bench --json (no 'suite' field)")
        reports.append(report)
    _write_markdown(reports, markdown)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (``sys.argv[1:]`` if None); return the exit status."""
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.from_json:
        if args.markdown is None:
            parser.error("--from-json renders reports: add --markdown [PATH]")
        return _render_json_files(args.from_json, args.markdown, parser)
    if args.list:
        for name in suite_names():
            suite = get_suite(name)
            print(f"{name}: {suite.description} (shapes: {suite.shape_help})")
        return 0
    suite = get_suite(args.suite)
    shapes = None
    if args.shapes:
        shapes = tuple(s for arg in args.shapes for s in arg.split(",") if s)
        for shape in shapes:
            try:
                suite.parse_shape(shape)
            except ValueError as exc:
                parser.error(f"--shapes: {exc}")
    if args.num_warmups < 0 or args.num_tests <= 0 or args.idle < 0:
        parser.error("--num-warmups and --idle must be >= 0 and --num-tests > 0")
    options = BenchOptions(
        shapes=shapes,
        num_warmups=args.num_warmups,
        num_tests=args.num_tests,
        idle_s=args.idle,
        flush_l2=not args.no_flush_l2,
        l2_flush_mode=args.l2_flush,
        baselines=not args.no_baselines,
    )
    report = suite.run(options)
    report.data["command"] = _command_line(argv)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(_json_safe(report.data), f, indent=1)
        print(f"wrote {args.json}")
    if args.markdown is not None:
        _write_markdown([_json_safe(report.data)], args.markdown)
    if "error" in report.data:
        return 2
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
