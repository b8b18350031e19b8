"""The CUDA kernels a call launches, by name (the GPU tests' check of which path a call took)."""

from collections.abc import Callable

import torch


def launched_kernels(fn: Callable[[], object]) -> list[str]:
    """Names of the CUDA kernels one call of ``fn`` launches, in order. ``fn`` runs twice: a warm-up (kernels
    compile and load on a first call), then the profiled call."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def count(names: list[str], part: str) -> int:
    """How many of ``names`` contain ``part``."""
    return sum(part in name for name in names)
