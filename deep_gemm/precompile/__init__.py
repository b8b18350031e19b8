"""Ahead-of-time kernel builds: compile every kernel a model will need before serving, on any machine.

    python -m deep_gemm.precompile --model deepseek-v3 --tp 8 --ep 8 --max-tokens 8192 [--jobs N] [--cache-dir DIR]
    python -m deep_gemm.precompile --shapes fp8_gemm_nt:n=7168,k=2048 \\
        m_grouped_fp8_gemm_nt_masked:n=4096,k=7168,num_groups=32,max_m=256 --max-tokens 4096

Every call site (a model's layers, or the listed shapes) is planned for each M up to --max-tokens exactly as a launch
plans it (the launcher's own config and rendering functions, run on the CPU), the distinct kernel sources are kept,
and those not yet in the cache are compiled in parallel processes, with a progress bar (tqdm when installed, else a
line per kernel) and a summary: built, already cached, failed with the compiler's message (exit status 1 then).
No GPU is needed: the kernels are compiled for --arch (sm_90a). The cache ($DG_JIT_CACHE_DIR or --cache-dir) is
content-addressed and holds no absolute path, so a cache built once can be copied to every serving machine and
pointed at with DG_JIT_CACHE_DIR.

What must match the serving processes for their lookups to hit (the cache key covers the rendered source, the
kernel headers, the compiler and its code-generation flags):
- --num-sms: the SMs the GEMMs get there (132 on H100 / H200 SXM; fewer under deep_gemm.set_num_sms), and
  --cluster-ctas: the CTAs whole clusters of 1 .. 8 CTAs fill on that GPU, the eight numbers DG_PRINT_CONFIGS=1
  prints there at the first GEMM ("CTAs that whole clusters of each size fill"); default with 132 SMs: the H200's.
  (Split-K and multicast picks depend on both. The first GEMM of a process is planned before the capacity is measured,
  with whole clusters of the SM count: those kernels are built too.)
- the same deep_gemm (headers) and compiler (nvcc version, or NVRTC with DG_JIT_USE_NVRTC=1 / --nvrtc), and the
  same DG_JIT_CPP_STANDARD / DG_JIT_WITH_LINEINFO / DG_JIT_DEBUG / DG_TUNE environment;
- the same compiled_dims, set_ignore_compile_dims and set_mk_alignment_for_contiguous_layout settings (the Python
  API reads the current process's settings, as a launch does).

M enumeration (--max-tokens T): dense GEMMs every M in 1 .. T; m-grouped contiguous GEMMs every multiple of the
alignment up to their largest total row count (for a model: T x min(top-k, local experts) plus each expert's
padding); masked ones every expected_m in 1 .. min(T, max_m). The heuristic's pick changes at some of these M values
only, so the kernels are few (deduplicated by rendered source).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TextIO

from deep_gemm.precompile.build import KernelBuild, build_kernels, default_jobs, summary_text
from deep_gemm.precompile.models import load_model, model_shapes
from deep_gemm.precompile.shapes import (
    GemmShape,
    MqaLogitsShape,
    PagedMqaLogitsShape,
    RenderedKernel,
    Shape,
    plan_kernels,
)
from deep_gemm.testing import H200_CLUSTER_CTAS

__all__ = [
    "GemmShape",
    "KernelBuild",
    "MqaLogitsShape",
    "PagedMqaLogitsShape",
    "PrecompileResult",
    "RenderedKernel",
    "model_shapes_for",
    "precompile",
]

DEFAULT_NUM_SMS = 132  # H100 and H200 SXM


@dataclass
class PrecompileResult:
    """What precompile did: one KernelBuild per distinct kernel, and the summary text it printed."""

    builds: list[KernelBuild]
    summary: str

    @property
    def built(self) -> list[KernelBuild]:
        return [b for b in self.builds if b.status == "built"]

    @property
    def cached(self) -> list[KernelBuild]:
        return [b for b in self.builds if b.status == "cached"]

    @property
    def failed(self) -> list[KernelBuild]:
        return [b for b in self.builds if b.status == "failed"]

    @property
    def ok(self) -> bool:
        return not self.failed


@contextlib.contextmanager
def _cache_dir(path: str | None) -> Iterator[str]:
    """DG_JIT_CACHE_DIR set to `path` for the duration (the JIT and the worker processes read it); the cache used."""
    previous = os.environ.get("DG_JIT_CACHE_DIR")
    if path is not None:
        os.environ["DG_JIT_CACHE_DIR"] = os.path.abspath(path)
    try:
        yield os.environ.get("DG_JIT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".deep_gemm")
    finally:
        if path is not None and previous is None:
            del os.environ["DG_JIT_CACHE_DIR"]
        elif path is not None:
            os.environ["DG_JIT_CACHE_DIR"] = previous


def _cluster_ctas(num_sms: int, cluster_ctas: Sequence[int] | str | None) -> list[int]:
    if cluster_ctas is None:
        return list(H200_CLUSTER_CTAS) if num_sms == DEFAULT_NUM_SMS else []
    if cluster_ctas == "estimate":
        return []
    values = list(cluster_ctas)
    if len(values) != 8 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise ValueError(f"cluster_ctas must be 8 non-negative integers (the CTAs whole clusters of 1 .. 8 CTAs fill), "
                         f"'estimate' or None, got {cluster_ctas!r}")
    return values


def precompile(
    shapes: Sequence[Shape],
    jobs: int | None = None,
    *,
    max_tokens: int = 16384,
    arch: str = "sm_90a",
    num_sms: int = DEFAULT_NUM_SMS,
    cluster_ctas: Sequence[int] | str | None = None,
    cache_dir: str | None = None,
    use_nvrtc: bool | None = None,
    progress: bool = True,
    stream: TextIO | None = None,
    dry_run: bool = False,
) -> PrecompileResult:
    """Compile, ahead of time and without a GPU, every kernel the given call sites need, into the kernel cache.

    shapes: the call sites (a list, or one): GemmShape (a GEMM entry point's name, N, K and options; M enumerated up to max_tokens or
        the shape's max_rows / m_values), MqaLogitsShape, PagedMqaLogitsShape, RenderedKernel (a source built as is);
        `model_shapes_for("deepseek-v3", tp=8, ep=8, max_tokens=...)` lists a model's.
    jobs: compiles at a time, each in its own process (None: the CPU cores this process may use).
    max_tokens: the largest M of a call (see the module docstring for the grouped layouts).
    arch: the compile target, as a launch on the GPU compiles for it ("sm_90a" on H100 / H200).
    num_sms, cluster_ctas: the SMs the GEMMs get on the serving GPU and the CTAs whole clusters of 1 .. 8 CTAs fill
        there (8 values, as DG_PRINT_CONFIGS=1 prints them); cluster_ctas None: the H200's with 132 SMs, else not
        known; "estimate": not known (whole clusters of num_sms; the kernels of an unmeasured device only).
    cache_dir: the cache to fill (None: $DG_JIT_CACHE_DIR, else ~/.deep_gemm); the serving processes then point
        DG_JIT_CACHE_DIR at it (or at a copy: entries are relocatable).
    use_nvrtc: the compiler (None: DG_JIT_USE_NVRTC, as a launch chooses).
    progress, stream: a progress bar (tqdm when installed, else a line per kernel) and the summary on `stream`
        (default sys.stderr); progress=False prints the summary only.
    dry_run: plan only: every kernel is reported as "cached" or "pending", nothing is compiled.

    The kernels are planned by the launchers' own functions (`_C.render_gemm_kernels` and the MQA ones), with this
    process's set_ignore_compile_dims / set_mk_alignment_for_contiguous_layout settings and DG_TUNE, so that each is
    the kernel a launch with those settings looks up. Returns a PrecompileResult (builds, summary, ok); a failed
    compile does not stop the others: it is reported with the compiler's message (result.failed). Raises ValueError
    on a malformed shape, naming it and the field.
    """
    stream = sys.stderr if stream is None else stream
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens <= 0:
        raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if not isinstance(num_sms, int) or isinstance(num_sms, bool) or num_sms <= 0:
        raise ValueError(f"num_sms must be a positive integer, got {num_sms!r}")
    jobs = default_jobs() if jobs is None else jobs
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs <= 0:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
    if isinstance(shapes, (GemmShape, MqaLogitsShape, PagedMqaLogitsShape, RenderedKernel)):
        shapes = [shapes]
    start = time.monotonic()
    kernels = plan_kernels(list(shapes), max_tokens, num_sms, _cluster_ctas(num_sms, cluster_ctas))
    with _cache_dir(cache_dir) as root:
        if dry_run:
            builds = build_kernels(kernels, jobs=0, arch=arch, use_nvrtc=use_nvrtc, progress=False, stream=stream,
                                   compile=False)
        else:
            builds = build_kernels(kernels, jobs=jobs, arch=arch, use_nvrtc=use_nvrtc, progress=progress,
                                   stream=stream)
    summary = summary_text(builds, arch=arch, cache_dir=root, seconds=time.monotonic() - start)
    print(summary, file=stream, flush=True)
    return PrecompileResult(builds, summary)


def model_shapes_for(model: str, *, tp: int | None = None, ep: int | None = None, max_tokens: int = 16384,
                     moe_layouts: Sequence[str] = ("contiguous", "masked"),
                     masked_max_m: int | None = None) -> list[Shape]:
    """The call sites of one rank of `model` ('deepseek-v3', 'deepseek-v3.2' or a JSON file of config.json fields:
    see deep_gemm.precompile.models) at tensor-parallel degree tp and expert-parallel degree ep (None: the JSON's
    "tp" / "ep", else 1), plus the shapes the JSON lists. Raises ValueError naming a missing or malformed field."""
    config, extra = load_model(model)
    return model_shapes(config, tp=config["tp"] if tp is None else tp, ep=config["ep"] if ep is None else ep,
                        max_tokens=max_tokens, moe_layouts=tuple(moe_layouts), masked_max_m=masked_max_m) + extra


# `deep_gemm.precompile` is this function at the package's top level (the module stays reachable by import:
# `from deep_gemm.precompile import GemmShape`, `python -m deep_gemm.precompile`); it carries the module's public
# names too, so that `deep_gemm.precompile.GemmShape` works either way.
for _name in __all__:
    if _name != "precompile":
        setattr(precompile, _name, globals()[_name])
del _name
