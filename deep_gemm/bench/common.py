"""Helpers shared by the benchmark suites: shape parsing, one timed callable, a first call that records
failures, throughput, and the header of a suite's JSON report."""

import ctypes
import datetime
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import torch

from deep_gemm.bench.registry import BenchOptions, SuiteReport
from deep_gemm.bench.report import Table, fmt, geomean
from deep_gemm.testing import bench_kernel, d2d_copy_bandwidth, gpu_idle, kineto_kernel_times

__all__ = [
    "derive_throughput",
    "diff_cell",
    "driver_version",
    "copy_bandwidth_text",
    "device_copy_bandwidth",
    "error_text",
    "kernel_times",
    "parse_int_shape",
    "pct_of_copy_bandwidth",
    "report_header",
    "run_rows",
    "time_call",
    "try_first_call",
]


def parse_int_shape(text: str, count: int, description: str, example: str, min_first: int = 1) -> tuple[int, ...]:
    """Parse ``count`` integers separated by ``x`` (e.g. ``"4096x7168x2048"``): the first at least
    ``min_first``, the others positive.

    Raises:
        ValueError: anything else; the message reads "expected a shape <description> such as <example>".
    """
    try:
        values = tuple(int(p) for p in text.lower().split("x"))
    except ValueError:
        values = ()
    if len(values) != count or values[0] < min_first or min(values[1:], default=1) <= 0:
        raise ValueError(f"expected a shape {description} such as {example}, got {text!r}")
    return values


def driver_version() -> str | None:
    """The NVIDIA driver's version (``nvidia-smi``'s ``driver_version``, e.g. ``"580.159.04"``); where nvidia-smi
    is missing, the CUDA version the driver supports as ``"supports CUDA 13.0"``; None if neither can be read."""
    exe = shutil.which("nvidia-smi")
    if exe is not None:
        cmd = [exe, "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0"]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True).stdout.strip()
            if out:
                return out.splitlines()[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        version = ctypes.c_int()
        if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version)) == 0:
            return f"supports CUDA {version.value // 1000}.{version.value % 1000 // 10}"
    except (OSError, AttributeError):
        pass
    return None


def report_header(
    suite: str,
    options: BenchOptions,
    max_diff: float,
    copy_bandwidth: float,
    copy_bandwidth_device: float | None = None,
) -> dict[str, Any]:
    """The fields every suite's JSON report starts with: what ran, where (GPU name and driver), when, with which
    CUDA, PyTorch and deep_gemm versions and options, and the copy bandwidths (by events; on the device alone where
    the suite measured it, else None). The command line is added by ``python -m deep_gemm.bench``."""
    import deep_gemm

    return {
        "suite": suite,
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "device": torch.cuda.get_device_name(),
        "driver": driver_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "deep_gemm_version": getattr(deep_gemm, "__version__", None),
        "options": dict(vars(options)),
        "max_diff": max_diff,
        "copy_bandwidth_gbps": copy_bandwidth * 1e-9,
        "copy_bandwidth_device_gbps": copy_bandwidth_device * 1e-9 if copy_bandwidth_device else None,
    }


def error_text(exc: BaseException) -> str:
    """``"TypeName: first line of the message"``, at most 200 characters (for tables and JSON)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:200]


def time_call(fn: Callable[[], object], options: BenchOptions) -> dict[str, Any]:
    """Time ``fn`` (which must already have run once successfully): median, fastest and every sample, in µs."""
    result = bench_kernel(
        fn,
        num_warmups=options.num_warmups,
        num_tests=options.num_tests,
        flush_l2=options.flush_l2,
        l2_flush_mode=options.l2_flush_mode,
    )
    return {"median_us": result.median_us, "min_us": result.min_us, "samples_us": [s * 1e6 for s in result.samples_s]}


def kernel_times(fn: Callable[[], object], kernels: dict[str, str], options: BenchOptions) -> dict[str, float]:
    """Device time per call of the kernels ``fn`` launches, in µs, without the host's launch cost: for each
    ``label: name substring`` of ``kernels``, the mean over ``options.num_tests`` profiled calls (CUPTI, through
    :func:`deep_gemm.testing.kineto_kernel_times`, with the L2 flush of the options before each call)."""
    seconds = kineto_kernel_times(
        fn,
        list(kernels.values()),
        num_tests=options.num_tests,
        flush_l2=options.flush_l2,
        l2_flush_mode=options.l2_flush_mode,
    )
    return {label: seconds[name] * 1e6 for label, name in kernels.items()}


def device_copy_bandwidth() -> float | None:
    """The device-to-device copy bandwidth on device time (:func:`deep_gemm.testing.d2d_copy_bandwidth` with
    ``device_time``), the ceiling to hold a kernel's device time against; None, after a printed note, when the
    profiler saw no memcpy (under ncu, which holds CUPTI)."""
    try:
        return d2d_copy_bandwidth(device_time=True)
    except ValueError as exc:
        print(f"note: no device time for the copy: {error_text(exc)}")
        return None


def copy_bandwidth_text(by_events: float, on_device: float | None) -> str:
    """The suites' copy-ceiling line: the copy bandwidth by events and on the device alone (``-`` where not
    measured), both in GB/s of bytes read plus written."""
    device_gbps = fmt(on_device * 1e-9 if on_device else None, ".0f")
    return f"device-to-device copy: {by_events * 1e-9:.0f} GB/s by events, {device_gbps} GB/s on the device alone"


def pct_of_copy_bandwidth(num_bytes: int, device_us: float | None, copy_bandwidth: float | None) -> float | None:
    """``num_bytes`` moved in ``device_us`` as a percentage of ``copy_bandwidth`` (bytes per second); None when
    either timing is missing."""
    return num_bytes / (device_us * 1e-6) / copy_bandwidth * 100 if device_us and copy_bandwidth else None


def try_first_call(fn: Callable[[], Any]) -> tuple[Any, str | None]:
    """Run ``fn`` once and synchronize: ``(result, None)``, or ``(None, error text)`` if it raised."""
    try:
        out = fn()
        torch.cuda.synchronize()
        return out, None
    except Exception as exc:  # any failure is recorded and the run goes on
        return None, error_text(exc)


def derive_throughput(row: dict[str, Any], copy_bandwidth: float, baselines: tuple[str, ...]) -> None:
    """Add to ``row`` (with ``flops``, ``bytes``, timing entries ``ours`` and each baseline, None when it
    did not run) the TFLOPS, GB/s and % of ``copy_bandwidth`` of ours and ``speedup_vs_<baseline>``."""
    ours_s = row["ours"]["median_us"] * 1e-6 if row["ours"] else None
    row["tflops"] = row["flops"] / ours_s * 1e-12 if ours_s else None
    row["gbps"] = row["bytes"] / ours_s * 1e-9 if ours_s else None
    row["pct_copy_bandwidth"] = row["bytes"] / ours_s / copy_bandwidth * 100 if ours_s else None
    for key in baselines:
        theirs = row.get(key)
        row[f"speedup_vs_{key}"] = theirs["median_us"] * 1e-6 / ours_s if ours_s and theirs else None


def diff_cell(row: dict[str, Any], spec: str) -> str:
    """A table's accuracy cell: ERROR where ours failed, else the diff (``spec``), '!' when above the limit."""
    if row["ours_error"]:
        return "ERROR"
    return fmt(row["ours_diff"], spec) + ("" if row["ours_accurate"] else "!")


def median_cell(entry: dict[str, Any] | None) -> str:
    """A timing cell: the median in microseconds, '-' where the call did not run."""
    return fmt(entry["median_us"] if entry else None, ".1f")


def torch_cells(row: dict[str, Any], diff_spec: str) -> list[str]:
    """The last cells of the suites timed against PyTorch: its time, our speedup over it, the accuracy cell."""
    return [median_cell(row.get("torch")), fmt(row["speedup_vs_torch"], ".2f"), diff_cell(row, diff_spec)]


def run_rows(
    name: str,
    options: BenchOptions,
    items: list,
    bench: Callable[[Any, BenchOptions], dict[str, Any]],
    table: Table,
    cells: Callable[[dict[str, Any]], list[str]],
    max_diff: float,
    baselines: tuple[str, ...] = ("torch",),
    group_of: Callable[[dict[str, Any]], str] | None = None,
) -> SuiteReport:
    """The loop of the suites that time our kernel against baselines row by row (quant, hc, einsum): the CUDA check,
    the device and copy-bandwidth lines, per item the GPU idled then ``bench(item, options)`` (a row with ``ours``,
    ``ours_error``, ``ours_diff``, ``ours_accurate``, ``flops``, ``bytes`` and each baseline's timing), its throughput
    (:func:`derive_throughput`) and its printed ``cells(row)``; then the geomean speedup vs the first baseline (per
    ``group_of(row)`` when given), the errors as notes, and the report (not ok where ours failed or was inaccurate)."""
    if not torch.cuda.is_available():
        message = "no CUDA GPU (torch.cuda.is_available() is False)"
        print(f"{name}: {message}")
        return SuiteReport(data={"suite": name, "error": message}, ok=False)
    copy_bandwidth = d2d_copy_bandwidth()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(f"device-to-device copy: {copy_bandwidth * 1e-9:.0f} GB/s (read + write)")
    print(table.header())
    rows = []
    for item in items:
        gpu_idle(options.idle_s)
        row = bench(item, options)
        derive_throughput(row, copy_bandwidth, baselines)
        print(table.row(cells(row)), flush=True)
        rows.append(row)
        torch.cuda.empty_cache()
    first = baselines[0]
    groups = dict.fromkeys(group_of(r) for r in rows) if group_of else {first: None}
    geomeans = {
        group: geomean(r.get(f"speedup_vs_{first}") for r in rows if group_of is None or group_of(r) == group)
        for group in groups
    }
    for group, value in geomeans.items():
        print(f"geomean speedup vs {first}{f' ({group})' if group_of else ''}: {fmt(value, '.3f')}")
    notes = {f"{key}: {r[f'{key}_error']}" for r in rows for key in ("ours", *baselines) if r.get(f"{key}_error")}
    for note in sorted(notes):
        print(f"note: {note}")
    failed = [r for r in rows if r["ours_error"] or not r["ours_accurate"]]
    data = {**report_header(name, options, max_diff, copy_bandwidth), "geomean_speedup": geomeans, "rows": rows}
    return SuiteReport(data=data, ok=not failed)
