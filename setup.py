"""Build of deep_gemm: the pure-Python package, the kernel headers it compiles at run time, and
deep_gemm._C, a plain C++ extension (no CUDA code, no CUDA headers) built against the installed
PyTorch. CUDA kernels are compiled at run time by the JIT (see csrc/jit)."""

import shutil
import sys
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:
    # pip's default build isolation builds in a fresh environment without the installed PyTorch; the
    # extension must be built against the PyTorch it will run with, so declaring torch as a build
    # requirement (which would fetch another one) is no fix.
    sys.exit(
        "deep_gemm: building needs the installed PyTorch, and this Python cannot import torch.\n"
        "  - With pip: `pip install --no-build-isolation .` (pip's build isolation hides the installed\n"
        "    PyTorch), or ./install.sh, which does that and installs the rest.\n"
        "  - Otherwise install PyTorch first (e.g. `pip install torch`), then build again."
    )

ROOT = Path(__file__).resolve().parent
THIRD_PARTY_FMT = ROOT / "third-party" / "fmt" / "include"


class BuildPyWithHeaders(build_py):
    """Ship the kernel headers the JIT compiles at run time."""

    def run(self):
        super().run()
        target = Path(self.build_lib) / "deep_gemm" / "include"
        shutil.copytree(ROOT / "deep_gemm" / "include", target, dirs_exist_ok=True)


# (deep_gemm/include: the header of types and rules the extension shares with the kernels)
include_dirs = [str(ROOT / "csrc"), str(ROOT / "deep_gemm" / "include")]
if (THIRD_PARTY_FMT / "fmt" / "format.h").exists():
    include_dirs.insert(0, str(THIRD_PARTY_FMT))

setup(
    name="deep_gemm",
    version="0.1.0",
    description="JIT-compiled FP8/BF16 tensor-core GEMM kernels for NVIDIA Hopper",
    license="MIT",
    python_requires=">=3.10",
    packages=find_packages(include=["deep_gemm", "deep_gemm.*"]),
    package_data={"deep_gemm": ["_C.pyi", "py.typed"]},
    ext_modules=[
        CppExtension(
            name="deep_gemm._C",
            sources=["csrc/python_api.cpp"],
            include_dirs=include_dirs,
            extra_compile_args=["-std=c++20", "-O2", "-Wno-unused-function"],
            extra_link_args=["-ldl"],
        )
    ],
    cmdclass={"build_py": BuildPyWithHeaders, "build_ext": BuildExtension.with_options(use_ninja=False)},
    zip_safe=False,
)
