"""Building planned kernels into the disk cache: the entries already there are counted, the others compiled in
parallel processes (each through `deep_gemm.compile_kernel(family, source=...)`, the JIT's own compile path), with a
progress bar and a result per kernel."""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import TextIO

from deep_gemm import _C
from deep_gemm.precompile.shapes import PlannedKernel


@dataclass
class KernelBuild:
    """One kernel's outcome: status "built", "cached" (a complete entry was already there) or "failed" (`error`
    holds the compiler's message); `needed_by` lists the call sites (and their M values) that use it."""

    family: str
    key: str  # the cache entry's folder name: <family>-<compiler>-<hash>
    entry_dir: str
    status: str
    needed_by: list[str]
    error: str = ""
    seconds: float = 0.0


def _compile_one(family: str, source: str, arch: str, use_nvrtc: bool | None) -> tuple[bool, str, float]:
    """(cache hit, error message or "", seconds); runs in a worker process (or in this one with one job)."""
    start = time.monotonic()
    try:
        result = _C.compile_kernel(family, arch=arch, use_nvrtc=use_nvrtc, source=source)
    except Exception as e:  # (the compiler's log, or a check's message: reported, the other kernels go on)
        return False, f"{type(e).__name__}: {e}", time.monotonic() - start
    return bool(result["cache_hit"]), "", time.monotonic() - start


class _Progress:
    """tqdm's bar when tqdm is installed, else one plain line per kernel ('[3/17] built <key>')."""

    def __init__(self, total: int, enabled: bool, stream: TextIO) -> None:
        self.total, self.done, self.enabled, self.stream = total, 0, enabled, stream
        self.bar = None
        if enabled and total > 0:
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=total, desc="deep_gemm.precompile", unit="kernel", file=stream)

    def update(self, build: KernelBuild) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(f"{build.status} {build.family}", refresh=False)
            self.bar.update(1)
        else:
            print(f"[{self.done}/{self.total}] {build.status} {build.key}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def build_kernels(kernels: list[PlannedKernel], *, jobs: int, arch: str, use_nvrtc: bool | None, progress: bool,
                  stream: TextIO, compile: bool = True) -> list[KernelBuild]:
    """Build every kernel not yet in the cache ($DG_JIT_CACHE_DIR as set now), `jobs` compiles at a time
    (compile=False: look them up only, those missing reported as "pending")."""
    builds: list[KernelBuild] = []
    todo: list[tuple[KernelBuild, PlannedKernel]] = []
    for kernel in kernels:
        entry = _C.kernel_cache_entry(kernel.family, kernel.source, arch=arch, use_nvrtc=use_nvrtc)
        build = KernelBuild(kernel.family, entry["key"], entry["entry_dir"], "cached" if entry["cached"] else "",
                            kernel.needed_by)
        builds.append(build)
        if not entry["cached"]:
            todo.append((build, kernel))
    if not compile:
        for build, _ in todo:
            build.status = "pending"
        return builds

    bar = _Progress(len(builds), progress, stream)
    try:
        for build in builds:
            if build.status == "cached":
                bar.update(build)

        def finish(build: KernelBuild, outcome: tuple[bool, str, float]) -> None:
            hit, error, seconds = outcome
            # (a hit here: another process built it meanwhile)
            build.status = "failed" if error else "cached" if hit else "built"
            build.error, build.seconds = error, seconds
            bar.update(build)

        if jobs <= 1 or len(todo) <= 1:
            for build, kernel in todo:
                finish(build, _compile_one(kernel.family, kernel.source, arch, use_nvrtc))
            return builds
        # (spawned workers: a fork of a process that loaded PyTorch may inherit locked mutexes of its threads)
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=context) as pool:
            pending = {pool.submit(_compile_one, kernel.family, kernel.source, arch, use_nvrtc): build
                       for build, kernel in todo}
            try:
                while pending:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        finish(pending.pop(future), future.result())
            except BaseException:
                for future in pending:
                    future.cancel()
                raise
        return builds
    finally:
        bar.close()


def default_jobs() -> int:
    """The CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (not on Linux)
        return os.cpu_count() or 1


def summary_text(builds: list[KernelBuild], *, arch: str, cache_dir: str, seconds: float) -> str:
    """A few lines: the counts, then each failure with its call sites and the compiler's message."""
    built = sum(b.status == "built" for b in builds)
    cached = sum(b.status == "cached" for b in builds)
    failed = [b for b in builds if b.status == "failed"]
    pending = sum(b.status == "pending" for b in builds)
    lines = [f"deep_gemm.precompile: {len(builds)} kernels for {arch} in {cache_dir}: {built} built, {cached} already "
             f"cached, {len(failed)} failed{f', {pending} not built (dry run)' if pending else ''} ({seconds:.1f} s)"]
    for b in failed:
        lines.append(f"failed: {b.key}, needed by {'; '.join(b.needed_by)}:")
        lines.extend("    " + line for line in b.error.rstrip().splitlines())
    return "\n".join(lines)

