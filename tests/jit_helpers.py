"""Helpers for the JIT tests: isolated cache directories, subprocess compiles, SASS dumps."""

import ctypes
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path


def find_nvcc() -> str | None:
    """The nvcc the JIT would run, if it exists: DG_JIT_NVCC_COMPILER, else the toolkit's ($CUDA_HOME, $CUDA_PATH,
    PATH, /usr/local/cuda)."""
    override = os.environ.get("DG_JIT_NVCC_COMPILER")
    if override:
        return override if os.access(override, os.X_OK) else None
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    on_path = shutil.which("nvcc")
    if on_path:
        homes.append(str(Path(on_path).resolve().parent.parent))
    homes.append("/usr/local/cuda")
    for home in filter(None, homes):
        nvcc = Path(home) / "bin" / "nvcc"
        if (Path(home) / "include" / "cuda.h").exists() and os.access(nvcc, os.X_OK):
            return str(nvcc)
    return None


def find_nvrtc() -> str | None:
    """A loadable NVRTC 13 library where the JIT looks for one (the toolkit, the nvidia-cuda-nvrtc wheel, the
    loader's path), if any."""
    candidates = []
    for home in filter(None, [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]):
        candidates += [str(Path(home) / lib / "libnvrtc.so.13") for lib in ("lib64", "lib")]
    candidates += [str(Path(entry) / "nvidia" / "cu13" / "lib" / "libnvrtc.so.13") for entry in sys.path if entry]
    candidates.append("libnvrtc.so.13")
    for candidate in candidates:
        if "/" in candidate and not Path(candidate).exists():
            continue
        try:
            ctypes.CDLL(candidate)
        except OSError:
            continue
        return candidate
    return None


def find_tool(name: str) -> str | None:
    """Path of a CUDA binary tool (cuobjdump, nvdisasm): PATH, the toolkit, or the nvidia-cuda-* wheels."""
    found = shutil.which(name)
    if found:
        return found
    candidates = [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / name]
    for entry in sys.path:
        candidates.append(Path(entry) / "nvidia" / "cu13" / "bin" / name)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def dump_sass(cubin_path: str) -> str:
    """Disassemble a cubin with cuobjdump (nvdisasm must be findable too)."""
    cuobjdump = find_tool("cuobjdump")
    nvdisasm = find_tool("nvdisasm")
    assert cuobjdump and nvdisasm, (
        "cuobjdump/nvdisasm not found: install nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm"
    )
    env = dict(os.environ, PATH=os.path.dirname(nvdisasm) + os.pathsep + os.environ.get("PATH", ""))
    result = subprocess.run([cuobjdump, "--dump-sass", cubin_path], capture_output=True, text=True, env=env, check=True)
    return result.stdout


COMPILE_SCRIPT = """
import json, sys
import deep_gemm
family, params, use_nvrtc = json.loads(sys.argv[1])
r = deep_gemm.compile_kernel(family, params, use_nvrtc=use_nvrtc)
print(json.dumps({k: r[k] for k in ("cache_hit", "entry_dir", "cubin_path")}))
"""


def compile_in_subprocess(cache_dir: Path, family: str, params: dict, use_nvrtc: bool = False) -> subprocess.Popen:
    """Start a fresh Python process that compiles one kernel into `cache_dir`; read it with `finish`."""
    env = dict(os.environ, DG_JIT_CACHE_DIR=str(cache_dir))
    return subprocess.Popen(
        [sys.executable, "-c", COMPILE_SCRIPT, json.dumps([family, params, use_nvrtc])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(cache_dir.parent),
    )


def finish(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"compile subprocess failed:\n{err}"
    return json.loads(out.strip().splitlines()[-1])


def run_python(code: str, env_updates: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (outside the source tree, so the installed package is used)."""
    env = dict(os.environ, **env_updates)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(cwd))


# The parameters compile_kernel("sm90_gemm", ...) takes from a get_gemm_config result (its other keys describe the
# config, e.g. smem_bytes), with the dimensions compiled in: N and K (the APIs' 'nk' default); operand layout flags
# that get_gemm_config does not return are passed through `extra` (mn_major_a, mn_major_b, fp32_out, has_c).
GEMM_COMPILE_KEYS = (
    "block_m", "block_n", "num_stages", "num_math_warpgroups", "num_group_n", "store_chunk_n", "fp32_buffers",
    "num_multicast", "is_multicast_on_a", "num_splits", "stream_k", "overlap_promotion", "use_tma_store",
    "per_row_sfb", "bf16", "gemm_type",
)  # fmt: skip


def compile_params(cfg: dict, n: int, k: int, **extra: int) -> dict:
    params = {key: int(cfg[key]) for key in GEMM_COMPILE_KEYS}
    params.update(shape_n=n, shape_k=k)
    params.update({key: int(value) for key, value in extra.items()})
    return params


def parameter_names(fn) -> list[str]:
    """The `name: type [= default]` entries of a pybind11 binding's signature line (split at top-level commas)."""
    line = fn.__doc__.splitlines()[0]
    inner = line[line.index("(") + 1 : line.rindex(") ->")]
    entries, depth, current = [], 0, ""
    for ch in inner + ",":
        if ch == "," and depth == 0:
            entries.append(current.strip())
            current = ""
            continue
        depth += (ch in "[(") - (ch in "])")
        current += ch
    return entries


def signature_params(fn) -> list[tuple[str, str | None]]:
    """(name, default repr or None) pairs of a binding's parameters: from its text signature (inspect) where it has
    one (the vectorcall bindings), else from pybind11's signature line `name(p: T, q: T = default, ...) -> R`."""
    try:
        params = inspect.signature(fn).parameters.values()
        return [(p.name, None if p.default is inspect.Parameter.empty else repr(p.default)) for p in params]
    except ValueError:  # (a pybind11 function: no text signature)
        pass
    pairs = []
    for entry in parameter_names(fn):
        if entry:
            name, _, rest = entry.partition(":")
            pairs.append((name.strip(), rest.split(" = ", 1)[1].strip() if " = " in rest else None))
    return pairs
