"""Build of deep_gemm: the pure-Python package, the kernel headers it compiles at run time, and
deep_gemm._C, a plain C++ extension (no CUDA code, no CUDA headers) built against the installed
PyTorch. CUDA kernels are compiled at run time by the JIT (see csrc/jit)."""

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = Path(__file__).resolve().parent
THIRD_PARTY_CUTLASS = ROOT / "third-party" / "cutlass" / "include"
THIRD_PARTY_FMT = ROOT / "third-party" / "fmt" / "include"


class BuildPyWithHeaders(build_py):
    """Ship the kernel headers (and CUTLASS/CuTe from third-party/cutlass, when populated)."""

    def run(self):
        super().run()
        target = Path(self.build_lib) / "deep_gemm" / "include"
        shutil.copytree(ROOT / "deep_gemm" / "include", target, dirs_exist_ok=True)
        if (THIRD_PARTY_CUTLASS / "cutlass" / "version.h").exists():
            for name in ("cutlass", "cute"):
                shutil.copytree(THIRD_PARTY_CUTLASS / name, target / name, dirs_exist_ok=True)


include_dirs = [str(ROOT / "csrc")]
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
