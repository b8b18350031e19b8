"""The reference API's timing functions, ``bench`` and ``bench_kineto``, with its signatures and return types.

Our own, richer timers (:func:`deep_gemm.testing.bench_kernel` with every sample,
:func:`deep_gemm.testing.kineto_kernel_times` with a ``{name: seconds}`` result) are in
:mod:`deep_gemm.testing.timing`.
"""

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from deep_gemm.testing.output_capture import empty_suppress, suppress_stdout_stderr
from deep_gemm.testing.timing import GPU_LEAD_CYCLES, L2_FLUSH_BYTES, _check_counts, _l2_flusher, _require_cuda

__all__ = ["bench", "bench_kineto"]

# Set (to a non-zero integer) while running under Nsight Systems, Nsight Compute or Compute Sanitizer,
# whose CUPTI use conflicts with the profiler's: bench_kineto then returns at once.
NVIDIA_TOOLS_ENV = "DG_USE_NVIDIA_TOOLS"
# GPU cycles spun before each call when a barrier is given (about 10 ms at 2 GHz), so that every rank has
# queued its call before any starts: the ranks' host launch times do not skew the measured kernels.
BARRIER_LEAD_CYCLES = 20_000_000


def _nvidia_tools_in_use() -> bool:
    value = os.environ.get(NVIDIA_TOOLS_ENV, "0").strip() or "0"
    try:
        return int(value) != 0
    except ValueError:
        raise ValueError(f"bench_kineto: {NVIDIA_TOOLS_ENV} must be an integer, got {value!r}") from None


def bench(fn: Callable[[], object], num_warmups: int = 5, num_tests: int = 10, high_precision: bool = False) -> float:
    """Mean time of ``fn``, in seconds, over ``num_tests`` back-to-back calls timed by two CUDA events.

    L2 is flushed once (a 256 MiB buffer is zeroed), ``fn`` runs ``num_warmups`` times untimed, then
    ``num_tests`` times between a start and an end event. The calls run back to back, so host launch
    overhead counts where it exceeds the GPU time of a call. With ``high_precision`` the GPU first
    spins for a while (outside the events) so that the host has queued the timed calls before they
    start. For per-call samples and an L2 flush before every call use
    :func:`deep_gemm.testing.bench_kernel`.

    Args:
        fn: a callable taking no arguments that enqueues GPU work on the current stream.
        num_warmups: untimed calls first, ``>= 0``.
        num_tests: timed calls, ``> 0``.
        high_precision: hide host launch overhead behind a GPU spin before the start event.

    Returns:
        Seconds per call (a float).

    Raises:
        ValueError: bad counts.
        RuntimeError: no CUDA GPU.
    """
    _check_counts("bench", num_warmups, num_tests)
    _require_cuda("bench")
    torch.cuda.synchronize()
    _l2_flusher(True, "write", L2_FLUSH_BYTES)()
    for _ in range(num_warmups):
        fn()
    if high_precision:
        # About 1 ms of GPU spin (the reference launches a large matmul for the same purpose).
        torch.cuda._sleep(GPU_LEAD_CYCLES * 10)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(num_tests):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / num_tests / 1e3


def _profile_device_kernels(
    fn: Callable[[], object],
    num_tests: int,
    flush: Callable[[], object] | None,
    barrier: Callable[[], object] | None,
) -> tuple[list[tuple[str, float]], torch.profiler.profile]:
    """``(kernel name, microseconds)`` of every device activity of ``num_tests`` calls of ``fn``, and the profiler.

    The profiler runs two rounds of ``num_tests`` calls and records the second (the first is the
    profiler's warm-up).
    """
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
    with warnings.catch_warnings():
        # torch warns that events are cleared at the end of each profiler cycle: expected here.
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA], schedule=schedule) as prof:
            for _ in range(2):
                for _ in range(num_tests):
                    if flush is not None:
                        flush()
                    if barrier is not None:
                        torch.cuda._sleep(BARRIER_LEAD_CYCLES)
                        barrier()
                    fn()
                torch.cuda.synchronize()
                prof.step()
        events = sorted(
            (event.time_range.start, event.name, event.time_range.elapsed_us())
            for event in prof.events()
            if event.device_type == torch.autograd.DeviceType.CUDA
        )
    return [(name, us) for _, name, us in events], prof


# The L2 flush's launch sequence per device (the same for every call: a read of an L2_FLUSH_BYTES buffer), profiled
# once per process
_FLUSH_KERNELS: dict[int, tuple[str, ...]] = {}


def _flush_kernels(flush: Callable[[], object], device: int) -> tuple[str, ...]:
    """The kernels one call of the L2 flush launches, in order (profiled alone; a second session where the first
    comes back without device activity)."""
    if device not in _FLUSH_KERNELS:
        for _ in range(2):
            sequence = tuple(kernel for kernel, _ in _profile_device_kernels(flush, 1, None, None)[0])
            if sequence:
                _FLUSH_KERNELS[device] = sequence
                break
    return _FLUSH_KERNELS.get(device, ())


def _without_flush(kernels: list[tuple[str, float]], flush: tuple[str, ...], num_tests: int) -> list[tuple[str, float]]:
    """The profiled launches (in time order) less the L2 flush's, whose launch sequence per call is ``flush``: each
    call launches the same kernels, the flush's first, so the first ``len(flush)`` of every call's share are dropped
    where they are exactly that sequence (fn's own launches of the same kernels stay); else every launch of a flush
    kernel is."""
    if not flush:
        return kernels
    per_call, rest = divmod(len(kernels), num_tests)
    if rest == 0 and per_call >= len(flush):
        calls = [kernels[i * per_call : (i + 1) * per_call] for i in range(num_tests)]
        if all(tuple(name for name, _ in call[: len(flush)]) == flush for call in calls):
            return [launch for call in calls for launch in call[len(flush) :]]
    return [(name, us) for name, us in kernels if name not in flush]


# The reference's test scripts time kernels by names of its own kernels ('fp8_gemm', 'bf16_gemm',
# 'bmn_bnk_mn_gemm_impl', 'm_grouped_bf16_gemm_contiguous_tl_impl', ('fp8_mqa_logits', 'clean_logits'), 'mega_moe', ...).
# Ours are named by family instead: one GEMM kernel, sm90_gemm_kernel, serves every FP8 and BF16 GEMM layout, the MQA
# kernels clean the logits themselves, and some work the reference does in one kernel ours does in several kernels or
# launches. match_kernel_name maps a reference name to ours.
GEMM_KERNEL = "sm90_gemm_kernel"
FUSED_KERNEL_NAMES = ("clean_logits",)  # work our kernels do inside another kernel: 0 s, as the reference gives
# Reference kernel names that ours spell otherwise or whose work ours split over several kernels or launches: the name
# stands for every kernel containing one of these substrings, timed per call of fn
STAND_INS = {
    # the UE8M0 packing of scales (K-grouped: one launch per group)
    "pack_fp32_into_ue8m0": ("pack_ue8m0_kernel",),
    # get_paged_mqa_logits_metadata's schedule
    "paged_mqa_logits_metadata": ("paged_mqa_schedule_kernel",),
    # route, gather, SwiGLU and combine, and the two grouped GEMMs
    "mega_moe": ("mega_moe_", GEMM_KERNEL),
    "sm90_fp8_mega_moe_impl": ("mega_moe_", GEMM_KERNEL),
    # the MQA kernel and (prefill) its pre-pass, mqa_logits_pieces_kernel
    "mqa_logits": ("mqa_logits",),
    "fp8_mqa_logits": ("sm90_fp8_mqa_logits_kernel", "mqa_logits_pieces_kernel"),
}


@dataclass(frozen=True)
class KernelMatch:
    """The kernels a name passed to :func:`bench_kineto` stands for.

    kernels: the distinct kernel names (of those seen) it matches; empty for none.
    per_call: time them per call of ``fn`` (the sum of every launch), as the reference times its one kernel; else per
        launch of the single kernel (the reference's rule for a name of one of its kernels).
    fused: the name's work is done inside another kernel of ours (0 s).
    """

    kernels: tuple[str, ...]
    per_call: bool = False
    fused: bool = False


def match_kernel_name(name: str, seen: list[str]) -> KernelMatch:
    """The kernels of ``seen`` that ``name`` (a substring, as the reference's test scripts pass it) stands for:
    ``STAND_INS``'s (per call); else the kernels containing ``name`` (per launch); else, for a GEMM name of the
    reference's (any name containing ``gemm``), our GEMM kernel, per call (``einsum`` may launch it once per batch
    entry); else none (``fused`` for a name of ``FUSED_KERNEL_NAMES``)."""
    if name in STAND_INS:
        parts = STAND_INS[name]
        return KernelMatch(tuple(k for k in seen if any(part in k for part in parts)), per_call=True)
    direct = tuple(kernel for kernel in seen if name in kernel)
    if direct:
        return KernelMatch(direct)
    if "gemm" in name:
        gemm = tuple(kernel for kernel in seen if GEMM_KERNEL in kernel)
        if gemm:
            return KernelMatch(gemm, per_call=True)
    return KernelMatch((), fused=name in FUSED_KERNEL_NAMES)


def bench_kineto(
    fn: Callable[[], object],
    kernel_names: str | tuple[str, ...],
    num_tests: int = 30,
    suppress_kineto_output: bool = False,
    trace_path: str | None = None,
    flush_l2: bool = True,
    with_multiple_kernels: bool = False,
    barrier: Callable[[], object] | None = None,
) -> float | tuple[float, ...]:
    """Device time of the kernels whose names contain ``kernel_names``, in seconds, under ``torch.profiler``.

    A name of the reference's kernels stands for the kernels of ours that do that work (:func:`match_kernel_name`):
    a GEMM name (``'fp8_gemm'``, ``'bf16_gemm'``, ``'bmn_bnk_mn_gemm_impl'``, ...) for our GEMM kernel, ``'mega_moe'``
    for the Mega MoE stage kernels and grouped GEMMs, ``'mqa_logits'`` for the MQA kernel and its pre-pass, each
    timed per call of ``fn`` (the sum of its launches); ``'clean_logits'``, which our MQA kernels do inside, gives 0 s.

    ``fn`` runs once to warm up, then ``num_tests`` times profiled (L2 flushed before each call with ``flush_l2``,
    by reading a 256 MiB buffer; the flush's kernel is not counted). For each other name the result is the mean
    time of one launch of the (single) kernel whose name contains it; with ``with_multiple_kernels`` several
    distinct kernels may match and the result is their summed time per call of ``fn``. A name that matches
    no kernel gives 0 s, as in the reference (with a warning listing the kernels seen).

    With ``DG_USE_NVIDIA_TOOLS`` set to a non-zero integer (running under Nsight Systems/Compute
    or Compute Sanitizer, whose CUPTI use conflicts with the profiler's) nothing runs and the
    result is ``1`` per name, not a time, as in the reference.

    Args:
        fn: a callable taking no arguments that enqueues GPU work on the current stream.
        kernel_names: one name substring (the result is a float) or a tuple of them (a tuple).
        num_tests: profiled calls, ``> 0``.
        suppress_kineto_output: silence stdout/stderr while profiling.
        trace_path: where to write a Chrome trace of the profiled calls, or ``None``.
        flush_l2: flush L2 before each call.
        with_multiple_kernels: allow several distinct kernels per name (see above).
        barrier: called before each call (after a GPU spin that lets every rank queue its call),
            e.g. ``torch.distributed.barrier`` for collective kernels.

    Returns:
        Seconds per launch or per call of ``fn`` (as above), a float or a tuple of floats.

    Raises:
        TypeError: ``kernel_names`` is neither a str nor a tuple of str.
        ValueError: bad counts; or, without ``with_multiple_kernels``, a name matches several distinct kernels
            (names of split work excepted).
        RuntimeError: no CUDA GPU.
    """
    is_tuple = isinstance(kernel_names, tuple)
    names = kernel_names if is_tuple else (kernel_names,)
    if not (isinstance(kernel_names, str) or is_tuple) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"bench_kineto: kernel_names must be a str or a tuple of str, got {kernel_names!r}")
    if _nvidia_tools_in_use():
        return (1,) * len(names) if is_tuple else 1
    _check_counts("bench_kineto", 0, num_tests)
    _require_cuda("bench_kineto")
    flush = _l2_flusher(flush_l2, "read", L2_FLUSH_BYTES)
    fn()
    torch.cuda.synchronize()
    with suppress_stdout_stderr() if suppress_kineto_output else empty_suppress():
        # The flush's own kernels (PyTorch's reduce_kernel, which a name such as cuBLAS's 'reduce' would match) are
        # left out (_flush_kernels, _without_flush). The first profiler session of a process can come back without any
        # device activity (a profiler effect that makes the reference return 0 on its first call): one more then.
        flush_kernels = _flush_kernels(flush, torch.cuda.current_device()) if flush is not None else ()
        for _ in range(2):
            kernels, prof = _profile_device_kernels(fn, num_tests, flush, barrier)
            kernels = _without_flush(kernels, flush_kernels, num_tests)
            if kernels:
                break
        if trace_path is not None:
            prof.export_chrome_trace(trace_path)
    seen = sorted({kernel for kernel, _ in kernels})
    times = []
    for name in names:
        match = match_kernel_name(name, seen)
        if not match.kernels:
            # (the reference's result for a name it does not find, e.g. cuBLAS's 'reduce' kernel when it runs none)
            if not match.fused:
                warnings.warn(f"bench_kineto: no kernel name contains {name!r} (0 s); kernels seen: {seen}",
                              stacklevel=2)
            times.append(0.0)
            continue
        if len(match.kernels) > 1 and not (match.per_call or with_multiple_kernels):
            raise ValueError(
                f"bench_kineto: {name!r} matches {len(match.kernels)} distinct kernels {list(match.kernels)}; "
                "pass with_multiple_kernels=True to sum them"
            )
        launches = [us for kernel, us in kernels if kernel in match.kernels]
        total_s = sum(launches) * 1e-6
        times.append(total_s / num_tests if match.per_call or with_multiple_kernels else total_s / len(launches))
    return tuple(times) if is_tuple else times[0]
