"""Shared pytest setup.

- Tests marked ``gpu`` are skipped unless the visible CUDA GPU is an SM90 one (H100, H200, H800: the kernels' only
  target; other GPUs get NotImplementedError from every kernel), and those marked ``multigpu`` (one process per
  GPU, e.g. test_mega_moe_dist.py) also when fewer than two are.
- Tests that compile kernels with NVCC (marked ``nvcc``, or parametrized ``use_nvrtc=False``) are skipped when no
  nvcc is found, and those that compile with NVRTC (marked ``nvrtc``, or ``use_nvrtc=True``) when no NVRTC library
  loads: the CPU tier then runs everything else and says what was skipped and why.
- Each GPU test hands the memory PyTorch's caching allocator kept back to the device when it ends: several test
  processes may share one GPU (pytest-xdist), and a float64 reference of a 129280-column test leaves ~39 GB of
  cached blocks that the other processes then cannot allocate.
"""

import os

import pytest
import torch
from jit_helpers import find_nvcc, find_nvrtc


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs an SM90 GPU")
    config.addinivalue_line("markers", "multigpu: needs two or more SM90 GPUs (one process per GPU)")
    config.addinivalue_line("markers", "nvcc: compiles kernels with NVCC (skipped when no nvcc is found)")
    config.addinivalue_line("markers", "nvrtc: compiles kernels with NVRTC (skipped when no NVRTC library loads)")


def compilers_needed(item: pytest.Item) -> set[str]:
    """The JIT compilers a test needs: its nvcc/nvrtc markers and its `use_nvrtc` parameter."""
    needed = {name for name in ("nvcc", "nvrtc") if item.get_closest_marker(name)}
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "use_nvrtc" in callspec.params:
        needed.add("nvrtc" if callspec.params["use_nvrtc"] else "nvcc")
    return needed


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
    sm90 = capability is not None and capability[0] == 9
    gpu_found = "no CUDA GPU is visible" if capability is None else f"found compute capability {capability}"
    skips = {
        "nvcc": None if find_nvcc() else pytest.mark.skip(
            reason=f"needs nvcc: DG_JIT_NVCC_COMPILER={os.environ['DG_JIT_NVCC_COMPILER']} is not executable"
            if os.environ.get("DG_JIT_NVCC_COMPILER")
            else "needs nvcc: none found ($CUDA_HOME/bin, $CUDA_PATH/bin, PATH, /usr/local/cuda/bin); install a "
            "CUDA 13 toolkit or set CUDA_HOME"
        ),
        "nvrtc": None if find_nvrtc() else pytest.mark.skip(
            reason="needs NVRTC: no libnvrtc.so.13 loads (toolkit, nvidia-cuda-nvrtc wheel, loader path)"
        ),
        "gpu": None if sm90 else pytest.mark.skip(reason=f"needs an SM90 GPU ({gpu_found})"),
        "multigpu": None if sm90 and torch.cuda.device_count() >= 2 else pytest.mark.skip(
            reason=f"needs two or more SM90 GPUs ({gpu_found}; torch.cuda.device_count() is {torch.cuda.device_count()})"
        ),
    }
    for item in items:
        needed = compilers_needed(item) | {name for name in ("gpu", "multigpu") if name in item.keywords}
        for name in sorted(needed):
            if skips[name] is not None:
                item.add_marker(skips[name])
                break


@pytest.fixture(autouse=True)
def _release_cached_gpu_memory(request: pytest.FixtureRequest):
    """After each GPU test, return the caching allocator's free blocks to the device (other test processes on the
    same GPU, and the tests' own subprocesses, allocate from what is left)."""
    yield
    if "gpu" in request.keywords and torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
