"""Markdown tables from a suite's JSON report (``python -m deep_gemm.bench ... --markdown``).

Every suite writes the same kind of report (see :func:`deep_gemm.bench.common.report_header`): a header of
metadata and one or more lists of rows (``rows``; the MQA suite also ``paged_rows``). The tables are built from
the rows themselves, so a new suite needs no code here: shape fields first (in :data:`SHAPE_KEYS` order), then
every timing (a ``{"median_us": ...}`` entry) as median µs, then throughput and the speedups. Each table is
headed by the date, GPU, driver, CUDA and PyTorch versions and the exact command of its run; a field a report
lacks (reports written before it was recorded) reads "not recorded".
"""

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["NOT_RECORDED", "SHAPE_KEYS", "command_from_options", "render_document", "render_report", "render_table"]

NOT_RECORDED = "not recorded"

# Shape fields of the suites' rows, in the order their columns appear
SHAPE_KEYS = (
    "g",
    "m",
    "n",
    "k",
    "valid_rows",
    "batch",
    "next_n",
    "ctx",
    "block_kv",
    "s",
    "s_kv",
    "h",
    "d",
    "pattern",
    "variant",
    "out_dtype",
)

# Derived numbers of a row, in column order: key -> (header, format)
_DERIVED = (
    ("ours_device_us", "ours device µs", ".1f"),
    ("tflops", "TFLOPS", ".0f"),
    ("gbps", "GB/s", ".0f"),
    ("pct_copy_bandwidth", "% copy BW", ".0f"),
    ("pct_copy_bandwidth_device", "% copy BW (device)", ".0f"),
    ("meta_pct", "metadata %", ".1f"),
)

# Row lists of a report and the heading each table gets
_ROW_LISTS = (("rows", ""), ("paged_rows", " (paged)"))

# Command-line defaults, so a command rebuilt from recorded options names only what differed
_OPTION_FLAGS = (
    ("num_warmups", 5, lambda v: f"--num-warmups {v}"),
    ("num_tests", 30, lambda v: f"--num-tests {v}"),
    ("idle_s", 0.3, lambda v: f"--idle {v}"),
    ("flush_l2", True, lambda v: "--no-flush-l2"),
    ("l2_flush_mode", "read", lambda v: f"--l2-flush {v}"),
    ("baselines", True, lambda v: "--no-baselines"),
)


def _cell(value: Any, spec: str = "") -> str:
    """A table cell: ``-`` for None, numbers by ``spec``, text with ``|`` escaped."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)) and spec:
        return format(value, spec)
    return str(value).replace("|", "\\|")


def _is_timing(value: Any) -> bool:
    return isinstance(value, dict) and "median_us" in value


def _present(rows: Sequence[dict[str, Any]], key: str) -> bool:
    """Whether any row has a non-None value under ``key``."""
    return any(row.get(key) is not None for row in rows)


def _ordered_keys(rows: Sequence[dict[str, Any]], accept) -> list[str]:
    """Keys of the rows, in first-seen order, for which some row's value passes ``accept``."""
    keys: list[str] = []
    for row in rows:
        keys += [key for key in row if key not in keys]
    return [key for key in keys if any(accept(row.get(key)) for row in rows)]


def render_table(rows: Sequence[dict[str, Any]]) -> str:
    """One Markdown table of ``rows`` (dicts of a suite's report); columns present in no row are left out.

    Raises:
        ValueError: ``rows`` is empty.
    """
    if not rows:
        raise ValueError("render_table: no rows")
    shape_keys = [key for key in SHAPE_KEYS if _present(rows, key)]
    timing_keys = _ordered_keys(rows, _is_timing)
    timing_keys.sort(key=lambda key: key != "ours")  # ours first, the baselines after in report order
    speedup_keys = [key for key in _ordered_keys(rows, lambda v: v is not None) if key.startswith("speedup_vs_")]
    derived = [(key, header, spec) for key, header, spec in _DERIVED if _present(rows, key)]
    with_errors = any(row.get("ours_error") for row in rows)
    inaccurate = any(row.get("ours_accurate") is False for row in rows)

    headers = [*shape_keys, *(f"{key} µs" for key in timing_keys), *(h for _, h, _ in derived)]
    headers += [f"vs {key.removeprefix('speedup_vs_')}" for key in speedup_keys]
    if inaccurate:
        headers.append("accurate")
    if with_errors:
        headers.append("error")
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
    for row in rows:
        cells = [_cell(row.get(key)) for key in shape_keys]
        cells += [_cell(row[key]["median_us"] if _is_timing(row.get(key)) else None, ".1f") for key in timing_keys]
        cells += [_cell(row.get(key), spec) for key, _, spec in derived]
        cells += [_cell(row.get(key), ".2f") for key in speedup_keys]
        if inaccurate:
            cells.append(_cell(row.get("ours_accurate")))
        if with_errors:
            cells.append(_cell(row.get("ours_error")))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def command_from_options(report: dict[str, Any]) -> str:
    """The command line that runs ``report``'s suite with its recorded options (for reports that predate the
    recorded command); output paths are not part of it."""
    options = report.get("options") or {}
    parts = ["python -m deep_gemm.bench", "--suite", str(report.get("suite", "?"))]
    if options.get("shapes"):
        parts += ["--shapes", *options["shapes"]]
    for key, default, flag in _OPTION_FLAGS:
        if key in options and options[key] != default:
            if key == "l2_flush_mode" and options.get("flush_l2") is False:
                continue
            parts.append(flag(options[key]))
    return " ".join(parts)


def without_output_paths(command: str) -> str:
    """A recorded command line without its output files (``--json PATH``, ``--markdown PATH``): where a run wrote
    its report is the machine's business, not part of how to reproduce the numbers."""
    words, kept, skip = command.split(), [], False
    for word in words:
        if skip:
            skip = False
        elif word in ("--json", "--markdown"):
            skip = True
        elif not word.startswith(("--json=", "--markdown=")):
            kept.append(word)
    return " ".join(kept)


def _metadata_lines(report: dict[str, Any]) -> list[str]:
    """The bullet list heading a report's tables."""

    def field(key: str) -> str:
        value = report.get(key)
        return NOT_RECORDED if value in (None, "") else str(value)

    timestamp = report.get("timestamp")
    date = timestamp[:16].replace("T", " ") + " UTC" if isinstance(timestamp, str) and timestamp else NOT_RECORDED
    if report.get("command"):
        command = f"`{without_output_paths(report['command'])}`"
    elif report.get("options") is not None:
        command = f"`{command_from_options(report)}` (rebuilt from the recorded options)"
    else:
        command = NOT_RECORDED
    options = report.get("options") or {}
    timing = NOT_RECORDED
    if "num_tests" in options:
        flush = "no L2 flush"
        if options.get("flush_l2", True):
            mode = options.get("l2_flush_mode") or "mode not recorded"
            flush = f"L2 flushed ({mode}) before each call"
        timing = f"median of {options['num_tests']} calls after {options.get('num_warmups', '?')} warm-ups, {flush}"
    lines = [
        f"- date: {date}",
        f"- GPU: {field('device')}",
        f"- driver: {field('driver')}",
        f"- CUDA (PyTorch build): {field('cuda')}",
        f"- PyTorch: {field('torch')}",
        f"- deep_gemm: {field('deep_gemm_version')}",
        f"- command: {command}",
        f"- timing: {timing}",
    ]
    copy = report.get("copy_bandwidth_gbps")
    if isinstance(copy, (int, float)):
        lines.append(f"- device-to-device copy bandwidth (the memory ceiling): {copy:.0f} GB/s")
    return lines


def _suite_description(name: str) -> str | None:
    """The registered suite's one-line description (what it times against which baselines), if it is known."""
    from deep_gemm.bench.registry import get_suite

    try:
        return get_suite(name).description
    except KeyError:
        return None


def _geomean_line(report: dict[str, Any]) -> str | None:
    geomeans = report.get("geomean_speedup") or report.get("geomeans")
    if not isinstance(geomeans, dict):
        return None
    parts = [f"{key} {value:.3f}" for key, value in geomeans.items() if isinstance(value, (int, float))]
    return "Geomeans over the rows: " + ", ".join(parts) if parts else None


def render_report(report: dict[str, Any], level: int = 2) -> str:
    """The Markdown of one suite's report: a heading (suite and GPU), the metadata list, and a table per row
    list (``rows``, ``paged_rows``); a report of a suite that could not run renders its error.

    Raises:
        ValueError: ``report`` is not a suite report (no ``suite`` field).
    """
    if not isinstance(report, dict) or "suite" not in report:
        raise ValueError("render_report: expected a report of python -m deep_gemm.bench --json (no 'suite' field)")
    hashes = "#" * level
    parts = [f"{hashes} {report['suite']} on {report.get('device') or 'an unrecorded GPU'}", ""]
    description = _suite_description(report["suite"])
    if description:
        parts += [description, ""]
    parts += _metadata_lines(report)
    if "error" in report:
        parts += ["", f"The suite did not run: {_cell(report['error'])}"]
    for key, suffix in _ROW_LISTS:
        rows = report.get(key)
        if rows:
            if suffix:
                parts += ["", f"{hashes}# {report['suite']}{suffix}"]
            parts += ["", render_table(rows)]
    geomean = _geomean_line(report)
    if geomean:
        parts += ["", geomean]
    return "\n".join(parts) + "\n"


# What every document says before its tables
DOCUMENT_PREAMBLE = (
    "Generated by `python -m deep_gemm.bench --markdown` from the bench's JSON reports (`--json`; render saved "
    "ones with `python -m deep_gemm.bench --from-json FILE ... --markdown PATH`). Times are medians in µs of "
    "CUDA events around each call; `ours` is deep_gemm, the other timing columns are the baselines the suite "
    "names, timed in the same run on the same inputs; `vs X` is X's time over ours (above 1: we are faster); "
    "`% copy BW` is the bytes a call must move at its time, as a share of the measured device-to-device copy "
    "bandwidth."
)


def render_document(reports: Iterable[dict[str, Any]], title: str | None = None) -> str:
    """Several reports as one Markdown document (an optional ``# title`` and the preamble, then each report's
    section)."""
    sections = [render_report(report) for report in reports]
    head = [f"# {title}\n", DOCUMENT_PREAMBLE + "\n"] if title else []
    return "\n".join([*head, *sections])
