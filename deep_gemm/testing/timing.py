"""GPU timing helpers for ``python -m deep_gemm.bench`` and ad-hoc measurements (ours; the reference API's
``bench``/``bench_kineto`` are in :mod:`deep_gemm.testing.drop_in_bench`).

Importing this module needs no GPU; CUDA is touched only when a function runs.
"""

import dataclasses
import os
import shutil
import statistics
import subprocess
import time
import warnings
from collections.abc import Callable, Sequence

import torch

__all__ = [
    "BenchResult",
    "bench_kernel",
    "kineto_kernel_times",
    "count_bytes",
    "d2d_copy_bandwidth",
    "gpu_idle",
    "sm_clock_mhz",
]

# Larger than the L2 of every Hopper/Blackwell part (50-126 MB), so touching it evicts all of L2.
L2_FLUSH_BYTES = 256 << 20
# How the flush touches that buffer: "read" leaves L2 full of clean lines; "write" (zeroing it, what
# most harnesses do) leaves it full of dirty ones, whose write-back (~50 MB on an H200, ~12 us of DRAM
# time) then lands inside the next timed call: a charge for the harness's own traffic that weighs
# ~9 % on a 600 MB memory-bound call and ~70 % on a 70 MB one (measured on an H200).
L2_FLUSH_MODES = ("read", "write")


def _check_flush_mode(mode: str) -> None:
    if mode not in L2_FLUSH_MODES:
        raise ValueError(f"l2_flush_mode must be one of {L2_FLUSH_MODES}, got {mode!r}")


def _l2_flusher(flush_l2: bool, mode: str, num_bytes: int) -> Callable[[], object] | None:
    """A callable that evicts L2 by reading or writing a ``num_bytes`` buffer; ``None`` without ``flush_l2``.
    ``mode`` was checked by the caller (before its CUDA check)."""
    if not flush_l2:
        return None
    buffer = torch.zeros(num_bytes // 4, dtype=torch.int32, device="cuda")
    return buffer.zero_ if mode == "write" else buffer.sum


# A GPU spin of this many cycles (about 100 us at 2 GHz) before each timed call lets the host
# enqueue the whole call before the start event fires, so host launch overhead is not timed.
GPU_LEAD_CYCLES = 200_000


@dataclasses.dataclass(frozen=True)
class BenchResult:
    """Timings of one benchmarked callable, in seconds."""

    median_s: float
    min_s: float
    samples_s: tuple[float, ...]

    @property
    def median_us(self) -> float:
        """Median time in microseconds."""
        return self.median_s * 1e6

    @property
    def min_us(self) -> float:
        """Minimum time in microseconds."""
        return self.min_s * 1e6


def count_bytes(*tensors: object) -> int:
    """Total bytes (``numel * element_size``) of the given tensors.

    Arguments may be tensors, ``None`` (ignored) or (nested) tuples/lists of those, so
    ``count_bytes((a, sfa), (b, sfb), d)`` works directly on GEMM arguments.

    Raises:
        TypeError: an argument is something else.
    """
    total = 0
    for t in tensors:
        if t is None:
            continue
        if isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
        elif isinstance(t, (tuple, list)):
            total += count_bytes(*t)
        else:
            raise TypeError(f"count_bytes: expected tensors, None, tuples or lists, got {type(t).__name__}")
    return total


def _check_counts(fn: str, num_warmups: int, num_tests: int) -> None:
    if num_warmups < 0:
        raise ValueError(f"{fn}: num_warmups must be non-negative, got {num_warmups}")
    if num_tests <= 0:
        raise ValueError(f"{fn}: num_tests must be positive, got {num_tests}")


def _require_cuda(fn: str) -> None:
    if not torch.cuda.is_available():
        raise RuntimeError(f"{fn}: needs a CUDA GPU, but torch.cuda.is_available() is False")


def bench_kernel(
    fn: Callable[[], object],
    num_warmups: int = 5,
    num_tests: int = 30,
    flush_l2: bool = True,
    l2_flush_bytes: int = L2_FLUSH_BYTES,
    gpu_lead_cycles: int = GPU_LEAD_CYCLES,
    l2_flush_mode: str = "read",
) -> BenchResult:
    """Time a GPU callable with CUDA events on the current stream.

    ``fn`` runs ``num_warmups`` times untimed, then ``num_tests`` times, each between two
    events. With ``flush_l2``, an ``l2_flush_bytes`` buffer is read (``l2_flush_mode="read"``, L2
    left clean) or zeroed (``"write"``) before each timed call (outside the events), so every call
    starts from a cold L2. Then the GPU spins for
    ``gpu_lead_cycles`` (also outside the events) so that the host has queued all of ``fn``
    before its start event fires: host overhead shorter than the flush plus the spin is
    not timed. Use :func:`kineto_kernel_times` for pure kernel time in every case.

    Args:
        fn: a callable taking no arguments that enqueues GPU work on the current stream.
        num_warmups: untimed calls first (also triggers JIT compilation), ``>= 0``.
        num_tests: timed calls, ``> 0``.
        flush_l2: touch a large buffer before each timed call.
        l2_flush_bytes: size of that buffer in bytes.
        gpu_lead_cycles: GPU clock cycles to spin before each timed call; 0 disables.
        l2_flush_mode: ``"read"`` or ``"write"``: see :data:`L2_FLUSH_MODES`.

    Returns:
        A :class:`BenchResult` with the median, the minimum and every sample, in seconds.

    Raises:
        ValueError: bad counts or flush mode.
        RuntimeError: no CUDA GPU.
    """
    _check_counts("bench_kernel", num_warmups, num_tests)
    _check_flush_mode(l2_flush_mode)
    _require_cuda("bench_kernel")
    flush = _l2_flusher(flush_l2, l2_flush_mode, l2_flush_bytes)
    for _ in range(num_warmups):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(num_tests)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(num_tests)]
    torch.cuda.synchronize()
    for start, end in zip(starts, ends, strict=True):
        if flush is not None:
            flush()
        if gpu_lead_cycles > 0 and hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(gpu_lead_cycles)
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    samples = tuple(start.elapsed_time(end) * 1e-3 for start, end in zip(starts, ends, strict=True))
    return BenchResult(median_s=statistics.median(samples), min_s=min(samples), samples_s=samples)


def kineto_kernel_times(
    fn: Callable[[], object],
    kernel_names: str | Sequence[str],
    num_tests: int = 30,
    flush_l2: bool = True,
    l2_flush_bytes: int = L2_FLUSH_BYTES,
    l2_flush_mode: str = "read",
) -> dict[str, float]:
    """Mean GPU time per call of the kernels whose names contain each of ``kernel_names``.

    Runs ``fn`` once to warm up, then ``num_tests`` times under ``torch.profiler`` (with the
    L2 flush of :func:`bench_kernel` before each call) and sums, per name, the device time
    of every matching kernel, divided by ``num_tests``. Host launch gaps are excluded.

    Args:
        fn: a callable taking no arguments that enqueues GPU work on the current stream.
        kernel_names: one substring or several; each must match at least one kernel.
        num_tests: profiled calls, ``> 0``.
        flush_l2: touch a large buffer before each call.
        l2_flush_bytes: size of that buffer in bytes.
        l2_flush_mode: ``"read"`` or ``"write"``: see :data:`L2_FLUSH_MODES`.

    Returns:
        ``{name: seconds per call}``.

    Raises:
        ValueError: bad counts or flush mode, or a name matches no kernel (the message lists the kernels seen).
        RuntimeError: no CUDA GPU.
    """
    _check_counts("kineto_kernel_times", 0, num_tests)
    _check_flush_mode(l2_flush_mode)
    _require_cuda("kineto_kernel_times")
    names = [kernel_names] if isinstance(kernel_names, str) else list(kernel_names)
    flush = _l2_flusher(flush_l2, l2_flush_mode, l2_flush_bytes)
    fn()
    torch.cuda.synchronize()
    kernels_us: list[tuple[str, float]] = []
    with warnings.catch_warnings():
        # torch warns that events are cleared at the end of each profiler cycle: expected here.
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(num_tests):
                if flush is not None:
                    flush()
                fn()
            torch.cuda.synchronize()
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                kernels_us.append((event.name, event.time_range.elapsed_us()))
    seen = {kernel for kernel, _ in kernels_us}
    missing = [name for name in names if not any(name in kernel for kernel in seen)]
    if missing:
        raise ValueError(f"kineto_kernel_times: no kernel matches {missing}; kernels seen: {sorted(seen)}")
    return {name: sum(us for kernel, us in kernels_us if name in kernel) * 1e-6 / num_tests for name in names}


def d2d_copy_bandwidth(num_bytes: int = 2 << 30, num_tests: int = 10, device_time: bool = False) -> float:
    """Device-to-device copy bandwidth of the current GPU, in bytes per second.

    Copies a ``num_bytes`` buffer into another with ``Tensor.copy_`` and counts the bytes
    read plus written (``2 * num_bytes``) over the median time (CUDA events, as
    :func:`bench_kernel`), or with ``device_time`` over the copy's mean device time (CUPTI, as
    :func:`kineto_kernel_times`: the ceiling to hold a kernel's own device time against). The practical
    ceiling for a memory-bound kernel.

    Raises:
        ValueError: ``num_bytes`` or ``num_tests`` not positive, or (``device_time``) the profiler saw no
            device-to-device memcpy.
        RuntimeError: no CUDA GPU.
    """
    if num_bytes <= 0:
        raise ValueError(f"d2d_copy_bandwidth: num_bytes must be positive, got {num_bytes}")
    _check_counts("d2d_copy_bandwidth", 0, num_tests)
    _require_cuda("d2d_copy_bandwidth")
    src = torch.ones(num_bytes // 4, dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    # The buffers dwarf L2, so no flush is needed.
    if device_time:
        seconds = kineto_kernel_times(lambda: dst.copy_(src), _D2D_MEMCPY_EVENT, num_tests=num_tests, flush_l2=False)
        return 2 * (num_bytes // 4) * 4 / seconds[_D2D_MEMCPY_EVENT]
    result = bench_kernel(lambda: dst.copy_(src), num_warmups=2, num_tests=num_tests, flush_l2=False)
    return 2 * (num_bytes // 4) * 4 / result.median_s


# The profiler's name for a device-to-device cudaMemcpyAsync (what a same-dtype contiguous copy_ issues)
_D2D_MEMCPY_EVENT = "Memcpy DtoD"


def gpu_idle(seconds: float = 0.3) -> None:
    """Wait for queued GPU work, then sleep ``seconds`` so clocks and temperature settle.

    Safe without a GPU (it then only sleeps).
    """
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    time.sleep(seconds)


_nvml_state: dict[str, object] = {}


def _nvml_sm_clock(uuid: str | None, index: int) -> int | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        if not _nvml_state.get("initialized"):
            pynvml.nvmlInit()
            _nvml_state["initialized"] = True
        if uuid is not None:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        else:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:
        return None


def _nvidia_smi_sm_clock(uuid: str | None, index: int) -> int | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    cmd = [exe, "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i", uuid or str(index)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True).stdout
        return int(out.strip().splitlines()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def _device_ids(device: int | None) -> tuple[str | None, int]:
    """NVML/nvidia-smi identifiers of a torch device: its UUID if known, and a best-effort index."""
    index = torch.cuda.current_device() if device is None else device
    uuid = None
    try:
        uuid = str(torch.cuda.get_device_properties(index).uuid)
        if not uuid.startswith("GPU-"):
            uuid = "GPU-" + uuid
    except (AttributeError, RuntimeError):
        uuid = None
    if uuid is None and os.environ.get("CUDA_VISIBLE_DEVICES"):
        # Torch indices are remapped by CUDA_VISIBLE_DEVICES; NVML indices are not.
        visible = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
        entry = visible[index].strip() if index < len(visible) else ""
        if entry.startswith("GPU-"):
            uuid = entry
        elif entry.isdigit():
            index = int(entry)
    return uuid, index


def sm_clock_mhz(device: int | None = None) -> int | None:
    """Current SM clock of a GPU in MHz, or ``None`` if it cannot be read.

    Tries NVML (``pynvml``, from the ``nvidia-ml-py`` package), then
    ``nvidia-smi --query-gpu=clocks.sm``. Never raises.

    Args:
        device: a torch CUDA device index; the current device if ``None``.
    """
    try:
        if not torch.cuda.is_available():
            return None
        uuid, index = _device_ids(device)
    except Exception:
        return None
    clock = _nvml_sm_clock(uuid, index)
    return clock if clock is not None else _nvidia_smi_sm_clock(uuid, index)
